"""XLA:CPU's LLVM back end at optimisation level 0 for the whole test session.

``XLA_FLAGS`` is set when the session starts, so the xdist workers and the subprocesses they
start (recipes, benchmarks) inherit it. The suite's models are tiny: most of its time is
compiling, and level 0 compiles about twice as fast while the programs stay the same HLO (XLA's
graph passes still run; only LLVM's machine-code optimisation is skipped, which changes speed,
not IEEE results). Timings are never asserted, so nothing checked depends on it. A level
already given in ``XLA_FLAGS`` is kept.

No persistent compilation cache: with jax 0.10.2 on CPU, writing a decoding program to it
(``executable.serialize()``) while the previous batch's program still ran crashed the process
(a segmentation fault in ``put_executable_and_time``, seen three times in full runs), and a
crashed xdist worker left the session hanging until CI's time limit.
"""

from __future__ import annotations

import os

FAST_COMPILE = "--xla_backend_optimization_level=0"


def with_fast_compile(flags: str) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) with LLVM optimisation level 0, unless a level is
    already given."""
    if "xla_backend_optimization_level" in flags:
        return flags
    return f"{flags} {FAST_COMPILE}".strip()


def pytest_configure(config):
    os.environ["XLA_FLAGS"] = with_fast_compile(os.environ.get("XLA_FLAGS", ""))
