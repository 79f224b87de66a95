"""Beam-search caches written in place: K slots per sentence and an ancestry table.

A model's ``init_cache`` holds B rows. Beam search over K hypotheses per sentence could tile it
to B*K rows and gather every row by parent after each step (a copy of the whole cache per step);
``beam_cache`` instead gives each self-attention cache K *slots* per sentence (a slot axis just
before each leaf's position axis, ``attention.POSITION_AXIS``: key [B, H, Dh, K, L], value
[B, H, K, L, Dh]) and adds ``"ancestry"`` int32[B, K, L]: entry (b, k, t) is the slot whose
position t belongs to hypothesis k's history. Each step, hypothesis k writes its key/value into
slot k at the current position (``write_ancestry`` records that) and attends through
``ancestry_mask``; when hypotheses take new parents only the table is gathered
(``reorder_beams``). A slot position is written once, at its step, so no hypothesis ever loses
its history. Everything else in the cache (positions, masks, cross-attention memory) stays one
copy per sentence.

``resize_cache`` cuts or pads the position axis of every self-attention cache (and the table):
decoders let the cache grow with the output so that attention reads filled positions only.

The model-specific part is where its self-attention caches sit in its cache dict: passed as a
``get(layer) -> {"key", "value"}`` / ``put(layer, new) -> layer`` pair over ``cache["layers"]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from textkit.models.attention import POSITION_AXIS

Array = jax.Array
Cache = dict[str, Any]
GetSelf = Callable[[Any], dict[str, Array]]
PutSelf = Callable[[Any, dict[str, Array]], Any]


def slot_cache(cache: dict[str, Array], beams: int) -> dict[str, Array]:
    """Row cache {"key": [B, H, Dh, L], "value": [B, H, L, Dh]} -> slot cache with K slots
    before the position axis (every slot a copy of its sentence's row: the positions written
    so far are shared by all hypotheses)."""
    out = {}
    for name, leaf in cache.items():
        axis = leaf.ndim + POSITION_AXIS[name]
        out[name] = jnp.repeat(jnp.expand_dims(leaf, axis), beams, axis=axis)
    return out


def write_ancestry(ancestry: Array, positions: Array) -> Array:
    """Ancestry int32[B, K, L] with every hypothesis's own slot written at ``positions``
    int32[B] (the position this step fills)."""
    rows = jnp.arange(ancestry.shape[0])
    slots = jnp.arange(ancestry.shape[1], dtype=ancestry.dtype)
    return ancestry.at[rows, :, positions].set(slots[None, :])


def ancestry_mask(ancestry: Array, positions: Array) -> Array:
    """Self-attention mask of one beam step: bool[B, 1, K, K*L], True where query k may read
    slot j at position t: ``ancestry[b, k, t] == j`` and ``t <= positions[b]``."""
    batch, beams, length = ancestry.shape
    slots = jnp.arange(beams, dtype=ancestry.dtype)
    own = ancestry[:, :, None, :] == slots[None, None, :, None]                 # [B, K, K, L]
    filled = jnp.arange(length)[None, :] <= positions[:, None]                   # [B, L]
    return (own & filled[:, None, None, :]).reshape(batch, 1, beams, beams * length)


def resize_length(x: Array, length: int, axis: int) -> Array:
    """``x`` cut or zero-padded to ``length`` along ``axis`` (a cache's position axis)."""
    size = x.shape[axis]
    if length <= size:
        return jax.lax.slice_in_dim(x, 0, length, axis=axis)
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, length - size)
    return jnp.pad(x, pad)


def _map_self(cache: Cache, get: GetSelf, put: PutSelf,
              fn: Callable[[dict[str, Array]], dict[str, Array]]) -> Cache:
    layers = tuple(put(layer, fn(get(layer))) for layer in cache["layers"])
    return {**cache, "layers": layers}


def beam_cache(cache: Cache, beams: int, get: GetSelf, put: PutSelf) -> Cache:
    """Row cache (B rows, ``cache["layers"]``) -> beam cache: slot caches and a zero ancestry
    table (positions already written belong to slot 0's history, identical in every slot)."""
    if "ancestry" in cache:
        raise ValueError("the cache is already a beam cache")
    length = get(cache["layers"][0])["key"].shape[POSITION_AXIS["key"]]
    batch = cache["position"].shape[0]
    out = _map_self(cache, get, put, lambda self_cache: slot_cache(self_cache, beams))
    out["ancestry"] = jnp.zeros((batch, beams, length), jnp.int32)
    return out


def beam_step_inputs(cache: Cache) -> tuple[int | None, dict[str, Array]]:
    """For a decode step: (K, {"ancestry": table with this step's slots written, "mask":
    its ``ancestry_mask``}) for a beam cache; (None, {}) for a row cache."""
    if "ancestry" not in cache:
        return None, {}
    ancestry = write_ancestry(cache["ancestry"], cache["position"])            # [B, K, L]
    return ancestry.shape[1], {"ancestry": ancestry,
                               "mask": ancestry_mask(ancestry, cache["position"])}


def reorder_beams(cache: Cache, parent: Array) -> Cache:
    """Beam cache whose hypotheses took parents int32[B, K]: the ancestry rows are gathered."""
    ancestry = jnp.take_along_axis(cache["ancestry"], parent[:, :, None], axis=1)
    return {**cache, "ancestry": ancestry}


def resize_cache(cache: Cache, length: int, get: GetSelf, put: PutSelf) -> Cache:
    """Row or beam cache with ``length`` positions (cut or zero-padded)."""
    out = _map_self(cache, get, put, lambda self_cache: {
        name: resize_length(leaf, length, leaf.ndim + POSITION_AXIS[name])
        for name, leaf in self_cache.items()})
    if "ancestry" in cache:
        out["ancestry"] = resize_length(cache["ancestry"], length, 2)
    return out
