"""``load_pretrained(dir)``: the one loader of foreign (Hugging Face layout) checkpoint
directories. It reads ``config.json`` and hands the directory to the loader registered for its
``model_type`` in ``LOADERS`` (the encoder-decoder families, "marian": ``seq2seq.load`` of
the family; the encoder families:
``encoders.load``); a sentence-transformers directory (``modules.json``) loads its Transformer
module so, then ``sentence.load`` adds the rest. Every family gives one typed ``Pretrained``.
``load_translator(dir)`` builds a ``Translator`` that searches as Hugging Face ``generate``
does, with the options of ``generation_options(dir)``.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from textkit.decoding import GenerationConfig, Translator
from textkit.decoding.generation_config import NEUTRAL, OPTIONS
from textkit.decoding.translator import translator_options
from textkit.models.decoder_lm import DecoderLM
from textkit.models.sentence_encoder import SentenceEncoder
from textkit.models.transformer import Transformer
from textkit.pretrained import decoders, encoders, sentence, seq2seq
from textkit.pretrained.errors import PretrainedError, UnsupportedArchitectureError
from textkit.pretrained.families import SEQ2SEQ_FAMILIES
from textkit.pretrained.files import (
    GENERATION_TYPES,
    check_types,
    read_config,
    read_settings,
    unsupported,
)
from textkit.pretrained.result import Pretrained

__all__ = ["LOADERS", "generation_config", "generation_options", "load_pretrained",
           "load_translator", "save_pretrained"]

PyTree = Any

LOADERS: dict[str, Callable[..., Any]] = {
    **{family.model_type: functools.partial(seq2seq.load, family)
       for family in SEQ2SEQ_FAMILIES.values()},
                                          **dict.fromkeys(encoders.MODEL_TYPES, encoders.load),
                                          **dict.fromkeys(decoders.MODEL_TYPES, decoders.load)}
"""``config.json`` ``model_type`` -> ``loader(root: Path, config: dict, **overrides)``."""


def load_pretrained(path: str | os.PathLike, *, adapter: str | os.PathLike | None = None,
                    **overrides: Any) -> Pretrained:
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

    ``adapter``: a PEFT LoRA adapter directory for this base (``peft.load_adapter``): the
    params come with it merged (its saved modules, a task head, in place) and the result's
    ``adapter`` holds it.
    """
    root = Path(path)
    if sentence.is_sentence_transformers(root):
        if adapter is not None:
            raise UnsupportedArchitectureError(f"{root}: a sentence-transformers directory "
                                               f"takes no LoRA adapter")
        transformer = _load_checkpoint(sentence.transformer_path(root), **overrides)
        if transformer.kind != "encoder":
            raise UnsupportedArchitectureError(
                f"{root / 'modules.json'}: the Transformer module is a "
                f"{type(transformer.model).__name__}, not an encoder")
        return sentence.load(root, transformer)
    loaded = _load_checkpoint(root, **overrides).replace(generation=_generation_config(root))
    if adapter is None:
        return loaded
    from textkit.pretrained.peft import load_adapter

    found, params = load_adapter(adapter, loaded.model, loaded.params)
    return loaded.replace(params=jax.tree_util.tree_map(np.asarray, found.merge(params)),
                          adapter=found)


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
    tokenizers (``seq2seq.save_pretrained`` of the family its config's ``architecture``
    names, Marian's ``MarianTokenizer``s; ``options``: ``generation``), a
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
        family = SEQ2SEQ_FAMILIES.get(model.config.architecture)
        if family is None:
            raise UnsupportedArchitectureError(
                f"save_pretrained writes a Transformer in the layout of the checkpoint family "
                f"its config's architecture names ({sorted(SEQ2SEQ_FAMILIES)}); this one is "
                f"{model.config.architecture!r} (textkit's own: it has no Hugging Face "
                f"layout; train from --init-from a checkpoint to export one)")
        return seq2seq.save_pretrained(family, model, params, tokenizers, path, **options)
    raise TypeError(f"save_pretrained writes Encoder, SentenceEncoder, DecoderLM and "
                    f"Transformer models; got {type(model).__name__}")


def load_translator(path: str | os.PathLike, *, src_lang: str | None = None,
                    tgt_lang: str | None = None, prefix: str | None = None,
                    task: str | None = None, **options: Any) -> tuple[Translator, PyTree]:
    """``(translator, params)`` for a translation checkpoint directory (``load_pretrained``;
    Marian / OPUS-MT, BART, mBART-50, M2M100, NLLB, T5, mT5): sources are encoded by the
    checkpoint's tokenizer (its
    EOS, and its language token), the search follows the checkpoint's generation settings
    (``generation_config``, mapped by ``translator_options``: beam size, length penalty in
    transformers' form ``n ** alpha`` via ``length_offset=0``, ``max_length`` - 1 output tokens,
    banned ids, forced first and last tokens, transformers' finishing rule).

    ``src_lang`` / ``tgt_lang``: the language codes of a multilingual checkpoint, in its
    family's spelling (M2M100 "en"); the target language's token is forced first. A
    multilingual checkpoint given no ``tgt_lang`` uses its ``forced_bos_token_id`` when its
    generation settings have one; otherwise, an unknown code, or codes given to a family that
    takes none, is a ``LanguageError`` naming them.

    ``task``: an entry of ``config.json``'s ``task_specific_params`` (T5's
    "translation_en_to_de"): its ``prefix`` is put before every source and its generation
    settings replace the checkpoint's (``task_settings``). ``prefix`` (T5's text-to-text task
    prefix, e.g. "translate English to German: ") is put before every source, the task's
    replaced; a family whose tokenizer takes no prefix warns and ignores it. ``options``
    override any ``Translator`` argument, e.g. ``beam_size=1`` (greedy) or ``alpha=0``."""
    loaded = load_pretrained(path)
    if loaded.kind != "translation":
        raise UnsupportedArchitectureError(f"{Path(path) / 'config.json'}: a {loaded.kind} "
                                           f"checkpoint, not a translation model")
    task_prefix, task_generation = task_settings(path, task) if task else ("", {})
    config = generation_config(path, task_generation)
    target = loaded.target_tokenizer
    languages = getattr(target, "languages", ())
    if tgt_lang is None and languages and config.forced_bos_id is not None:
        tgt_lang = next((code for code in languages
                         if target.language_id(code) == config.forced_bos_id), None)
    source = loaded.tokenizer.for_languages(src_lang, tgt_lang)
    target = target.for_languages(src_lang, tgt_lang)
    prefix = task_prefix if prefix is None else prefix
    if prefix and hasattr(source, "prefix"):
        source = source.configured(prefix=prefix)
    elif prefix:
        warnings.warn(f"{Path(path)}: a {loaded.model.config.architecture} checkpoint takes "
                      f"no text prefix; {prefix!r} is ignored (T5-family checkpoints take "
                      f"one)", UserWarning, stacklevel=2)
    start = getattr(loaded.model.config, "decoder_start_id", None)
    if config.decoder_start_id is not None and config.decoder_start_id != start:
        warnings.warn(f"{Path(path)}: generation_config.json's decoder_start_token_id "
                      f"{config.decoder_start_id} differs from config.json's {start}; the "
                      f"Translator starts with {start}", UserWarning, stacklevel=2)
    settings = translator_options(config, target.eos_id, f"the Translator of {Path(path)}")
    forced = getattr(target, "forced_bos_id", None)
    if forced is not None:
        settings["forced_bos"] = forced
    settings = {**settings, "src_append_eos": False, **options}
    return Translator(loaded.model, source, target, **settings), loaded.params


# -------------------------------------------------------------------------------- generation
def generation_config(path: str | os.PathLike,
                      task: Mapping[str, Any] | None = None) -> GenerationConfig:
    """The ``GenerationConfig`` of a checkpoint directory: its ``generation_config.json``
    (keys checked by type, ``files.GENERATION_TYPES``), else the generation keys of its
    ``config.json`` (older checkpoints keep them there), else transformers' defaults, with a
    task's settings (``task_settings``) over them; read by the one reader
    (``GenerationConfig.from_dict``: options textkit does not implement are named in a
    ``UserWarning``)."""
    root = Path(path)
    source = root / "generation_config.json"
    gen = read_settings(source, GENERATION_TYPES)
    if not source.is_file():
        source = root / "config.json"
        config = read_config(root)
        gen = {k: v for k, v in config.items() if k in OPTIONS or k in NEUTRAL}
        check_types(source, gen, GENERATION_TYPES)
    if task:
        check_types(root / "config.json", dict(task), GENERATION_TYPES)
        gen = {**gen, **task}
        source = f"{source} and config.json's task_specific_params"
    return GenerationConfig.from_dict(gen, str(source))


def task_settings(path: str | os.PathLike, task: str) -> tuple[str, dict[str, Any]]:
    """(prefix, generation settings) of ``task`` in a checkpoint's ``config.json``
    ``task_specific_params`` (T5's "translation_en_to_de": a ``prefix`` and beam settings); a
    ``PretrainedError`` naming the tasks it has for one it does not."""
    root = Path(path)
    tasks = read_config(root).get("task_specific_params") or {}
    if not isinstance(tasks, Mapping) or task not in tasks or not isinstance(tasks[task],
                                                                              Mapping):
        names = sorted(tasks) if isinstance(tasks, Mapping) else []
        raise PretrainedError(f"{root / 'config.json'}: no task {task!r} in "
                              f"task_specific_params (it has {', '.join(names) or 'none'})")
    settings = dict(tasks[task])
    return str(settings.pop("prefix", "") or ""), settings


def generation_options(path: str | os.PathLike) -> dict[str, Any]:
    """``Translator`` options from a checkpoint's generation settings (``generation_config``,
    mapped by ``translator_options``: ``num_beams`` -> ``beam_size``, ``length_penalty`` ->
    ``alpha`` with ``length_offset=0`` (transformers' ``n ** alpha``), ``max_length`` (start
    token included) -> ``max_length - 1`` output tokens, single-token ``bad_words_ids`` ->
    ``banned_ids``, ``forced_eos_token_id`` -> ``forced_eos``, ``min_length``,
    ``early_stopping``, and ``hf_compatible=True``). Options the Translator does not apply at a
    non-neutral value are named in a ``UserWarning``."""
    config = generation_config(path)
    eos = config.eos_ids[0] if config.eos_ids else None
    return translator_options(config, eos, f"the Translator of {Path(path)}")
