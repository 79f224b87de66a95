"""Foreign checkpoint formats: Hugging Face layouts in and out of textkit.

``load_pretrained(dir, **overrides)`` is the one loader: it dispatches on ``config.json``'s
``model_type`` (``loader.LOADERS``) and always returns one typed ``Pretrained`` (``result``:
``kind``, ``model``, ``params``, ``tokenizer``, ``target_tokenizer``, ``generation``). The
encoder-decoder families, "marian" (Marian / OPUS-MT), "bart", "mbart" (mBART-50) and
"m2m_100" (M2M100 and NLLB-200), are ``kind="translation"``: a ``Transformer`` with the source
and target tokenizers (``seq2seq``: each family a config map, a weight map and tokenizer
settings; the multilingual ones choose their languages with ``for_languages``). "bert",
"roberta", "xlm-roberta", "electra", "distilbert", "deberta-v2" (DeBERTa-v2/v3), "modernbert"
(``encoders``) are ``kind="encoder"``. A sentence-transformers directory (``modules.json``,
``sentence``) is ``kind="sentence_encoder"``, its model a ``SentenceEncoder``;
``embed_texts(loaded, texts)`` turns texts into vectors with any loaded encoder (``embed``).
The decoder-only families (``decoders``) are ``kind="causal_lm"``. ``save_pretrained`` writes
each back (transformers loads it); ``load_translator(dir, src_lang=..., tgt_lang=...)`` gives
``(Translator, params)`` searching as transformers' ``generate`` does, with the options of
``generation_options(dir)``. Errors are ``PretrainedError``s (``textkit.errors.TextkitError``
and ``ValueError``) naming the directory or file and what was expected.

This package sits above ``textkit.models`` and ``textkit.decoding``: it maps names and options
onto textkit's own models, and never implements a model a second time.
"""

from textkit.pretrained.embed import embed_texts, length_buckets
from textkit.pretrained.encoder_tokenizer import EncoderTokenizer
from textkit.pretrained.errors import (
    LanguageError,
    MissingFileError,
    NotCheckpointError,
    NotMarianCheckpointError,
    PretrainedError,
    UnsupportedArchitectureError,
    VocabSizeMismatchError,
)
from textkit.pretrained.loader import (
    generation_options,
    load_pretrained,
    load_translator,
    save_pretrained,
)
from textkit.pretrained.marian_tokenizer import MarianTokenizer
from textkit.pretrained.result import Pretrained

__all__ = [
    "EncoderTokenizer", "LanguageError", "MarianTokenizer", "MissingFileError",
    "NotCheckpointError", "NotMarianCheckpointError", "Pretrained", "PretrainedError",
    "UnsupportedArchitectureError", "VocabSizeMismatchError", "generation_options",
    "embed_texts", "length_buckets", "load_pretrained", "load_translator", "save_pretrained",
]
