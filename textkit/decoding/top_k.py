"""Exact top-k of long rows through chunk maxima (beam search over K x V candidates), and the
top k of a log-softmax read from logits in the [V, N] layout (``top_k_log_softmax``).

XLA:CPU's TopK kernel visits every element in a single-threaded partial sort. ``top_k`` first
takes the maximum of each chunk of ``chunk`` consecutive elements (a vectorised reduction),
picks the k best chunks, and sorts only their k x ``chunk`` elements. The result equals
``lax.top_k`` exactly, ties included (lower index first): an element of the true top k lies in
a chunk whose maximum is at least its value, and if that chunk were not among the k best
chunks, k other chunks would each hold an element ranked before it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

CHUNK = 256


def chunk_size(size: int, target: int = CHUNK) -> int:
    """A divisor of ``size`` within a factor 2 of ``target``, closest to it (no padding copy
    of the rows), else ``target`` (the rows are padded with -inf)."""
    divisors = [d for d in range(target // 2, 2 * target + 1) if size % d == 0]
    return min(divisors, key=lambda d: abs(d - target)) if divisors else target



def top_k(x: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """(values [B, k] best first, indices int32[B, k]) of x [B, N], as ``lax.top_k``."""
    batch, size = x.shape
    chunk = chunk_size(size)
    if size <= 4 * k * chunk:   # short rows: the plain kernel is as fast
        return _kernel(x, k)
    pad = -size % chunk
    if pad:
        x = jnp.pad(x, ((0, 0), (0, pad)), constant_values=-jnp.inf)
    chunks = x.reshape(batch, -1, chunk)                                       # [B, C, c]
    _, best = _kernel(jnp.max(chunks, axis=2), k)                              # [B, k]
    best = jnp.sort(best, axis=1)             # ascending: ties keep the lower index first
    candidates = jnp.take_along_axis(chunks, best[:, :, None], axis=1)        # [B, k, c]
    values, position = _kernel(candidates.reshape(batch, k * chunk), k)       # [B, k]
    chunk_of = jnp.take_along_axis(best, position // chunk, axis=1)            # [B, k]
    return values, (chunk_of * chunk + position % chunk).astype(jnp.int32)


def _kernel(x: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """``lax.top_k`` behind a barrier: without it XLA may fuse the consumers into a full sort
    (its CPU TopK kernel only replaces a sort whose users are plain slices)."""
    return lax.optimization_barrier(lax.top_k(x, k))


def top_k_log_softmax(logits_t: jax.Array, k: int, exclude: tuple[int, ...] = ()
                      ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The k best entries of each column's log-softmax: logits_t float[V, N] (one column per
    row of a batch) -> (values float32[N, k], best first, ties lower id first as ``top_k``; ids
    int32[N, k]; kept float32[N, E]): the log-probs of the k best ids not in ``exclude``, and
    the log-probs at ``exclude``'s E ids (in its order). Every id counts in the normaliser.
    Chunk maxima as ``top_k``, taken down the columns."""
    logits_t = logits_t.astype(jnp.float32)
    size, rows = logits_t.shape
    kept_ids = np.asarray(exclude, np.int32)
    chunk = chunk_size(size)
    if -size % chunk:
        logits_t = jnp.pad(logits_t, ((0, -size % chunk), (0, 0)), constant_values=-jnp.inf)
    chunks = logits_t.reshape(-1, chunk, rows)                                  # [C, c, N]
    # Both passes over the logits read them as chunks, so XLA materialises one array for both;
    # the barrier keeps the peak a reduction of the chunk maxima, not a third full pass.
    chunk_max = lax.optimization_barrier(jnp.max(chunks, axis=1))              # [C, N]
    peak = jnp.max(chunk_max, axis=0)                                           # [N]
    shift = jnp.where(jnp.isfinite(peak), peak, 0.0)
    lse = shift + jnp.log(jnp.sum(jnp.exp(chunks - shift), axis=(0, 1)))       # [N]
    # The k + E best of all ids, then the excluded ones dropped: no masked copy of the logits.
    width = min(k + len(exclude), chunks.shape[0])
    _, best = _kernel(chunk_max.T, width)                                       # [N, w]
    best = jnp.sort(best, axis=1)             # ascending: ties keep the lower id first
    candidates = chunks[best, :, jnp.arange(rows)[:, None]]                      # [N, w, c]
    values, position = lax.top_k(candidates.reshape(rows, width * chunk),
                                 min(k + len(exclude), width * chunk))           # [N, k+E]
    ids = jnp.take_along_axis(best, position // chunk, axis=1) * chunk + position % chunk
    ids = jnp.minimum(ids, size - 1)   # a padded id (-inf) only where k + E > V: a real one
    if exclude:
        values = jnp.where(jnp.isin(ids, kept_ids), -jnp.inf, values)
        values, order = lax.top_k(values, k)                                     # [N, k]
        ids = jnp.take_along_axis(ids, order, axis=1)
    kept = logits_t[kept_ids].T - lse[:, None]                                   # [N, E]
    return values - lse[:, None], ids.astype(jnp.int32), kept
