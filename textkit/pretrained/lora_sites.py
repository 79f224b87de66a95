"""The LoRA sites of every checkpoint family, from its weight map, and PEFT's default targets.

``lora_sites(model, params)`` reads a family's weight map (``families.weight_map_of``): every
kernel entry made of transformers ``*.weight`` tensors gives one ``adapters.Site`` per tensor,
named by its module (``model.layers.0.self_attn.k_proj``) and placed on the slice of textkit's
fused kernel that tensor fills (k of ``qkv``, up of ``wi``). Each site's transform is probed
once (an index array through the entry's ``to_textkit``) to find its input axes and whether
transformers stores it [out, in] (``Linear``) or [in, out] (GPT-2's ``Conv1D``: PEFT's
``fan_in_fan_out``); a kernel the probe does not recognise is no site. An embedding table is a
site when the model looks it up (``layers.Embed``) and never reads it as a tied output layer
(one abstract forward pass tells): PEFT's embedding LoRA, whose unmerged output layer stays the
base's.

``DEFAULT_TARGETS`` are PEFT's default target modules per ``model_type`` (peft 0.21.2's
``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``, with entries where it has none:
DistilBERT's ``q_lin`` / ``v_lin``, ModernBERT's fused ``Wqkv``, Marian / mBART / M2M100's
``q_proj`` / ``v_proj``). A task head (``encoders.head_modules``) is trained fully: PEFT's
``modules_to_save``. ``lora_for(model, params, rank=..., targets=...)`` is the ``Lora`` of
such settings on a loaded model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from textkit.adapters import Lora, LoraConfig, Site
from textkit.models.encoder import Encoder
from textkit.models.layers import Embed
from textkit.models.transformer import Transformer
from textkit.pretrained import encoders
from textkit.pretrained.families import model_type_of, weight_map_of
from textkit.pretrained.weights import Entry, at

__all__ = ["DEFAULT_TARGETS", "default_targets", "head_modules", "heads_of", "key_names",
           "lora_for", "lora_sites"]

DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "gpt2": ("c_attn",), "llama": ("q_proj", "v_proj"), "mistral": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"), "qwen3": ("q_proj", "v_proj"), "gemma": ("q_proj", "v_proj"),
    "bert": ("query", "value"), "roberta": ("query", "value"),
    "xlm-roberta": ("query", "value"), "electra": ("query", "value"),
    "deberta-v2": ("query_proj", "value_proj"), "bart": ("q_proj", "v_proj"),
    "t5": ("q", "v"), "mt5": ("q", "v"),
    # not in peft's mapping:
    "distilbert": ("q_lin", "v_lin"), "modernbert": ("Wqkv",), "marian": ("q_proj", "v_proj"),
    "mbart": ("q_proj", "v_proj"), "m2m_100": ("q_proj", "v_proj")}
"""``model_type`` -> PEFT's default LoRA target modules (module docstring)."""


def key_names(entry: Entry) -> list[str]:
    """The transformers tensor names of ``entry`` (the first of each list of alternatives)."""
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
        names = key_names(entry)
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


def heads_of(model: Any, modules: Sequence[str]) -> tuple[str, ...]:
    """textkit's top-level params of the transformers ``modules`` (a module's names, or their
    last parts, as ``modules_to_save`` gives them); modules the model lacks are skipped, as
    PEFT skips them."""
    tops = []
    for entry in weight_map_of(model):
        module = key_names(entry)[0].rsplit(".", 1)[0]
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
    heads = heads_of(model, saved)
    sites = [s for s in lora_sites(model, params) if s.path[0] not in heads]
    return Lora.select(config, sites, heads)
