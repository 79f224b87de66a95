"""Encoder checkpoints (BERT, RoBERTa, XLM-RoBERTa, ELECTRA, DistilBERT) in the Hugging Face
layout in and out of textkit's ``models.encoder.Encoder``.

``load(dir, config)`` (what ``load_pretrained`` calls for these ``model_type``s) reads
``config.json``, the weights (``model.safetensors``, sharded safetensors with their index, or
``pytorch_model.bin`` when torch is installed) and the tokenizer, takes the head from
``architectures`` (``BertForSequenceClassification`` -> ``sequence_classification``, the bare
``BertModel`` -> ``model``, ...) and returns ``PretrainedEncoder(model, params, tokenizer)``.
``save_pretrained(model, params, tokenizer, dir)`` writes the layout back (the tensor names
transformers writes, tied weights once), so that transformers loads it with the same outputs;
load -> save -> load is exact. Class names (``id2label``, when not transformers' ``LABEL_<i>``)
load into ``EncoderConfig.labels``; ``save_pretrained(..., labels=[...])`` or the config's
labels are written back as ``id2label`` / ``label2id``.

Weights map one to one (torch ``Linear`` [out, in] -> kernel [in, out]); per layer, BERT's
``attention.self.{query,key,value}`` (DistilBERT's ``attention.{q,k,v}_lin``) -> the fused
``self_attention.qkv`` [D, 3, H, Dh], ``attention.output.dense`` (``out_lin``) ->
``self_attention.out`` [H, Dh, D], ``attention.output.LayerNorm`` (``sa_layer_norm``) ->
``self_norm``, ``intermediate.dense`` / ``output.dense`` (``ffn.lin1`` / ``lin2``) ->
``feed_forward.wi`` / ``wo``, ``output.LayerNorm`` (``output_layer_norm``) -> ``ff_norm``.
Options textkit does not implement are ``UnsupportedArchitectureError``s naming the config key
and value (e.g. ``position_embedding_type``, ``sinusoidal_pos_embds``, untied decoders).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from textkit._io import atomic_dir, write_json_atomic
from textkit.models.encoder import Encoder, EncoderConfig
from textkit.models.layers import ACTIVATIONS
from textkit.models.sentence_encoder import SentenceEncoder
from textkit.pretrained.encoder_tokenizer import EncoderTokenizer
from textkit.pretrained.errors import PretrainedError, VocabSizeMismatchError
from textkit.pretrained.files import read_tensors, unsupported
from textkit.pretrained.weights import (
    SAME,
    at,
    heads_bias,
    linear,
    out_proj,
    put,
    to_textkit,
    to_torch,
)

__all__ = ["MODEL_TYPES", "PretrainedEncoder", "encoder_config", "hf_config", "load",
           "params_from_tensors", "save_pretrained", "tensors_from_params", "weight_map",
           "write_checkpoint"]

MODEL_TYPES = {"bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta",
               "electra": "Electra", "distilbert": "DistilBert"}
"""config.json ``model_type`` -> transformers' class prefix."""
HEAD_SUFFIXES = {"Model": "model", "ForMaskedLM": "masked_lm", "ForPreTraining": "pretraining",
                 "ForSequenceClassification": "sequence_classification",
                 "ForTokenClassification": "token_classification",
                 "ForQuestionAnswering": "question_answering"}
_BASE = {"bert": "bert", "roberta": "roberta", "xlm-roberta": "roberta", "electra": "electra",
         "distilbert": "distilbert"}
"""Attribute holding the bare model inside transformers' head classes (the key prefix)."""


