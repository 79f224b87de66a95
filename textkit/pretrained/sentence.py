"""sentence-transformers directories in and out of textkit's ``models.SentenceEncoder``.

A sentence-transformers directory has ``modules.json``: a list of modules, each with a
``type`` and a ``path`` (a subfolder, or "" for the root). textkit reads the chain
``Transformer -> Pooling -> Dense* -> Normalize?``:

- ``Transformer``: an encoder checkpoint (``config.json``, weights, tokenizer) in its path,
  loaded by ``load_pretrained``'s registry; ``sentence_bert_config.json`` there may set
  ``max_seq_length`` and ``do_lower_case``; otherwise the tokenizer's ``model_max_length``
  (capped at the model's positions) is the limit, as in sentence-transformers.
- ``Pooling`` (``1_Pooling/config.json``): ``pooling_mode`` (a mode or a list), or the older
  ``pooling_mode_cls_token`` / ``_mean_tokens`` / ``_max_tokens`` / ... booleans.
- ``Dense`` (``2_Dense/``: ``config.json`` and ``model.safetensors``): a linear layer with an
  activation (Identity, Tanh, ReLU, GELU, Sigmoid, SiLU).
- ``Normalize``: L2 normalisation, last.

Any other module type (LayerNorm, WordWeights, CNN, LSTM, Router, ...) is an
``UnsupportedArchitectureError`` naming modules.json, the module and its type. ``load`` gives
``Pretrained(kind="sentence_encoder", model, params, tokenizer)`` whose model is a
``SentenceEncoder`` (its config carries ``pooling``, ``dense``, ``normalize``,
``max_seq_length``; the bare encoder's config is ``model.config.encoder``, its params
``params["encoder"]``).
``save_pretrained`` writes sentence-transformers' current layout (the Transformer at the root).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from textkit._io import atomic_dir, write_json_atomic
from textkit.models.encoder import Encoder
from textkit.models.sentence_encoder import SentenceDense, SentenceEncoder, SentenceEncoderConfig
from textkit.pretrained.encoder_tokenizer import EncoderTokenizer
from textkit.pretrained.encoders import write_checkpoint
from textkit.pretrained.errors import MissingFileError, NotCheckpointError, PretrainedError
from textkit.pretrained.errors import UnsupportedArchitectureError as Unsupported
from textkit.pretrained.files import read_tensors, write_tensors_file
from textkit.pretrained.result import Pretrained

__all__ = ["is_sentence_transformers", "load", "save_pretrained", "transformer_path"]

_LEGACY_POOLING = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                   "pooling_mode_mean_tokens": "mean",
                   "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                   "pooling_mode_weightedmean_tokens": "weightedmean",
                   "pooling_mode_lasttoken": "lasttoken"}
"""The older Pooling config's booleans, in the order sentence-transformers concatenates."""
_ACTIVATIONS = {"Identity": "identity", "Tanh": "tanh", "ReLU": "relu", "GELU": "gelu",
                "Sigmoid": "sigmoid", "SiLU": "silu"}
_TYPES = {"Transformer": "sentence_transformers.base.modules.transformer.Transformer",
          "Pooling": "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
          "Dense": "sentence_transformers.base.modules.dense.Dense",
          "Normalize": "sentence_transformers.base.modules.normalize.Normalize"}
"""The module types textkit reads (the last part of the dotted name) and the names it writes."""


