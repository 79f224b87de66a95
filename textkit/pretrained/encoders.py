"""Encoder checkpoints (BERT, RoBERTa, XLM-RoBERTa, ELECTRA, DistilBERT, DeBERTa-v2/v3,
ModernBERT) in the Hugging Face layout in and out of textkit's ``models.encoder.Encoder``.

``load(dir, config)`` (what ``load_pretrained`` calls for these ``model_type``s) reads
``config.json``, the weights (``model.safetensors``, sharded safetensors with their index, or
``pytorch_model.bin`` when torch is installed) and the tokenizer, takes the head from
``architectures`` (``BertForSequenceClassification`` -> ``sequence_classification``, the bare
``BertModel`` -> ``model``, ...) and returns ``Pretrained(kind="encoder", model, params,
tokenizer)``.
``save_pretrained(model, params, tokenizer, dir)`` writes the layout back (the tensor names
transformers writes, tied weights once), so that transformers loads it with the same outputs;
load -> save -> load is exact. Class names (``id2label``, when not transformers' ``LABEL_<i>``)
load into ``EncoderConfig.labels``; ``save_pretrained(..., labels=[...])`` or the config's
labels are written back as ``id2label`` / ``label2id``.

Weights map one to one (torch ``Linear`` [out, in] -> kernel [in, out]); per layer, BERT's
``attention.self.{query,key,value}`` (DistilBERT's ``attention.{q,k,v}_lin``, DeBERTa's
``attention.self.{query,key,value}_proj``, ModernBERT's fused ``attn.Wqkv``) -> the fused
``self_attention.qkv`` [D, 3, H, Dh], ``attention.output.dense`` (``out_lin``, ``attn.Wo``) ->
``self_attention.out`` [H, Dh, D], ``attention.output.LayerNorm`` (``sa_layer_norm``,
``attn_norm``) -> ``self_norm``, ``intermediate.dense`` / ``output.dense`` (``ffn.lin1`` /
``lin2``, ``mlp.Wi`` / ``Wo``; ModernBERT's ``Wi`` [2 I, D] -> [D, 2, I], input then gate) ->
``feed_forward.wi`` / ``wo``, ``output.LayerNorm`` (``output_layer_norm``, ``mlp_norm``) ->
``ff_norm``. DeBERTa's ``encoder.rel_embeddings`` / ``encoder.LayerNorm`` ->
``relative_embeddings`` / ``relative_norm``; its masked-LM head is read from either layout
(``cls.predictions`` of ``legacy: true``, or ``lm_predictions.lm_head``) and written as the
first (``legacy: true``, transformers' default; the same maths).
Options textkit does not implement are ``UnsupportedArchitectureError``s naming the config key
and value (e.g. ``position_embedding_type``, ``sinusoidal_pos_embds``, untied decoders,
DeBERTa's ``relative_attention: false`` or ``conv_kernel_size``, ModernBERT's ``layer_types``
other than one global layer every n or a ``rope_type`` other than "default").
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from textkit._io import atomic_dir, write_json_atomic
from textkit.models.encoder import Encoder, EncoderConfig
from textkit.models.layers import ACTIVATIONS
from textkit.pretrained.encoder_tokenizer import EncoderTokenizer
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
    at,
    check_vocab_size,
    expected_params,
    heads_bias,
    linear,
    out_proj,
    read_params,
    write_tensors,
)

__all__ = ["MODEL_TYPES", "TASK_HEADS", "encoder_config", "head_modules", "hf_config", "load",
           "params_from_tensors", "save_pretrained", "tensors_from_params", "weight_map",
           "write_checkpoint"]

MODEL_TYPES = {"bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta",
               "electra": "Electra", "distilbert": "DistilBert", "deberta-v2": "DebertaV2",
               "modernbert": "ModernBert"}
"""config.json ``model_type`` -> transformers' class prefix."""
HEAD_SUFFIXES = {"Model": "model", "ForMaskedLM": "masked_lm", "ForPreTraining": "pretraining",
                 "ForSequenceClassification": "sequence_classification",
                 "ForTokenClassification": "token_classification",
                 "ForQuestionAnswering": "question_answering"}
_BASE = {"bert": "bert", "roberta": "roberta", "xlm-roberta": "roberta", "electra": "electra",
         "distilbert": "distilbert", "deberta-v2": "deberta", "modernbert": "model"}
"""Attribute holding the bare model inside transformers' head classes (the key prefix)."""


# ------------------------------------------------------------------------------------ config
def head_of(hf: Mapping[str, Any], root: Path) -> str:
    """The head named by ``architectures`` (none: the bare model)."""
    prefix = MODEL_TYPES[hf["model_type"]]
    architectures = hf.get("architectures") or [prefix + "Model"]
    name = architectures[0]
    suffix = name[len(prefix):] if name.startswith(prefix) else None
    head = HEAD_SUFFIXES.get(suffix) if suffix is not None else None
    if head is None or (head == "pretraining" and hf["model_type"] != "electra"):
        known = [prefix + s for s, h in HEAD_SUFFIXES.items()
                 if h != "pretraining" or hf["model_type"] == "electra"]
        raise unsupported(root, "architectures", architectures,
                          f"textkit has the heads {', '.join(known)}")
    return head


