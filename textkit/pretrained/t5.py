"""T5, T5 v1.1 / Flan-T5 and mT5 checkpoints (``model_type`` "t5" and "mt5"): the ``FAMILY``
and ``MT5`` that ``textkit.pretrained.seq2seq`` loads and saves generically.

The config map reads ``config.json`` as a ``Transformer`` with ``architecture`` "t5" (or
"mt5"): pre-norm
layers with RMS norms (no bias, no mean) and a final norm after each stack, no absolute
positions but a bucketed relative position bias per stack (``relative_attention_num_buckets``
up to ``relative_attention_max_distance``), ``d_kv`` as the head size, scores without the
1/sqrt(d) scale, no biases anywhere, unscaled embeddings shared by both stacks, the
feed-forward of ``feed_forward_proj`` ("relu": v1.0; "gated-gelu": v1.1, Flan-T5, mT5, GELU
as ``gelu_new``), the decoder started by the pad id. The head is the embedding matrix (v1.0,
its input rescaled by d_model^-0.5) or a matrix of its own (v1.1, mT5: ``lm_head.weight``
differs from ``shared.weight``). transformers 5 reads ``scale_decoder_outputs`` (else
``tie_word_embeddings`` not false) for T5 and never rescales mT5; so does this map.

``task_specific_params`` (``translation_en_to_de``: a ``prefix`` and generation settings) is
read by ``loader.task_settings``; the tokenizer is ``t5_tokenizer.T5Tokenizer``.

=====================================================  =========================================
transformers                                           textkit
=====================================================  =========================================
``shared.weight``                                      ``src_embed.embedding``
``lm_head.weight`` (v1.1, mT5)                         ``output.kernel`` [D, V]
``{side}.block.0.layer.0.SelfAttention.``              ``{side}_relative_bias.embedding``
``relative_attention_bias.weight``                     [buckets, H]
``*.SelfAttention.{q,k,v}`` / ``.o``                   ``self_attention.qkv`` / ``out``
``decoder.block.i.layer.1.EncDecAttention.q``          ``cross_attention.query``
``decoder.block.i.layer.1.EncDecAttention.{k,v}``      ``cross_attention.key_value``
``*.DenseReluDense.wi`` (or ``wi_0``, ``wi_1``), wo    ``feed_forward.wi`` [D, (2,) F], ``wo``
``*.layer.N.layer_norm``                               ``self_norm`` / ``cross_norm`` / ``ff_norm``
``{side}.final_layer_norm``                            ``encoder_norm`` / ``decoder_norm``
=====================================================  =========================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from textkit.models.layers import ACTIVATIONS
from textkit.models.transformer import TransformerConfig
from textkit.pretrained import seq2seq
from textkit.pretrained.errors import PretrainedError, UnsupportedArchitectureError
from textkit.pretrained.files import unsupported
from textkit.pretrained.t5_tokenizer import T5Tokenizer
from textkit.pretrained.weights import SAME, Entry, linear, out_proj

__all__ = ["FAMILY", "MT5", "hf_config", "t5_config"]

FIXED = {"norm": "rms", "pre_norm": True, "final_norm": True, "positions": "none",
         "scale_embedding": False, "attention_bias": False, "ff_bias": False,
         "norm_bias": False, "scaled_attention": False, "share_embeddings": True,
         "embedding_norm": False, "final_logits_bias": False}
"""The ``TransformerConfig`` fields every T5 checkpoint has."""


def _feed_forward(hf: Mapping[str, Any], root: Path) -> tuple[str, bool]:
    """(activation, gated) of ``feed_forward_proj`` ("relu", "gated-gelu", ...)."""
    proj = str(hf.get("feed_forward_proj", "relu"))
    parts = proj.split("-")
    gated = len(parts) == 2 and parts[0] == "gated"
    activation = "gelu_new" if proj == "gated-gelu" else parts[-1]
    if len(parts) > 2 or (len(parts) == 2 and not gated) or activation not in ACTIVATIONS:
        raise unsupported(root, "feed_forward_proj", proj,
                          f"expected ACT or gated-ACT with ACT one of {sorted(ACTIVATIONS)}")
    return activation, gated


def t5_config(hf: Mapping[str, Any], root: str | os.PathLike = ".",
              **overrides: Any) -> TransformerConfig:
    """``TransformerConfig`` of a T5 or mT5 ``config.json`` dict; ``overrides`` (e.g.
    ``policy``, ``dropout``, ``tie_output`` from the tensors) replace fields."""
    root = Path(root)
    activation, gated = _feed_forward(hf, root)
    mt5 = hf.get("model_type") == "mt5"
    scale = False if mt5 else bool(hf.get("scale_decoder_outputs",
                                          hf.get("tie_word_embeddings", True) is not False))
    vocab = int(hf["vocab_size"])
    layers = int(hf["num_layers"])
    options = dict(
        FIXED, src_vocab_size=vocab, tgt_vocab_size=vocab, tie_output=True,
        d_model=int(hf["d_model"]), num_heads=int(hf["num_heads"]), head_dim=int(hf["d_kv"]),
        d_ff=int(hf["d_ff"]), num_encoder_layers=layers,
        num_decoder_layers=int(hf.get("num_decoder_layers") or layers),
        dropout=float(hf.get("dropout_rate", 0.1)), attention_dropout=0.0,
        max_len=int(hf.get("n_positions", 512)), activation=activation, gated_ff=gated,
        layer_norm_epsilon=float(hf.get("layer_norm_epsilon", 1e-6)),
        relative_buckets=int(hf.get("relative_attention_num_buckets", 32)),
        relative_max_distance=int(hf.get("relative_attention_max_distance", 128)),
        scale_decoder_output=scale, architecture="mt5" if mt5 else "t5",
        decoder_start_id=int(hf.get("decoder_start_token_id", 0)),
        pad_id=int(hf.get("pad_token_id", 0)))
    options.update(overrides)
    return TransformerConfig(**options)


def hf_config(config: TransformerConfig, target: T5Tokenizer) -> dict[str, Any]:
    """The ``config.json`` dict of a T5 ``TransformerConfig`` (inverse of ``t5_config``);
    ``UnsupportedArchitectureError`` for what T5 cannot express."""
    for field, want in FIXED.items():
        have = config.has_final_norm if field == "final_norm" else getattr(config, field)
        if have != want:
            raise UnsupportedArchitectureError(
                f"TransformerConfig.{field}={have!r} cannot be written as a T5 checkpoint (T5 "
                f"has {field}={want!r})")
    if not config.relative_buckets:
        raise UnsupportedArchitectureError("a T5 checkpoint needs relative_buckets > 0")
    gelu_new = config.gated_ff and config.activation == "gelu_new"
    proj = "gated-gelu" if gelu_new else (
        f"gated-{config.activation}" if config.gated_ff else config.activation)
    return {"d_model": config.d_model, "d_kv": config.head_dim or config.d_model //
            config.num_heads, "d_ff": config.d_ff, "num_heads": config.num_heads,
            "num_layers": config.num_encoder_layers,
            "num_decoder_layers": config.num_decoder_layers, "vocab_size": config.src_vocab_size,
            "feed_forward_proj": proj, "dropout_rate": config.dropout,
            "layer_norm_epsilon": config.layer_norm_epsilon,
            "relative_attention_num_buckets": config.relative_buckets,
            "relative_attention_max_distance": config.relative_max_distance,
            "tie_word_embeddings": config.tie_output,
            "scale_decoder_outputs": config.scale_decoder_output,
            "n_positions": config.max_len, "is_encoder_decoder": True,
            "pad_token_id": config.pad_id, "eos_token_id": target.eos_id,
            "decoder_start_token_id": config.decoder_start_id}


def mt5_hf_config(config: TransformerConfig, target: T5Tokenizer) -> dict[str, Any]:
    """``hf_config`` for mT5, which transformers never rescales."""
    if config.scale_decoder_output:
        raise UnsupportedArchitectureError("an mT5 checkpoint cannot say scale_decoder_output="
                                           "True (transformers never rescales mT5); write it "
                                           "as T5")
    hf = hf_config(config, target)
    hf.pop("scale_decoder_outputs")
    return hf


# ----------------------------------------------------------------------------------- weights
def _layer_entries(side: str, i: int, heads: int, gated: bool) -> list[tuple]:
    """(textkit path, [hf keys], transform) of block ``i`` of the ``side`` stack."""
    hf, tk = f"{side}.block.{i}.layer", f"{side}_{i}"
    entries = [
        ((tk, "self_attention", "qkv", "kernel"),
         [f"{hf}.0.SelfAttention.{n}.weight" for n in "qkv"], linear(heads)),
        ((tk, "self_attention", "out", "kernel"), [f"{hf}.0.SelfAttention.o.weight"],
         out_proj(heads)),
        ((tk, "self_norm", "scale"), [f"{hf}.0.layer_norm.weight"], SAME)]
    ff = 1
    if side == "decoder":
        ff = 2
        entries += [
            ((tk, "cross_attention", "query", "kernel"), [f"{hf}.1.EncDecAttention.q.weight"],
             linear(heads)),
            ((tk, "cross_attention", "key_value", "kernel"),
             [f"{hf}.1.EncDecAttention.{n}.weight" for n in "kv"], linear(heads)),
            ((tk, "cross_attention", "out", "kernel"), [f"{hf}.1.EncDecAttention.o.weight"],
             out_proj(heads)),
            ((tk, "cross_norm", "scale"), [f"{hf}.1.layer_norm.weight"], SAME)]
    wi = ["wi_0", "wi_1"] if gated else ["wi"]
    entries += [
        ((tk, "feed_forward", "wi", "kernel"),
         [f"{hf}.{ff}.DenseReluDense.{n}.weight" for n in wi], linear(None)),
        ((tk, "feed_forward", "wo", "kernel"), [f"{hf}.{ff}.DenseReluDense.wo.weight"],
         linear(None)),
        ((tk, "ff_norm", "scale"), [f"{hf}.{ff}.layer_norm.weight"], SAME)]
    return entries


def weight_map(config: TransformerConfig) -> list[Entry]:
    """Every ``Entry`` of a T5 ``config`` under transformers' T5 names."""
    entries: list[tuple] = [(("src_embed", "embedding"),
                             [["shared.weight", "encoder.embed_tokens.weight"]], SAME)]
    if not config.tie_output:
        entries.append((("output", "kernel"), ["lm_head.weight"], linear(None)))
    for side, count in (("encoder", config.num_encoder_layers),
                        ("decoder", config.num_decoder_layers)):
        entries.append(((f"{side}_relative_bias", "embedding"),
                        [f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                        SAME))
        entries.append(((f"{side}_norm", "scale"), [f"{side}.final_layer_norm.weight"], SAME))
        for i in range(count):
            entries += _layer_entries(side, i, config.num_heads, config.gated_ff)
    return [Entry(*entry) for entry in entries]


def layout(tensors: seq2seq.Tensors) -> dict[str, bool]:
    """``tie_output``: no ``lm_head.weight``, or one equal to ``shared.weight`` (transformers 5
    writes T5 v1.1's head only where it differs)."""
    head, shared = tensors.get("lm_head.weight"), tensors.get("shared.weight")
    tied = head is None or (shared is not None and head.shape == shared.shape
                            and np.array_equal(head, shared))
    return {"tie_output": tied}


def check_bias_tables(tensors: seq2seq.Tensors, root: Path, config: TransformerConfig) -> None:
    """A relative-bias table whose rows are not ``relative_attention_num_buckets`` is named
    with both counts."""
    for side in ("encoder", "decoder"):
        name = f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        table = tensors.get(name)
        if table is not None and table.shape[0] != config.relative_buckets:
            raise PretrainedError(
                f"{root}: {name} has {table.shape[0]} rows (buckets) but config.json "
                f"relative_attention_num_buckets is {config.relative_buckets}")


# ----------------------------------------------------------------------- tokenizer settings
def load_tokenizers(root: Path, config: TransformerConfig) -> tuple[T5Tokenizer, T5Tokenizer]:
    """(source, target): one ``T5Tokenizer`` of ``root`` for both sides."""
    tokenizer = T5Tokenizer.from_directory(root, config.decoder_start_id)
    return tokenizer, tokenizer


def save_tokenizers(source: T5Tokenizer, target: T5Tokenizer, directory: Path,
                    config: TransformerConfig) -> None:
    source.save(directory, config.max_len)


def generation(config: TransformerConfig, target: T5Tokenizer) -> dict[str, Any]:
    """The ``generation_config.json`` transformers writes for a T5 model."""
    return {"decoder_start_token_id": config.decoder_start_id, "eos_token_id": target.eos_id,
            "pad_token_id": config.pad_id}


_COMMON = dict(config=t5_config, weight_map=weight_map,
               vocab_paths=("src_embed", "output"), tokenizer_files=(),
               load_tokenizers=load_tokenizers, save_tokenizers=save_tokenizers,
               tokenizer_type=T5Tokenizer, generation=generation, layout=layout,
               checks=check_bias_tables)

FAMILY = seq2seq.Seq2SeqFamily(model_type="t5", hf_class="T5ForConditionalGeneration",
                               architecture="t5", hf_config=hf_config, **_COMMON)
"""T5 (v1.0, v1.1, Flan-T5) as a ``seq2seq.Seq2SeqFamily``."""

MT5 = seq2seq.Seq2SeqFamily(model_type="mt5", hf_class="MT5ForConditionalGeneration",
                            architecture="mt5", hf_config=mt5_hf_config, **_COMMON)
"""mT5 as a ``seq2seq.Seq2SeqFamily``."""
