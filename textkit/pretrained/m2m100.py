"""M2M100 checkpoints (``model_type`` "m2m_100", ``M2M100ForConditionalGeneration``): the
``FAMILY`` that ``textkit.pretrained.seq2seq`` loads and saves generically.

The config map reads ``config.json`` as a ``Transformer`` with ``architecture="m2m_100"``:
pre-norm layers with a final norm after each stack, fairseq's sinusoidal positions offset by 2
(``positions="sinusoidal"``: textkit's table is fairseq's), embeddings scaled by
sqrt(d_model), ReLU, one shared table tied to the output, no logits bias, the decoder starting
from ``</s>``. The tokenizer (``M2M100Tokenizer``) is transformers' slow one:
``sentencepiece.bpe.model`` segments, ``vocab.json`` maps pieces to ids, and the language
tokens ``__xx__`` (``tokenizer_config.json``'s ``additional_special_tokens``, in order) take
the ids after the vocabulary (or, when it lists none, those of its ``language_codes``, as
transformers 5 saves it). A source is ``__src__ ... </s>``, a target ``__tgt__ ... </s>``;
translating forces the target language's token first (``forced_bos_id``). NLLB-200 has the
same ``model_type``: a ``tokenizer.json`` whose ``tokenizer_config.json`` names an NLLB class is
read as a ``JsonLanguageTokenizer`` (codes such as ``eng_Latn``, ``language_tokenizers``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from textkit._io import write_json_atomic
from textkit.models.transformer import TransformerConfig
from textkit.pretrained import seq2seq
from textkit.pretrained.errors import (
    MissingFileError,
    UnsupportedArchitectureError,
)
from textkit.pretrained.files import read_json_object
from textkit.pretrained.language_tokenizers import (
    JsonLanguageTokenizer,
    LanguageTokenizer,
    M2M100Tokenizer,
    json_language_tokenizer,
)

__all__ = ["FAMILY", "LANGUAGE_CODES", "NLLB_CODE", "hf_config", "m2m100_config"]

LANGUAGE_CODES = {
    "m2m100": tuple(
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd "
        "gl gu ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg "
        "mk ml mn mr ms my ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw "
        "ta th tl tn tr uk ur uz vi wo xh yi yo zh zu".split()),
    "wmt21": ("en", "ha", "is", "ja", "cs", "ru", "zh", "de"),
}
"""``tokenizer_config.json``'s ``language_codes`` -> the codes in fairseq's order (the published
M2M100 tokenizers give ``__xx__`` the ids after the vocabulary in this order)."""
LAYER_NORM_EPSILON = 1e-5
POSITION_OFFSET = 2          # fairseq's padding_idx + 1
NLLB_CODE = re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$")
"""What an NLLB language code looks like (``eng_Latn``)."""


# ------------------------------------------------------------------------------------ config
def m2m100_config(hf: Mapping[str, Any], root: str | os.PathLike = ".",
                  **overrides: Any) -> TransformerConfig:
    """``TransformerConfig`` of an M2M100 ``config.json`` dict (``UnsupportedArchitectureError``
    names the first option textkit does not implement); ``overrides`` replace fields."""
    root = Path(root)
    options = seq2seq.fairseq_options(hf, root, "M2M100", "relu", {})
    options.update(
        pre_norm=True, final_norm=True, positions="sinusoidal", position_offset=POSITION_OFFSET,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        scale_embedding=bool(hf.get("scale_embedding", True)), final_logits_bias=False,
        architecture="m2m_100")
    options.update(overrides)
    return TransformerConfig(**options)


def hf_config(config: TransformerConfig, target: M2M100Tokenizer) -> dict[str, Any]:
    """The ``config.json`` dict of an M2M100 ``TransformerConfig`` (inverse of
    ``m2m100_config``)."""
    return {**seq2seq.fairseq_hf_config(config, "M2M100", {
        "pre_norm": True, "has_final_norm": True, "positions": "sinusoidal",
        "position_offset": POSITION_OFFSET, "embedding_norm": False, "final_logits_bias": False,
        "share_embeddings": True, "layer_norm_epsilon": LAYER_NORM_EPSILON}),
        "vocab_size": config.src_vocab_size, "tie_word_embeddings": config.tie_output,
        "bos_token_id": target.begin_id, "eos_token_id": target.eos_id,
        "decoder_start_token_id": config.decoder_start_id}


# ----------------------------------------------------------------------- tokenizer settings
def _languages(root: Path) -> tuple[str, ...]:
    """The language codes of ``root``'s tokenizer: ``tokenizer_config.json``'s
    ``additional_special_tokens`` (``__xx__`` tokens, in order; else those of
    ``special_tokens_map.json``), else its ``language_codes`` list name ("m2m100", the
    default, or "wmt21"), as transformers' ``M2M100Tokenizer`` reads them."""
    settings: dict[str, Any] = {}
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = root / name
        if not path.is_file():
            continue
        found = read_json_object(path)
        settings = settings or found
        tokens = [t.get("content") if isinstance(t, dict) else t
                  for t in found.get("additional_special_tokens") or []]
        codes = tuple(t[2:-2] for t in tokens
                      if isinstance(t, str) and t.startswith("__") and t.endswith("__"))
        if codes:
            return codes
    name = settings.get("language_codes", "m2m100")
    if name not in LANGUAGE_CODES:
        raise UnsupportedArchitectureError(
            f"{root / 'tokenizer_config.json'}: language_codes={name!r} is not supported: "
            f"expected one of {sorted(LANGUAGE_CODES)}")
    return LANGUAGE_CODES[name]