def encoder_config(hf: Mapping[str, Any], root: str | os.PathLike = ".",
                   **overrides: Any) -> EncoderConfig:
    """``EncoderConfig`` of an encoder ``config.json`` dict (``UnsupportedArchitectureError``
    names the first option textkit does not implement; a missing key is a
    ``PretrainedError`` naming it, and so is a size or rate of the wrong type); ``overrides``
    replace fields."""
    check_types(Path(root) / "config.json", hf, CONFIG_TYPES)
    try:
        return _encoder_config(hf, Path(root), overrides)
    except KeyError as err:
        raise PretrainedError(f"{Path(root) / 'config.json'}: missing the key "
                              f"{err.args[0]!r} a {hf.get('model_type')} config.json "
                              f"has") from None


def _encoder_config(hf: Mapping[str, Any], root: Path,
                    overrides: dict[str, Any]) -> EncoderConfig:
    model_type = hf["model_type"]
    if model_type in _FAMILY_OPTIONS:
        return _family_config(hf, root, overrides)
    distil = model_type == "distilbert"
    get = hf.get
    if distil:
        if get("sinusoidal_pos_embds"):
            raise unsupported(root, "sinusoidal_pos_embds", hf["sinusoidal_pos_embds"],
                              "textkit loads DistilBERT with learned positions only")
        activation = get("activation", "gelu")
    else:
        for key, expected in (("position_embedding_type", "absolute"), ("is_decoder", False),
                              ("add_cross_attention", False)):
            if key in hf and hf[key] not in (expected, None):
                raise unsupported(root, key, hf[key], f"textkit's encoders have {expected!r}")
        activation = get("hidden_act", "gelu")
    if activation not in ACTIVATIONS:
        raise unsupported(root, "activation" if distil else "hidden_act", activation,
                          f"expected one of {sorted(ACTIVATIONS)}")
    head = head_of(hf, root)
    if head == "masked_lm" and get("tie_word_embeddings", True) is False:
        raise unsupported(root, "tie_word_embeddings", False,
                          "textkit's masked-LM decoder is tied to the word embeddings")
    if distil:
        options = dict(vocab_size=int(hf["vocab_size"]), hidden_size=int(hf["dim"]),
                       num_layers=int(hf["n_layers"]), num_heads=int(hf["n_heads"]),
                       intermediate_size=int(hf["hidden_dim"]), type_vocab_size=0,
                       dropout=float(get("dropout", 0.1)),
                       attention_dropout=float(get("attention_dropout", 0.1)),
                       classifier_dropout=float(get("seq_classif_dropout", 0.2)
                                                if head == "sequence_classification"
                                                else get("qa_dropout", 0.1)
                                                if head == "question_answering"
                                                else get("dropout", 0.1)))
    else:
        options = dict(vocab_size=int(hf["vocab_size"]), hidden_size=int(hf["hidden_size"]),
                       num_layers=int(hf["num_hidden_layers"]),
                       num_heads=int(hf["num_attention_heads"]),
                       intermediate_size=int(hf["intermediate_size"]),
                       type_vocab_size=int(get("type_vocab_size", 2)),
                       layer_norm_epsilon=float(get("layer_norm_eps", 1e-12)),
                       dropout=float(get("hidden_dropout_prob", 0.1)),
                       attention_dropout=float(get("attention_probs_dropout_prob", 0.1)),
                       classifier_dropout=get("classifier_dropout"))
        if model_type == "electra" and get("embedding_size") not in (None, hf["hidden_size"]):
            options["embedding_size"] = int(hf["embedding_size"])   # else no projection
    if options["hidden_size"] % options["num_heads"]:
        raise unsupported(root, "num_attention_heads", options["num_heads"],
                          f"hidden size {options['hidden_size']} is not divisible by it")
    options.update(architecture=model_type, head=head, activation=activation,
                   pad_id=int(get("pad_token_id") or 0),
                   max_position_embeddings=int(get("max_position_embeddings", 512)))
    options.update(overrides)
    options.update(_label_options(hf, root, overrides))
    try:
        return EncoderConfig(**options)
    except ValueError as err:
        raise PretrainedError(f"{root / 'config.json'}: {err}") from None


def _labels(hf: Mapping[str, Any], root: Path) -> tuple[str, ...] | None:
    """The class names of ``id2label``, in id order (None when absent)."""
    id2label = hf.get("id2label")
    if not id2label:
        return None
    try:
        names = {int(k): str(v) for k, v in id2label.items()}
    except (AttributeError, TypeError, ValueError):
        raise PretrainedError(f"{root / 'config.json'}: id2label={id2label!r}; expected an "
                              f"object mapping class ids to names") from None
    if sorted(names) != list(range(len(names))):
        raise PretrainedError(f"{root / 'config.json'}: id2label has the ids {sorted(names)}; "
                              f"expected 0 to {len(names) - 1}")
    return tuple(names[i] for i in range(len(names)))


