"""T5's bucketed relative position bias: one learned score per head and bucket of the distance
``key position - query position``, computed once per stack and added to the self-attention
scores of every layer (the full passes and the cached one-token step alike).

Distances are bucketed as Mesh TensorFlow buckets them (``relative_buckets``): the first half
of the buckets hold exact distances, the second half logarithmically wider ranges up to
``max_distance``, beyond which all distances share the last bucket. A bidirectional stack (the
encoder) gives keys after the query buckets of their own (the upper half); a causal one (the
decoder) maps every key after the query to bucket 0.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from textkit.precision import Policy

Array = jax.Array


def relative_buckets(distances: np.ndarray, bidirectional: bool, buckets: int,
                     max_distance: int) -> np.ndarray:
    """The bucket int32[...] of each distance int[...] (``key - query``), in float32
    arithmetic as transformers' ``T5Attention._relative_position_bucket`` computes it."""
    distances = np.asarray(distances, np.int64)
    out = np.zeros(distances.shape, np.int64)
    if bidirectional:
        buckets //= 2
        out += (distances > 0) * buckets
        distances = np.abs(distances)
    else:
        distances = -np.minimum(distances, 0)
    exact = buckets // 2
    with np.errstate(divide="ignore"):
        ratio = (np.log(distances.astype(np.float32) / np.float32(exact))
                 / np.float32(np.log(max_distance / exact)) * np.float32(buckets - exact))
    large = np.minimum(exact + np.where(distances < exact, 0, ratio).astype(np.int64),
                       buckets - 1)
    return (out + np.where(distances < exact, distances, large)).astype(np.int32)


class RelativePositionBias(nn.Module):
    """One stack's bias table ``embedding`` [buckets, H] (param dtype; float32 results).

    ``__call__(queries, keys)``: the full pass, float32 [1, H, queries, keys] for query i and
    key j at positions i and j. ``step(positions int32[B], length)``: one decoding step, the
    query of row b at ``positions[b]`` against cache positions ``0 .. length - 1``: float32
    [B, H, 1, length].
    """

    num_heads: int
    buckets: int
    max_distance: int
    bidirectional: bool
    policy: Policy = Policy()

    def setup(self):
        self.embedding = self.param("embedding", nn.initializers.normal(stddev=1.0),
                                    (self.buckets, self.num_heads), self.policy.param_dtype)
        span = np.arange(-self.max_distance, self.max_distance + 1)
        self.table = relative_buckets(span, self.bidirectional, self.buckets,
                                      self.max_distance)           # [2 * max_distance + 1]

    def _scores(self, distances: Array | np.ndarray) -> Array:
        """float32 [..., H] of distances int[...]."""
        index = jnp.clip(distances, -self.max_distance, self.max_distance) + self.max_distance
        return jnp.take(self.embedding, jnp.asarray(self.table)[index], axis=0).astype(
            jnp.float32)

    def __call__(self, queries: int, keys: int) -> Array:
        distances = np.arange(keys)[None, :] - np.arange(queries)[:, None]   # [Q, K]
        return jnp.transpose(self._scores(distances), (2, 0, 1))[None]      # [1, H, Q, K]

    def step(self, positions: Array, length: int) -> Array:
        distances = jnp.arange(length)[None, :] - positions[:, None]         # [B, L]
        return jnp.transpose(self._scores(distances), (0, 2, 1))[:, :, None]  # [B, H, 1, L]