class PretrainedEncoder(NamedTuple):
    """What ``load_pretrained`` returns for an encoder checkpoint (model: an ``Encoder``) or a
    sentence-transformers directory (model: a ``SentenceEncoder``, ``pretrained.sentence``)."""

    model: Encoder | SentenceEncoder
    params: Any
    tokenizer: EncoderTokenizer


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
    names the first option textkit does not implement); ``overrides`` replace fields."""
    root = Path(root)
    model_type = hf["model_type"]
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
    labels = _labels(hf, root)
    num_labels = len(labels) if labels else int(get("num_labels", 2))
    if labels == tuple(f"LABEL_{i}" for i in range(num_labels)):
        labels = None                                # transformers' names for unnamed classes
    if labels and "labels" not in overrides and overrides.get("num_labels", num_labels) \
            != num_labels:
        labels = None                                # a new head: the names no longer apply
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
        if model_type == "electra" and get("embedding_size") is not None:
            options["embedding_size"] = int(hf["embedding_size"])
    if options["hidden_size"] % options["num_heads"]:
        raise unsupported(root, "num_attention_heads", options["num_heads"],
                          f"hidden size {options['hidden_size']} is not divisible by it")
    options.update(architecture=model_type, head=head, activation=activation,
                   num_labels=num_labels, labels=labels, pad_id=int(get("pad_token_id") or 0),
                   max_position_embeddings=int(get("max_position_embeddings", 512)))
    options.update(overrides)
    if overrides.get("labels") is not None and "num_labels" not in overrides:
        options["num_labels"] = len(overrides["labels"])
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
                "discriminator_prediction", "classifier_dense", "classifier", "qa_outputs"}
"""Top-level params of the heads (and pooler): what a new head initialises at random."""


# ----------------------------------------------------------------------------------- weights








def _dense(tk: tuple[str, ...], hf: str) -> Iterator[tuple]:
    yield (*tk, "kernel"), [f"{hf}.weight"], linear()
    yield (*tk, "bias"), [f"{hf}.bias"], SAME


def _norm(tk: tuple[str, ...], hf: str) -> Iterator[tuple]:
    yield (*tk, "norm", "scale"), [f"{hf}.weight"], SAME
    yield (*tk, "norm", "bias"), [f"{hf}.bias"], SAME


def _layer(config: EncoderConfig, i: int, base: str) -> Iterator[tuple]:
    heads, tk = config.num_heads, f"layer_{i}"
    if config.architecture == "distilbert":
        hf = f"{base}transformer.layer.{i}"
        qkv = [f"{hf}.attention.{n}_lin" for n in "qkv"]
        out, sa_norm = f"{hf}.attention.out_lin", f"{hf}.sa_layer_norm"
        wi, wo, ff_norm = f"{hf}.ffn.lin1", f"{hf}.ffn.lin2", f"{hf}.output_layer_norm"
    else:
        hf = f"{base}encoder.layer.{i}"
        qkv = [f"{hf}.attention.self.{n}" for n in ("query", "key", "value")]
        out, sa_norm = f"{hf}.attention.output.dense", f"{hf}.attention.output.LayerNorm"
        wi, wo, ff_norm = (f"{hf}.intermediate.dense", f"{hf}.output.dense",
                           f"{hf}.output.LayerNorm")
    yield (tk, "self_attention", "qkv", "kernel"), [f"{k}.weight" for k in qkv], linear(heads)
    yield (tk, "self_attention", "qkv", "bias"), [f"{k}.bias" for k in qkv], heads_bias(heads)
    yield (tk, "self_attention", "out", "kernel"), [f"{out}.weight"], out_proj(heads)
    yield (tk, "self_attention", "out", "bias"), [f"{out}.bias"], SAME
    yield from _norm((tk, "self_norm"), sa_norm)
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
    entries = [(("word_embeddings", "embedding"), [f"{emb}.word_embeddings.weight"], SAME),
               (("position_embeddings", "embedding"), [f"{emb}.position_embeddings.weight"],
                SAME)]
    if config.type_vocab_size:
        entries.append((("token_type_embeddings", "embedding"),
                        [f"{emb}.token_type_embeddings.weight"], SAME))
    entries += _norm(("embeddings_norm",), f"{emb}.LayerNorm")
    if config.embedding_size is not None:
        entries += _dense(("embeddings_project",), f"{base}embeddings_project")
    for i in range(config.num_layers):
        entries += _layer(config, i, base)
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
        else:
            entries += _dense(("classifier_dense",), "classifier.dense")
            entries += _dense(("classifier",), "classifier.out_proj")
    elif head == "token_classification":
        entries += _dense(("classifier",), "classifier")
    elif head == "question_answering":
        entries += _dense(("qa_outputs",), "qa_outputs")
    return entries


_TIED_DECODER = {"bert": ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias"),
                 "roberta": ("lm_head.decoder.weight", "lm_head.decoder.bias"),
                 "xlm-roberta": ("lm_head.decoder.weight", "lm_head.decoder.bias"),
                 "electra": ("generator_lm_head.weight", None),
                 "distilbert": ("vocab_projector.weight", None)}


def _alternatives(key: str, config: EncoderConfig) -> list[str]:
    """Names a tensor may have in other checkpoints: with or without the base prefix (a bare
    model saved from a head class, or the reverse), LayerNorm ``gamma`` / ``beta`` of older
    files, the decoder's own bias name."""
    base = f"{_BASE[config.architecture]}."
    names = [key, key[len(base):] if key.startswith(base) else base + key]
    old = {".LayerNorm.weight": ".LayerNorm.gamma", ".LayerNorm.bias": ".LayerNorm.beta"}
    names += [n[:-len(a)] + b for n in list(names) for a, b in old.items() if n.endswith(a)]
    if config.head == "masked_lm" and _TIED_DECODER[config.architecture][1]:
        if key.endswith(("predictions.bias", "lm_head.bias")):
            names.append(_TIED_DECODER[config.architecture][1])
    return names


