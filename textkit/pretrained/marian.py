"""Marian / OPUS-MT checkpoints (Hugging Face ``save_pretrained`` layout): the ``FAMILY`` that
``textkit.pretrained.seq2seq`` loads and saves generically.

The config map (``marian_config`` / ``hf_config``) reads ``config.json`` as a ``Transformer``
with ``architecture="marian"`` (post-norm, Marian's sinusoidal positions, sqrt(d_model)
embedding scale, the checkpoint's activation, ``final_logits_bias``, shared/tied embeddings,
layer-norm epsilon 1e-5, decoder start = pad); the tokenizer settings read ``source.spm``,
``target.spm``, ``vocab.json`` (+ ``target_vocab.json``) and ``tokenizer_config.json`` as the
two ``MarianTokenizer`` sides; the default ``generation_config.json`` is Marian's (beam 4,
pad banned, EOS forced at ``max_length``). ``load(dir, config)`` is ``seq2seq.load`` of this
family; load -> save -> load is exact.

The weights map one to one (torch ``Linear`` weight [out, in] -> textkit kernel [in, out]):

=====================================================  =========================================
transformers                                           textkit
=====================================================  =========================================
``model.shared.weight`` (or encoder/decoder embed)     ``src_embed`` / ``tgt_embed`` ``embedding``
``lm_head.weight`` (untied only)                       ``output.kernel`` [D, V]
``final_logits_bias`` [1, V]                           ``final_logits_bias`` [V]
``*.self_attn.{q,k,v}_proj``                           ``self_attention.qkv`` [D, 3, H, Dh]
``*.self_attn.out_proj``                               ``self_attention.out`` [H, Dh, D]
``decoder.layers.i.encoder_attn.q_proj``               ``cross_attention.query`` [D, H, Dh]
``decoder.layers.i.encoder_attn.{k,v}_proj``           ``cross_attention.key_value`` [D, 2, H, Dh]
``*.fc1`` / ``*.fc2``                                  ``feed_forward.wi`` / ``wo``
``self_attn_layer_norm`` / ``encoder_attn_layer_norm``  ``self_norm`` / ``cross_norm``
``final_layer_norm``                                   ``ff_norm``
=====================================================  =========================================

Errors a user meets (``textkit.pretrained.errors``), each a ``PretrainedError`` (a ``ValueError``)
naming the directory: ``MissingFileError`` (also a ``FileNotFoundError``),
``UnsupportedArchitectureError`` (names the config key and value) and
``VocabSizeMismatchError``; a checkpoint of another ``model_type`` given to ``load`` is a
``NotMarianCheckpointError``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from textkit._io import write_json_atomic
from textkit.models.transformer import TransformerConfig
from textkit.pretrained import seq2seq
from textkit.pretrained.errors import NotMarianCheckpointError
from textkit.pretrained.files import unsupported
from textkit.pretrained.marian_tokenizer import MarianTokenizer
from textkit.pretrained.result import Pretrained

__all__ = ["FAMILY", "hf_config", "load", "marian_config"]

LAYER_NORM_EPSILON = 1e-5   # torch.nn.LayerNorm's default, used by every Marian layer norm


# ------------------------------------------------------------------------------------ config
def marian_config(hf: Mapping[str, Any], root: str | os.PathLike = ".",
                  **overrides: Any) -> TransformerConfig:
    """``TransformerConfig`` of a Marian ``config.json`` dict (``UnsupportedArchitectureError``
    names the first option textkit does not implement); ``overrides`` (e.g. ``policy``,
    ``dropout``) replace fields."""
    root = Path(root)
    get = lambda key, default=None: hf.get(key, default)  # noqa: E731
    activation = seq2seq.fairseq_options(hf, root, "Marian", "swish", {
        "normalize_before": False, "add_final_layer_norm": False, "normalize_embedding": False,
        "static_position_embeddings": True, "add_bias_logits": False})["activation"]
    shared = bool(get("share_encoder_decoder_embeddings", True))
    vocab = int(get("vocab_size"))
    tgt_vocab = vocab if shared else int(get("decoder_vocab_size") or vocab)
    shared = bool(overrides.pop("share_embeddings", shared))
    d_model, heads = int(get("d_model")), int(get("encoder_attention_heads"))
    if d_model % heads or d_model % 2:
        raise unsupported(root, "d_model", d_model, f"needs an even d_model divisible by the "
                                                     f"{heads} heads")
    options = dict(
        src_vocab_size=vocab, tgt_vocab_size=tgt_vocab, share_embeddings=shared,
        tie_output=bool(get("tie_word_embeddings", True)), d_model=d_model, num_heads=heads,
        d_ff=int(get("encoder_ffn_dim")), num_encoder_layers=int(get("encoder_layers")),
        num_decoder_layers=int(get("decoder_layers")), dropout=float(get("dropout", 0.1)),
        attention_dropout=float(get("attention_dropout", 0.0)), pre_norm=False,
        positions="sinusoidal_marian", max_len=int(get("max_position_embeddings", 512)),
        activation=activation, layer_norm_epsilon=LAYER_NORM_EPSILON,
        scale_embedding=bool(get("scale_embedding", False)), final_logits_bias=True,
        decoder_start_id=int(get("decoder_start_token_id", get("pad_token_id"))),
        pad_id=int(get("pad_token_id")), architecture="marian")
    options.update(overrides)
    return TransformerConfig(**options)


# ----------------------------------------------------------------------------------- weights








# ------------------------------------------------------------------------- the config map back
def hf_config(config: TransformerConfig, target: MarianTokenizer) -> dict[str, Any]:
    """The ``config.json`` dict of a Marian ``TransformerConfig`` (inverse of
    ``marian_config``; ``target``: the target tokenizer, for the EOS id);
    ``UnsupportedArchitectureError`` for what Marian cannot express."""
    start = config.pad_id if config.decoder_start_id is None else config.decoder_start_id
    return {**seq2seq.fairseq_hf_config(config, "Marian", {
        "pre_norm": False, "positions": "sinusoidal_marian", "final_logits_bias": True,
        "layer_norm_epsilon": LAYER_NORM_EPSILON, "has_final_norm": False,
        "embedding_norm": False, "position_offset": 0}),
        "vocab_size": config.src_vocab_size, "decoder_vocab_size": config.tgt_vocab_size,
        "share_encoder_decoder_embeddings": config.src_vocab_size == config.tgt_vocab_size,
        "tie_word_embeddings": config.tie_output and config.share_embeddings,
        "decoder_start_token_id": start, "eos_token_id": target.eos_id,
        "forced_eos_token_id": target.eos_id}


# ----------------------------------------------------------------------- tokenizer settings
def load_tokenizers(root: Path, config: TransformerConfig) -> tuple[MarianTokenizer,
                                                                     MarianTokenizer]:
    """(source, target) ``MarianTokenizer``s of ``root``, the target starting the decoder at
    the config's ``decoder_start_id``."""
    return MarianTokenizer.from_directory(root, config.decoder_start_id)


