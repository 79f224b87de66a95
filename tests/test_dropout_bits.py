"""The counter-based random words behind ``dropout`` (``layers.counter_bits16``): the keep rate,
uniform words, independence across neighbouring elements, steps and devices, and
reproducibility from the seed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from subprocesses import cpu_env

from textkit.models.layers import counter_bits16, dropout

N = 1 << 18


def _words(key: jax.Array, count: int = N) -> np.ndarray:
    return np.asarray(counter_bits16(key, count)).astype(np.int64)


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_keep_rate_within_binomial_bounds(rate):
    out = np.asarray(dropout(jnp.ones((512, 512)), rate, jax.random.PRNGKey(11)))
    dropped = (out == 0).mean()
    rounded = round(rate * 65536) / 65536
    assert abs(dropped - rounded) < 5 * np.sqrt(rounded * (1 - rounded) / out.size)
    np.testing.assert_allclose(out[out != 0], 1 / (1 - rounded), rtol=1e-6)


def test_words_are_uniform_in_both_bytes():
    words = _words(jax.random.PRNGKey(0))
    for byte in (words >> 8, words & 0xFF):            # chi-square over 256 cells, 255 dof
        counts = np.bincount(byte, minlength=256)
        expected = len(words) / 256
        chi2 = ((counts - expected) ** 2 / expected).sum()
        assert 180 < chi2 < 345, chi2                   # about the 0.1 % and 99.9 % quantiles


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1])


def test_neighbouring_words_and_steps_are_uncorrelated():
    bound = 5 / np.sqrt(N)
    key = jax.random.PRNGKey(5)
    words = _words(key)
    assert abs(_corr(words[:-1], words[1:])) < bound   # the two halves of one hash, and the next
    assert abs(_corr(words[:-2], words[2:])) < bound
    steps = [_words(jax.random.fold_in(key, step)) for step in range(3)]
    for a, b in [(0, 1), (1, 2), (0, 2)]:
        assert abs(_corr(steps[a], steps[b])) < bound
        masks = (steps[a] >= 6554), (steps[b] >= 6554)  # dropout's keep decisions at rate 0.1
        assert abs(_corr(*masks)) < bound


def test_reproducible_from_the_seed_and_prefix_stable():
    key = jax.random.PRNGKey(7)
    np.testing.assert_array_equal(_words(key, 1001), _words(key, 1001))
    np.testing.assert_array_equal(_words(key, 1001), _words(key, 4000)[:1001])
    assert not np.array_equal(_words(key, 1001), _words(jax.random.PRNGKey(8), 1001))
    typed = jax.random.key(7)                           # new-style typed keys work too
    assert counter_bits16(typed, 10).dtype == jnp.uint16


def test_sharded_dropout_equals_unsharded_and_devices_differ():
    """On two CPU devices, dropout of a batch sharded over them is the one-device result: each
    device draws its own counters, not a copy of the other's mask."""
    script = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec
        from textkit.models.layers import dropout
        mesh = Mesh(np.array(jax.devices()), ("data",))
        x = jnp.ones((8, 64, 32))
        key = jax.random.PRNGKey(3)
        step = jax.jit(lambda x, k: dropout(x, 0.5, k),
                       out_shardings=NamedSharding(mesh, PartitionSpec("data")))
        sharded = jax.device_put(x, NamedSharding(mesh, PartitionSpec("data")))
        out = step(sharded, key)
        assert len(out.sharding.device_set) == 2
        alone = jax.jit(dropout, static_argnums=1)(x, 0.5, key)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(alone))
        halves = np.asarray(out).reshape(2, -1)
        assert not np.array_equal(halves[0], halves[1])
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], env=cpu_env(2), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]