def _label_options(hf: Mapping[str, Any], root: Path,
                   overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``num_labels`` and ``labels`` of a ``config.json`` as the config gets them: names of
    ``id2label`` unless they are transformers' ``LABEL_<i>`` defaults, or a new head
    (``overrides`` with another ``num_labels``) makes them wrong; ``overrides["labels"]`` sets
    both."""
    labels = _labels(hf, root)
    num_labels = len(labels) if labels else int(hf.get("num_labels", 2))
    if labels == tuple(f"LABEL_{i}" for i in range(num_labels)):
        labels = None                                # transformers' names for unnamed classes
    if labels and "labels" not in overrides and overrides.get("num_labels", num_labels) \
            != num_labels:
        labels = None                                # a new head: the names no longer apply
    options = {"num_labels": num_labels, "labels": labels, **{
        k: v for k, v in overrides.items() if k in ("num_labels", "labels")}}
    if overrides.get("labels") is not None and "num_labels" not in overrides:
        options["num_labels"] = len(overrides["labels"])
    return options


def _activation(root: Path, key: str, value: Any) -> str:
    if value not in ACTIVATIONS:
        raise unsupported(root, key, value, f"expected one of {sorted(ACTIVATIONS)}")
    return value


def _deberta_options(hf: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """EncoderConfig fields of a DeBERTa-v2/v3 ``config.json`` (named errors for what textkit
    does not implement)."""
    get = hf.get
    if not get("relative_attention", False):
        raise unsupported(root, "relative_attention", get("relative_attention", False),
                          "textkit's DeBERTa has disentangled relative attention")
    kinds = get("pos_att_type") or []
    if isinstance(kinds, str):
        kinds = [k.strip() for k in kinds.lower().split("|")]
    if not kinds or set(kinds) - {"c2p", "p2c"}:
        raise unsupported(root, "pos_att_type", get("pos_att_type"),
                          "textkit has 'c2p' and / or 'p2c'")
    norm = [k.strip() for k in str(get("norm_rel_ebd", "none")).lower().split("|")]
    if set(norm) - {"none", "layer_norm"}:
        raise unsupported(root, "norm_rel_ebd", get("norm_rel_ebd"),
                          "textkit has 'layer_norm' or 'none'")
    hidden = int(hf["hidden_size"])
    for key, value, expected in (
            ("conv_kernel_size", get("conv_kernel_size", 0), 0),
            ("embedding_size", get("embedding_size", hidden), hidden),
            ("pooler_hidden_size", get("pooler_hidden_size", hidden), hidden),
            ("attention_head_size", get("attention_head_size",
                                        hidden // int(hf["num_attention_heads"])),
             hidden // int(hf["num_attention_heads"]))):
        if value not in (expected, None):
            raise unsupported(root, key, value, f"textkit's DeBERTa has {expected}")
    return dict(
        vocab_size=int(hf["vocab_size"]), hidden_size=hidden,
        num_layers=int(hf["num_hidden_layers"]), num_heads=int(hf["num_attention_heads"]),
        intermediate_size=int(hf["intermediate_size"]),
        activation=_activation(root, "hidden_act", get("hidden_act", "gelu")),
        type_vocab_size=int(get("type_vocab_size", 0)),
        absolute_positions=bool(get("position_biased_input", True)),
        layer_norm_epsilon=float(get("layer_norm_eps", 1e-7)),
        dropout=float(get("hidden_dropout_prob", 0.1)),
        attention_dropout=float(get("attention_probs_dropout_prob", 0.1)),
        classifier_dropout=get("cls_dropout"),
        classifier_activation=_activation(root, "pooler_hidden_act",
                                          get("pooler_hidden_act", "gelu")),
        relative_attention=tuple(kinds), position_buckets=int(get("position_buckets", -1)),
        max_relative_positions=int(get("max_relative_positions", -1)),
        share_att_key=bool(get("share_att_key", False)), relative_norm="layer_norm" in norm,
        max_position_embeddings=int(get("max_position_embeddings", 512)))


def _global_every(hf: Mapping[str, Any], root: Path) -> int:
    """ModernBERT's ``global_attn_every_n_layers`` (from ``layer_types`` when given; a
    pattern other than "full_attention every n-th layer from the first" is an error)."""
    layers = int(hf["num_hidden_layers"])
    types = hf.get("layer_types")
    if types is None:
        return int(hf.get("global_attn_every_n_layers", 3))
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    every = full[1] if len(full) > 1 else max(layers, 1)
    expected = ["sliding_attention" if i % every else "full_attention" for i in range(layers)]
    if list(types) != expected:
        raise unsupported(root, "layer_types", types, "textkit has one full_attention layer "
                          "every n layers, from the first, the others sliding_attention")
    return every


def _rope_thetas(hf: Mapping[str, Any], root: Path) -> tuple[float, float]:
    """(global, local) rotary theta of a ModernBERT ``config.json`` (``rope_parameters`` or
    the older ``global_rope_theta`` / ``local_rope_theta``)."""
    thetas = [float(hf.get("global_rope_theta", 160_000.0)),
              float(hf.get("local_rope_theta", 10_000.0))]
    for i, kind in enumerate(("full_attention", "sliding_attention")):
        params = (hf.get("rope_parameters") or {}).get(kind) or {}
        if params.get("rope_type", "default") != "default":
            raise unsupported(root, f"rope_parameters.{kind}.rope_type", params["rope_type"],
                              "textkit has the 'default' rotary positions")
        thetas[i] = float(params.get("rope_theta", thetas[i]))
    return thetas[0], thetas[1]


def _modernbert_options(hf: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """EncoderConfig fields of a ModernBERT ``config.json``."""
    get = hf.get
    if float(get("mlp_dropout", 0.0)) != float(get("embedding_dropout", 0.0)):
        raise unsupported(root, "mlp_dropout", get("mlp_dropout"),
                          f"textkit's ModernBERT has one dropout rate for the embeddings and "
                          f"the MLP (embedding_dropout={get('embedding_dropout', 0.0)})")
    heads = int(hf["num_attention_heads"])
    if get("head_dim") not in (None, int(hf["hidden_size"]) // heads):
        raise unsupported(root, "head_dim", get("head_dim"), "textkit has hidden_size / heads")
    global_theta, local_theta = _rope_thetas(hf, root)
    return dict(
        vocab_size=int(hf["vocab_size"]), hidden_size=int(hf["hidden_size"]),
        num_layers=int(hf["num_hidden_layers"]), num_heads=heads,
        intermediate_size=int(hf["intermediate_size"]),
        activation=_activation(root, "hidden_activation", get("hidden_activation", "gelu")),
        type_vocab_size=0, absolute_positions=False,
        layer_norm_epsilon=float(get("norm_eps", 1e-5)),
        dropout=float(get("embedding_dropout", 0.0)),
        attention_dropout=float(get("attention_dropout", 0.0)),
        classifier_dropout=float(get("classifier_dropout", 0.0)),
        classifier_activation=_activation(root, "classifier_activation",
                                          get("classifier_activation", "gelu")),
        global_rope_theta=global_theta, local_rope_theta=local_theta,
        local_attention=int(get("local_attention", 128)),
        global_attn_every_n_layers=_global_every(hf, root),
        attention_bias=bool(get("attention_bias", False)), mlp_bias=bool(get("mlp_bias", False)),
        norm_bias=bool(get("norm_bias", False)),
        classifier_bias=bool(get("classifier_bias", False)),
        decoder_bias=bool(get("decoder_bias", True)),
        classifier_pooling=get("classifier_pooling", "cls"),
        max_position_embeddings=int(get("max_position_embeddings", 8192)))


_FAMILY_OPTIONS = {"deberta-v2": _deberta_options, "modernbert": _modernbert_options}
"""The families whose config.json keys differ from BERT's, with their readers."""


