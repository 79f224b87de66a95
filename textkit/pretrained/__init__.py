"""Foreign checkpoint formats: Hugging Face layouts in and out of textkit.

``load_pretrained(dir, **overrides)`` is the one loader: it dispatches on ``config.json``'s
``model_type`` (``loader.LOADERS``; today "marian", Marian / OPUS-MT translation models, which
give ``Pretrained(model, params, src_tokenizer, tgt_tokenizer)``). ``save_pretrained`` writes a
Marian-shaped ``Transformer`` back (transformers loads it), ``load_translator(dir)`` gives
``(Translator, params)`` searching as transformers' ``generate`` does, with the options of
``generation_options(dir)``. Errors are ``PretrainedError``s (``textkit.errors.TextkitError``
and ``ValueError``) naming the directory or file and what was expected.

This package sits above ``textkit.models`` and ``textkit.decoding``: it maps names and options
onto textkit's own models, and never implements a model a second time.
"""

from textkit.pretrained.errors import (
    MissingFileError,
    NotCheckpointError,
    NotMarianCheckpointError,
    PretrainedError,
    UnsupportedArchitectureError,
    VocabSizeMismatchError,
)
from textkit.pretrained.loader import generation_options, load_pretrained, load_translator
from textkit.pretrained.marian import Pretrained, save_pretrained
from textkit.pretrained.marian_tokenizer import MarianTokenizer

__all__ = [
    "MarianTokenizer", "MissingFileError", "NotCheckpointError", "NotMarianCheckpointError",
    "Pretrained", "PretrainedError", "UnsupportedArchitectureError", "VocabSizeMismatchError",
    "generation_options", "load_pretrained", "load_translator", "save_pretrained",
]
