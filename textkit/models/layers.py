"""Policy-aware building blocks shared by the textkit models: the one source of ``Dense``,
``Embed``, ``Dropout`` / ``dropout``, ``log_softmax``, ``LayerNorm``, positions, initialisers
(``uniform_init``); the LSTM layers (``LSTM``, ``BidirectionalLSTM``) are in ``rnn.py``.

Precision rule (DESIGN.md rule 3): parameters live in ``policy.param_dtype``; every matmul casts
both operands to ``policy.compute_dtype`` and accumulates into a float32 result
(``kernels.mixed_einsum``, which also keeps the backward matmuls in the compute dtype). ``Dense``
(bias added in float32), ``Embed`` and ``LayerNorm`` (statistics in float32) return
``policy.activations`` (under the mixed policies the 16-bit compute dtype on accelerators,
float32 on XLA:CPU, unless the policy names ``activations=``), so on a GPU the residual stream
and the elementwise work between layers move 16-bit values; logits (``Embed.attend``, a
``Dense`` with ``dtype=float32``) stay float32.
``Dense`` and ``Embed`` are the ``kernels.Int8Layer``s that ``kernels.quantize_int8`` makes
int8 for CPU inference.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from textkit.models.kernels import int8_matmul, mixed_einsum
from textkit.precision import Policy

Array = jax.Array
Initializer = Callable[..., Array]


def _xavier(in_rank: int, out_rank: int, batch_axis: tuple[int, ...] = ()) -> Initializer:
    """Glorot-uniform over a kernel of shape [*in_dims, *out_dims] (fans per projection)."""
    in_axis = tuple(range(in_rank))
    out_axis = tuple(a for a in range(in_rank, in_rank + out_rank) if a not in batch_axis)
    return nn.initializers.variance_scaling(
        1.0, "fan_avg", "uniform", in_axis=in_axis, out_axis=out_axis, batch_axis=batch_axis)


def uniform_init(scale: float) -> Initializer:
    """Initializer drawing U(-scale, scale) (in the param dtype asked for)."""

    def init(key: Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Array:
        return jax.random.uniform(key, shape, dtype, -scale, scale)

    return init


class Dense(nn.Module):
    """Affine map contracting the last ``contract`` input axes into ``features``.

    ``x`` [..., *in_dims] (any float dtype) -> [..., *features] in ``dtype`` (None: the
    policy's activation dtype; float32 for logits and recurrent states). The kernel has shape
    [*in_dims, *features] in ``policy.param_dtype``; ``batch_axes`` are kernel axes (counted
    among the feature axes) that hold independent projections, e.g. the 3 of a fused
    query/key/value kernel [d_model, 3, heads, head_dim], so each gets its own init fan.
    ``kernel_init`` replaces that Glorot-uniform init (e.g. flax's LeCun normal).
    """

    features: int | tuple[int, ...]
    policy: Policy = Policy()
    use_bias: bool = True
    contract: int = 1
    batch_axes: tuple[int, ...] = ()
    kernel_init: Initializer | None = None
    dtype: Any = None

    @nn.nowrap
    def int8_weight(self) -> tuple[str, tuple[int, ...]]:
        """``kernels.Int8Layer``: the kernel, one scale per output column."""
        return "kernel", tuple(range(self.contract))

    @nn.compact
    def __call__(self, x: Array, part: slice | None = None) -> Array:
        """x [..., *in_dims] -> [..., *features] (``dtype``); ``part``, a slice of the first
        feature axis (e.g. the keys and values of a fused query/key/value kernel), computes
        only those features: [..., len(part), *features[1:]]."""
        features = (self.features,) if isinstance(self.features, int) else tuple(self.features)
        in_dims = x.shape[x.ndim - self.contract:]
        n_in, n_out = len(in_dims), len(features)
        kernel_init = self.kernel_init or _xavier(n_in, n_out,
                                                  tuple(n_in + a for a in self.batch_axes))
        kernel = self.param("kernel", kernel_init, (*in_dims, *features), self.policy.param_dtype)

        def take(weight: Array) -> Array:          # the part of a weight [..., *features]
            if part is None:
                return weight
            return weight[(slice(None),) * (weight.ndim - n_out) + (part,)]

        kernel = take(kernel)
        out_dims = kernel.shape[n_in:]
        # Always one plain 2-D matmul [rows, in] x [in, out]: XLA:CPU runs it fastest (a
        # [B, 1, D] decoding step would otherwise get a degenerate-axis layout and a copy of
        # every result).
        rows = x.reshape(-1, math.prod(in_dims))
        matrix = kernel.reshape(math.prod(in_dims), math.prod(out_dims))
        if self.has_variable("params", "kernel_scale"):  # kernels.quantize_int8
            scale = take(self.get_variable("params", "kernel_scale"))
            weight_sum = None
            if self.has_variable("params", "kernel_sum"):
                weight_sum = take(self.get_variable("params", "kernel_sum")).reshape(-1)
            y = int8_matmul(rows, matrix, scale.reshape(-1), weight_sum=weight_sum)
        else:
            y = mixed_einsum("za,ab->zb", rows, matrix, self.policy.compute_dtype)
        y = y.reshape(*x.shape[:x.ndim - self.contract], *out_dims)
        if self.use_bias:
            bias = self.param("bias", nn.initializers.zeros, features, self.policy.param_dtype)
            y = y + take(bias).astype(jnp.float32)
        return y.astype(self.dtype or self.policy.activations)

    def _kernel_sum(self) -> Array | None:
        """The uint8 carrier's column sums of the int8 kernel, flat [out] (None otherwise)."""
        if not self.has_variable("params", "kernel_sum"):
            return None
        return self.get_variable("params", "kernel_sum").reshape(-1)

    def columns(self, x: Array) -> Array:
        """The layer (``contract=1``, one feature axis) applied to rows x float[N, in] and
        transposed: float32 [features, N]. Reads the parameters ``__call__`` made."""
        kernel = self.get_variable("params", "kernel")                          # [in, out]
        if self.has_variable("params", "kernel_scale"):
            y = int8_matmul(x, kernel, self.get_variable("params", "kernel_scale"),
                            weight_sum=self._kernel_sum(), columns=True)
        else:
            y = mixed_einsum("io,ni->on", kernel, x, self.policy.compute_dtype)
        if self.use_bias:
            y = y + self.get_variable("params", "bias").astype(jnp.float32)[:, None]
        return y


def check_ids(ids: np.ndarray, size: int, what: str = "token ids",
              bound: str = "the vocabulary") -> None:
    """Raise ``ValueError`` naming the first entry of ``ids`` int[...] outside ``[0, size)``
    (its index: the sample, then the position), the accepted range and what bounds it."""
    ids = np.asarray(ids)
    bad = (ids < 0) | (ids >= size)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f"[{', '.join(map(str, index))}]" if index else ""
        raise ValueError(f"{what}{where} = {int(ids[index])} is outside {bound}: "
                         f"expected 0 <= value < {size} ({int(bad.sum())} such value(s))")


def lookup(table: Array, ids: Array, what: str = "token ids",
           bound: str = "the vocabulary") -> Array:
    """Rows of ``table`` [N, ...] at ``ids`` int[...] -> [*ids.shape, ...] in the table's dtype.

    Ids must lie in ``[0, N)``. Concrete ids (``model.apply`` outside ``jit``) are checked here
    (``check_ids``: a ``ValueError`` naming the sample and position). Traced ids cannot be
    checked: an out-of-range one reads a NaN row (``jnp.take``'s fill mode, kept on purpose so
    that a loss over it is non-finite and stops training instead of being silently wrong).
    Check ids on the host where text becomes ids; positions are bounded by ``max_len`` checks.

    A 16-bit float table (bfloat16, float16) is gathered as raw 16-bit words: a caller that
    widens the rows would otherwise get XLA:CPU to widen the whole table before the gather (in
    a decoding loop, once per call and as large as the table). The fill word 0xFFFF is a NaN in
    both formats.
    """
    if not isinstance(ids, jax.core.Tracer):
        check_ids(np.asarray(ids), table.shape[0], what, bound)
    if jnp.issubdtype(table.dtype, jnp.floating) and table.dtype.itemsize == 2:
        words = jax.lax.bitcast_convert_type(table, jnp.uint16)
        rows = jnp.take(words, ids, axis=0, mode="fill")
        return jax.lax.bitcast_convert_type(rows, table.dtype)
    return jnp.take(table, ids, axis=0, mode="fill")


class Embed(nn.Module):
    """Token embedding with an ``attend`` method for tied output logits.

    ``__call__(ids int[...]) -> [..., features]`` in the activation dtype (optionally times
    sqrt(features); ids
    in ``[0, num_embeddings)``, see ``lookup``);
    ``attend(x float[..., features]) -> float32 [..., num_embeddings]`` computed in the compute
    dtype with float32 accumulation (``attend_t``: the same of rows [N, features], as [V, N]).
    The table [num_embeddings, features] is in param dtype, initialised N(0, features**-0.5).
    """

    num_embeddings: int
    features: int
    policy: Policy = Policy()
    scale_by_sqrt_dim: bool = True

    @nn.nowrap
    def int8_weight(self) -> tuple[str, tuple[int, ...]]:
        """``kernels.Int8Layer``: the table, one scale per row."""
        return "embedding", (1,)

    def setup(self):
        init = nn.initializers.normal(stddev=self.features ** -0.5)
        self.embedding = self.param("embedding", init, (self.num_embeddings, self.features),
                                    self.policy.param_dtype)
        self.quantized = self.has_variable("params", "embedding_scale")  # quantize_int8
        if self.quantized:
            self.embedding_scale = self.get_variable("params", "embedding_scale")
        self.embedding_sum = (self.get_variable("params", "embedding_sum")
                              if self.has_variable("params", "embedding_sum") else None)

    def __call__(self, ids: Array) -> Array:
        x = lookup(self.embedding, ids, f"{self.name or 'Embed'} ids").astype(jnp.float32)
        if self.quantized:
            x = x * jnp.take(self.embedding_scale, ids, axis=0, mode="fill")[..., None]
        if self.scale_by_sqrt_dim:
            x = x * np.float32(np.sqrt(self.features))
        return x.astype(self.policy.activations)

    def attend(self, x: Array) -> Array:
        if self.quantized:
            rows = int8_matmul(x.reshape(-1, self.features), self.embedding,
                               self.embedding_scale, weight_sum=self.embedding_sum,
                               transposed=True)
            return rows.reshape(*x.shape[:-1], self.num_embeddings)
        return mixed_einsum("...d,vd->...v", x, self.embedding, self.policy.compute_dtype)

    def attend_t(self, x: Array) -> Array:
        """``attend`` of rows x float[N, features], transposed: logits float32 [V, N]."""
        if self.quantized:
            return int8_matmul(x, self.embedding, self.embedding_scale,
                               weight_sum=self.embedding_sum, transposed=True, columns=True)
        return mixed_einsum("vd,nd->vn", self.embedding, x, self.policy.compute_dtype)


def log_softmax(logits: Array) -> Array:
    """``logits - logsumexp(logits)`` over the last axis, float32 [..., V].

    Same values as ``jax.nn.log_softmax``, but XLA:CPU fuses that one's max-subtraction into
    the logits matmul as a slow fused kernel (see ``benchmarks/decode.py``); use this one after
    an output projection."""
    logits = logits.astype(jnp.float32)
    return logits - jax.nn.logsumexp(logits, axis=-1, keepdims=True)


class LayerNorm(nn.Module):
    """Layer norm computed in float32 (scale and bias in param dtype): [..., D] in the
    activation dtype.
    ``use_bias=False``: scale only (ModernBERT's ``norm_bias: false``)."""

    policy: Policy = Policy()
    epsilon: float = 1e-6
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: Array) -> Array:
        y = nn.LayerNorm(epsilon=self.epsilon, dtype=jnp.float32, use_bias=self.use_bias,
                         param_dtype=self.policy.param_dtype, name="norm")(x.astype(jnp.float32))
        return y.astype(self.policy.activations)


class RMSNorm(nn.Module):
    """``x / rms(x) * (offset + scale)`` in float32 over the last axis (``offset`` 1: Gemma's
    ``1 + w`` with its weights stored around 0). x float[..., D] -> [..., D] in the
    activation dtype."""

    policy: Policy = Policy()
    epsilon: float = 1e-6
    offset: float = 0.0

    @nn.compact
    def __call__(self, x: Array) -> Array:
        init = nn.initializers.zeros if self.offset else nn.initializers.ones
        scale = self.param("scale", init, (x.shape[-1],), self.policy.param_dtype)
        x = x.astype(jnp.float32)
        x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.epsilon)
        y = x * (np.float32(self.offset) + scale.astype(jnp.float32))
        return y.astype(self.policy.activations)