def _family_config(hf: Mapping[str, Any], root: Path,
                   overrides: Mapping[str, Any]) -> EncoderConfig:
    """``EncoderConfig`` of a DeBERTa or ModernBERT ``config.json``."""
    options = _FAMILY_OPTIONS[hf["model_type"]](hf, root)
    head = head_of(hf, root)
    if head == "masked_lm" and hf.get("tie_word_embeddings", True) is False:
        raise unsupported(root, "tie_word_embeddings", False,
                          "textkit's masked-LM decoder is tied to the word embeddings")
    if options["hidden_size"] % options["num_heads"]:
        raise unsupported(root, "num_attention_heads", options["num_heads"],
                          f"hidden size {options['hidden_size']} is not divisible by it")
    options.update(architecture=hf["model_type"], head=head,
                   pad_id=int(hf.get("pad_token_id") or 0), **overrides)
    options.update(_label_options(hf, root, overrides))
    try:
        return EncoderConfig(**options)
    except ValueError as err:
        raise PretrainedError(f"{root / 'config.json'}: {err}") from None


def _deberta_hf(config: EncoderConfig) -> dict[str, Any]:
    """The DeBERTa keys of ``hf_config``."""
    return {"hidden_size": config.hidden_size, "num_hidden_layers": config.num_layers,
            "num_attention_heads": config.num_heads,
            "intermediate_size": config.intermediate_size, "hidden_act": config.activation,
            "hidden_dropout_prob": config.dropout,
            "attention_probs_dropout_prob": config.attention_dropout,
            "type_vocab_size": config.type_vocab_size,
            "layer_norm_eps": config.layer_norm_epsilon,
            "position_biased_input": config.absolute_positions, "relative_attention": True,
            "pos_att_type": list(config.relative_attention),
            "position_buckets": config.position_buckets,
            "max_relative_positions": config.max_relative_positions,
            "share_att_key": config.share_att_key,
            "norm_rel_ebd": "layer_norm" if config.relative_norm else "none",
            "pooler_hidden_size": config.hidden_size, "pooler_dropout": 0.0,
            "pooler_hidden_act": config.classifier_activation or "gelu",
            "cls_dropout": config.classifier_dropout, "legacy": True}


def _modernbert_hf(config: EncoderConfig) -> dict[str, Any]:
    """The ModernBERT keys of ``hf_config``."""
    every = config.global_attn_every_n_layers
    return {"hidden_size": config.hidden_size, "num_hidden_layers": config.num_layers,
            "num_attention_heads": config.num_heads,
            "intermediate_size": config.intermediate_size,
            "hidden_activation": config.activation, "norm_eps": config.layer_norm_epsilon,
            "embedding_dropout": config.dropout, "mlp_dropout": config.dropout,
            "attention_dropout": config.attention_dropout,
            "classifier_dropout": config.classifier_dropout or 0.0,
            "classifier_activation": config.classifier_activation or "gelu",
            "classifier_pooling": config.classifier_pooling,
            "attention_bias": config.attention_bias, "mlp_bias": config.mlp_bias,
            "norm_bias": config.norm_bias, "classifier_bias": config.classifier_bias,
            "decoder_bias": config.decoder_bias, "local_attention": config.local_attention,
            "global_attn_every_n_layers": every,
            "layer_types": ["sliding_attention" if i % every else "full_attention"
                            for i in range(config.num_layers)],
            "rope_parameters": {
                "full_attention": {"rope_theta": config.global_rope_theta,
                                   "rope_type": "default"},
                "sliding_attention": {"rope_theta": config.local_rope_theta,
                                      "rope_type": "default"}}}


