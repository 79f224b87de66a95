"""Low-level kernels of the models, in one module: the mixed-precision einsum, the int8 matmul
and weight quantization, and the CPU feature checks that choose between dot forms.

**Mixed precision** (DESIGN.md rule 3): ``mixed_einsum`` casts both operands to the policy's
compute dtype and accumulates into a float32 result (``preferred_element_type=float32``). It
also keeps the *backward* matmuls in the compute dtype: plain autodiff would multiply the float32
cotangent with the bfloat16 operand, which XLA runs as a float32 (or slower mixed) matmul, losing
most of the mixed-precision speed-up. Where the backend has no fast low-precision dot (XLA:CPU
without bf16 dot instructions, see ``native_low_precision_dots``) the rounded operands are
multiplied in float32: the same products, at the float32 kernel's speed.

**Int8 weights for CPU inference**: ``quantize_int8(model, params)``. Every layer that declares
an int8 weight (``Int8Layer``: ``layers.Dense``'s kernel, ``layers.Embed``'s table) gets it as
int8 values with a float32 scale per output column (kernel, ``kernel_scale``) or per row
(table, ``embedding_scale``): symmetric, ``round(w / scale)`` with ``scale = max|w| / 127``.
The values are held in int8 or, where that multiplies faster, bfloat16 (``int8_carrier``); the
uint8 carrier keeps int8 values and each output column's sum (``<weight>_sum``) for the VNNI
product. At apply time a layer with a scale beside its weight quantizes its input too, one
symmetric scale per row (``int8_matmul``), so the product is one of int8 values: an int8 x int8
-> int32 dot, the same values as bfloat16 with float32 sums, or (uint8 carrier) the input
shifted into unsigned bytes times the int8 weight (``vnni.mixed_int8_dot``: XLA:CPU's VNNI
kernel), rescaled to float32.
Everything else (layer norms, biases, attention products, softmax, LSTM weights) stays as it
was. Inference only: there is no gradient through the rounding. Which parameters belong to such
a layer is read from the model itself (one abstract forward pass with
``flax.linen.intercept_methods``), not guessed from names.

**The host CPU** as Linux describes it in ``/proc/cpuinfo`` (``model_and_flags``,
``has_bf16_dots``). Elsewhere (macOS, Windows) both are empty, and callers fall back to what
works on any CPU.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "BF16_CARRIER_MIN_ROWS", "INT8_MAX", "Int8Layer", "VNNI_CARRIER_MIN_ROWS", "has_amx_int8",
    "has_bf16_dots", "has_vnni", "int8_carrier",
    "int8_matmul", "mixed_einsum", "model_and_flags", "native_low_precision_dots",
    "quantize_int8", "symmetric_int8",
]

Array = jax.Array
PyTree = Any


# ------------------------------------------------------------------------------- host CPU
CPUINFO = Path("/proc/cpuinfo")


@functools.cache
def model_and_flags() -> tuple[str | None, frozenset[str]]:
    """(model name or None, feature flags) of the first processor ``CPUINFO`` lists."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return None, frozenset()
    model, flags = None, frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model is None:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = frozenset(value.split())
    return model, flags


def has_vnni() -> bool:
    """Whether the CPU has int8 dot-product instructions (``avx512_vnni`` or ``avx_vnni``),
    which XLA:CPU uses for unsigned x signed int8 matmuls (``vnni.mixed_int8_dot``)."""
    return bool(model_and_flags()[1] & {"avx512_vnni", "avx_vnni"})


def has_amx_int8() -> bool:
    """Whether the CPU has AMX int8 tile instructions (``amx_int8``). There XLA:CPU's
    int8 x int8 -> int32 dot was measured fastest at every row count (``int8_dot.py``; its
    rate suggests the tiles, not traced)."""
    return "amx_int8" in model_and_flags()[1]


def has_bf16_dots() -> bool:
    """Whether the CPU has bfloat16 dot-product instructions (``avx512_bf16`` or ``amx_bf16``),
    which XLA:CPU uses for bfloat16 x bfloat16 -> float32 matmuls."""
    return bool(model_and_flags()[1] & {"avx512_bf16", "amx_bf16"})