def is_sentence_transformers(root: Path) -> bool:
    """Whether ``root`` is a sentence-transformers directory (it has ``modules.json``)."""
    return (root / "modules.json").is_file()


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise MissingFileError(f"{path} is missing (the sentence-transformers layout needs it)")
    try:
        return json.loads(path.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise NotCheckpointError(f"{path}: not valid JSON ({err})") from None


def _modules(root: Path) -> list[tuple[str, Path]]:
    """``(type, directory)`` of each module of ``root / "modules.json"``, in order."""
    listing = _read_json(root / "modules.json")
    if not isinstance(listing, list) or not all(isinstance(m, dict) for m in listing):
        raise NotCheckpointError(f"{root / 'modules.json'}: expected a list of modules")
    modules = []
    for entry in sorted(listing, key=lambda m: int(m.get("idx", 0))):
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1]
        if kind not in _TYPES:
            raise Unsupported(f"{root / 'modules.json'}: module {entry.get('name')!r} has type "
                              f"{entry.get('type')!r}; textkit reads Transformer -> Pooling -> "
                              f"Dense* -> Normalize")
        modules.append((kind, root / str(entry.get("path", ""))))
    kinds = [k for k, _ in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or "Transformer" in kinds[1:] or \
            "Pooling" in kinds[2:] or "Normalize" in kinds[:-1]:
        raise Unsupported(f"{root / 'modules.json'}: modules {kinds}; textkit reads "
                          f"Transformer -> Pooling -> Dense* -> Normalize?")
    return modules


def transformer_path(root: Path) -> Path:
    """The directory of the Transformer module of the sentence-transformers ``root``."""
    return _modules(root)[0][1]


def _pooling(path: Path, width: int) -> tuple[str, ...]:
    config = _read_json(path / "config.json")
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
    else:
        modes = tuple(m for key, m in _LEGACY_POOLING.items() if config.get(key)) or ("mean",)
    dim = config.get("embedding_dimension", config.get("word_embedding_dimension", width))
    if dim != width:
        raise PretrainedError(f"{path / 'config.json'}: embedding dimension {dim}, but the "
                              f"Transformer's hidden size is {width}")
    return modes


def _dense(path: Path, width: int) -> tuple[SentenceDense, dict[str, np.ndarray]]:
    config = _read_json(path / "config.json")
    for key, value in (("use_residual", False), ("module_input_name", "sentence_embedding"),
                       ("module_output_name", "sentence_embedding")):
        if config.get(key, value) not in (value, None):
            raise Unsupported(f"{path / 'config.json'}: {key}={config[key]!r} is not "
                              f"supported (textkit's Dense has {value!r})")
    name = str(config.get("activation_function", "torch.nn.modules.activation.Tanh"))
    activation = _ACTIVATIONS.get(name.rsplit(".", 1)[-1])
    if activation is None:
        raise Unsupported(f"{path / 'config.json'}: activation_function={name!r} is not "
                          f"supported: expected one of {sorted(_ACTIVATIONS)}")
    tensors = read_tensors(path)
    weight = tensors.get("linear.weight")
    if weight is None or weight.shape != (config["out_features"], width):
        raise PretrainedError(f"{path}: expected linear.weight of shape "
                              f"({config['out_features']}, {width}), got "
                              f"{None if weight is None else weight.shape}")
    bias = bool(config.get("bias", True))
    params = {"kernel": np.ascontiguousarray(weight.T, np.float32)}
    if bias:
        params["bias"] = np.asarray(tensors["linear.bias"], np.float32)
    return SentenceDense(int(config["out_features"]), bias, activation), params


def _limits(path: Path, positions: int) -> tuple[int, bool]:
    """``(max_seq_length, do_lower_case)`` of the Transformer module in ``path``."""
    candidates = sorted(path.glob("sentence_*_config.json"))   # sentence_bert_config.json, ...
    config: dict[str, Any] = _read_json(candidates[0]) if candidates else {}
    limit = config.get("max_seq_length")
    if limit is None and (path / "tokenizer_config.json").is_file():
        limit = _read_json(path / "tokenizer_config.json").get("model_max_length")
    limit = positions if limit is None else min(int(limit), positions)
    return limit, bool(config.get("do_lower_case", False))


def _lowercase(tokenizer: EncoderTokenizer) -> None:
    """Lowercase before the tokenizer's own normaliser (``do_lower_case``)."""
    from tokenizers import normalizers

    inner = tokenizer.tokenizer.normalizer
    steps = [normalizers.Lowercase()] + ([inner] if inner is not None else [])
    tokenizer.tokenizer.normalizer = normalizers.Sequence(steps)


def load(root: Path, transformer: Pretrained) -> Pretrained:
    """The sentence-transformers directory ``root`` whose Transformer module was loaded as
    ``transformer``: ``Pretrained("sentence_encoder", SentenceEncoder, params, tokenizer)``."""
    encoder, encoder_params, tokenizer = (transformer.model, transformer.params,
                                          transformer.tokenizer)
    if not isinstance(encoder, Encoder):
        raise Unsupported(f"{root / 'modules.json'}: the Transformer module is a "
                          f"{type(encoder).__name__}, not an encoder")
    modules = _modules(root)
    width = encoder.config.hidden_size
    pooling = _pooling(modules[1][1], width)
    params: dict[str, Any] = {"encoder": encoder_params}
    dense = []
    for kind, path in modules[2:]:
        if kind == "Dense":
            layer, params[f"dense_{len(dense)}"] = _dense(path, width * len(pooling)
                                                          if not dense else dense[-1].features)
            dense.append(layer)
    limit, lower = _limits(modules[0][1], encoder.config.max_positions)
    if lower:
        _lowercase(tokenizer)
    settings = root / "config_sentence_transformers.json"
    prompt = _read_json(settings).get("default_prompt_name") if settings.is_file() else None
    if prompt:
        warnings.warn(f"{settings}: default_prompt_name {prompt!r}: textkit does not prepend "
                      f"prompts; add the prompt to the texts", UserWarning, stacklevel=3)
    config = SentenceEncoderConfig.for_encoder(
        encoder.config, pooling=pooling, dense=tuple(dense),
        normalize=modules[-1][0] == "Normalize", max_seq_length=limit)
    return Pretrained("sentence_encoder", SentenceEncoder(config), params, tokenizer)


def save_pretrained(model: SentenceEncoder, params: Any, tokenizer: EncoderTokenizer,
                    path: str | os.PathLike) -> Path:
    """Write ``model`` as a sentence-transformers directory (replaced atomically): the
    encoder checkpoint at the root, ``1_Pooling``, ``2_Dense``... and ``N_Normalize``."""
    c = model.config
    with atomic_dir(path) as staging:
        write_checkpoint(staging, c.encoder, params["encoder"], tokenizer)
        write_json_atomic(staging / "sentence_bert_config.json",
                          {"max_seq_length": c.length_limit, "do_lower_case": False})
        modules = [("Transformer", "")]
        (staging / "1_Pooling").mkdir()
        write_json_atomic(staging / "1_Pooling" / "config.json",
                          {"embedding_dimension": c.encoder.hidden_size,
                           "pooling_mode": list(c.pooling), "include_prompt": True})
        modules.append(("Pooling", "1_Pooling"))
        names = {v: k for k, v in _ACTIVATIONS.items()}
        width = c.encoder.hidden_size * len(c.pooling)
        for i, layer in enumerate(c.dense):
            folder = staging / f"{len(modules)}_Dense"
            folder.mkdir()
            weights = params[f"dense_{i}"]
            tensors = {"linear.weight": np.ascontiguousarray(
                np.asarray(weights["kernel"], np.float32).T)}
            if layer.bias:
                tensors["linear.bias"] = np.asarray(weights["bias"], np.float32)
            write_tensors_file(folder / "model.safetensors", tensors)
            module = "linear" if layer.activation == "identity" else "activation"
            write_json_atomic(folder / "config.json", {
                "in_features": width, "out_features": layer.features, "bias": layer.bias,
                "activation_function": f"torch.nn.modules.{module}.{names[layer.activation]}"})
            modules.append(("Dense", folder.name))
            width = layer.features
        if c.normalize:
            (staging / f"{len(modules)}_Normalize").mkdir()
            modules.append(("Normalize", f"{len(modules)}_Normalize"))
        write_json_atomic(staging / "modules.json", [
            {"idx": i, "name": str(i), "path": folder, "type": _TYPES[kind]}
            for i, (kind, folder) in enumerate(modules)])
    return Path(path)