def load_tokenizers(root: Path, config: TransformerConfig) -> tuple[LanguageTokenizer,
                                                                     LanguageTokenizer]:
    """(source, target) tokenizers of ``root``, no language chosen yet: NLLB's
    (``tokenizer.json`` with a ``tokenizer_class`` of NLLB) or M2M100's (``vocab.json`` +
    ``sentencepiece.bpe.model``); ``MissingFileError`` naming the files looked for."""
    config_path = root / "tokenizer_config.json"
    settings = read_json_object(config_path) if config_path.is_file() else {}
    nllb = str(settings.get("tokenizer_class", "")).startswith("Nllb")
    if nllb and (root / "tokenizer.json").is_file():
        source: LanguageTokenizer = json_language_tokenizer(
            root, settings, config.decoder_start_id, NLLB_CODE, "NLLB")
    elif (root / "vocab.json").is_file() and (root / "sentencepiece.bpe.model").is_file():
        source = M2M100Tokenizer(where=root, spm_path=root / "sentencepiece.bpe.model",
                                 vocab=read_json_object(root / "vocab.json"),
                                 languages=_languages(root),
                                 decoder_start_id=config.decoder_start_id)
    else:
        raise MissingFileError(
            f"{root} has no tokenizer textkit reads for model_type m2m_100: expected "
            f"tokenizer.json with tokenizer_config.json's tokenizer_class NllbTokenizer(Fast) "
            f"(NLLB-200), or vocab.json + sentencepiece.bpe.model (M2M100)")
    return source, dataclasses.replace(source, side="target")


def save_tokenizers(source: LanguageTokenizer, target: LanguageTokenizer, directory: Path,
                    config: TransformerConfig) -> None:
    """The tokenizer's files, as transformers reads them: NLLB's ``tokenizer.json`` and
    ``tokenizer_config.json``; M2M100's ``vocab.json``, ``sentencepiece.bpe.model`` and a
    ``tokenizer_config.json``."""
    if isinstance(source, JsonLanguageTokenizer):
        source.tokenizer.save(str(directory / "tokenizer.json"))
        write_json_atomic(directory / "tokenizer_config.json", {
            "tokenizer_class": "NllbTokenizer", "bos_token": "<s>", "eos_token": "</s>",
            "sep_token": "</s>", "cls_token": "<s>", "pad_token": "<pad>",
            "unk_token": "<unk>", "mask_token": "<mask>",
            "additional_special_tokens": list(source.languages),
            "legacy_behaviour": source.legacy, "model_max_length": config.max_len})
        return
    write_json_atomic(directory / "vocab.json", dict(source.vocab))
    shutil.copyfile(source.spm_path, directory / "sentencepiece.bpe.model")
    write_json_atomic(directory / "tokenizer_config.json", {
        "tokenizer_class": "M2M100Tokenizer", "bos_token": "<s>", "eos_token": "</s>",
        "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
        "additional_special_tokens": [f"__{code}__" for code in source.languages],
        "language_codes": next((name for name, codes in LANGUAGE_CODES.items()
                                if codes == source.languages), "m2m100"),
        "model_max_length": config.max_len})


def generation(config: TransformerConfig, target: M2M100Tokenizer) -> dict[str, Any]:
    """The ``generation_config.json`` transformers writes for an M2M100 model."""
    return {"bos_token_id": target.begin_id, "decoder_start_token_id": config.decoder_start_id,
            "eos_token_id": target.eos_id, "pad_token_id": config.pad_id}


FAMILY = seq2seq.Seq2SeqFamily(
    model_type="m2m_100", hf_class="M2M100ForConditionalGeneration", architecture="m2m_100",
    config=m2m100_config, hf_config=hf_config, weight_map=seq2seq.fairseq_weight_map,
    vocab_paths=("src_embed", "tgt_embed", "output"),
    tokenizer_files=(), load_tokenizers=load_tokenizers,
    save_tokenizers=save_tokenizers, tokenizer_type=LanguageTokenizer, generation=generation,
    layout=seq2seq.embedding_layout, named=seq2seq.tied_names)
"""M2M100 as a ``seq2seq.Seq2SeqFamily``."""
