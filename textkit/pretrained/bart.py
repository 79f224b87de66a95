"""BART and mBART-50 checkpoints (``model_type`` "bart" and "mbart"): the ``FAMILY`` and
``MBART`` that ``textkit.pretrained.seq2seq`` loads and saves generically. mBART-50 is BART
with pre-norm layers and a final norm after each stack, scaled embeddings and a multilingual
tokenizer (``tokenizer.json``, codes such as ``en_XX`` before the text, the target's forced
first: ``language_tokenizers.JsonLanguageTokenizer``).

The config map reads ``config.json`` as a ``Transformer`` with ``architecture="bart"``:
post-norm layers, learned positions with BART's offset of 2 (the table has
``max_position_embeddings`` + 2 rows), a layer norm after the embeddings
(``layernorm_embedding``), the checkpoint's activation (GELU), ``final_logits_bias``, one
shared embedding table, the decoder starting from ``decoder_start_token_id`` (``</s>``). The
weights follow the fairseq-descended names (``seq2seq.fairseq_weight_map``). The tokenizer is
the byte-level BPE of RoBERTa (``tokenizer.json``, else ``vocab.json`` + ``merges.txt``), each
text encoded as ``<s> ... </s>`` (``BartTokenizer``). A summarisation checkpoint's
``generation_config.json`` (``forced_bos_token_id``, ``early_stopping``, ``min_length``,
``no_repeat_ngram_size``, ...) is read by the one reader; ``load_translator`` follows what it
implements and names the rest.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from textkit._io import write_json_atomic
from textkit.models.transformer import TransformerConfig
from textkit.pretrained import seq2seq
from textkit.pretrained.encoder_tokenizer import EncoderTokenizer
from textkit.pretrained.errors import (
    MissingFileError,
    PretrainedError,
    UnsupportedArchitectureError,
    refuse_language_codes,
)
from textkit.pretrained.files import read_json_object
from textkit.pretrained.language_tokenizers import JsonLanguageTokenizer, json_language_tokenizer

__all__ = ["FAMILY", "MBART", "BartTokenizer", "bart_config", "hf_config", "mbart_config"]

LAYER_NORM_EPSILON = 1e-5   # torch.nn.LayerNorm's default, every BART layer norm's
POSITION_OFFSET = 2         # BartLearnedPositionalEmbedding's offset


class BartTokenizer:
    """BART's tokenizer as a ``seq2seq.Seq2SeqTokenizer``: RoBERTa's byte-level BPE
    (``EncoderTokenizer``), each text encoded ``<s> ... </s>`` as transformers'
    ``BartTokenizer`` encodes it; the same object serves both sides.

    ``decoder_start_id``: the decoder's first input (BART's is ``</s>``); ``bos_id`` is the
    same id (what the translation batches put first in every target). ``add_eos=False`` (a
    ``configured`` copy) leaves the final ``</s>`` out (training targets, to which the
    translation loader adds it)."""

    def __init__(self, inner: EncoderTokenizer, decoder_start_id: int, *,
                 add_eos: bool = True) -> None:
        self.inner = inner
        ids = {name: inner.token_to_id(token) for name, token in
               (("eos", "</s>"), ("unk", "<unk>"), ("begin", "<s>"))}
        missing = [token for token, i in zip(("</s>", "<unk>", "<s>"), ids.values())
                   if i is None]
        if missing:
            raise PretrainedError(f"{inner.source or 'the tokenizer'}: BART's special tokens "
                                  f"{missing} are not in the vocabulary")
        self.pad_id, self.eos_id, self.unk_id = inner.pad_id, ids["eos"], ids["unk"]
        self.begin_id = ids["begin"]
        self.decoder_start_id = int(decoder_start_id)
        self.add_eos = bool(add_eos)

    @property
    def bos_id(self) -> int:
        """The decoder start id (see the class docstring)."""
        return self.decoder_start_id

    def __len__(self) -> int:
        return len(self.inner)

    def __repr__(self) -> str:
        return f"BartTokenizer({self.inner.source}, {len(self)} ids)"

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """``<s> ... </s>`` ids of every text (without the ``</s>`` when ``add_eos`` is
        False)."""
        rows = [list(encoding.ids) for encoding in self.inner.encodings(list(texts))]
        if not self.add_eos:
            rows = [row[:-1] if row and row[-1] == self.eos_id else row for row in rows]
        return rows

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Text of every id list, special tokens skipped."""
        return [self.inner.decode(row) for row in ids]

    def configured(self, *, add_eos: bool | None = None) -> BartTokenizer:
        """A copy with ``add_eos`` changed (this tokenizer is left as it is)."""
        return BartTokenizer(self.inner, self.decoder_start_id,
                             add_eos=self.add_eos if add_eos is None else add_eos)

    def for_languages(self, src_lang: str | None, tgt_lang: str | None) -> BartTokenizer:
        """This tokenizer when both codes are None; a ``LanguageError`` naming them otherwise
        (BART is not multilingual; mBART-50 is)."""
        refuse_language_codes("BART", src_lang, tgt_lang)
        return self