NORMS = ("layer", "rms")
"""The norms a layer can take: ``LayerNorm`` or ``RMSNorm``."""


def make_norm(kind: str, policy: Policy, epsilon: float, use_bias: bool = True,
              offset: float = 0.0, name: str | None = None) -> nn.Module:
    """The norm of ``kind`` (``NORMS``): a ``LayerNorm`` (``use_bias``) or an ``RMSNorm``
    (``offset``)."""
    if kind == "layer":
        return LayerNorm(policy, epsilon, use_bias, name=name)
    if kind == "rms":
        return RMSNorm(policy, epsilon, offset, name=name)
    raise ValueError(f"unknown norm {kind!r}; expected one of {NORMS}")


def sinusoidal_positions(length: int, dim: int, layout: str = "textkit") -> np.ndarray:
    """Sin/cos position table, float32 [length, dim], sin in the first half, cos in the second.

    ``layout`` "textkit": frequencies ``10000 ** (-i / (dim/2 - 1))`` (tensor2tensor's);
    "marian": ``10000 ** (-2i / dim)`` (Vaswani et al.'s, laid out [sin half | cos half] as
    Hugging Face's ``MarianSinusoidalPositionalEmbedding``).
    """
    if dim % 2:
        raise ValueError(f"sinusoidal positions need an even dimension, got {dim}")
    half = dim // 2
    steps = np.arange(half, dtype=np.float64)
    if layout == "marian":
        inv_freq = 1.0 / np.power(10000.0, 2.0 * steps / dim)
    elif layout == "textkit":
        inv_freq = np.exp(-np.log(10000.0) * steps / max(half - 1, 1))
    else:
        raise ValueError(f"unknown sinusoidal layout {layout!r}; expected 'textkit' or 'marian'")
    angles = np.arange(length, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


POSITION_KINDS = ("sinusoidal", "learned", "sinusoidal_marian", "none")


class PositionEmbedding(nn.Module):
    """Adds position information: ``kind`` "sinusoidal" (fixed), "sinusoidal_marian" (fixed,
    Marian's frequencies, see ``sinusoidal_positions``), "learned" ([max_len + offset, dim]) or
    "none" (x unchanged: a model whose attention carries the positions, T5's).
    ``offset``: position p reads row p + offset (BART's learned table keeps two rows first).

    ``__call__(x float[B, T, D], positions int32[B, T]) -> [B, T, D]`` in x's dtype.
    """

    kind: str
    max_len: int
    features: int
    policy: Policy = Policy()
    offset: int = 0

    def setup(self):
        rows = self.max_len + self.offset
        if self.kind == "learned":
            self.table = self.param("embedding", nn.initializers.normal(stddev=0.02),
                                    (rows, self.features), self.policy.param_dtype)
        elif self.kind in ("sinusoidal", "sinusoidal_marian"):
            layout = "marian" if self.kind == "sinusoidal_marian" else "textkit"
            self.table = jnp.asarray(sinusoidal_positions(rows, self.features, layout))
        elif self.kind != "none":
            raise ValueError(f"unknown positions kind {self.kind!r}; expected one of "
                             f"{POSITION_KINDS}")

    def __call__(self, x: Array, positions: Array) -> Array:
        if self.kind == "none":
            return x
        if self.offset:
            positions = positions + self.offset
        rows = lookup(self.table, positions, "positions", "the max_len positions")
        return x + rows.astype(x.dtype)


_UNIFORM_LEVELS = 2 ** 16


def _mix32(x: Array) -> Array:
    """A bijective avalanche mix of uint32 words (C. Wellons' "lowbias32"): uint32[...]."""
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def counter_bits16(rng: Array, count: int) -> Array:
    """``count`` random 16-bit words uint16[count] from ``rng`` (any JAX key): a counter-based
    hash of each word's index, seeded by two 32-bit words drawn from ``rng``.

    Each 32-bit hash ``mix(mix(i ^ s0) ^ s1)`` of counter ``i`` gives two 16-bit words. The
    only keyed random draw is the two seed words, so the cost is a few integer operations per
    element (threefry, ``jax.random.bits``, runs 20 rounds per pair of words). Under ``jit``
    with sharded inputs the counters are global positions, so every device draws different
    words and the result does not depend on the sharding."""
    if count > 2 ** 33:
        raise ValueError(f"counter_bits16 draws at most 2**33 words, asked for {count}")
    seed = jax.random.bits(rng, (2,), jnp.uint32)
    counters = jax.lax.iota(jnp.uint32, (count + 1) // 2)
    words = _mix32(_mix32(counters ^ seed[0]) ^ seed[1])                   # uint32[ceil(n/2)]
    return jax.lax.bitcast_convert_type(words, jnp.uint16).reshape(-1)[:count]


def dropout(x: Array, rate: float, rng: Array, broadcast_dims: tuple[int, ...] = ()) -> Array:
    """Inverted dropout: zero each element of ``x`` [...] with probability ``rate`` and scale
    the others by 1 / (keep probability); same shape and dtype. Along ``broadcast_dims`` one
    decision is shared (e.g. ``(1,)`` on [B, T, D]: one mask per sequence, locked over time).

    Each element compares one 16-bit word of ``counter_bits16`` with the threshold. ``rate`` is
    therefore rounded to a multiple of 2**-16 (0.1 becomes 0.100006) and the scale uses that
    rounded rate, so the expectation is exact.
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
    threshold = round(rate * _UNIFORM_LEVELS)
    if threshold == 0:
        return x
    shape = tuple(1 if axis in broadcast_dims else size for axis, size in enumerate(x.shape))
    keep = counter_bits16(rng, math.prod(shape)).reshape(shape) >= np.uint16(threshold)
    scale = np.float32(_UNIFORM_LEVELS / (_UNIFORM_LEVELS - threshold))
    return jnp.where(keep, x * scale.astype(x.dtype), jnp.zeros((), x.dtype))


class Dropout(nn.Module):
    """``dropout`` as a module (flax ``nn.Dropout``'s interface): takes its key from the
    "dropout" rng collection; the identity when ``deterministic`` or ``rate == 0``."""

    rate: float
    broadcast_dims: tuple[int, ...] = ()

    @nn.compact
    def __call__(self, x: Array, *, deterministic: bool) -> Array:
        if deterministic or self.rate == 0.0:
            return x
        return dropout(x, self.rate, self.make_rng("dropout"), self.broadcast_dims)


ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "relu": jax.nn.relu,
    "gelu": functools.partial(jax.nn.gelu, approximate=False),   # erf form (torch's default)
    "gelu_new": functools.partial(jax.nn.gelu, approximate=True),  # tanh approximation
    "gelu_pytorch_tanh": functools.partial(jax.nn.gelu, approximate=True),  # the same
    "swish": jax.nn.silu,
    "silu": jax.nn.silu,
}
"""Feed-forward activations by name (Hugging Face's ``activation_function`` names)."""


class FeedForward(nn.Module):
    """Position-wise ``Dense(d_ff) -> activation -> dropout -> Dense(d_model)``: [..., D] in the
    activation dtype.

    ``activation`` is a key of ``ACTIVATIONS`` (default "relu"). ``gated``: a gated linear unit
    (ModernBERT's GeGLU), ``wi`` [D, 2, d_ff] gives an input and a gate, ``act(input) * gate``;
    ``use_bias=False`` drops both biases."""

    d_ff: int
    dropout_rate: float = 0.0
    policy: Policy = Policy()
    activation: str = "relu"
    gated: bool = False
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: Array, *, deterministic: bool = True) -> Array:
        dense = dict(policy=self.policy, use_bias=self.use_bias)
        act = ACTIVATIONS[self.activation]
        if self.gated:
            h = Dense((2, self.d_ff), batch_axes=(0,), name="wi", **dense)(x)
            h = act(h[..., 0, :]) * h[..., 1, :]
        else:
            h = act(Dense(self.d_ff, name="wi", **dense)(x))
        h = Dropout(self.dropout_rate)(h, deterministic=deterministic)
        return Dense(x.shape[-1], name="wo", **dense)(h)