# ------------------------------------------------------------------------ mixed precision
def _is_float32(dtype: Any) -> bool:
    return np.dtype(dtype) == np.dtype(np.float32)


def native_low_precision_dots(dtype: Any) -> bool:
    """Whether ``dtype x dtype -> float32`` matmuls run as native dots.

    True on every backend but XLA:CPU. There only for bfloat16, and only on a CPU with bf16 dot
    instructions (``has_bf16_dots``): without them the bfloat16 dot is slower than
    the float32 dot of the same shape (see ``benchmarks/train_step.py``), and float16 has no fast
    CPU dot. Otherwise the operands, already rounded to ``dtype``, are multiplied as float32: the
    same products (the product of two bfloat16 or float16 values is exact in float32),
    accumulated in float32 either way.
    """
    if jax.default_backend() != "cpu":
        return True
    return np.dtype(dtype) == np.dtype(jnp.bfloat16) and has_bf16_dots()


def _einsum_f32(spec: str, a: Array, b: Array) -> Array:
    """``einsum`` of compute-dtype operands with a float32 result (see
    ``native_low_precision_dots``)."""
    if not native_low_precision_dots(a.dtype):
        a, b = a.astype(jnp.float32), b.astype(jnp.float32)
    return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 3))
def _low_precision_einsum(spec: str, x: Array, y: Array, compute_dtype: Any) -> Array:
    return _einsum_f32(spec, x.astype(compute_dtype), y.astype(compute_dtype))


def _low_precision_einsum_fwd(spec, x, y, compute_dtype):
    xc, yc = x.astype(compute_dtype), y.astype(compute_dtype)
    out = _einsum_f32(spec, xc, yc)
    # Residuals keep the compute-dtype copies (half the memory in bf16) and the input dtypes.
    return out, (xc, yc, jnp.zeros((), x.dtype), jnp.zeros((), y.dtype))


def _rows_contracted(spec: str, a: Array, b: Array) -> Array:
    """``_einsum_f32(spec, a, b)`` for a matrix product that contracts the rows of both
    operands (``"za,zb->ab"``: a dense layer's weight gradient). XLA:CPU's fast dot library
    (YNNPACK) does not take that layout, and XLA then runs a bfloat16 product with float32
    operands, no faster than float32. With native bfloat16 dots, ``a`` is transposed here
    into [a, z] and flattened behind an optimization barrier (a plain or barrier-held
    transpose is folded back or handed on with float32 operands), so the product runs as a
    row-major [M, K] x [K, N] bfloat16 dot (``benchmarks/grad_dots.py``)."""
    inputs, out = spec.split("->")
    first, second = inputs.split(",")
    if not (a.ndim == b.ndim == 2 and first[0] == second[0] and out == first[1] + second[1]
            and native_low_precision_dots(a.dtype) and jax.default_backend() == "cpu"):
        return _einsum_f32(spec, a, b)
    flat = jax.lax.optimization_barrier(a.T.reshape(-1))                        # [M * K]
    return jnp.einsum("mk,kn->mn", flat.reshape(a.shape[1], a.shape[0]), b,
                      preferred_element_type=jnp.float32)                       # [M, N]


def _low_precision_einsum_bwd(spec, compute_dtype, residuals, grad):
    xc, yc, x_proto, y_proto = residuals
    inputs, out = spec.split("->")
    x_spec, y_spec = inputs.split(",")
    g = grad.astype(compute_dtype)
    dx = _einsum_f32(f"{out},{y_spec}->{x_spec}", g, yc)
    dy = _rows_contracted(f"{x_spec},{out}->{y_spec}", xc, g)
    return dx.astype(x_proto.dtype), dy.astype(y_proto.dtype)


_low_precision_einsum.defvjp(_low_precision_einsum_fwd, _low_precision_einsum_bwd)