# ------------------------------------------------------------------------------------ config
def _config(hf: Mapping[str, Any], root: str | os.PathLike, architecture: str,
            **overrides: Any) -> TransformerConfig:
    """``TransformerConfig`` of a BART (``architecture`` "bart": post-norm) or mBART ("mbart":
    pre-norm with a final norm after each stack) ``config.json`` dict;
    ``UnsupportedArchitectureError`` names the first option textkit does not implement."""
    root = Path(root)
    mbart = architecture == "mbart"
    options = seq2seq.fairseq_options(hf, root, "mBART" if mbart else "BART", "gelu", {
        "normalize_before": mbart, "add_final_layer_norm": mbart, "normalize_embedding": True,
        "static_position_embeddings": False, "add_bias_logits": False})
    options.update(
        pre_norm=mbart, final_norm=mbart, positions="learned", position_offset=POSITION_OFFSET,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        scale_embedding=bool(hf.get("scale_embedding", False)), final_logits_bias=True,
        embedding_norm=True, architecture=architecture)
    options.update(overrides)
    return TransformerConfig(**options)


def bart_config(hf: Mapping[str, Any], root: str | os.PathLike = ".",
                **overrides: Any) -> TransformerConfig:
    """``TransformerConfig`` of a BART ``config.json`` dict; ``overrides`` replace fields."""
    return _config(hf, root, "bart", **overrides)


def mbart_config(hf: Mapping[str, Any], root: str | os.PathLike = ".",
                 **overrides: Any) -> TransformerConfig:
    """``TransformerConfig`` of an mBART ``config.json`` dict; ``overrides`` replace fields."""
    return _config(hf, root, "mbart", **overrides)


def hf_config(config: TransformerConfig, target: Any) -> dict[str, Any]:
    """The ``config.json`` dict of a BART or mBART ``TransformerConfig`` (inverse of
    ``bart_config`` / ``mbart_config``); ``UnsupportedArchitectureError`` for what the family
    cannot express."""
    mbart = config.architecture == "mbart"
    return {**seq2seq.fairseq_hf_config(config, config.architecture, {
        "pre_norm": mbart, "positions": "learned", "position_offset": POSITION_OFFSET,
        "embedding_norm": True, "has_final_norm": mbart, "final_logits_bias": True,
        "share_embeddings": True, "layer_norm_epsilon": LAYER_NORM_EPSILON}),
        "vocab_size": config.src_vocab_size, "tie_word_embeddings": config.tie_output,
        "bos_token_id": target.begin_id, "eos_token_id": target.eos_id,
        "decoder_start_token_id": config.decoder_start_id,
        "forced_eos_token_id": target.eos_id}


# ----------------------------------------------------------------------- tokenizer settings
def load_tokenizers(root: Path, config: TransformerConfig) -> tuple[BartTokenizer,
                                                                     BartTokenizer]:
    """(source, target): one ``BartTokenizer`` of ``root`` for both sides."""
    tokenizer = BartTokenizer(EncoderTokenizer.from_directory(root, "roberta"),
                              config.decoder_start_id)
    return tokenizer, tokenizer


def save_tokenizers(source: BartTokenizer, target: BartTokenizer, directory: Path,
                    config: TransformerConfig) -> None:
    """The tokenizer's files (those it was read from) in ``directory``."""
    source.inner.save(directory, "roberta")


