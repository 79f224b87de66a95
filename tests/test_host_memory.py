"""Freed host memory kept for reuse: a program's second call faults no new pages in."""

import importlib.metadata
import os
import platform
import subprocess
import sys

import pytest

from textkit import host_memory
from textkit.host_memory import accelerator_expected, keep_freed_memory

# The gradient of a three-layer MLP on 4096 x 512 activations (about 50 MiB of temporaries),
# called 20 times after 3 warm-up calls; prints the median of the page faults per call (the
# kept heap still grows now and then while the allocations settle). ``import textkit`` comes
# after ``import jax`` (as in most user code) but before the first computation.
PROGRAM = """
import resource, statistics, jax, jax.numpy as jnp
import textkit
def loss(w, x):
    h = jnp.tanh(jnp.tanh(x @ w[0]) @ w[1])
    return jnp.mean((h @ w[2]) ** 2)
f = jax.jit(jax.grad(loss))
x, w = jnp.ones((4096, 512)), jnp.full((3, 512, 512), 1e-3)
faults = []
for _ in range(23):
    start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    f(w, x).block_until_ready()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
print(statistics.median(faults[3:]))
"""


def faults_per_call(keep: bool) -> float:
    env = {**os.environ, "TEXTKIT_KEEP_FREED_MEMORY": "1" if keep else "0"}
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                         text=True, check=True)
    return float(out.stdout.split()[-1])


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="mallopt is glibc's")
def test_import_textkit_keeps_freed_buffers_for_the_next_call():
    assert keep_freed_memory() is True
    default, kept = faults_per_call(keep=False), faults_per_call(keep=True)
    assert default > 2000                 # glibc hands the temporaries back: faulted in anew
    assert kept < 0.1 * default           # reused


def test_opt_out_and_other_platforms_leave_malloc_alone(monkeypatch):
    monkeypatch.setenv("TEXTKIT_KEEP_FREED_MEMORY", "0")
    assert keep_freed_memory() is False
    monkeypatch.delenv("TEXTKIT_KEEP_FREED_MEMORY")
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    assert keep_freed_memory() is False


def test_an_expected_accelerator_leaves_malloc_alone(monkeypatch):
    """Decided from the environment and the installed plugins, before JAX starts a client."""
    monkeypatch.delenv("JAX_PLATFORM_NAME", raising=False)
    monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
    assert accelerator_expected() is True
    assert keep_freed_memory() is False
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert accelerator_expected() is False
    monkeypatch.delenv("JAX_PLATFORMS")
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: ["cuda12"] if group == "jax_plugins" else [])
    assert host_memory.accelerator_expected() is True