def hf_config(config: EncoderConfig) -> dict[str, Any]:
    """The ``config.json`` dict of ``config`` (inverse of ``encoder_config``)."""
    prefix = MODEL_TYPES[config.architecture]
    suffix = {h: s for s, h in HEAD_SUFFIXES.items()}[config.head]
    names = config.labels or tuple(f"LABEL_{i}" for i in range(config.num_labels))
    labels = {str(i): name for i, name in enumerate(names)}
    common = {"model_type": config.architecture, "architectures": [prefix + suffix],
              "vocab_size": config.vocab_size, "pad_token_id": config.pad_id,
              "max_position_embeddings": config.max_position_embeddings,
              "id2label": labels, "label2id": {v: int(k) for k, v in labels.items()},
              "tie_word_embeddings": True}
    if config.architecture == "deberta-v2":
        return {**common, **_deberta_hf(config)}
    if config.architecture == "modernbert":
        return {**common, **_modernbert_hf(config)}
    if config.architecture == "distilbert":
        dropout = config.dropout if config.classifier_dropout is None \
            else config.classifier_dropout
        return {**common, "dim": config.hidden_size, "n_layers": config.num_layers,
                "n_heads": config.num_heads, "hidden_dim": config.intermediate_size,
                "activation": config.activation, "dropout": config.dropout,
                "attention_dropout": config.attention_dropout,
                "seq_classif_dropout": dropout if config.head == "sequence_classification"
                else 0.2, "qa_dropout": dropout if config.head == "question_answering" else 0.1,
                "sinusoidal_pos_embds": False}
    hf = {**common, "hidden_size": config.hidden_size, "num_hidden_layers": config.num_layers,
          "num_attention_heads": config.num_heads,
          "intermediate_size": config.intermediate_size, "hidden_act": config.activation,
          "hidden_dropout_prob": config.dropout,
          "attention_probs_dropout_prob": config.attention_dropout,
          "type_vocab_size": config.type_vocab_size,
          "layer_norm_eps": config.layer_norm_epsilon,
          "classifier_dropout": config.classifier_dropout,
          "position_embedding_type": "absolute"}
    if config.architecture in ("roberta", "xlm-roberta"):
        hf.update(bos_token_id=0, eos_token_id=2)
    if config.architecture == "electra":
        hf["embedding_size"] = config.width
    return hf


_HEAD_PARAMS = {"pooler", "mlm_dense", "mlm_norm", "mlm_bias", "discriminator_dense",
                "discriminator_prediction", "classifier_dense", "classifier_norm", "classifier",
                "qa_outputs"}
"""Top-level params of the heads (and pooler): what a new head initialises at random."""


# ----------------------------------------------------------------------------------- weights
def _dense(tk: tuple[str, ...], hf: str, bias: bool = True,
           transform: Transform | None = None) -> Iterator[tuple]:
    yield (*tk, "kernel"), [f"{hf}.weight"], transform or linear()
    if bias:
        yield (*tk, "bias"), [f"{hf}.bias"], SAME


def _norm(tk: tuple[str, ...], hf: str, bias: bool = True) -> Iterator[tuple]:
    yield (*tk, "norm", "scale"), [f"{hf}.weight"], SAME
    if bias:
        yield (*tk, "norm", "bias"), [f"{hf}.bias"], SAME


def _fused(*axes: int) -> Transform:
    """A fused torch Linear weight [prod(axes), in] <-> kernel [in, *axes] (ModernBERT's
    ``Wqkv`` [3 D, D] -> [D, 3, H, Dh], ``Wi`` [2 I, D] -> [D, 2, I])."""
    return (lambda w: w.T.reshape(w.shape[1], *axes), lambda k: k.reshape(k.shape[0], -1).T)


def _fused_bias(*axes: int) -> Transform:
    """A fused bias [prod(axes)] <-> [*axes]."""
    return lambda b: b.reshape(axes), lambda b: b.reshape(-1)


def _modernbert_layer(config: EncoderConfig, i: int, base: str) -> Iterator[tuple]:
    heads, tk, hf = config.num_heads, f"layer_{i}", f"{base}layers.{i}"
    depth, ff = config.hidden_size // heads, config.intermediate_size
    attention, mlp, norm = config.attention_bias, config.mlp_bias, config.norm_bias
    if i > 0:
        yield from _norm((tk, "self_norm"), f"{hf}.attn_norm", norm)
    yield (tk, "self_attention", "qkv", "kernel"), [f"{hf}.attn.Wqkv.weight"], \
        _fused(3, heads, depth)
    if attention:
        yield (tk, "self_attention", "qkv", "bias"), [f"{hf}.attn.Wqkv.bias"], \
            _fused_bias(3, heads, depth)
    yield from _dense((tk, "self_attention", "out"), f"{hf}.attn.Wo", attention, out_proj(heads))
    yield from _norm((tk, "ff_norm"), f"{hf}.mlp_norm", norm)
    yield (tk, "feed_forward", "wi", "kernel"), [f"{hf}.mlp.Wi.weight"], _fused(2, ff)
    if mlp:
        yield (tk, "feed_forward", "wi", "bias"), [f"{hf}.mlp.Wi.bias"], _fused_bias(2, ff)
    yield from _dense((tk, "feed_forward", "wo"), f"{hf}.mlp.Wo", mlp)


