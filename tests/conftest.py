"""One JAX persistent compilation cache per test session.

Many tests compile the same programs again: the recipes' subprocesses (a run, its second run,
its resume), equal models built by different tests, the benchmarks' smoke runs. A cache in a
fresh temporary directory, made when the session starts and removed when it ends, lets every
process of the session (xdist workers and the subprocesses they start inherit the variable)
load a program another process compiled, instead of compiling it again. Nothing carries over
from one session to the next, so no result depends on an earlier run. A cache directory
already set in the environment is used as it is (and kept).

XLA:CPU's LLVM back end at optimisation level 0 (``XLA_FLAGS``, inherited by the subprocesses
too). The suite's models are tiny: most of its time was compiling, and level 0 compiles about
twice as fast while the programs stay the same HLO (XLA's graph passes still run; only LLVM's
machine-code optimisation is skipped, which changes speed, not IEEE results). Timings are never
asserted, so nothing checked depends on it. A level already given in ``XLA_FLAGS`` is kept.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

_CACHE = "JAX_COMPILATION_CACHE_DIR"
_made: str | None = None
FAST_COMPILE = "--xla_backend_optimization_level=0"


def with_fast_compile(flags: str) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) with LLVM optimisation level 0, unless a level is
    already given."""
    if "xla_backend_optimization_level" in flags:
        return flags
    return f"{flags} {FAST_COMPILE}".strip()


def pytest_configure(config):
    global _made
    if not os.environ.get(_CACHE):
        _made = tempfile.mkdtemp(prefix="textkit-jax-cache-")
        os.environ[_CACHE] = _made
    os.environ["XLA_FLAGS"] = with_fast_compile(os.environ.get("XLA_FLAGS", ""))
    if "jax" in sys.modules:                  # imported before this file: set it directly
        sys.modules["jax"].config.update("jax_compilation_cache_dir", os.environ[_CACHE])


def pytest_unconfigure(config):
    if _made is not None:
        shutil.rmtree(_made, ignore_errors=True)
