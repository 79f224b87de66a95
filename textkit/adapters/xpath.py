"""LoRA on the activations while training: ``y = x W + scale * dropout(x) A.T B.T``.

Inside ``lora_on_activations(lora, weights, rng)`` every ``models.layers.Dense`` whose kernel
is a LoRA site (matched by the module's path, which is the param path without ``kernel``) adds
its sites' low-rank terms to its output, and every ``layers.Embed`` whose table is one adds
``scale * (A.T)[ids] B.T`` to its lookup (PEFT's embedding LoRA: no dropout; never to a tied
output, ``attend``, as peft's unmerged model), through flax's ``intercept_methods``: the models are
not changed and the base kernels are used as they are (float, or int8 from
``kernels.quantize_int8``). Dropout on A's input (PEFT's ``lora_dropout``) needs this path;
so does training cheaply: the gradient of A and B is two thin products per site, and no
[in, out] update of a kernel is ever formed. With ``rng=None`` (evaluation) there is no
dropout, and the outputs equal those of ``Lora.merge`` up to float rounding.

Every site must be reached by a ``Dense`` (``Embed``) call while the block runs (one forward
pass of the model); a site read some other way would silently lose its adapter, so leaving the
block with one unreached is a ``RuntimeError`` naming it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from textkit.adapters.lora import Lora, Site
from textkit.models.layers import Dense, Embed, dropout

__all__ = ["lora_on_activations"]


@contextlib.contextmanager
def lora_on_activations(lora: Lora, weights: Any, rng: jax.Array | None = None
                        ) -> Iterator[None]:
    """Within the block, model calls add ``lora``'s terms with adapter ``weights`` (module
    docstring); ``rng``: the key of LoRA dropout while training (None: no dropout)."""
    by_module: dict[tuple[str, ...], list[Site]] = {}
    for site in lora.sites:
        by_module.setdefault(site.path[:-1], []).append(site)
    reached: set[tuple[str, ...]] = set()
    calls = [0]

    def interceptor(next_fun: Any, args: tuple, kwargs: dict, context: Any) -> Any:
        module = context.module
        sites = by_module.get(tuple(module.path)) if isinstance(module, Dense | Embed) and \
            context.method_name == "__call__" else None
        if not sites:
            return next_fun(*args, **kwargs)
        y = next_fun(*args, **kwargs)
        if isinstance(module, Embed):
            reached.add(sites[0].path)
            return (y.astype(jnp.float32) + _embedding_term(lora, weights, sites[0], module,
                                                            args[0])).astype(y.dtype)
        x = args[0]
        part = args[1] if len(args) > 1 else kwargs.get("part")
        lead = x.shape[:x.ndim - module.contract]
        rows = x.reshape(-1, math.prod(x.shape[x.ndim - module.contract:])).astype(jnp.float32)
        features = (module.features,) if isinstance(module.features, int) else \
            tuple(module.features)
        delta = None
        for site in sites:
            inputs = rows
            if rng is not None and lora.config.dropout > 0.0:   # one mask per site, as peft
                inputs = dropout(rows, lora.config.dropout, jax.random.fold_in(rng, calls[0]))
            calls[0] += 1
            a, b = lora.factors(weights, site)
            term = ((inputs @ a) @ b).reshape(*lead, *site.piece[site.contract:])
            index = site.index(len(lead))
            if not index:
                delta = term
                continue
            if delta is None:
                delta = jnp.zeros((*lead, *features), jnp.float32)
            delta = delta.at[index].add(term)
        reached.update(site.path for site in sites)
        if part is not None:
            delta = delta[(slice(None),) * len(lead) + (part,)]
        return (y.astype(jnp.float32) + delta).astype(y.dtype)

    with nn.intercept_methods(interceptor):
        yield
    missed = [s.name for s in lora.sites if s.path not in reached]
    if missed:
        raise RuntimeError(f"LoRA sites {missed} were not reached by a Dense or Embed call of "
                           f"the model (their weights are read another way); use Lora.merge "
                           f"for this model")


def _embedding_term(lora: Lora, weights: Any, site: Site, module: Embed,
                    ids: jax.Array) -> jax.Array:
    """``scale * (A.T)[ids] @ B.T`` float32 [..., D], times sqrt(D) where ``module`` scales
    its lookup so."""
    a, b = lora.factors(weights, site)                         # [V, r], [r, D] (scaled)
    term = jnp.take(a, ids, axis=0) @ b
    return term * jnp.sqrt(jnp.float32(module.features)) if module.scale_by_sqrt_dim else term