def _layer(config: EncoderConfig, i: int, base: str) -> Iterator[tuple]:
    heads, tk = config.num_heads, f"layer_{i}"
    if config.architecture == "modernbert":
        yield from _modernbert_layer(config, i, base)
        return
    if config.architecture == "distilbert":
        hf = f"{base}transformer.layer.{i}"
        qkv = [f"{hf}.attention.{n}_lin" for n in "qkv"]
        out, sa_norm = f"{hf}.attention.out_lin", f"{hf}.sa_layer_norm"
        wi, wo, ff_norm = f"{hf}.ffn.lin1", f"{hf}.ffn.lin2", f"{hf}.output_layer_norm"
    else:
        hf = f"{base}encoder.layer.{i}"
        names = ("query", "key", "value")
        if config.architecture == "deberta-v2":
            names = ("query_proj", "key_proj", "value_proj")
        qkv = [f"{hf}.attention.self.{n}" for n in names]
        out, sa_norm = f"{hf}.attention.output.dense", f"{hf}.attention.output.LayerNorm"
        wi, wo, ff_norm = (f"{hf}.intermediate.dense", f"{hf}.output.dense",
                           f"{hf}.output.LayerNorm")
    yield (tk, "self_attention", "qkv", "kernel"), [f"{k}.weight" for k in qkv], linear(heads)
    yield (tk, "self_attention", "qkv", "bias"), [f"{k}.bias" for k in qkv], heads_bias(heads)
    yield (tk, "self_attention", "out", "kernel"), [f"{out}.weight"], out_proj(heads)
    yield (tk, "self_attention", "out", "bias"), [f"{out}.bias"], SAME
    yield from _norm((tk, "self_norm"), sa_norm)
    relative = config.relative
    if relative is not None and not relative.share_key:
        for kind, name in (("p2c", "pos_query"), ("c2p", "pos_key")):
            if kind in relative.kinds:
                torch_name = f"{hf}.attention.self.{name}_proj"
                yield (tk, "self_attention", name, "kernel"), [f"{torch_name}.weight"], \
                    linear(heads)
                yield (tk, "self_attention", name, "bias"), [f"{torch_name}.bias"], \
                    heads_bias(heads)
    yield from _dense((tk, "feed_forward", "wi"), wi)
    yield from _dense((tk, "feed_forward", "wo"), wo)
    yield from _norm((tk, "ff_norm"), ff_norm)


def weight_map(config: EncoderConfig) -> list[tuple]:
    """Every (textkit param path, [transformers keys], (to_textkit, from_textkit)) of
    ``config``, under the names transformers writes; several keys are stacked along a new axis
    (q/k/v). Tied weights (the masked-LM decoder) are not listed."""
    family, head = config.architecture, config.head
    base = "" if head == "model" else f"{_BASE[family]}."
    emb = f"{base}embeddings"
    if family == "modernbert":
        entries = [(("word_embeddings", "embedding"), [f"{emb}.tok_embeddings.weight"], SAME),
                   *_norm(("embeddings_norm",), f"{emb}.norm", config.norm_bias)]
    else:
        entries = [(("word_embeddings", "embedding"), [f"{emb}.word_embeddings.weight"], SAME)]
    if config.absolute_positions:
        entries.append((("position_embeddings", "embedding"),
                        [f"{emb}.position_embeddings.weight"], SAME))
    if config.type_vocab_size:
        entries.append((("token_type_embeddings", "embedding"),
                        [f"{emb}.token_type_embeddings.weight"], SAME))
    if family != "modernbert":
        entries += _norm(("embeddings_norm",), f"{emb}.LayerNorm")
    if config.embedding_size is not None:
        entries += _dense(("embeddings_project",), f"{base}embeddings_project")
    if config.relative is not None:
        entries.append((("relative_embeddings", "embedding"),
                        [f"{base}encoder.rel_embeddings.weight"], SAME))
        if config.relative_norm:
            entries += _norm(("relative_norm",), f"{base}encoder.LayerNorm")
    for i in range(config.num_layers):
        entries += _layer(config, i, base)
    if family == "modernbert":
        entries += _norm(("final_norm",), f"{base}final_norm", config.norm_bias)
        return entries + list(_modernbert_head(config))
    if config.has_pooler:
        entries += _dense(("pooler",), f"{base}pooler.dense")
    if head == "masked_lm":
        dense, norm, bias = {
            "bert": ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                     "cls.predictions.bias"),
            "roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias"),
            "xlm-roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias"),
            "electra": ("generator_predictions.dense", "generator_predictions.LayerNorm",
                        "generator_lm_head.bias"),
            "distilbert": ("vocab_transform", "vocab_layer_norm", "vocab_projector.bias"),
            "deberta-v2": ("cls.predictions.transform.dense",
                           "cls.predictions.transform.LayerNorm", "cls.predictions.bias"),
        }[family]
        entries += _dense(("mlm_dense",), dense)
        entries += _norm(("mlm_norm",), norm)
        entries.append((("mlm_bias",), [bias], SAME))
    elif head == "pretraining":
        entries += _dense(("discriminator_dense",), "discriminator_predictions.dense")
        entries += _dense(("discriminator_prediction",),
                          "discriminator_predictions.dense_prediction")
    elif head == "sequence_classification":
        if family == "bert":
            entries += _dense(("classifier",), "classifier")
        elif family == "distilbert":
            entries += _dense(("classifier_dense",), "pre_classifier")
            entries += _dense(("classifier",), "classifier")
        elif family == "deberta-v2":
            entries += _dense(("classifier_dense",), "pooler.dense")
            entries += _dense(("classifier",), "classifier")
        else:
            entries += _dense(("classifier_dense",), "classifier.dense")
            entries += _dense(("classifier",), "classifier.out_proj")
    elif head == "token_classification":
        entries += _dense(("classifier",), "classifier")
    elif head == "question_answering":
        entries += _dense(("qa_outputs",), "qa_outputs")
    return entries