def generation(config: TransformerConfig, target: BartTokenizer) -> dict[str, Any]:
    """The ``generation_config.json`` transformers writes for a BART model."""
    return {"bos_token_id": target.begin_id, "decoder_start_token_id": config.decoder_start_id,
            "eos_token_id": target.eos_id, "forced_eos_token_id": target.eos_id,
            "pad_token_id": config.pad_id}


MBART50_CODE = re.compile(r"^[a-z]{2}_[A-Z]{2}$")
"""What an mBART-50 language code looks like (``en_XX``)."""


def load_mbart_tokenizers(root: Path, config: TransformerConfig
                          ) -> tuple[JsonLanguageTokenizer, JsonLanguageTokenizer]:
    """(source, target) mBART-50 tokenizers of ``root``'s ``tokenizer.json`` (codes such as
    ``en_XX``), no language chosen yet; mBART-cc25's ``MBartTokenizer`` (its codes after the
    text, the decoder started by the target's code) is refused by name."""
    path = root / "tokenizer_config.json"
    settings = read_json_object(path) if path.is_file() else {}
    kind = str(settings.get("tokenizer_class", ""))
    if not kind.startswith("MBart50"):
        raise UnsupportedArchitectureError(
            f"{path}: tokenizer_class={kind or None!r} is not supported: textkit reads mBART-50 "
            f"(MBart50Tokenizer), not mBART-cc25's MBartTokenizer")
    if not (root / "tokenizer.json").is_file():
        raise MissingFileError(f"{root} has no tokenizer.json (an mBART-50 checkpoint's "
                               f"tokenizer as transformers saves it)")
    source = json_language_tokenizer(root, settings, config.decoder_start_id, MBART50_CODE,
                                     "mBART-50")
    return source, dataclasses.replace(source, side="target")


def save_mbart_tokenizers(source: JsonLanguageTokenizer, target: JsonLanguageTokenizer,
                          directory: Path, config: TransformerConfig) -> None:
    """``tokenizer.json`` and a ``tokenizer_config.json`` that transformers'
    ``MBart50TokenizerFast`` reads."""
    source.tokenizer.save(str(directory / "tokenizer.json"))
    write_json_atomic(directory / "tokenizer_config.json", {
        "tokenizer_class": "MBart50Tokenizer", "bos_token": "<s>", "eos_token": "</s>",
        "sep_token": "</s>", "cls_token": "<s>", "pad_token": "<pad>", "unk_token": "<unk>",
        "mask_token": "<mask>", "additional_special_tokens": list(source.languages),
        "model_max_length": config.max_len})


MBART = seq2seq.Seq2SeqFamily(
    model_type="mbart", hf_class="MBartForConditionalGeneration", architecture="mbart",
    config=mbart_config, hf_config=hf_config, weight_map=seq2seq.fairseq_weight_map,
    vocab_paths=("src_embed", "tgt_embed", "output", "final_logits_bias"),
    tokenizer_files=(), load_tokenizers=load_mbart_tokenizers,
    save_tokenizers=save_mbart_tokenizers, tokenizer_type=JsonLanguageTokenizer,
    generation=lambda config, target: {
        "bos_token_id": target.begin_id, "decoder_start_token_id": config.decoder_start_id,
        "eos_token_id": target.eos_id, "forced_eos_token_id": target.eos_id,
        "pad_token_id": config.pad_id},
    layout=seq2seq.embedding_layout, named=seq2seq.tied_names)
"""mBART-50 as a ``seq2seq.Seq2SeqFamily``."""


FAMILY = seq2seq.Seq2SeqFamily(
    model_type="bart", hf_class="BartForConditionalGeneration", architecture="bart",
    config=bart_config, hf_config=hf_config, weight_map=seq2seq.fairseq_weight_map,
    vocab_paths=("src_embed", "tgt_embed", "output", "final_logits_bias"),
    tokenizer_files=(), load_tokenizers=load_tokenizers, save_tokenizers=save_tokenizers,
    tokenizer_type=BartTokenizer, generation=generation, layout=seq2seq.embedding_layout,
    named=seq2seq.tied_names)
"""BART as a ``seq2seq.Seq2SeqFamily``."""
