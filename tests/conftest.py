"""One JAX persistent compilation cache per test session.

Many tests compile the same programs again: the recipes' subprocesses (a run, its second run,
its resume), equal models built by different tests, the benchmarks' smoke runs. A cache in a
fresh temporary directory, made when the session starts and removed when it ends, lets every
process of the session (xdist workers and the subprocesses they start inherit the variable)
load a program another process compiled, instead of compiling it again. Nothing carries over
from one session to the next, so no result depends on an earlier run. A cache directory
already set in the environment is used as it is (and kept).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

_CACHE = "JAX_COMPILATION_CACHE_DIR"
_made: str | None = None


def pytest_configure(config):
    global _made
    if not os.environ.get(_CACHE):
        _made = tempfile.mkdtemp(prefix="textkit-jax-cache-")
        os.environ[_CACHE] = _made
    if "jax" in sys.modules:                  # imported before this file: set it directly
        sys.modules["jax"].config.update("jax_compilation_cache_dir", os.environ[_CACHE])


def pytest_unconfigure(config):
    if _made is not None:
        shutil.rmtree(_made, ignore_errors=True)