TASK_HEADS = ("sequence_classification", "token_classification", "question_answering")
"""The heads a fine-tuning task trains from (new) weights: PEFT's ``modules_to_save``."""


def head_modules(config: EncoderConfig) -> tuple[str, ...]:
    """transformers' module names of a task head of ``config`` (``classifier``; RoBERTa's
    ``classifier`` holds ``dense`` and ``out_proj``; DistilBERT's ``pre_classifier`` and
    ``classifier``; ``qa_outputs``): what LoRA fine-tuning trains fully (PEFT's
    ``modules_to_save``). () for the bare model and the pretraining heads."""
    if config.head not in TASK_HEADS:
        return ()
    base = f"{_BASE[config.architecture]}."
    names = [keys[0] for path, keys, _ in weight_map(config) if path[0] in _HEAD_PARAMS]
    return tuple(dict.fromkeys(name.split(".")[0] for name in names
                               if not name.startswith(base)))


def _modernbert_head(config: EncoderConfig) -> Iterator[tuple]:
    """ModernBERT's head entries (``head.dense`` / ``head.norm``, then ``decoder.bias`` or
    ``classifier``)."""
    if config.head == "model":
        return
    name = "mlm" if config.head == "masked_lm" else "classifier"
    yield from _dense((f"{name}_dense",), "head.dense", config.classifier_bias)
    yield from _norm((f"{name}_norm",), "head.norm", config.norm_bias)
    if config.head == "masked_lm":
        if config.decoder_bias:
            yield ("mlm_bias",), ["decoder.bias"], SAME
    else:
        yield from _dense(("qa_outputs" if config.head == "question_answering"
                           else "classifier",), "classifier")


_TIED_DECODER = {"bert": ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias"),
                 "roberta": ("lm_head.decoder.weight", "lm_head.decoder.bias"),
                 "xlm-roberta": ("lm_head.decoder.weight", "lm_head.decoder.bias"),
                 "electra": ("generator_lm_head.weight", None),
                 "distilbert": ("vocab_projector.weight", None),
                 "deberta-v2": ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias"),
                 "modernbert": ("decoder.weight", None)}
_DEBERTA_LM = {"cls.predictions.transform.": "lm_predictions.lm_head.",
               "cls.predictions.bias": "lm_predictions.lm_head.bias"}
"""DeBERTa's masked-LM names under ``legacy: false`` (the same maths)."""


def _alternatives(key: str, config: EncoderConfig) -> list[str]:
    """Names a tensor may have in other checkpoints: with or without the base prefix (a bare
    model saved from a head class, or the reverse), LayerNorm ``gamma`` / ``beta`` of older
    files, the decoder's own bias name."""
    base = f"{_BASE[config.architecture]}."
    names = [key, key[len(base):] if key.startswith(base) else base + key]
    old = {".LayerNorm.weight": ".LayerNorm.gamma", ".LayerNorm.bias": ".LayerNorm.beta"}
    names += [n[:-len(a)] + b for n in list(names) for a, b in old.items() if n.endswith(a)]
    if config.architecture == "deberta-v2":
        names += [key.replace(a, b) for a, b in _DEBERTA_LM.items() if key.startswith(a)]
    if config.head == "masked_lm" and _TIED_DECODER[config.architecture][1]:
        if key.endswith(("predictions.bias", "lm_head.bias")):
            names.append(_TIED_DECODER[config.architecture][1])
    return names


