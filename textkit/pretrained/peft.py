"""PEFT's LoRA adapters, out and in, and the LoRA sites of every checkpoint family.

**Sites.** ``lora_sites(model, params)`` reads a family's weight map (``families.weight_map_of``):
every kernel entry made of transformers ``*.weight`` tensors gives one ``adapters.Site`` per
tensor, named by its module (``model.layers.0.self_attn.k_proj``) and placed on the slice of
textkit's fused kernel that tensor fills (k of ``qkv``, up of ``wi``). Each site's transform
is probed once (an index array through the entry's ``to_textkit``) to find its input axes and
whether transformers stores it [out, in] (``Linear``) or [in, out] (GPT-2's ``Conv1D``: PEFT's
``fan_in_fan_out``); a kernel the probe does not recognise is no site. An embedding table is a
site when the model looks it up (``layers.Embed``) and never reads it as a tied output layer
(one abstract forward pass tells): PEFT's embedding LoRA, whose unmerged output layer stays the
base's. ``DEFAULT_TARGETS`` are
PEFT's default target modules per ``model_type`` (peft 0.21.2's
``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``, with entries where it has none:
DistilBERT's ``q_lin`` / ``v_lin``, ModernBERT's fused ``Wqkv``, Marian / mBART / M2M100's
``q_proj`` / ``v_proj``). A task head (``encoders.head_modules``) is trained fully and saved
whole: PEFT's ``modules_to_save``.

**Files.** ``save_adapter`` writes ``adapter_config.json`` and ``adapter_model.safetensors``
with PEFT's key names (``base_model.model.<module>.lora_A.weight`` [r, in], ``lora_B.weight``
[out, r]; an embedding's ``lora_embedding_A`` [r, V] and ``lora_embedding_B`` [D, r]; a
saved module's tensors under ``base_model.model.<its names>``), which
``peft.PeftModel.from_pretrained`` loads over the same base checkpoint. ``load_adapter`` reads
such a directory (written by peft or by textkit) for a loaded base model: a ``peft_type`` other
than LORA, DoRA, LoRA on biases, per-module ranks, or an adapter whose tensors do not fit the
base (shapes named) is a ``PretrainedError``.
"""

from __future__ import annotations

import math
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
from textkit.models.layers import Embed
from textkit.models.transformer import Transformer
from textkit.pretrained import encoders
from textkit.pretrained.errors import MissingFileError, PretrainedError
from textkit.pretrained.families import model_type_of, weight_map_of
from textkit.pretrained.files import read_json_object, write_tensors_file
from textkit.pretrained.weights import Entry, at, read_params, write_tensors

__all__ = ["CONFIG_FILE", "DEFAULT_TARGETS", "PEFT_VERSION", "WEIGHTS_FILE", "default_targets",
           "head_modules", "load_adapter", "lora_for", "lora_sites", "save_adapter"]

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PEFT_VERSION = "0.21.2"
"""The peft release whose format and default targets this module follows."""
PREFIX = "base_model.model."

DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "gpt2": ("c_attn",), "llama": ("q_proj", "v_proj"), "mistral": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"), "qwen3": ("q_proj", "v_proj"), "gemma": ("q_proj", "v_proj"),
    "bert": ("query", "value"), "roberta": ("query", "value"),
    "xlm-roberta": ("query", "value"), "electra": ("query", "value"),
    "deberta-v2": ("query_proj", "value_proj"), "bart": ("q_proj", "v_proj"),
    # not in peft's mapping:
    "distilbert": ("q_lin", "v_lin"), "modernbert": ("Wqkv",), "marian": ("q_proj", "v_proj"),
    "mbart": ("q_proj", "v_proj"), "m2m_100": ("q_proj", "v_proj")}
"""``model_type`` -> PEFT's default LoRA target modules (module docstring)."""

_TASK_TYPES = {"sequence_classification": "SEQ_CLS", "token_classification": "TOKEN_CLS",
               "question_answering": "QUESTION_ANS"}


# -------------------------------------------------------------------------------- sites
def _key_names(entry: Entry) -> list[str]:
    return [k[0] if isinstance(k, list) else k for k in entry.keys]


def _site(name: str, entry: Entry, piece: tuple[int, ...],
          slot: int | tuple[int, int] | None) -> Site | None:
    """The site of one transformers weight (``name`` its module) filling ``piece`` of
    ``entry``'s leaf at ``slot``; None when the transform is not a transposed (or, for
    ``Conv1D``, plain) reshape of a 2-D weight."""
    torch_shape = entry.transform[1](np.zeros(piece, np.int8)).shape
    if len(torch_shape) != 2:
        return None
    size = math.prod(torch_shape)
    probe = np.arange(size, dtype=np.int32 if size < 2 ** 31 else np.int64).reshape(torch_shape)
    mapped = entry.transform[0](probe)
    if tuple(mapped.shape) != tuple(piece):
        return None
    for fan_in_fan_out, matrix in ((False, probe.T), (True, probe)):
        inputs = matrix.shape[0]
        contract = next((k for k in range(1, len(piece))
                         if math.prod(piece[:k]) == inputs), None)
        if contract is None or (slot is not None and contract != 1):
            continue
        if np.array_equal(mapped.reshape(inputs, -1), matrix):
            return Site(name, entry.path, tuple(piece), contract, slot, fan_in_fan_out)
    return None