def _pick(tensors: Mapping[str, np.ndarray], key: str, config: EncoderConfig,
          root: Path) -> np.ndarray:
    for name in _alternatives(key, config):
        if name in tensors:
            return np.asarray(tensors[name])
    raise PretrainedError(f"{root}: the weights have no {key} (config.json says "
                          f"{config.architecture} with head {config.head}; a damaged file, or "
                          f"a checkpoint of another architecture?)")



def params_from_tensors(tensors: Mapping[str, np.ndarray], config: EncoderConfig,
                        expected: Any, root: Path, fallback: Any = None) -> dict[str, Any]:
    """textkit params (numpy, ``expected``'s dtypes) from transformers' tensors, each
    shape-checked against ``expected`` (a ``jax.eval_shape`` of the params). With
    ``fallback`` (params of a fresh init), head weights the tensors lack, or hold with another
    number of labels, are taken from it."""
    params: dict[str, Any] = {}
    for path, keys, transform in weight_map(config):
        if fallback is not None and path[0] in _HEAD_PARAMS and not all(
                any(n in tensors for n in _alternatives(k, config)) for k in keys):
            put(params, path, np.array(at(fallback, path)))
            continue
        arrays = [_pick(tensors, key, config, root) for key in keys]
        value, want = to_textkit(arrays, transform, path), at(expected, path)
        if fallback is not None and path[0] in _HEAD_PARAMS and (
                tuple(value.shape) != tuple(want.shape)):     # a head with other labels
            put(params, path, np.array(at(fallback, path)))
            continue
        if tuple(value.shape) != tuple(want.shape):
            kind = VocabSizeMismatchError if path[0] in ("word_embeddings", "mlm_bias") \
                else PretrainedError
            raise kind(f"{root}: {keys[0]} has shape {arrays[0].shape}, which gives "
                       f"{value.shape} for {'/'.join(path)}; config.json implies "
                       f"{tuple(want.shape)}")
        put(params, path, np.ascontiguousarray(value, dtype=np.dtype(want.dtype)))
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
    tensors: dict[str, np.ndarray] = {}
    for path, keys, transform in weight_map(config):
        tensors.update(zip(keys, to_torch(at(params, path), len(keys), transform, path)))
    return tensors


# -------------------------------------------------------------------------------- load/save
def load(root: Path, hf: Mapping[str, Any], **overrides: Any) -> PretrainedEncoder:
    """Load the encoder checkpoint directory ``root`` whose ``config.json`` is ``hf``:
    ``PretrainedEncoder(model, params, tokenizer)``, params float32 numpy arrays in the
    ``Encoder``'s tree. ``overrides`` replace config fields (``policy="mixed_bfloat16"``,
    ``dropout``, ``gradient_checkpointing=True``; ``head`` / ``num_labels`` for fine-tuning,
    whose new head weights are then initialised at random, with a warning)."""
    import jax
    import jax.numpy as jnp

    config = encoder_config(hf, root, **overrides)
    checkpoint_head = head_of(hf, root)
    tokenizer = EncoderTokenizer.from_directory(root, hf["model_type"])
    if len(tokenizer) > config.vocab_size:
        raise VocabSizeMismatchError(f"{root}: the tokenizer has {len(tokenizer)} ids but the "
                                     f"model {config.vocab_size} embeddings (vocab_size in "
                                     f"config.json)")
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
    expected = jax.eval_shape(lambda key: model.init(key, dummy)["params"],
                              jax.random.PRNGKey(0))
    params = params_from_tensors(tensors, config, expected, root, fallback)
    return PretrainedEncoder(model, params, tokenizer)


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
    from safetensors.numpy import save_file

    if not isinstance(tokenizer, EncoderTokenizer):
        raise TypeError(f"save_pretrained writes an EncoderTokenizer (from load_pretrained); "
                        f"got {type(tokenizer).__name__}")
    if len(tokenizer) > config.vocab_size:
        raise VocabSizeMismatchError(f"the tokenizer has {len(tokenizer)} ids but the model "
                                     f"{config.vocab_size} embeddings")
    save_file(tensors_from_params(params, config), str(directory / "model.safetensors"),
              metadata={"format": "pt"})
    write_json_atomic(directory / "config.json", hf_config(config))
    tokenizer.save(directory, config.architecture)