def params_from_tensors(tensors: Mapping[str, np.ndarray], config: EncoderConfig,
                        expected: Any, root: Path, fallback: Any = None) -> dict[str, Any]:
    """textkit params (numpy, ``expected``'s dtypes) from transformers' tensors, each
    shape-checked against ``expected`` (a ``jax.eval_shape`` of the params), through the
    shared walker. With ``fallback`` (params of a fresh init), head weights the tensors lack,
    or hold with another number of labels, are taken from it."""
    def pick(key: str) -> np.ndarray | None:
        return next((np.asarray(tensors[n]) for n in _alternatives(key, config)
                     if n in tensors), None)

    def fresh_head(entry: Entry, value: np.ndarray | None) -> Any:
        if fallback is None or entry.path[0] not in _HEAD_PARAMS:
            return None
        return np.array(at(fallback, entry.path))

    params = read_params([Entry(*e) for e in weight_map(config)], pick, expected, root=root,
                         says=f"config.json says {config.architecture} with head "
                              f"{config.head}",
                         vocab_paths=("word_embeddings", "mlm_bias"), fallback=fresh_head)
    decoder = _TIED_DECODER[config.architecture][0] if config.head == "masked_lm" else None
    if decoder in tensors and not np.array_equal(tensors[decoder],
                                                 params["word_embeddings"]["embedding"]):
        raise unsupported(root, "tie_word_embeddings", "(weights differ)",
                          f"{decoder} differs from the word embeddings; textkit's masked-LM "
                          f"decoder is tied to them")
    return params


def tensors_from_params(params: Any, config: EncoderConfig) -> dict[str, np.ndarray]:
    """transformers' tensors (float32 numpy) from textkit params: the inverse of
    ``params_from_tensors``, the names and set transformers' ``save_pretrained`` writes."""
    return write_tensors([Entry(*e) for e in weight_map(config)], params)


# -------------------------------------------------------------------------------- load/save
def load(root: Path, hf: Mapping[str, Any], **overrides: Any) -> Pretrained:
    """Load the encoder checkpoint directory ``root`` whose ``config.json`` is ``hf``:
    ``Pretrained("encoder", model, params, tokenizer)``, params float32 numpy arrays in the
    ``Encoder``'s tree. ``overrides`` replace config fields (``policy="mixed_bfloat16"``,
    ``dropout``, ``gradient_checkpointing=True``; ``head`` / ``num_labels`` for fine-tuning,
    whose new head weights are then initialised at random, with a warning)."""
    import jax
    import jax.numpy as jnp

    config = encoder_config(hf, root, **overrides)
    checkpoint_head = head_of(hf, root)
    tokenizer = EncoderTokenizer.from_directory(root, hf["model_type"])
    check_vocab_size(root, "the tokenizer", len(tokenizer), config.vocab_size)
    tensors = read_tensors(root)
    model = Encoder(config)
    dummy = jnp.zeros((1, 4), jnp.int32)
    new_head = (config.head, config.num_labels) != (checkpoint_head,
                                                    encoder_config(hf, root).num_labels)
    fallback = None
    if new_head:
        fallback = jax.tree_util.tree_map(
            np.asarray, jax.jit(model.init)(jax.random.PRNGKey(0), dummy)["params"])
        warnings.warn(f"{root}: the {config.head} head ({config.num_labels} labels) is "
                      f"initialised at random (the checkpoint has {checkpoint_head})",
                      UserWarning, stacklevel=3)
    params = params_from_tensors(tensors, config, expected_params(model, dummy), root, fallback)
    return Pretrained("encoder", model, params, tokenizer)


def _token_ids(config: EncoderConfig, tokenizer: EncoderTokenizer) -> dict[str, int | None]:
    """ModernBERT's special-token ids of config.json (its ``[CLS]`` / ``[SEP]``; None when the
    vocabulary lacks them), which transformers checks against the vocabulary."""
    if config.architecture != "modernbert":
        return {}
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    return {"bos_token_id": cls, "cls_token_id": cls, "eos_token_id": sep, "sep_token_id": sep}


def save_pretrained(model: Encoder, params: Any, tokenizer: EncoderTokenizer,
                    path: str | os.PathLike, *, labels: Sequence[str] | None = None) -> Path:
    """Write ``model`` / ``params`` / ``tokenizer`` as a checkpoint directory that transformers'
    ``AutoModel...`` / ``AutoTokenizer`` load (replaced atomically). ``labels`` (one name per
    class, e.g. of a fine-tuned classifier) replace ``model.config.labels`` and are written as
    ``id2label`` / ``label2id``."""
    config = model.config
    if labels is not None:
        try:
            config = dataclasses.replace(config, labels=tuple(labels))
        except ValueError as err:
            raise PretrainedError(f"save_pretrained: {err}") from None
    with atomic_dir(path) as staging:
        write_checkpoint(staging, config, params, tokenizer)
    return Path(path)


def write_checkpoint(directory: Path, config: EncoderConfig, params: Any,
                     tokenizer: EncoderTokenizer) -> None:
    """Write the weights, ``config.json`` and the tokenizer's files into ``directory``."""
    if not isinstance(tokenizer, EncoderTokenizer):
        raise TypeError(f"save_pretrained writes an EncoderTokenizer (from load_pretrained); "
                        f"got {type(tokenizer).__name__}")
    check_vocab_size("save_pretrained", "the tokenizer", len(tokenizer), config.vocab_size)
    write_tensors_file(directory / "model.safetensors", tensors_from_params(params, config))
    write_json_atomic(directory / "config.json", {**hf_config(config),
                                                 **_token_ids(config, tokenizer)})
    tokenizer.save(directory, config.architecture)