def save_tokenizers(source: MarianTokenizer, target: MarianTokenizer, directory: Path,
                    config: TransformerConfig) -> None:
    """``tokenizer_config.json``, ``vocab.json`` (+ ``target_vocab.json``), ``source.spm`` and
    ``target.spm`` in ``directory``."""
    separate = source.vocab != target.vocab
    write_json_atomic(directory / "tokenizer_config.json", {
        "tokenizer_class": "MarianTokenizer", "eos_token": source.eos_piece,
        "unk_token": source.unk_piece, "pad_token": source.pad_piece,
        "separate_vocabs": separate, "model_max_length": config.max_len})
    write_json_atomic(directory / "vocab.json", source.vocab)
    if separate:
        write_json_atomic(directory / "target_vocab.json", target.vocab)
    shutil.copyfile(source.spm_path, directory / "source.spm")
    shutil.copyfile(target.spm_path, directory / "target.spm")


def generation(config: TransformerConfig, target: MarianTokenizer) -> dict[str, Any]:
    """Marian's ``generation_config.json``: beam 4, pad banned, EOS forced at ``max_length``
    = ``max_len``."""
    start = config.pad_id if config.decoder_start_id is None else config.decoder_start_id
    return {"bad_words_ids": [[config.pad_id]], "bos_token_id": target.eos_id,
            "decoder_start_token_id": start, "eos_token_id": target.eos_id,
            "forced_eos_token_id": target.eos_id, "max_length": config.max_len, "num_beams": 4,
            "pad_token_id": config.pad_id}


FAMILY = seq2seq.Seq2SeqFamily(
    model_type="marian", hf_class="MarianMTModel", architecture="marian",
    config=marian_config, hf_config=hf_config, weight_map=seq2seq.fairseq_weight_map,
    vocab_paths=("src_embed", "tgt_embed", "output", "final_logits_bias"),
    tokenizer_files=("source.spm", "target.spm", "vocab.json"),
    load_tokenizers=load_tokenizers, save_tokenizers=save_tokenizers,
    tokenizer_type=MarianTokenizer, generation=generation, layout=seq2seq.embedding_layout,
    named=seq2seq.tied_names, wrong_family=NotMarianCheckpointError)
"""Marian as a ``seq2seq.Seq2SeqFamily``."""


def load(root: Path, hf: Mapping[str, Any], **overrides: Any) -> Pretrained:
    """The Marian checkpoint directory ``root`` whose ``config.json`` is ``hf``
    (``seq2seq.load`` of ``FAMILY``): ``Pretrained(kind="translation", model, params,
    tokenizer=source side, target_tokenizer=target side)``."""
    return seq2seq.load(FAMILY, root, hf, **overrides)