def mixed_einsum(spec: str, x: Array, y: Array, compute_dtype: Any) -> Array:
    """Two-operand ``einsum`` with operands in ``compute_dtype`` and a float32 result.

    ``spec`` is an explicit two-operand spec (``"...d,dhk->...hk"``) in which every index of an
    operand also appears in the other operand or the output. Gradients are computed with the
    cotangent cast to ``compute_dtype`` (again accumulating in float32) and returned in each
    operand's own dtype.
    """
    if _is_float32(compute_dtype):
        return jnp.einsum(spec, x.astype(jnp.float32), y.astype(jnp.float32))
    return _low_precision_einsum(spec, x, y, compute_dtype)


# ------------------------------------------------------------------------------- int8
INT8_MAX = 127.0


def symmetric_int8(x: jax.Array, axis: int | tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """(int8 values, float32 scale) with ``x ~= values * scale``; the scale is
    ``max|x| / 127`` over ``axis`` (kept as size-1 axes; 1 where that max is 0). Values are
    ``round(x * 127 / max|x|)``: within [-127, 127] without a clip."""
    x = x.astype(jnp.float32)
    peak = jnp.max(jnp.abs(x), axis=axis, keepdims=True)
    values = jnp.round(x * jnp.where(peak > 0, INT8_MAX / peak, 0.0)).astype(jnp.int8)
    return values, jnp.where(peak > 0, peak / INT8_MAX, 1.0)


BF16_CARRIER_MIN_ROWS = 48
"""Rows (a decoding step's sentences x beams) from which XLA:CPU multiplies int8 values
faster as bfloat16 (``int8_carrier``); ``benchmarks/int8_dot.py`` measures the crossover."""


def require_int8_backend() -> None:
    """Refuse ``quantize="int8"`` off the CPU: the int8 products are XLA:CPU's (int8 or
    bfloat16 carriers); on a GPU or TPU a bfloat16 policy is the fast inference path."""
    backend = jax.default_backend()
    if backend != "cpu":
        raise ValueError(f"quantize='int8' is CPU inference and JAX runs on {backend!r}: use "
                         f"a bfloat16 policy there (precision 'mixed_bfloat16') instead")


VNNI_CARRIER_MIN_ROWS = 1
"""Rows from which the uint8 carrier (the VNNI product) replaces the int8 and bfloat16 ones on
a CPU with VNNI (``int8_carrier``); ``benchmarks/int8_dot.py`` measures the crossover."""


def int8_carrier(rows: int) -> Any:
    """The dtype that holds int8 weight values for the fastest product with ``rows`` input rows
    (``quantize_int8``'s ``carrier``), on XLA:CPU: int8 at every row count on a CPU with AMX
    int8 tiles (``has_amx_int8``); else uint8 (int8 values, the VNNI product) on a CPU with
    VNNI (``has_vnni``) from ``VNNI_CARRIER_MIN_ROWS`` rows; else bfloat16 on a CPU with bf16
    dot instructions (``has_bf16_dots``) from ``BF16_CARRIER_MIN_ROWS`` rows; int8 otherwise.
    Every int8 value is exact in bfloat16; without AMX, XLA:CPU's int8 x int8 -> int32 dot
    does not use the CPU's int8 dot-product instructions, and its bfloat16 dot overtakes it
    once there are enough rows."""
    if jax.default_backend() != "cpu" or has_amx_int8():
        return jnp.int8
    if rows >= VNNI_CARRIER_MIN_ROWS and has_vnni():
        return jnp.uint8
    if rows >= BF16_CARRIER_MIN_ROWS and has_bf16_dots():
        return jnp.bfloat16
    return jnp.int8


def int8_matmul(x: jax.Array, weight: jax.Array, weight_scale: jax.Array, *,
                weight_sum: jax.Array | None = None, transposed: bool = False,
                columns: bool = False) -> jax.Array:
    """x float[N, A] times int8-valued weight [A, M] (``transposed``: [M, A]) with float32
    ``weight_scale`` [M] -> float32 [N, M] (``columns``: its transpose [M, N], computed as such).

    x is quantized per row (``symmetric_int8``) and multiplied with the weight's int8 values in
    the weight's carrier dtype (``int8_carrier``):

    - int8: an int8 x int8 -> int32 dot. A single row is multiplied as two (a zero row added):
      XLA:CPU runs a one-row integer dot in a slow generic loop, up to tens of times slower
      than two rows (one-sentence greedy decoding, a beam search's first step for one sentence).
      With ``weight_sum`` (int32 [M], each column's sum of int8 values: the uint8 carrier),
      x's values are shifted into unsigned bytes and multiplied by ``vnni.mixed_int8_dot``
      (the VNNI kernel), ``128 * weight_sum`` subtracted: the same int32 result.
    - bfloat16: a bfloat16 x bfloat16 -> float32 dot of the same int8 values. Each product is
      exact and so is every partial sum below 2**24 in magnitude, which an ``A`` up to
      2**24 / 127**2 (1,040) guarantees: the same result as the int32 dot; a longer row can
      differ from it only by float32 rounding of sums beyond 2**24.

    Differentiable in x (not in the weight): the gradient passes straight through the rounding
    of x and is that of x times the dequantized weight (QLoRA's backward), so adapters trained
    beside a frozen int8 base get their gradients.
    """
    return _int8_matmul(x, weight, weight_scale, weight_sum, transposed, columns)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _int8_matmul(x: jax.Array, weight: jax.Array, weight_scale: jax.Array,
                 weight_sum: jax.Array | None, transposed: bool, columns: bool) -> jax.Array:
    return _int8_product(x, weight, weight_scale, weight_sum, transposed, columns)


def _int8_matmul_forward(x, weight, weight_scale, weight_sum, transposed, columns):
    out = _int8_product(x, weight, weight_scale, weight_sum, transposed, columns)
    return out, (weight, weight_scale, jnp.zeros((0,), x.dtype))


def _int8_matmul_backward(transposed, columns, residuals, grad):
    weight, weight_scale, like = residuals
    scale = weight_scale.astype(jnp.float32)
    dequantized = weight.astype(jnp.float32) * (scale[:, None] if transposed
                                                else scale[None, :])   # [M, A] or [A, M]
    grad = grad.T if columns else grad                                  # [N, M]
    dx = grad @ dequantized if transposed else grad @ dequantized.T     # [N, A]
    return dx.astype(like.dtype), None, None, None


_int8_matmul.defvjp(_int8_matmul_forward, _int8_matmul_backward)


def _int8_product(x: jax.Array, weight: jax.Array, weight_scale: jax.Array,
                  weight_sum: jax.Array | None, transposed: bool, columns: bool) -> jax.Array:
    """``int8_matmul``'s forward product."""
    weight_axis = 1 if transposed else 0
    scale = weight_scale.astype(jnp.float32)
    integer = weight.dtype == jnp.int8
    xq, x_scale = symmetric_int8(x, axis=1)                                    # [N, A], [N, 1]
    single = integer and xq.shape[0] == 1
    if single:
        xq = jnp.pad(xq, ((0, 1), (0, 0)))                                     # [2, A]
    if weight_sum is not None:
        acc = _vnni_product(xq, weight, weight_sum, weight_axis, columns)      # int32
    else:
        xq = xq if integer else xq.astype(weight.dtype)                        # exact
        accumulator = jnp.int32 if integer else jnp.float32
        if columns:
            acc = jax.lax.dot_general(weight, xq, (((weight_axis,), (1,)), ((), ())),
                                      preferred_element_type=accumulator)      # [M, N]
        else:
            acc = jax.lax.dot_general(xq, weight, (((1,), (weight_axis,)), ((), ())),
                                      preferred_element_type=accumulator)      # [N, M]
    if columns:
        acc = acc[:, :1] if single else acc
        return acc.astype(jnp.float32) * x_scale[:, 0] * scale[:, None]
    acc = acc[:1] if single else acc
    return acc.astype(jnp.float32) * x_scale * scale


def _vnni_product(xq: jax.Array, weight: jax.Array, weight_sum: jax.Array, weight_axis: int,
                  columns: bool) -> jax.Array:
    """int8 xq [N, A] times int8 weight (A on ``weight_axis``) through the unsigned x signed
    VNNI product: int32 [N, M] (``columns``: [M, N])."""
    from textkit.models.vnni import mixed_int8_dot

    unsigned = (xq.astype(jnp.int16) + 128).astype(jnp.uint8)                 # [N, A]
    shift = 128 * weight_sum.astype(jnp.int32)                                  # [M]
    acc = mixed_int8_dot(unsigned, weight, (1, weight_axis)) - shift[None, :]  # [N, M]
    if columns:
        # The weight-first product runs in a slow loop on XLA:CPU, and a transpose folded
        # into the mixed product fails to compile: transposed after a barrier instead.
        return jax.lax.optimization_barrier(acc).T                             # [M, N]
    return acc


@runtime_checkable
class Int8Layer(Protocol):
    """A layer whose weight ``quantize_int8`` may make int8 (``layers.Dense``, ``layers.Embed``);
    at apply time it reads the int8 weight and its ``<name>_scale`` (``int8_matmul``)."""

    def int8_weight(self) -> tuple[str, tuple[int, ...]]:
        """(name of the weight parameter, the axes of it that one float32 scale spans); the
        scale is stored as ``<name>_scale``, shaped as the weight without those axes. Must be
        ``flax.linen.nowrap`` (called outside the module's scope)."""


def _layer_paths(model: nn.Module, params: PyTree, *example: jax.Array) -> dict[tuple, Any]:
    """Module path -> the ``Int8Layer`` instance at it, for every one the forward pass
    ``model.apply(params, *example)`` calls."""
    found: dict[tuple, Any] = {}

    def record(next_fun, args, kwargs, context):
        if isinstance(context.module, Int8Layer):
            found[tuple(context.module.path)] = context.module
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
        jax.eval_shape(lambda p: model.apply({"params": p}, *example), params)
    return found


def quantize_int8(model: nn.Module, params: PyTree, *example: jax.Array,
                  carrier: Any = jnp.int8) -> PyTree:
    """Copy of ``params`` with the weight of every ``Int8Layer`` (``Dense`` kernels, ``Embed``
    tables) quantized to int8 values (module docstring), held in ``carrier``: int8 (the
    smallest), bfloat16 (twice the size, exact) or uint8 (int8 values with each output
    column's sum as ``<name>_sum``, for the VNNI product); ``int8_carrier`` says which
    multiplies faster on this host. ``example`` are inputs of one forward pass (default: a
    seq2seq model's ``(src_tokens, tgt_input)``, both int32[1, 8] of id 0) that reaches every
    layer to quantize. A layer already quantized (a ``<name>_scale`` beside its weight) keeps
    its values, moved to ``carrier``."""
    carrier = jnp.dtype(carrier)
    if carrier not in (jnp.dtype(jnp.int8), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.uint8)):
        raise ValueError(f"carrier={carrier}; expected int8, bfloat16 or uint8")
    if not example:
        example = (jnp.zeros((1, 8), jnp.int32),) * 2
    out = _mutable(params)                 # new dicts, the same arrays: the input is kept
    for path, module in _layer_paths(model, params, *example).items():
        node = out
        for part in path:
            node = node[part]
        name, axes = module.int8_weight()
        if f"{name}_scale" not in node:
            values, scale = symmetric_int8(node[name], axis=axes)
            node[f"{name}_scale"] = jnp.squeeze(scale, axis=axes)
        else:
            values = node[name]
        node.pop(f"{name}_sum", None)
        if carrier == jnp.dtype(jnp.uint8):
            values = values.astype(jnp.int8)
            node[name] = values
            node[f"{name}_sum"] = jnp.sum(values.astype(jnp.int32), axis=axes)
        else:
            node[name] = values.astype(carrier)
    return out


def _mutable(tree: PyTree) -> PyTree:
    """Nested dicts (flax FrozenDicts included) as plain dicts, leaves shared."""
    if isinstance(tree, dict) or hasattr(tree, "items"):
        return {key: _mutable(value) for key, value in tree.items()}
    return tree
