"""Decoder-only language-model checkpoints (GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma; the
Llama-architecture TinyLlama and SmolLM/SmolLM2 load as "llama") in the Hugging Face layout, in
and out of textkit's one decoder stack ``models.decoder_lm.DecoderLM``.

``load(dir, config)`` (what ``load_pretrained`` calls for these ``model_type``s) reads
``config.json`` into a ``DecoderLMConfig`` (``decoder_config``: each option textkit does not
implement is an ``UnsupportedArchitectureError`` naming the key and value; an architecture other
than ``<Family>ForCausalLM`` / ``GPT2LMHeadModel`` is refused by name), the weights through the
shared walker (``weights.read_params``) and the tokenizer (``LMTokenizer``).
``save_pretrained(model, params, tokenizer, dir)`` writes the layout back (transformers loads
it with the same logits; load -> save -> load is exact).

Weights (torch ``Linear`` [out, in] -> kernel [in, out]; GPT-2's ``Conv1D`` is already
[in, out]): q/k/v (``self_attn.{q,k,v}_proj``, GPT-2's fused ``attn.c_attn``) -> one fused
``attention.qkv`` [D, H + 2 KVH, Dh]; ``o_proj`` / ``c_proj`` -> ``attention.out`` [H, Dh, D];
``mlp.{gate,up}_proj`` -> ``mlp.wi`` [D, 2, I] (gate first), ``down_proj`` -> ``mlp.wo``
(GPT-2: ``mlp.c_fc`` / ``mlp.c_proj``); ``input_layernorm`` / ``ln_1`` -> ``attention_norm``,
``post_attention_layernorm`` / ``ln_2`` -> ``mlp_norm``, ``model.norm`` / ``ln_f`` ->
``final_norm``; Qwen3's ``q_norm`` / ``k_norm`` -> ``attention.query_norm`` / ``key_norm``;
``lm_head`` only when the embeddings are untied.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from textkit._io import atomic_dir, write_json_atomic
from textkit.models.decoder_lm import ROPE_TYPES, DecoderLM, DecoderLMConfig
from textkit.models.layers import ACTIVATIONS
from textkit.pretrained.errors import PretrainedError
from textkit.pretrained.files import (
    CONFIG_TYPES,
    check_types,
    read_tensors,
    unsupported,
    write_tensors_file,
)
from textkit.pretrained.result import Pretrained
from textkit.pretrained.weights import (
    SAME,
    Entry,
    Transform,
    check_vocab_size,
    expected_params,
    linear,
    out_proj,
    read_params,
    write_tensors,
)

__all__ = ["ARCHITECTURES", "decoder_config", "hf_config", "load", "params_from_tensors",
           "save_pretrained", "tensors_from_params", "weight_map"]

ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM",
                 "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM", "gemma": "GemmaForCausalLM"}
"""config.json ``model_type`` -> the transformers class textkit reads and writes."""
MODEL_TYPES = tuple(ARCHITECTURES)


# ------------------------------------------------------------------------------------ config
def _rope(hf: Mapping[str, Any], root: Path) -> tuple[float, tuple[tuple[str, Any], ...]]:
    """(theta, scaling items) of ``rope_parameters`` (transformers 5) or the older
    ``rope_theta`` / ``rope_scaling``."""
    rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    theta = float(rope.pop("rope_theta", hf.get("rope_theta", 10000.0)))
    kind = rope.pop("rope_type", rope.pop("type", "default"))
    if kind not in ROPE_TYPES:
        raise unsupported(root, "rope_type", kind, f"textkit has {list(ROPE_TYPES)}")
    needed = {"default": (), "linear": ("factor",),
              "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                         "original_max_position_embeddings")}[kind]
    missing = [key for key in needed if key not in rope]
    if missing:
        raise PretrainedError(f"{root / 'config.json'}: rope_type {kind!r} needs "
                              f"{', '.join(missing)}")
    scaling = () if kind == "default" else (("rope_type", kind),
                                            *sorted((k, float(rope[k])) for k in needed))
    return theta, scaling


def _sliding_window(hf: Mapping[str, Any], root: Path) -> int | None:
    """The sliding window every layer uses (None: full attention); mixed layer types are
    refused."""
    types = set(hf.get("layer_types") or [])
    window = hf.get("sliding_window")
    if hf["model_type"] in ("qwen2", "qwen3") and not hf.get("use_sliding_window", False):
        window = None
    if len(types) > 1 and window is not None:
        raise unsupported(root, "layer_types", hf["layer_types"],
                          "textkit has one attention kind for every layer")
    if types == {"full_attention"}:
        window = None
    return None if window is None else int(window)


def _gpt2_options(hf: Mapping[str, Any], root: Path) -> dict[str, Any]:
    for key, expected in (("scale_attn_weights", True),
                          ("scale_attn_by_inverse_layer_idx", False), ("add_cross_attention",
                                                                       False)):
        if key in hf and bool(hf[key]) != expected:
            raise unsupported(root, key, hf[key], f"textkit's GPT-2 has {expected}")
    hidden = int(hf["n_embd"])
    return dict(hidden_size=hidden, num_layers=int(hf["n_layer"]), num_heads=int(hf["n_head"]),
                intermediate_size=int(hf.get("n_inner") or 4 * hidden),
                activation=hf.get("activation_function", "gelu_new"), gated_mlp=False,
                norm="layer", norm_epsilon=float(hf.get("layer_norm_epsilon", 1e-5)),
                positions="learned", max_position_embeddings=int(hf.get("n_positions", 1024)),
                qkv_bias=True, out_bias=True, mlp_bias=True,
                tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
                dropout=float(hf.get("resid_pdrop", 0.1)),
                attention_dropout=float(hf.get("attn_pdrop", 0.1)))


_TIED_DEFAULT = {"llama": False, "mistral": False, "qwen2": False, "qwen3": False,
                 "gemma": True}


def _llama_options(hf: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """Llama, Mistral, Qwen2, Qwen3 and Gemma: one set of keys, a few family rules."""
    family = hf["model_type"]
    theta, scaling = _rope(hf, root)
    heads = int(hf["num_attention_heads"])
    bias = bool(hf.get("attention_bias", False))
    gemma = family == "gemma"
    activation = (hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh") \
        if gemma else hf.get("hidden_act", "silu")
    return dict(hidden_size=int(hf["hidden_size"]), num_layers=int(hf["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(hf.get("num_key_value_heads") or heads),
                head_dim=int(hf["head_dim"]) if hf.get("head_dim") else None,
                intermediate_size=int(hf["intermediate_size"]), activation=activation,
                norm="rms", norm_epsilon=float(hf.get("rms_norm_eps", 1e-6)),
                norm_offset=1.0 if gemma else 0.0, positions="rotary",
                max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
                rope_theta=theta, rope_scaling=scaling,
                qkv_bias=bias or family == "qwen2", out_bias=bias,
                mlp_bias=bool(hf.get("mlp_bias", False)), qk_norm=family == "qwen3",
                sliding_window=_sliding_window(hf, root),
                tie_embeddings=bool(hf.get("tie_word_embeddings", _TIED_DEFAULT[family])),
                scale_embeddings=gemma,
                attention_dropout=float(hf.get("attention_dropout", 0.0)), dropout=0.0)


def decoder_config(hf: Mapping[str, Any], root: str | os.PathLike = ".",
                   **overrides: Any) -> DecoderLMConfig:
    """``DecoderLMConfig`` of a decoder-only ``config.json`` dict; ``overrides`` (e.g.
    ``policy``, ``dropout``) replace fields. ``UnsupportedArchitectureError`` names the first
    option textkit does not implement; a missing key, or a size or rate of the wrong type, is a
    ``PretrainedError`` naming it."""
    root = Path(root)
    check_types(root / "config.json", hf, CONFIG_TYPES)
    family = hf["model_type"]
    architectures = hf.get("architectures") or [ARCHITECTURES[family]]
    if architectures[0] != ARCHITECTURES[family]:
        raise unsupported(root, "architectures", architectures,
                          f"textkit reads {family} checkpoints as {ARCHITECTURES[family]}")
    try:
        options = (_gpt2_options if family == "gpt2" else _llama_options)(hf, root)
        options["vocab_size"] = int(hf["vocab_size"])
    except KeyError as err:
        raise PretrainedError(f"{root / 'config.json'}: missing the key {err.args[0]!r} a "
                              f"{family} config.json has") from None
    if options["activation"] not in ACTIVATIONS:
        raise unsupported(root, "hidden_act", options["activation"],
                          f"expected one of {sorted(ACTIVATIONS)}")
    pad = hf.get("pad_token_id")
    options.update(architecture=family, pad_id=int(pad) if isinstance(pad, int) else 0)
    options.update(overrides)
    try:
        return DecoderLMConfig(**options)
    except ValueError as err:
        raise PretrainedError(f"{root / 'config.json'}: {err}") from None


def hf_config(config: DecoderLMConfig) -> dict[str, Any]:
    """The ``config.json`` dict of ``config`` (inverse of ``decoder_config``)."""
    family = config.architecture
    common = {"model_type": family, "architectures": [ARCHITECTURES[family]],
              "vocab_size": config.vocab_size, "tie_word_embeddings": config.tie_embeddings,
              "pad_token_id": config.pad_id}
    if family == "gpt2":
        return {**common, "n_embd": config.hidden_size, "n_layer": config.num_layers,
                "n_head": config.num_heads, "n_inner": config.intermediate_size,
                "activation_function": config.activation,
                "layer_norm_epsilon": config.norm_epsilon,
                "n_positions": config.max_position_embeddings, "resid_pdrop": config.dropout,
                "embd_pdrop": config.dropout, "attn_pdrop": config.attention_dropout}
    rope = {"rope_theta": config.rope_theta, "rope_type": "default", **dict(config.rope_scaling)}
    hf = {**common, "hidden_size": config.hidden_size, "num_hidden_layers": config.num_layers,
          "num_attention_heads": config.num_heads, "num_key_value_heads": config.kv_heads,
          "head_dim": config.depth, "intermediate_size": config.intermediate_size,
          "hidden_act": config.activation, "rms_norm_eps": config.norm_epsilon,
          "max_position_embeddings": config.max_position_embeddings, "rope_parameters": rope,
          "attention_bias": config.out_bias, "attention_dropout": config.attention_dropout}
    if family == "llama":
        hf["mlp_bias"] = config.mlp_bias
    if family == "gemma":
        hf["hidden_activation"] = config.activation
    if family in ("mistral", "qwen2", "qwen3"):
        hf["sliding_window"] = config.sliding_window
    if family in ("qwen2", "qwen3"):
        hf["use_sliding_window"] = config.sliding_window is not None
        if config.sliding_window is not None:
            hf["max_window_layers"] = 0
    return hf


# ----------------------------------------------------------------------------------- weights
def _heads(depth: int) -> Transform:
    """torch Linear [n * Dh, D] <-> kernel [D, n, Dh] (any n: q, k or v heads)."""
    return (lambda w: w.T.reshape(w.shape[1], -1, depth),
            lambda k: k.reshape(k.shape[0], -1).T)


def _heads_bias(depth: int) -> Transform:
    return lambda b: b.reshape(-1, depth), lambda b: b.reshape(-1)


def _norm(tk: tuple[str, ...], hf: str, config: DecoderLMConfig) -> Iterator[Entry]:
    if config.norm == "layer":
        yield Entry((*tk, "norm", "scale"), [f"{hf}.weight"], SAME)
        yield Entry((*tk, "norm", "bias"), [f"{hf}.bias"], SAME)
    else:
        yield Entry((*tk, "scale"), [f"{hf}.weight"], SAME)


def _gpt2_layer(config: DecoderLMConfig, i: int) -> Iterator[Entry]:
    tk, hf, depth = f"layer_{i}", f"transformer.h.{i}", config.depth
    conv_heads = (lambda w: w.reshape(w.shape[0], -1, depth),
                  lambda k: k.reshape(k.shape[0], -1))
    conv_out = (lambda w: w.reshape(config.num_heads, depth, -1),
                lambda k: k.reshape(-1, k.shape[-1]))
    yield from _norm((tk, "attention_norm"), f"{hf}.ln_1", config)
    yield Entry((tk, "attention", "qkv", "kernel"), [f"{hf}.attn.c_attn.weight"], conv_heads)
    yield Entry((tk, "attention", "qkv", "bias"), [f"{hf}.attn.c_attn.bias"],
                _heads_bias(depth))
    yield Entry((tk, "attention", "out", "kernel"), [f"{hf}.attn.c_proj.weight"], conv_out)
    yield Entry((tk, "attention", "out", "bias"), [f"{hf}.attn.c_proj.bias"], SAME)
    yield from _norm((tk, "mlp_norm"), f"{hf}.ln_2", config)
    for name, conv in (("wi", "c_fc"), ("wo", "c_proj")):
        yield Entry((tk, "mlp", name, "kernel"), [f"{hf}.mlp.{conv}.weight"], SAME)
        yield Entry((tk, "mlp", name, "bias"), [f"{hf}.mlp.{conv}.bias"], SAME)


def _llama_layer(config: DecoderLMConfig, i: int) -> Iterator[Entry]:
    tk, hf, depth = f"layer_{i}", f"model.layers.{i}", config.depth
    parts = (config.num_heads, config.kv_heads, config.kv_heads)
    qkv = [f"{hf}.self_attn.{n}_proj" for n in "qkv"]
    yield from _norm((tk, "attention_norm"), f"{hf}.input_layernorm", config)
    yield Entry((tk, "attention", "qkv", "kernel"), [f"{k}.weight" for k in qkv],
                _heads(depth), parts)
    if config.qkv_bias:
        yield Entry((tk, "attention", "qkv", "bias"), [f"{k}.bias" for k in qkv],
                    _heads_bias(depth), parts)
    if config.qk_norm:
        yield from _norm((tk, "attention", "query_norm"), f"{hf}.self_attn.q_norm", config)
        yield from _norm((tk, "attention", "key_norm"), f"{hf}.self_attn.k_norm", config)
    yield Entry((tk, "attention", "out", "kernel"), [f"{hf}.self_attn.o_proj.weight"],
                out_proj(config.num_heads))
    if config.out_bias:
        yield Entry((tk, "attention", "out", "bias"), [f"{hf}.self_attn.o_proj.bias"], SAME)
    yield from _norm((tk, "mlp_norm"), f"{hf}.post_attention_layernorm", config)
    yield Entry((tk, "mlp", "wi", "kernel"),
                [f"{hf}.mlp.gate_proj.weight", f"{hf}.mlp.up_proj.weight"], linear())
    yield Entry((tk, "mlp", "wo", "kernel"), [f"{hf}.mlp.down_proj.weight"], linear())
    if config.mlp_bias:
        yield Entry((tk, "mlp", "wi", "bias"),
                    [f"{hf}.mlp.gate_proj.bias", f"{hf}.mlp.up_proj.bias"], SAME)
        yield Entry((tk, "mlp", "wo", "bias"), [f"{hf}.mlp.down_proj.bias"], SAME)


def weight_map(config: DecoderLMConfig) -> list[Entry]:
    """Every ``Entry`` of ``config`` under the names transformers writes (the tied output
    matrix is not listed)."""
    gpt2 = config.architecture == "gpt2"
    base = "transformer" if gpt2 else "model"
    entries = [Entry(("embed", "embedding"), [f"{base}.{'wte' if gpt2 else 'embed_tokens'}"
                                              f".weight"], SAME)]
    if gpt2:
        entries.append(Entry(("position_embed", "embedding"), ["transformer.wpe.weight"], SAME))
    layer = _gpt2_layer if gpt2 else _llama_layer
    for i in range(config.num_layers):
        entries += layer(config, i)
    entries += _norm(("final_norm",), f"{base}.{'ln_f' if gpt2 else 'norm'}", config)
    if not config.tie_embeddings:
        entries.append(Entry(("lm_head", "kernel"), ["lm_head.weight"], linear()))
    return entries


def params_from_tensors(tensors: Mapping[str, np.ndarray], config: DecoderLMConfig,
                        expected: Any, root: Path) -> dict[str, Any]:
    """textkit params (numpy in ``expected``'s dtypes) from transformers' tensors, through
    the shared walker."""
    def pick(key: str) -> np.ndarray | None:
        return np.asarray(tensors[key]) if key in tensors else None

    return read_params(weight_map(config), pick, expected, root=root,
                       says=f"config.json says {config.architecture}",
                       vocab_paths=("embed", "lm_head"))


def tensors_from_params(params: Any, config: DecoderLMConfig) -> dict[str, np.ndarray]:
    """transformers' tensors (float32 numpy) of textkit ``params``."""
    return write_tensors(weight_map(config), params)


# -------------------------------------------------------------------------------- load/save
def load(root: Path, hf: Mapping[str, Any], **overrides: Any) -> Pretrained:
    """Load the decoder-only checkpoint directory ``root`` whose ``config.json`` is ``hf``:
    ``Pretrained("causal_lm", DecoderLM, params, LMTokenizer)``, params float32 numpy arrays.
    ``overrides`` replace config fields (``policy="mixed_bfloat16"``, ``dropout``)."""
    from textkit.pretrained.lm_tokenizer import LMTokenizer

    config = decoder_config(hf, root, **overrides)
    tokenizer = LMTokenizer.from_directory(root, hf)
    check_vocab_size(root, "the tokenizer", len(tokenizer), config.vocab_size)
    model = DecoderLM(config)
    params = params_from_tensors(read_tensors(root), config,
                                 expected_params(model, np.zeros((1, 2), np.int32)), root)
    return Pretrained("causal_lm", model, params, tokenizer)


def save_pretrained(model: DecoderLM, params: Any, tokenizer: Any, path: str | os.PathLike, *,
                    generation: Mapping[str, Any] | None = None) -> Path:
    """Write ``model`` / ``params`` / ``tokenizer`` (an ``LMTokenizer``) as a checkpoint
    directory that transformers' ``AutoModelForCausalLM`` / ``AutoTokenizer`` load (replaced
    atomically); ``generation`` is written as ``generation_config.json`` when given."""
    config = model.config
    check_vocab_size("save_pretrained", "the tokenizer", len(tokenizer), config.vocab_size)
    hf = hf_config(config)
    hf["bos_token_id"] = tokenizer.bos_id
    hf["eos_token_id"] = list(tokenizer.eos_ids) if len(tokenizer.eos_ids) > 1 else (
        tokenizer.eos_ids[0] if tokenizer.eos_ids else None)
    with atomic_dir(path) as staging:
        write_tensors_file(staging / "model.safetensors", tensors_from_params(params, config))
        write_json_atomic(staging / "config.json", hf)
        if generation:
            write_json_atomic(staging / "generation_config.json", dict(generation))
        tokenizer.save(staging)
    return Path(path)
