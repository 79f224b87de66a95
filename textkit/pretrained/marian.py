"""Marian / OPUS-MT checkpoints (Hugging Face ``save_pretrained`` layout) in and out of textkit.

``load(dir, config)`` (what ``textkit.pretrained.load_pretrained`` calls for ``model_type``
"marian") reads ``model.safetensors`` (``pytorch_model.bin`` only when torch is installed),
``source.spm``, ``target.spm``, ``vocab.json``, ``tokenizer_config.json`` next to the
``config.json`` given and returns a ``Transformer`` configured as Marian (post-norm, Marian's
sinusoidal positions, sqrt(d_model) embedding scale, the checkpoint's activation,
``final_logits_bias``, shared/tied embeddings, layer-norm epsilon 1e-5, decoder start = pad),
its params and the two
``MarianTokenizer`` sides. ``save_pretrained`` writes the same layout back (transformers loads
it); load -> save -> load is exact.

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
``VocabSizeMismatchError``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from textkit._io import atomic_dir, write_json_atomic
from textkit.models.layers import ACTIVATIONS
from textkit.models.transformer import Transformer, TransformerConfig
from textkit.pretrained.errors import (
    MissingFileError,
    NotMarianCheckpointError,
    UnsupportedArchitectureError,
    VocabSizeMismatchError,
)
from textkit.pretrained.files import read_tensors, unsupported, write_tensors_file
from textkit.pretrained.marian_tokenizer import MarianTokenizer
from textkit.pretrained.result import Pretrained
from textkit.pretrained.weights import (
    SAME,
    Entry,
    heads_bias,
    linear,
    out_proj,
    read_params,
    write_tensors,
)

__all__ = [
    "embedding_layout", "hf_config", "load", "marian_config",
    "params_from_tensors", "save_pretrained", "tensors_from_params", "weight_map",
]

TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
LAYER_NORM_EPSILON = 1e-5   # torch.nn.LayerNorm's default, used by every Marian layer norm


# ------------------------------------------------------------------------------------ config
def marian_config(hf: Mapping[str, Any], root: str | os.PathLike = ".",
                  **overrides: Any) -> TransformerConfig:
    """``TransformerConfig`` of a Marian ``config.json`` dict (``UnsupportedArchitectureError``
    names the first option textkit does not implement); ``overrides`` (e.g. ``policy``,
    ``dropout``) replace fields."""
    root = Path(root)
    get = lambda key, default=None: hf.get(key, default)  # noqa: E731
    pairs = (("encoder_attention_heads", "decoder_attention_heads"),
             ("encoder_ffn_dim", "decoder_ffn_dim"))
    for enc, dec in pairs:
        if get(enc) != get(dec):
            raise unsupported(root, dec, get(dec), f"textkit needs {enc} == {dec} "
                                                    f"({get(enc)})")
    activation = get("activation_function", "swish")
    if activation not in ACTIVATIONS:
        raise unsupported(root, "activation_function", activation,
                           f"expected one of {sorted(ACTIVATIONS)}")
    for key, expected in (("normalize_before", False), ("add_final_layer_norm", False),
                          ("normalize_embedding", False), ("static_position_embeddings", True),
                          ("add_bias_logits", False)):
        if key in hf and bool(hf[key]) != expected:
            raise unsupported(root, key, hf[key], f"Marian (and textkit) use {expected}")
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
        pad_id=int(get("pad_token_id")))
    options.update(overrides)
    return TransformerConfig(**options)


# ----------------------------------------------------------------------------------- weights








def _layer_entries(side: str, i: int, heads: int, cross: bool) -> Iterator[tuple]:
    """(textkit path, [hf keys], [to_textkit/from_textkit per key], stacked?) of one layer."""
    hf, tk = f"model.{side}.layers.{i}", f"{side}_{i}"
    qkv = [f"{hf}.self_attn.{n}_proj" for n in "qkv"]
    yield (tk, "self_attention", "qkv", "kernel"), [f"{k}.weight" for k in qkv], linear(heads)
    yield (tk, "self_attention", "qkv", "bias"), [f"{k}.bias" for k in qkv], heads_bias(heads)
    yield (tk, "self_attention", "out", "kernel"), [f"{hf}.self_attn.out_proj.weight"], \
        out_proj(heads)
    yield (tk, "self_attention", "out", "bias"), [f"{hf}.self_attn.out_proj.bias"], SAME
    norms = [("self_norm", "self_attn_layer_norm"), ("ff_norm", "final_layer_norm")]
    if cross:
        ea = f"{hf}.encoder_attn"
        yield (tk, "cross_attention", "query", "kernel"), [f"{ea}.q_proj.weight"], linear(heads)
        yield (tk, "cross_attention", "query", "bias"), [f"{ea}.q_proj.bias"], heads_bias(heads)
        kv = [f"{ea}.{n}_proj" for n in "kv"]
        yield (tk, "cross_attention", "key_value", "kernel"), [f"{k}.weight" for k in kv], \
            linear(heads)
        yield (tk, "cross_attention", "key_value", "bias"), [f"{k}.bias" for k in kv], \
            heads_bias(heads)
        yield (tk, "cross_attention", "out", "kernel"), [f"{ea}.out_proj.weight"], \
            out_proj(heads)
        yield (tk, "cross_attention", "out", "bias"), [f"{ea}.out_proj.bias"], SAME
        norms.append(("cross_norm", "encoder_attn_layer_norm"))
    for name, fc in (("wi", "fc1"), ("wo", "fc2")):
        yield (tk, "feed_forward", name, "kernel"), [f"{hf}.{fc}.weight"], linear(None)
        yield (tk, "feed_forward", name, "bias"), [f"{hf}.{fc}.bias"], SAME
    for name, hf_name in norms:
        yield (tk, name, "norm", "scale"), [f"{hf}.{hf_name}.weight"], SAME
        yield (tk, name, "norm", "bias"), [f"{hf}.{hf_name}.bias"], SAME


def weight_map(config: TransformerConfig) -> list[tuple]:
    """Every (textkit param path, [transformers keys], (to_textkit, from_textkit)) of a Marian
    ``config``; several keys are stacked along a new axis (q/k/v, ``weights.stack_axis``)."""
    heads = config.num_heads
    shared, enc, dec = (f"model.{n}.weight" for n in
                        ("shared", "encoder.embed_tokens", "decoder.embed_tokens"))
    entries: list[tuple] = [(("src_embed", "embedding"), [[enc, shared]], SAME)]
    if not config.share_embeddings:
        entries.append((("tgt_embed", "embedding"), [[dec, shared]], SAME))
    if not config.tie_output:
        entries.append((("output", "kernel"), [["lm_head.weight"]], linear(None)))
    entries.append((("final_logits_bias",), ["final_logits_bias"],
                    (lambda b: b.reshape(-1), lambda b: b.reshape(1, -1))))
    for side, count in (("encoder", config.num_encoder_layers),
                        ("decoder", config.num_decoder_layers)):
        for i in range(count):
            entries += list(_layer_entries(side, i, heads, side == "decoder"))
    return entries


def _picker(tensors: Mapping[str, np.ndarray]):
    """``pick(key)``: the tensor under ``key`` (or the first present of a list of alternative
    names); None when absent."""
    def pick(key: str | list[str]) -> np.ndarray | None:
        names = [key] if isinstance(key, str) else key
        return next((np.asarray(tensors[n]) for n in names if n in tensors), None)

    return pick


def params_from_tensors(tensors: Mapping[str, np.ndarray], config: TransformerConfig,
                        expected: Any, root: Path) -> dict[str, Any]:
    """textkit params (float32 numpy) from transformers' tensors, each shape-checked against
    ``expected`` (a ``jax.eval_shape`` of the params), through the shared walker."""
    return read_params([Entry(*e) for e in weight_map(config)], _picker(tensors), expected,
                       root=root, says="config.json says Marian",
                       vocab_paths=("src_embed", "tgt_embed", "output", "final_logits_bias"))


def tensors_from_params(params: Any, config: TransformerConfig) -> dict[str, np.ndarray]:
    """transformers' tensors (float32 numpy) from textkit params (inverse of
    ``params_from_tensors``); embeddings are written under every name transformers ties."""
    tensors = write_tensors([Entry(*e) for e in weight_map(config)], params)
    # transformers 5 ties nothing when tie_word_embeddings is false: every name gets a copy.
    enc, dec = tensors["model.encoder.embed_tokens.weight"], tensors.get(
        "model.decoder.embed_tokens.weight", tensors["model.encoder.embed_tokens.weight"])
    if config.share_embeddings and config.tie_output:
        return {"model.shared.weight": tensors.pop("model.encoder.embed_tokens.weight"),
                **tensors}
    tensors.update({"model.shared.weight": enc.copy(), "model.decoder.embed_tokens.weight": dec,
                    "lm_head.weight": tensors.get("lm_head.weight", dec.copy())})
    return tensors


def embedding_layout(tensors: Mapping[str, np.ndarray]) -> dict[str, bool]:
    """``share_embeddings`` / ``tie_output`` as the tensors are (transformers 5 writes separate
    encoder, decoder and output matrices when ``tie_word_embeddings`` is false, even with
    ``share_encoder_decoder_embeddings``): equal matrices are one table."""
    def get(name: str) -> np.ndarray | None:
        return tensors.get(f"{name}.weight")

    enc = get("model.encoder.embed_tokens")
    enc = get("model.shared") if enc is None else enc
    dec = get("model.decoder.embed_tokens")
    dec = enc if dec is None else dec
    head = get("lm_head")
    same = lambda a, b: a is b or (a.shape == b.shape and np.array_equal(a, b))  # noqa: E731
    return {"share_embeddings": enc is not None and same(enc, dec),
            "tie_output": head is None or same(head, dec)}


# -------------------------------------------------------------------------------- load/save
def _check_files(root: Path) -> None:
    missing = [name for name in TOKENIZER_FILES if not (root / name).is_file()]
    if missing:
        raise MissingFileError(f"{root} is missing {', '.join(missing)} (a Marian checkpoint "
                               f"directory holds {', '.join(TOKENIZER_FILES)} next to "
                               f"config.json and model.safetensors)")


def load(root: Path, hf: Mapping[str, Any], **overrides: Any) -> Pretrained:
    """Load the Marian checkpoint directory ``root`` whose ``config.json`` is ``hf``:
    ``Pretrained(kind="translation", model, params, tokenizer=source side,
    target_tokenizer=target side)``; params float32 numpy arrays in
    the ``Transformer``'s tree (``textkit.pretrained.load_pretrained`` reads the config and
    calls this for ``model_type`` "marian").

    ``overrides`` replace config fields (e.g. ``policy="mixed_bfloat16"``, ``dropout=0.1``
    for fine-tuning). Raises the ``PretrainedError`` subclasses of the module docstring.
    """
    import jax
    import jax.numpy as jnp

    if hf.get("model_type") != "marian":
        raise NotMarianCheckpointError(
            f"{root / 'config.json'}: model_type is {hf.get('model_type')!r}, not 'marian' "
            f"(architectures: {hf.get('architectures')})")
    _check_files(root)
    tensors = read_tensors(root)
    config = marian_config(hf, root, **{**embedding_layout(tensors), **overrides})
    src_tok, tgt_tok = MarianTokenizer.from_directory(root, config.decoder_start_id)
    for side, tok, size in (("source", src_tok, config.src_vocab_size),
                            ("target", tgt_tok, config.tgt_vocab_size)):
        if len(tok) > size:
            raise VocabSizeMismatchError(
                f"{root}: the {side} vocabulary has ids up to {len(tok) - 1} but the model has "
                f"{size} embeddings (vocab_size in config.json)")
    if tgt_tok.pad_id != config.pad_id:
        raise VocabSizeMismatchError(f"{root}: config.json pad_token_id={config.pad_id} but "
                                     f"vocab.json puts <pad> at {tgt_tok.pad_id}")
    model = Transformer(config)
    dummy = jnp.full((1, 8), config.pad_id, jnp.int32)
    expected = jax.eval_shape(lambda key: model.init(key, dummy, dummy)["params"],
                              jax.random.PRNGKey(0))
    params = params_from_tensors(tensors, config, expected, root)
    return Pretrained("translation", model, params, src_tok, tgt_tok)


def hf_config(config: TransformerConfig) -> dict[str, Any]:
    """The ``config.json`` dict of a Marian-shaped ``TransformerConfig`` (inverse of
    ``marian_config``); ``UnsupportedArchitectureError`` for what Marian cannot express."""
    for field, want in (("pre_norm", False), ("positions", "sinusoidal_marian"),
                        ("final_logits_bias", True), ("layer_norm_epsilon", LAYER_NORM_EPSILON)):
        if getattr(config, field) != want:
            raise UnsupportedArchitectureError(
                f"TransformerConfig.{field}={getattr(config, field)!r} cannot be written as a "
                f"Marian checkpoint (Marian has {field}={want!r})")
    start = config.pad_id if config.decoder_start_id is None else config.decoder_start_id
    return {
        "model_type": "marian", "architectures": ["MarianMTModel"],
        "vocab_size": config.src_vocab_size, "decoder_vocab_size": config.tgt_vocab_size,
        "share_encoder_decoder_embeddings": config.src_vocab_size == config.tgt_vocab_size,
        "tie_word_embeddings": config.tie_output and config.share_embeddings,
        "d_model": config.d_model,
        "encoder_layers": config.num_encoder_layers, "decoder_layers": config.num_decoder_layers,
        "encoder_attention_heads": config.num_heads, "decoder_attention_heads": config.num_heads,
        "encoder_ffn_dim": config.d_ff, "decoder_ffn_dim": config.d_ff,
        "activation_function": config.activation, "dropout": config.dropout,
        "attention_dropout": config.attention_dropout, "activation_dropout": 0.0,
        "max_position_embeddings": config.max_len, "scale_embedding": config.scale_embedding,
        "pad_token_id": config.pad_id, "decoder_start_token_id": start,
        "is_encoder_decoder": True,
    }


def save_pretrained(model: Transformer, params: Any,
                    tokenizers: tuple[MarianTokenizer, MarianTokenizer],
                    path: str | os.PathLike, *,
                    generation: Mapping[str, Any] | None = None) -> Path:
    """Write ``model`` / ``params`` / ``(src, tgt)`` tokenizers as a Marian checkpoint
    directory that transformers' ``MarianMTModel`` / ``MarianTokenizer`` load; the directory
    is replaced atomically. ``generation`` is ``generation_config.json`` (default: Marian's,
    beam 4, pad banned, EOS forced at ``max_length`` = ``max_len``)."""
    config = model.config
    src, tgt = tokenizers
    if not isinstance(src, MarianTokenizer) or not isinstance(tgt, MarianTokenizer):
        raise TypeError(f"save_pretrained writes MarianTokenizer pairs (from load_pretrained); "
                        f"got {type(src).__name__} and {type(tgt).__name__}")
    hf = hf_config(config)
    hf["eos_token_id"] = hf["forced_eos_token_id"] = tgt.eos_id
    for side, tok, size in (("source", src, config.src_vocab_size),
                            ("target", tgt, config.tgt_vocab_size)):
        if len(tok) > size:
            raise VocabSizeMismatchError(f"the {side} tokenizer has {len(tok)} ids but the "
                                         f"model {size} embeddings")
    separate = src.vocab != tgt.vocab
    generation = dict(generation or {
        "bad_words_ids": [[config.pad_id]], "bos_token_id": tgt.eos_id,
        "decoder_start_token_id": hf["decoder_start_token_id"], "eos_token_id": tgt.eos_id,
        "forced_eos_token_id": tgt.eos_id, "max_length": config.max_len, "num_beams": 4,
        "pad_token_id": config.pad_id})
    tokenizer_config = {
        "tokenizer_class": "MarianTokenizer", "eos_token": src.eos_piece,
        "unk_token": src.unk_piece, "pad_token": src.pad_piece, "separate_vocabs": separate,
        "model_max_length": config.max_len}
    with atomic_dir(path) as staging:
        write_tensors_file(staging / "model.safetensors", tensors_from_params(params, config))
        write_json_atomic(staging / "config.json", hf)
        write_json_atomic(staging / "generation_config.json", generation)
        write_json_atomic(staging / "tokenizer_config.json", tokenizer_config)
        write_json_atomic(staging / "vocab.json", src.vocab)
        if separate:
            write_json_atomic(staging / "target_vocab.json", tgt.vocab)
        shutil.copyfile(src.spm_path, staging / "source.spm")
        shutil.copyfile(tgt.spm_path, staging / "target.spm")
    return Path(path)
