"""LoRA on a params pytree: ``W' = W + scale * B A`` on a slice of a textkit kernel.

A ``Site`` is one adaptable linear map as transformers names it (``q_proj`` of layer 3) and
where it lives in textkit's params: a leaf (a fused ``qkv`` kernel [D, H + 2 KVH, Dh], a
gate/up ``wi`` [D, 2, I], an ``out`` [H, Dh, D]) and the slot of that leaf's first feature
axis it fills. Sites are made from each family's weight map (``pretrained.lora_sites``); here
they are data. Every site's piece, flattened to [in, out], is ``W.T`` of transformers'
``Linear`` weight W [out, in] (``W`` itself for GPT-2's ``Conv1D``, PEFT's ``fan_in_fan_out``),
so the update of a site is ``scale * A.T @ B.T`` [in, out] reshaped to the piece. An
embedding table [V, D] is a site too (``embedding``: PEFT's ``lora_embedding_A`` [r, V] and
``lora_embedding_B`` [D, r], the update ``scale * (B A).T``: the same product, V in, D out).

Adapter weights are a pytree nested by the module name (``{"model": {"layers": {"0":
{"self_attn": {"q_proj": {"lora_A": [r, in], "lora_B": [out, r]}}}}}}``, float32), PEFT's
layout, initialised as PEFT does: A ~ U(-1/sqrt(in), 1/sqrt(in)) (Kaiming-uniform with
a = sqrt(5)), B = 0 (an embedding's A = 0, B ~ N(0, 1)), so a new adapter leaves the model's
outputs exactly as they were.

``Lora.merge(params, weights)`` adds every site's update to its kernel (what evaluation,
generation and merged exports use); ``unmerge`` subtracts it. Training runs the adapters on
the activations instead (``textkit.adapters.xpath``), where dropout applies to A's input.
Several adapters share one base: ``merge`` is a pure function of (params, weights), so the
same compiled program serves any adapter of the same ranks.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["Adapter", "Lora", "LoraConfig", "Site", "matches", "nested", "unnested"]

PyTree = Any


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """PEFT's LoRA settings: ``rank`` r, ``alpha`` (scale ``alpha / r``, or ``alpha /
    sqrt(r)`` with ``rslora``), ``dropout`` on A's input while training, ``targets``: module
    names or their last parts as transformers names them (``q_proj``, ``query``,
    ``c_attn``); ``modules_to_save``: modules trained fully and saved whole (a task's head)."""

    rank: int = 8
    alpha: float = 8.0
    dropout: float = 0.0
    rslora: bool = False
    targets: tuple[str, ...] = ()
    modules_to_save: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {self.rank}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if not self.targets:
            raise ValueError("LoRA needs at least one target module")

    @property
    def scale(self) -> float:
        """The factor of ``B A``: ``alpha / r`` (``alpha / sqrt(r)`` with rsLoRA)."""
        return self.alpha / (math.sqrt(self.rank) if self.rslora else self.rank)


class Site(NamedTuple):
    """One linear map LoRA can adapt. ``name``: transformers' module name; ``path``: the
    textkit kernel leaf; ``piece``: the shape [*in_dims, *out_dims] of its part of the leaf
    (``contract`` input axes); ``slot``: where the piece sits on the leaf's first feature axis
    (None: the whole leaf; an int: one index of a stack; (start, size): a range of a
    concatenation); ``fan_in_fan_out``: transformers stores the weight [in, out] (GPT-2's
    ``Conv1D``); ``embedding``: an embedding table [V, D] (``layers.Embed``'s)."""

    name: str
    path: tuple[str, ...]
    piece: tuple[int, ...]
    contract: int
    slot: int | tuple[int, int] | None
    fan_in_fan_out: bool = False
    embedding: bool = False

    @property
    def parts(self) -> tuple[str, str]:
        """The names of its A and B under its module (PEFT's)."""
        return ("lora_embedding_A", "lora_embedding_B") if self.embedding else \
            ("lora_A", "lora_B")

    @property
    def in_features(self) -> int:
        return math.prod(self.piece[:self.contract])

    @property
    def out_features(self) -> int:
        return math.prod(self.piece[self.contract:])

    def index(self, feature_axis: int) -> tuple[Any, ...]:
        """The index of the piece in an array whose first feature axis is ``feature_axis``."""
        lead = (slice(None),) * feature_axis
        if self.slot is None:
            return ()
        if isinstance(self.slot, int):
            return (*lead, self.slot)
        start, size = self.slot
        return (*lead, slice(start, start + size))


def nested(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b.lora_A": x}`` -> ``{"a": {"b": {"lora_A": x}}}``."""
    tree: dict[str, Any] = {}
    for name, value in flat.items():
        *parents, last = name.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return tree


def unnested(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The inverse of ``nested``: dotted names -> leaves."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(unnested(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def matches(name: str, target: str) -> bool:
    """PEFT's rule for a list of targets: the module name is the target or ends in
    ``.target``."""
    return name == target or name.endswith(f".{target}")


@dataclasses.dataclass(frozen=True)
class Lora:
    """The sites of ``config.targets`` among ``sites`` (every adaptable site of a model) and
    the top-level params trained fully (``heads``: ``modules_to_save`` mapped to textkit's
    names). A target that matches no site, or a rank above a site's smaller dimension, is a
    ``ValueError`` naming it (and the model's module names)."""

    config: LoraConfig
    sites: tuple[Site, ...]
    heads: tuple[str, ...] = ()

    @classmethod
    def select(cls, config: LoraConfig, sites: Iterable[Site],
               heads: tuple[str, ...] = ()) -> Lora:
        """The ``Lora`` of ``config`` over a model whose adaptable sites are ``sites``."""
        sites = tuple(sites)
        chosen = []
        for target in config.targets:
            found = [s for s in sites if matches(s.name, target)]
            if not found:
                known = sorted({s.name.rsplit(".", 1)[-1] for s in sites})
                raise ValueError(f"LoRA target module {target!r} matches no module of the "
                                 f"model; its linear modules are named {known} (e.g. "
                                 f"{sites[0].name if sites else '-'})")
            chosen += [s for s in found if s not in chosen]
        for site in chosen:
            if config.rank > min(site.in_features, site.out_features):
                raise ValueError(f"LoRA rank {config.rank} is larger than the smaller dimension "
                                 f"of {site.name} ({site.in_features} in, "
                                 f"{site.out_features} out)")
        order = {s.name: i for i, s in enumerate(sites)}
        return cls(config, tuple(sorted(chosen, key=lambda s: order[s.name])), heads)

    def init(self, rng: jax.Array) -> PyTree:
        """New adapter weights (module docstring): A Kaiming-uniform, B zero, float32."""
        flat = {}
        r = self.config.rank
        for site, key in zip(self.sites, jax.random.split(rng, max(len(self.sites), 1))):
            a, b = site.parts
            if site.embedding:
                flat[f"{site.name}.{a}"] = jnp.zeros((r, site.in_features), jnp.float32)
                flat[f"{site.name}.{b}"] = jax.random.normal(key, (site.out_features, r))
                continue
            bound = 1.0 / math.sqrt(site.in_features)
            flat[f"{site.name}.{a}"] = jax.random.uniform(
                key, (r, site.in_features), jnp.float32, -bound, bound)
            flat[f"{site.name}.{b}"] = jnp.zeros((site.out_features, r), jnp.float32)
        return nested(flat)

    def factors(self, weights: PyTree, site: Site) -> tuple[jax.Array, jax.Array]:
        """(A' [in, r], B' [r, out]) of ``site``: the product ``A' @ B'`` is the site's update
        [in, out] in textkit's orientation, the scale included."""
        node = weights
        for part in site.name.split("."):
            node = node[part]
        a, b = site.parts
        # [r, in], [out, r]; ``fan_in_fan_out`` changes transformers' layout, not this one
        return node[a].T, node[b].T * self.config.scale

    def update(self, weights: PyTree, site: Site) -> jax.Array:
        """The update of ``site``'s piece, float32 in the piece's shape."""
        a, b = self.factors(weights, site)
        return (a @ b).reshape(site.piece)

    def merge(self, params: PyTree, weights: PyTree, sign: float = 1.0) -> PyTree:
        """``params`` with every site's update added (``sign=-1``: subtracted) to its kernel,
        in the kernel's dtype; the other leaves are the same arrays."""
        out = jax.tree_util.tree_map(lambda x: x, params)      # new dicts, the same leaves
        for site in self.sites:
            node = out
            for part in site.path[:-1]:
                node[part] = dict(node[part])
                node = node[part]
            kernel = jnp.asarray(node[site.path[-1]])
            if not jnp.issubdtype(kernel.dtype, jnp.floating):
                raise ValueError(f"cannot merge LoRA into {'/'.join(site.path)} of dtype "
                                 f"{kernel.dtype} (a quantized base); run the adapter beside "
                                 f"it instead")
            update = sign * self.update(weights, site)
            index = site.index(site.contract)
            merged = kernel.astype(jnp.float32).at[index].add(update) if index else \
                kernel.astype(jnp.float32) + update
            node[site.path[-1]] = merged.astype(kernel.dtype)
        return out

    def unmerge(self, params: PyTree, weights: PyTree) -> PyTree:
        """The base ``params`` of ``merge(params, weights)`` (up to float rounding)."""
        return self.merge(params, weights, sign=-1.0)

    def split(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(frozen, heads): the top-level params of ``heads`` apart from the rest."""
        missing = [h for h in self.heads if h not in params]
        if missing:
            raise ValueError(f"modules_to_save: the params have no {missing} (top-level "
                             f"params: {sorted(params)})")
        frozen = {k: v for k, v in params.items() if k not in self.heads}
        return frozen, {k: params[k] for k in self.heads}


@functools.partial(jax.jit, static_argnums=(0, 3))
def _merge(lora: Lora, params: PyTree, weights: PyTree, sign: float) -> PyTree:
    return lora.merge(params, weights, sign)


@dataclasses.dataclass(frozen=True)
class Adapter:
    """One adapter: its ``lora`` (sites, settings, heads) and ``weights``. ``merge`` /
    ``unmerge`` are compiled once per ``lora`` and params shapes, so switching between
    adapters of the same sites and ranks reuses the program."""

    lora: Lora
    weights: PyTree

    def merge(self, params: PyTree) -> PyTree:
        """``params`` with the adapter's updates added to its sites' kernels."""
        return _merge(self.lora, params, self.weights, 1.0)

    def unmerge(self, params: PyTree) -> PyTree:
        """The base params of ``merge(params)`` (up to float rounding)."""
        return _merge(self.lora, params, self.weights, -1.0)