def _looked_up(model: Any, params: Any) -> set[tuple[str, ...]]:
    """Paths of the ``Embed`` modules ``model`` looks ids up in and never attends with (one
    abstract forward pass)."""
    import flax.linen as nn
    import jax

    called: dict[str, set[tuple[str, ...]]] = {"__call__": set(), "attend": set()}

    def record(next_fun: Any, args: tuple, kwargs: dict, context: Any) -> Any:
        if isinstance(context.module, Embed):
            kind = "attend" if context.method_name.startswith("attend") else context.method_name
            called.setdefault(kind, set()).add(tuple(context.module.path))
        return next_fun(*args, **kwargs)

    ids = np.zeros((1, 8), np.int32)
    inputs = (ids, ids) if isinstance(model, Transformer) else (ids,)
    with nn.intercept_methods(record):
        jax.eval_shape(lambda p: model.apply({"params": p}, *inputs), params)
    return called["__call__"] - called["attend"]


def lora_sites(model: Any, params: Any) -> list[Site]:
    """Every linear map and embedding table of ``model`` (a loaded checkpoint's
    ``DecoderLM``, ``Encoder`` or ``Transformer``) LoRA can adapt, in weight-map order (module
    docstring); ``params`` gives the kernels' shapes."""
    sites = []
    tables = _looked_up(model, params)
    for entry in weight_map_of(model):
        names = _key_names(entry)
        if entry.path[-1] == "embedding" and entry.path[:-1] in tables and len(names) == 1:
            shape = tuple(np.shape(at(params, entry.path)))
            sites.append(Site(names[0][:-len(".weight")], entry.path, shape, 1, None,
                              embedding=True))
            continue
        if entry.path[-1] != "kernel" or not all(n.endswith(".weight") for n in names):
            continue
        shape = tuple(np.shape(at(params, entry.path)))
        if len(names) == 1:
            pieces = [(shape, None)]
        elif entry.parts:
            starts = np.cumsum((0, *entry.parts))
            pieces = [((shape[0], size, *shape[2:]), (int(start), size))
                      for start, size in zip(starts, entry.parts)]
        else:
            pieces = [((shape[0], *shape[2:]), i) for i in range(len(names))]
        for name, (piece, slot) in zip(names, pieces):
            site = _site(name[:-len(".weight")], entry, piece, slot)
            if site is not None:
                sites.append(site)
    return sites


def head_modules(model: Any) -> tuple[str, ...]:
    """transformers' module names of ``model``'s task head (PEFT's ``modules_to_save``; ()
    for the language models)."""
    return encoders.head_modules(model.config) if isinstance(model, Encoder) else ()


def default_targets(model: Any) -> tuple[str, ...]:
    """PEFT's default target modules of ``model``'s family (``DEFAULT_TARGETS``)."""
    return DEFAULT_TARGETS[model_type_of(model)]


def _heads_of(model: Any, modules: Sequence[str]) -> tuple[str, ...]:
    """textkit's top-level params of the transformers ``modules`` (a module's names, or their
    last parts, as ``modules_to_save`` gives them); modules the model lacks are skipped, as
    PEFT skips them."""
    tops = []
    for entry in weight_map_of(model):
        module = _key_names(entry)[0].rsplit(".", 1)[0]
        if any(module == m or module.startswith(f"{m}.") or f".{m}." in f".{module}."
               for m in modules):
            tops.append(entry.path[0])
    return tuple(dict.fromkeys(tops))


def lora_for(model: Any, params: Any, *, rank: int = 8, alpha: float = 8.0,
             dropout: float = 0.0, rslora: bool = False,
             targets: Sequence[str] | None = None,
             modules_to_save: Sequence[str] | None = None) -> Lora:
    """The ``Lora`` of these settings on ``model`` (``targets`` None: ``default_targets``;
    ``modules_to_save`` None: the task head, ``head_modules``). A target matching no module
    (the model's module names listed) or a rank above a target's smaller dimension is a
    ``ValueError``."""
    saved = tuple(head_modules(model) if modules_to_save is None else modules_to_save)
    config = LoraConfig(rank=rank, alpha=alpha, dropout=dropout, rslora=rslora,
                        targets=tuple(targets or default_targets(model)),
                        modules_to_save=saved)
    heads = _heads_of(model, saved)
    sites = [s for s in lora_sites(model, params) if s.path[0] not in heads]
    return Lora.select(config, sites, heads)


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
    heads = _heads_of(model, saved)
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
               if _key_names(e)[0][:-len(".weight")] in copies]
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
