"""The unsigned x signed int8 product primitive (``textkit.models.vnni``): exact against the
int64 reference in both contraction forms, and refused for other operands."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.models.vnni import mixed_int8_dot


@pytest.mark.parametrize("shape", [(1, 7, 5), (2, 64, 48), (16, 513, 33), (64, 1100, 128)])
@pytest.mark.parametrize("form", ["rows", "columns", "rows_weight_first", "columns_weight_first"])
def test_exact_against_the_integer_reference(shape, form):
    rows, depth, cols = shape
    rng = np.random.default_rng(depth)
    unsigned = rng.integers(0, 256, (rows, depth)).astype(np.uint8)
    signed = rng.integers(-128, 128, (cols, depth)).astype(np.int8)
    expected = unsigned.astype(np.int64) @ signed.T.astype(np.int64)              # [N, M]
    if form == "rows":                    # [N, A] x [M, A] -> [N, M]
        out = jax.jit(lambda u, s: mixed_int8_dot(u, s, (1, 1)))(unsigned, signed)
    elif form == "columns":               # [M, A] x [N, A] -> [M, N]
        out = jax.jit(lambda u, s: mixed_int8_dot(s, u, (1, 1)))(unsigned, signed)
        expected = expected.T
    elif form == "rows_weight_first":     # [N, A] x [A, M] -> [N, M]
        out = jax.jit(lambda u, s: mixed_int8_dot(u, s, (1, 0)))(unsigned, signed.T.copy())
    else:                                 # [A, M] x [N, A] -> [M, N]
        out = jax.jit(lambda u, s: mixed_int8_dot(s, u, (0, 1)))(unsigned, signed.T.copy())
        expected = expected.T
    assert out.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_eager_call_equals_jitted():
    unsigned = np.full((3, 4), 255, np.uint8)
    signed = np.full((2, 4), -128, np.int8)
    np.testing.assert_array_equal(mixed_int8_dot(unsigned, signed, (1, 1)),
                                  np.full((3, 2), 4 * 255 * -128))


@pytest.mark.parametrize("lhs, rhs, message", [
    (np.zeros((2, 4), np.int8), np.zeros((3, 4), np.int8), "uint8 and a 2-D int8"),
    (np.zeros((2, 4), np.uint8), np.zeros((3, 4, 1), np.int8), "uint8 and a 2-D int8"),
    (np.zeros((2, 4), np.uint8), np.zeros((3, 5), np.int8), "contracting axes differ"),
])
def test_other_operands_are_refused(lhs, rhs, message):
    with pytest.raises(ValueError, match=message):
        mixed_int8_dot(jnp.asarray(lhs), jnp.asarray(rhs), (1, 1))
