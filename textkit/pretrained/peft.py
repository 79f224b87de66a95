"""PEFT's LoRA adapter files, out and in (the sites they name: ``pretrained.lora_sites``).

``save_adapter`` writes ``adapter_config.json`` and ``adapter_model.safetensors``
with PEFT's key names (``base_model.model.<module>.lora_A.weight`` [r, in], ``lora_B.weight``
[out, r]; an embedding's ``lora_embedding_A`` [r, V] and ``lora_embedding_B`` [D, r]; a
saved module's tensors under ``base_model.model.<its names>``), which
``peft.PeftModel.from_pretrained`` loads over the same base checkpoint. ``load_adapter`` reads
such a directory (written by peft or by textkit) for a loaded base model: a ``peft_type`` other
than LORA, DoRA, LoRA on biases, per-module ranks, or an adapter whose tensors do not fit the
base (shapes named) is a ``PretrainedError``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from textkit._io import atomic_dir, write_json_atomic
from textkit.adapters import Lora, LoraConfig, Site, nested, unnested
from textkit.adapters.lora import Adapter, matches
from textkit.models.decoder_lm import DecoderLM
from textkit.models.encoder import Encoder
from textkit.pretrained.errors import MissingFileError, PretrainedError
from textkit.pretrained.families import weight_map_of
from textkit.pretrained.files import read_json_object, write_tensors_file
from textkit.pretrained.lora_sites import heads_of, key_names, lora_sites
from textkit.pretrained.weights import Entry, read_params, write_tensors

__all__ = ["CONFIG_FILE", "PEFT_VERSION", "WEIGHTS_FILE", "load_adapter", "save_adapter"]

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PEFT_VERSION = "0.21.2"
"""The peft release whose format this module follows (and ``lora_sites``' default targets)."""
PREFIX = "base_model.model."

_TASK_TYPES = {"sequence_classification": "SEQ_CLS", "token_classification": "TOKEN_CLS",
               "question_answering": "QUESTION_ANS"}


# -------------------------------------------------------------------------------- sites
# -------------------------------------------------------------------------------- out
def _task_type(model: Any) -> str | None:
    if isinstance(model, DecoderLM):
        return "CAUSAL_LM"
    if isinstance(model, Encoder):
        return _TASK_TYPES.get(model.config.head, "FEATURE_EXTRACTION")
    return "SEQ_2_SEQ_LM"


def _head_entries(model: Any, heads: Sequence[str]) -> list[Entry]:
    return [e for e in weight_map_of(model) if e.path[0] in heads]


def save_adapter(model: Any, adapter: Adapter, params: Any, path: str | os.PathLike, *,
                 base_model: str | None = None) -> Path:
    """Write ``adapter`` (its weights; the heads it trains taken from ``params``) as a PEFT
    adapter directory (module docstring; replaced atomically); ``base_model``: the
    ``base_model_name_or_path`` recorded. Returns the directory."""
    lora, config = adapter.lora, adapter.lora.config
    tensors = {f"{PREFIX}{name}{'' if '_embedding_' in name else '.weight'}":
               np.ascontiguousarray(np.asarray(value, np.float32))
               for name, value in unnested(adapter.weights).items()}
    heads = write_tensors(_head_entries(model, lora.heads), params)
    tensors.update({f"{PREFIX}{name}": value for name, value in heads.items()})
    settings = {
        "peft_type": "LORA", "task_type": _task_type(model), "peft_version": PEFT_VERSION,
        "base_model_name_or_path": base_model, "r": config.rank, "lora_alpha": config.alpha,
        "lora_dropout": config.dropout, "use_rslora": config.rslora,
        "target_modules": list(config.targets),
        "modules_to_save": list(config.modules_to_save) or None,
        "fan_in_fan_out": any(s.fan_in_fan_out for s in lora.sites), "bias": "none",
        "use_dora": False, "init_lora_weights": True, "inference_mode": True,
        "rank_pattern": {}, "alpha_pattern": {}, "layers_to_transform": None}
    with atomic_dir(path) as staging:
        write_tensors_file(staging / WEIGHTS_FILE, tensors)
        write_json_atomic(staging / CONFIG_FILE, settings)
    return Path(path)


# -------------------------------------------------------------------------------- in
def _read_tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    if not path.is_file():
        raise MissingFileError(f"{path.parent} has no {path.name}: not a PEFT adapter directory "
                               f"(it holds {CONFIG_FILE} and {WEIGHTS_FILE})")
    try:
        return load_file(str(path))
    except Exception as err:  # safetensors raises its own SafetensorError and OSError
        raise PretrainedError(f"{path}: unreadable safetensors file ({err})") from None


def _settings(root: Path) -> dict[str, Any]:
    """``adapter_config.json``, checked for what textkit implements."""
    where = root / CONFIG_FILE
    if not where.is_file():
        raise MissingFileError(f"{root} has no {CONFIG_FILE}: not a PEFT adapter directory")
    settings = read_json_object(where)
    kind = settings.get("peft_type")
    if kind != "LORA":
        raise PretrainedError(f"{where}: peft_type {kind!r}; textkit reads LORA adapters only")
    refused = {"use_dora": (False, None), "bias": ("none", None),
               "rank_pattern": ({}, None), "alpha_pattern": ({}, None),
               "layers_to_transform": (None,), "layers_pattern": (None, []),
               "target_parameters": (None, []), "use_qalora": (False, None),
               "exclude_modules": (None, []),
               "lora_bias": (False, None)}
    for key, allowed in refused.items():
        if settings.get(key) not in allowed:
            raise PretrainedError(f"{where}: {key} {settings[key]!r} is not implemented by "
                                  f"textkit (expected {allowed[0]!r}; DoRA and per-module "
                                  f"ranks are out of scope)")
    for key, kind_ in (("r", int), ("lora_alpha", (int, float))):
        if not isinstance(settings.get(key), kind_) or isinstance(settings.get(key), bool):
            raise PretrainedError(f"{where}: {key} must be a number, got "
                                  f"{settings.get(key)!r}")
    return settings


def _targets(settings: Mapping[str, Any], sites: Sequence[Site], where: Path) -> tuple[str, ...]:
    """The target list of ``target_modules``: a list keeps the names that match a module (as
    peft does; none matching is refused by ``Lora.select``); a string is PEFT's regular
    expression over the full module names ("all-linear": every site but the output layer)."""
    targets = settings.get("target_modules")
    if isinstance(targets, list) and targets and all(isinstance(t, str) for t in targets):
        found = tuple(t for t in targets if any(matches(s.name, t) for s in sites))
        return found or tuple(targets)
    if targets == "all-linear":
        return tuple(s.name for s in sites if s.path[0] not in ("lm_head", "output"))
    if isinstance(targets, str):
        found = tuple(s.name for s in sites if re.fullmatch(targets, s.name))
        if found:
            return found
        raise PretrainedError(f"{where}: target_modules {targets!r} matches no module of the "
                              f"base model (e.g. {sites[0].name if sites else '-'})")
    raise PretrainedError(f"{where}: target_modules must be a list of module names or a "
                          f"regular expression, got {targets!r}")


def load_adapter(path: str | os.PathLike, model: Any, params: Any) -> tuple[Adapter, Any]:
    """The PEFT adapter directory ``path`` (module docstring) for the base ``model`` /
    ``params`` (a ``load_pretrained`` result's): ``(adapter, params)``, the params with the
    adapter's saved modules (its task head) in place of the base's, as float32 numpy."""
    root = Path(path)
    settings = _settings(root)
    tensors = _read_tensors(root / WEIGHTS_FILE)
    saved = settings.get("modules_to_save") or ()
    heads = heads_of(model, saved)
    sites = [s for s in lora_sites(model, params) if s.path[0] not in heads]
    try:
        config = LoraConfig(rank=settings["r"], alpha=float(settings["lora_alpha"]),
                            dropout=float(settings.get("lora_dropout") or 0.0),
                            rslora=bool(settings.get("use_rslora", False)),
                            targets=_targets(settings, sites, root / CONFIG_FILE),
                            modules_to_save=tuple(saved))
        lora = Lora.select(config, sites, heads)
    except ValueError as err:
        raise PretrainedError(f"{root}: {err} (an adapter of another base model?)") from None
    weights, expected = {}, set()
    for site in lora.sites:
        a, b = site.parts
        for part, shape in ((a, (config.rank, site.in_features)),
                            (b, (site.out_features, config.rank))):
            key = f"{PREFIX}{site.name}.{part}{'' if site.embedding else '.weight'}"
            expected.add(key)
            if key not in tensors:
                raise PretrainedError(f"{root / WEIGHTS_FILE}: no {key} (the config targets "
                                      f"{site.name})")
            if tuple(tensors[key].shape) != shape:
                raise PretrainedError(f"{root / WEIGHTS_FILE}: {key} has shape "
                                      f"{tuple(tensors[key].shape)} but the base model's "
                                      f"{site.name} needs {shape} (r={config.rank}, "
                                      f"{site.in_features} in, {site.out_features} out): an "
                                      f"adapter of another base model")
            weights[f"{site.name}.{part}"] = np.asarray(tensors[key], np.float32)
    stray = sorted(k for k in tensors if ".lora_" in k and k not in expected)
    if stray:
        raise PretrainedError(f"{root / WEIGHTS_FILE}: {stray[0]} (and {len(stray) - 1} more) "
                              f"adapt modules the base model does not have, or that "
                              f"target_modules does not name")
    _check_base_copies(model, params, tensors, root)
    params = _with_heads(model, params, heads, tensors, root)
    return Adapter(lora, nested(weights)), params


def _check_base_copies(model: Any, params: Any, tensors: Mapping[str, np.ndarray],
                       root: Path) -> None:
    """peft saves the base weights of an adapted output layer or embedding beside the adapter
    (``<module>.base_layer.weight``, its ``save_embedding_layers``); textkit uses the base
    checkpoint's, so a copy that differs from them (resized embeddings) is refused."""
    copies = {k[len(PREFIX):-len(".base_layer.weight")]: v for k, v in tensors.items()
              if k.endswith(".base_layer.weight")}
    if not copies:
        return
    entries = [e for e in weight_map_of(model)
               if key_names(e)[0][:-len(".weight")] in copies]
    base = write_tensors(entries, params)
    for module, value in copies.items():
        want = base.get(f"{module}.weight")
        if want is None or want.shape != value.shape or not np.allclose(want, value, rtol=0,
                                                                         atol=1e-6):
            raise PretrainedError(f"{root / WEIGHTS_FILE}: {module}.base_layer.weight "
                                  f"{'differs from' if want is not None else 'is not in'} "
                                  f"the base checkpoint's {module}.weight (resized "
                                  f"embeddings?); textkit adapts the base's own weights")


def _with_heads(model: Any, params: Any, heads: Sequence[str],
                tensors: Mapping[str, np.ndarray], root: Path) -> Any:
    """``params`` with the leaves of ``heads`` read from the adapter's saved modules."""
    if not heads:
        return params
    entries = _head_entries(model, heads)

    def pick(key: Any) -> np.ndarray | None:
        names = key if isinstance(key, list) else [key]
        return next((tensors[f"{PREFIX}{n}"] for n in names if f"{PREFIX}{n}" in tensors),
                    None)

    expected = {top: params[top] for top in heads}
    read = read_params(entries, pick, expected, root=root / WEIGHTS_FILE,
                       says="modules_to_save names these modules")
    return {**params, **read}
