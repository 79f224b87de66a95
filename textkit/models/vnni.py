"""An unsigned x signed int8 matrix product that reaches XLA:CPU's VNNI kernel.

XLA:CPU multiplies int8 x int8 -> int32 by widening to int16 (no VNNI), but has a kernel for
*unsigned* x *signed* int8 that uses the CPU's int8 dot-product instructions (``avx512_vnni``,
``avx_vnni``). ``jax.lax.dot_general`` cannot ask for it: mixed int8 operands are promoted to
int32 before XLA sees them. ``mixed_int8_dot`` is a small primitive whose lowering emits the
mixed ``stablehlo.dot_general`` unchanged.

It is exact: int32 sums of byte products, as the int32 reference computes them. Callers shift
symmetric int8 activations ``q`` in [-127, 127] by +128 into unsigned bytes ``u = q + 128`` and
subtract ``128 * sum(w)`` over the contraction (``kernels.int8_matmul``; the sums are made once
by ``kernels.quantize_int8``): ``u . w - 128 * sum(w) = q . w``.

Inference only (no gradient, no batching rule); two-dimensional operands with one contracting
axis each, one of them uint8 and the other int8. XLA:CPU refuses (an internal error at compile
time) a mixed product whose result it would transpose in place, so the two forms textkit uses
are kept as computed: ``[N, A] x [M, A] -> [N, M]`` and ``[M, A] x [N, A] -> [M, N]`` (and the
``[A, M]`` weight layouts of the same).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core
from jax.extend.mlir.dialects import stablehlo
from jax.interpreters import mlir

__all__ = ["mixed_int8_dot"]

_dot = core.Primitive("mixed_int8_dot")


def mixed_int8_dot(lhs: jax.Array, rhs: jax.Array, contracting: tuple[int, int]) -> jax.Array:
    """lhs [P, A] (or [A, P]) times rhs [Q, A] (or [A, Q]), one uint8 and one int8, contracted
    on axes ``contracting = (lhs axis, rhs axis)`` -> int32 [P, Q]."""
    dtypes = {jnp.dtype(lhs.dtype), jnp.dtype(rhs.dtype)}
    if dtypes != {jnp.dtype(jnp.uint8), jnp.dtype(jnp.int8)} or lhs.ndim != 2 or rhs.ndim != 2:
        raise ValueError(f"mixed_int8_dot takes a 2-D uint8 and a 2-D int8 operand; got "
                         f"{lhs.dtype}{list(lhs.shape)} and {rhs.dtype}{list(rhs.shape)}")
    left, right = contracting
    if lhs.shape[left] != rhs.shape[right]:
        raise ValueError(f"contracting axes differ: {lhs.shape[left]} and {rhs.shape[right]}")
    return _dot.bind(lhs, rhs, contracting=(int(left), int(right)))


def _abstract(lhs, rhs, *, contracting):
    left, right = contracting
    return jax.core.ShapedArray((lhs.shape[1 - left], rhs.shape[1 - right]), np.int32)


def _lower(ctx, lhs, rhs, *, contracting):
    numbers = stablehlo.DotDimensionNumbers.get(
        lhs_batching_dimensions=[], rhs_batching_dimensions=[],
        lhs_contracting_dimensions=[contracting[0]], rhs_contracting_dimensions=[contracting[1]])
    result = mlir.aval_to_ir_type(ctx.module_context, ctx.avals_out[0])
    return [stablehlo.DotGeneralOp(result, lhs, rhs, numbers).result]


def _reference(lhs, rhs, *, contracting):
    """Eager calls run the same program as under ``jax.jit``."""
    return jax.jit(lambda a, b: _dot.bind(a, b, contracting=contracting))(lhs, rhs)


_dot.def_abstract_eval(_abstract)
_dot.def_impl(_reference)
mlir.register_lowering(_dot, _lower)
