"""What every decoder shares: the step contract, the output layout, the length penalty.

A decoder drives a model through one function, ``step_fn(params, cache, tokens int32[N]) ->
(log_probs float32[N, V], cache)``, where every cache leaf has leading axis N. For the
seq2seq and language-model modules of ``textkit.models`` that function is
``model_step_fn(model)``; any plain function with the same signature works too (the tests
use hand-written transition tables).

Decoders (``beam_search``, ``greedy_search``, ``sample``) return a ``DecodeOutput``:
``tokens`` int32[B, n, L] (generated tokens only, no start token; the EOS that ended a
hypothesis is kept, every position after it is ``pad_id``), ``scores`` float32[B, n] best
first and ``lengths`` int32[B, n] (generated tokens including the final EOS).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

StepFn = Callable[[Any, Any, jax.Array], tuple[jax.Array, Any]]


class DecodeOutput(NamedTuple):
    """Hypotheses of a batch, best first: tokens int32[B, n, L], scores float32[B, n],
    lengths int32[B, n] (tokens up to and including EOS; 0 for an empty slot)."""

    tokens: jax.Array
    scores: jax.Array
    lengths: jax.Array


@dataclasses.dataclass(frozen=True)
class ModelStep:
    """``step_fn`` of a flax module with a ``decode_step(cache, tokens)`` method.

    A frozen dataclass rather than a lambda so that it hashes by the model's config: two
    ``model_step_fn(model)`` calls give equal static jit arguments and share compiled programs.
    """

    model: Any

    def __call__(self, params: Any, cache: Any, tokens: jax.Array) -> tuple[jax.Array, Any]:
        return self.model.apply({"params": params}, cache, tokens, method="decode_step")


def model_step_fn(model: Any) -> ModelStep:
    """``step_fn(params, cache, tokens int32[N]) -> (log_probs float32[N, V], cache)`` for
    ``model``: ``model.apply({"params": params}, cache, tokens, method="decode_step")``."""
    return ModelStep(model)


def length_penalty(length: jax.Array | float, alpha: jax.Array | float,
                   k: jax.Array | float = 5.0) -> jax.Array:
    """GNMT length penalty ``((k + length) / (k + 1)) ** alpha`` (float32, elementwise).

    A hypothesis' score is its summed log-probability divided by this; ``alpha=0`` gives 1.
    """
    length = jnp.asarray(length, jnp.float32)
    return ((k + length) / (k + 1.0)) ** alpha


def batch_size_of(cache: Any) -> int:
    """Leading axis shared by every leaf of ``cache``; a clear error when they disagree."""
    leaves = jax.tree_util.tree_leaves_with_path(cache)
    if not leaves:
        raise ValueError("decoding needs a cache with at least one array leaf (leading axis B)")
    sizes = {jax.tree_util.keystr(path): jnp.shape(leaf)[0] if jnp.ndim(leaf) else None
             for path, leaf in leaves}
    distinct = set(sizes.values())
    if len(distinct) != 1 or None in distinct:
        raise ValueError(f"every cache leaf must have the same leading (batch) axis; got {sizes}")
    return distinct.pop()


def repeat_cache(cache: Any, times: int) -> Any:
    """Tile every leaf [B, ...] -> [B * times, ...]; row ``b * times + j`` is copy j of row b."""
    return jax.tree_util.tree_map(lambda leaf: jnp.repeat(leaf, times, axis=0), cache)


def start_token_array(start_tokens: int | jax.Array, batch_size: int) -> jax.Array:
    """``start_tokens`` (an int such as bos, or int32[B]) as int32[B]."""
    start = jnp.asarray(start_tokens, jnp.int32)
    if start.ndim == 0:
        return jnp.full((batch_size,), start, jnp.int32)
    if start.shape != (batch_size,):
        raise ValueError(
            f"start_tokens must be an int or int32[{batch_size}] (one per cache row); "
            f"got shape {start.shape}")
    return start


def length_caps(max_lengths: jax.Array | None, max_length: int, batch_size: int) -> jax.Array:
    """Per-row cap on generated tokens, int32[B]: ``max_lengths`` clipped to [1, max_length]."""
    if max_lengths is None:
        return jnp.full((batch_size,), max_length, jnp.int32)
    caps = jnp.asarray(max_lengths, jnp.int32)
    if caps.shape != (batch_size,):
        raise ValueError(f"max_lengths must be int32[{batch_size}]; got shape {caps.shape}")
    return jnp.clip(caps, 1, max_length)


def prefill(step_fn: StepFn, params: Any, cache: Any, prefix: jax.Array) -> tuple[Any, jax.Array]:
    """Run all but the last token of ``prefix`` int32[B, P] through ``step_fn``.

    Returns ``(cache, last_tokens int32[B])``: pass them to a decoder as ``cache`` and
    ``start_tokens`` to continue the prefix (language models). Every row has the same prefix
    length P.
    """
    head = jnp.swapaxes(prefix[:, :-1], 0, 1)                     # [P-1, B]

    def feed(cache: Any, tokens: jax.Array) -> tuple[Any, None]:
        _, cache = step_fn(params, cache, tokens)
        return cache, None

    cache, _ = lax.scan(feed, cache, head)
    return cache, prefix[:, -1].astype(jnp.int32)
