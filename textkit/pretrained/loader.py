"""``load_pretrained(dir)``: the one loader of foreign (Hugging Face layout) checkpoint
directories. It reads ``config.json`` and hands the directory to the loader registered for its
``model_type`` in ``LOADERS`` ("marian": ``marian.load``; the encoder families:
``encoders.load``); a sentence-transformers directory (``modules.json``) loads its Transformer
module so, then ``sentence.load`` adds the rest. Every family gives one typed ``Pretrained``.
``load_translator(dir)`` builds a ``Translator`` that searches as Hugging Face ``generate``
does, with the options of ``generation_options(dir)``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textkit.decoding import Translator
from textkit.models.decoder_lm import DecoderLM
from textkit.models.sentence_encoder import SentenceEncoder
from textkit.models.transformer import Transformer
from textkit.pretrained import decoders, encoders, marian, sentence
from textkit.pretrained.errors import UnsupportedArchitectureError
from textkit.pretrained.files import (
    GENERATION_TYPES,
    check_types,
    read_config,
    read_settings,
    unsupported,
)
from textkit.pretrained.result import Pretrained

__all__ = ["LOADERS", "generation_options", "load_pretrained", "load_translator",
           "save_pretrained"]

PyTree = Any

LOADERS: dict[str, Callable[..., Any]] = {"marian": marian.load,
                                          **dict.fromkeys(encoders.MODEL_TYPES, encoders.load),
                                          **dict.fromkeys(decoders.MODEL_TYPES, decoders.load)}
"""``config.json`` ``model_type`` -> ``loader(root: Path, config: dict, **overrides)``."""


def load_pretrained(path: str | os.PathLike, **overrides: Any) -> Pretrained:
    """Load a checkpoint directory by its ``config.json`` ``model_type`` (``LOADERS``) as one
    typed ``Pretrained`` (fields ``kind``, ``model``, ``params``, ``tokenizer``,
    ``target_tokenizer``, ``generation``: ``generation_config.json``, {} when absent).

    An encoder checkpoint (``model_type`` bert, roberta, xlm-roberta, electra, distilbert,
    deberta-v2, modernbert) is ``kind="encoder"``: an ``Encoder`` with the head of
    ``architectures``, its params and an ``EncoderTokenizer`` (``pretrained.encoders``).
    A translation checkpoint (Marian / OPUS-MT) is ``kind="translation"``: a ``Transformer``,
    its params (float32 numpy arrays in the model's tree), the source ``MarianTokenizer`` as
    ``tokenizer`` and the target one as ``target_tokenizer``. ``overrides`` replace model
    config fields (e.g. ``policy="mixed_bfloat16"``, ``dropout=0.1`` for fine-tuning).

    Raises ``NotCheckpointError`` (not a directory, no or bad config.json),
    ``UnsupportedArchitectureError`` (a ``model_type`` with no loader, or an option the loader
    does not implement: file, key and value named), ``MissingFileError`` and
    ``VocabSizeMismatchError``; all are ``PretrainedError``s.

    A sentence-transformers directory (``modules.json``: Transformer -> Pooling -> Dense* ->
    Normalize?) is ``kind="sentence_encoder"``, its model a ``SentenceEncoder``:
    ``model.config`` has ``pooling``, ``dense``, ``normalize``, ``max_seq_length``;
    ``embed_texts`` turns texts into its vectors (``pretrained.sentence``).
    """
    root = Path(path)
    if sentence.is_sentence_transformers(root):
        transformer = _load_checkpoint(sentence.transformer_path(root), **overrides)
        if transformer.kind != "encoder":
            raise UnsupportedArchitectureError(
                f"{root / 'modules.json'}: the Transformer module is a "
                f"{type(transformer.model).__name__}, not an encoder")
        return sentence.load(root, transformer)
    return _load_checkpoint(root, **overrides).replace(generation=_generation_config(root))


def _generation_config(root: Path) -> dict[str, Any]:
    """``generation_config.json`` of ``root`` as a dict ({} when absent)."""
    return read_settings(root / "generation_config.json", GENERATION_TYPES)


def _load_checkpoint(root: Path, **overrides: Any) -> Pretrained:
    """A Hugging Face checkpoint directory, by its ``config.json`` ``model_type``."""
    config = read_config(root)
    model_type = config.get("model_type")
    loader = LOADERS.get(model_type) if isinstance(model_type, str) else None
    if loader is None:
        raise unsupported(root, "model_type", model_type,
                          f"textkit loads {sorted(LOADERS)} checkpoints (architectures: "
                          f"{config.get('architectures')})")
    return loader(root, config, **overrides)


def save_pretrained(model: Any, params: PyTree, tokenizers: Any, path: str | os.PathLike,
                    **options: Any) -> Path:
    """Write ``model`` / ``params`` and its tokenizer(s) as a Hugging Face checkpoint directory
    (replaced atomically) that transformers loads: an ``Encoder`` with its ``EncoderTokenizer``
    (``encoders.save_pretrained``), a Marian-shaped ``Transformer`` with its ``(src, tgt)``
    ``MarianTokenizer``s (``marian.save_pretrained``; ``options``: ``generation``), a
    ``SentenceEncoder`` as a sentence-transformers directory (``sentence.save_pretrained``), a
    ``DecoderLM`` with its ``LMTokenizer`` (``decoders.save_pretrained``; ``options``:
    ``generation``). Encoder ``options``: ``labels`` (class names written as ``id2label`` /
    ``label2id``). Any other model is a ``TypeError`` naming it."""
    if isinstance(model, SentenceEncoder):
        return sentence.save_pretrained(model, params, tokenizers, path, **options)
    if isinstance(model, encoders.Encoder):
        return encoders.save_pretrained(model, params, tokenizers, path, **options)
    if isinstance(model, DecoderLM):
        return decoders.save_pretrained(model, params, tokenizers, path, **options)
    if isinstance(model, Transformer):
        return marian.save_pretrained(model, params, tokenizers, path, **options)
    raise TypeError(f"save_pretrained writes Encoder, SentenceEncoder, DecoderLM and "
                    f"Marian-shaped Transformer models; got {type(model).__name__}")


def load_translator(path: str | os.PathLike, **options: Any) -> tuple[Translator, PyTree]:
    """``(translator, params)`` for a translation checkpoint directory (Marian / OPUS-MT,
    ``load_pretrained``): sources get EOS appended (by the ``MarianTokenizer``), the search
    follows ``generation_config.json`` (``generation_options``: beam size, length penalty in
    transformers' form ``n ** alpha`` via ``length_offset=0``, ``max_length`` - 1 output
    tokens, banned pad, forced EOS, transformers' finishing rule). ``options`` override any
    ``Translator`` argument, e.g. ``beam_size=1`` (greedy) or ``alpha=0``."""
    loaded = load_pretrained(path)
    if loaded.kind != "translation":
        raise UnsupportedArchitectureError(f"{Path(path) / 'config.json'}: a {loaded.kind} "
                                           f"checkpoint, not a translation model")
    settings = {**generation_options(path), "src_append_eos": False, **options}
    return Translator(loaded.model, loaded.tokenizer, loaded.target_tokenizer,
                      **settings), loaded.params


# -------------------------------------------------------------------------------- generation
_IGNORED = {"transformers_version", "bos_token_id", "pad_token_id", "eos_token_id",
            "decoder_start_token_id", "_from_model_config", "use_cache", "output_scores",
            "return_dict_in_generate"}
_NEUTRAL = {"do_sample": False, "early_stopping": False, "num_return_sequences": 1,
            "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "min_length": 0,
            "temperature": 1.0, "top_k": 50, "top_p": 1.0, "renormalize_logits": False,
            "encoder_no_repeat_ngram_size": 0, "diversity_penalty": 0.0, "num_beam_groups": 1}


def generation_options(path: str | os.PathLike) -> dict[str, Any]:
    """``Translator`` options from a checkpoint's ``generation_config.json`` (else the
    generation keys of ``config.json``, else transformers' defaults).

    Maps ``num_beams`` -> ``beam_size``, ``length_penalty`` -> ``alpha`` with ``length_offset=0``
    (transformers' ``n ** alpha``), ``max_length`` (start token included) -> ``max_length - 1``
    output tokens, single-token ``bad_words_ids`` -> ``banned_ids``, ``forced_eos_token_id`` ->
    ``forced_eos``, and ``hf_compatible=True``. Options with no textkit counterpart at a
    non-neutral value (sampling, repetition penalties, ``min_length``, ...) are named in a
    ``UserWarning`` and ignored.
    """
    root = Path(path)
    gen_path = root / "generation_config.json"
    gen = read_settings(gen_path, GENERATION_TYPES)
    if not gen_path.is_file():
        gen = read_config(root)
        check_types(root / "config.json", gen, GENERATION_TYPES)
    eos = gen.get("eos_token_id", 0)
    eos = eos[0] if isinstance(eos, list) else eos
    banned = [ids[0] for ids in gen.get("bad_words_ids") or [] if len(ids) == 1]
    options = {"beam_size": int(gen.get("num_beams") or 1),
               "alpha": float(gen.get("length_penalty", 1.0)), "length_offset": 0.0,
               "max_length": max(1, int(gen.get("max_length") or 20) - 1),
               "banned_ids": tuple(banned), "hf_compatible": True,
               "forced_eos": gen.get("forced_eos_token_id") is not None
               and gen.get("forced_eos_token_id") in (eos, [eos])}
    if gen.get("max_new_tokens"):
        options["max_length"] = int(gen["max_new_tokens"])
    ignored = {k: v for k, v in gen.items() if k in _NEUTRAL and v != _NEUTRAL[k]}
    ignored.update({"bad_words_ids": gen["bad_words_ids"]} if len(banned) < len(
        gen.get("bad_words_ids") or []) else {})
    if ignored:
        warnings.warn(f"{gen_path}: generation options textkit does not apply: {ignored}",
                      UserWarning, stacklevel=2)
    return options
