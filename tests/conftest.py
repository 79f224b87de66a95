"""XLA:CPU's LLVM back end at optimisation level 0 for the whole test session, and the slowest
files handed to the xdist workers first (``LONGEST_FIRST``), and a worker's compiled programs
dropped when a file ends with the worker grown large.

``XLA_FLAGS`` is set when the session starts, so the xdist workers and the subprocesses they
start (recipes, benchmarks) inherit it. The suite's models are tiny: most of its time is
compiling, and level 0 compiles about twice as fast while the programs stay the same HLO (XLA's
graph passes still run; only LLVM's machine-code optimisation is skipped, which changes speed,
not IEEE results). Timings are never asserted, so nothing checked depends on it. A level
already given in ``XLA_FLAGS`` is kept.

No persistent compilation cache: its writes (``executable.serialize()``) were one of the two
places where a long-lived worker crashed (see ``_drop_compiled_programs``), and a crashed xdist
worker once left the session hanging until CI's time limit.
"""

from __future__ import annotations

import gc
import os
import sys

import pytest

FAST_COMPILE = "--xla_backend_optimization_level=0"


def with_fast_compile(flags: str) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) with LLVM optimisation level 0, unless a level is
    already given."""
    if "xla_backend_optimization_level" in flags:
        return flags
    return f"{flags} {FAST_COMPILE}".strip()


def pytest_configure(config):
    os.environ["XLA_FLAGS"] = with_fast_compile(os.environ.get("XLA_FLAGS", ""))
    if hasattr(config.option, "loadscopereorder"):      # xdist: keep LONGEST_FIRST's order
        config.option.loadscopereorder = False


# The files that took longest in a full run's --junitxml times on a 2-core AVX2-only machine,
# longest first. xdist's --dist loadfile hands out whole files in collection
# order, and by default reorders them by test count, which put the slow files of few tests (the
# benchmarks' and recipes' end-to-end runs) last: one worker ran them alone at the end. Handing
# out the longest first leaves only short files for the end.
LONGEST_FIRST = (
    "test_benchmarks.py", "test_encoders.py", "test_readme.py", "test_task_contract.py",
    "test_pretraining.py", "test_candidates.py", "test_decoder_lm.py", "test_nmt_recipe.py",
    "test_main_job.py", "test_finetune_recipes.py", "test_m2m_100.py", "test_kernels.py",
    "test_pretrained.py", "test_save_faults.py", "test_t5.py", "test_gnmt.py",
    "test_parallel_recipes.py", "test_packing.py", "test_decoding_in_place.py",
    "test_bad_inputs_decoding.py", "test_command_faults.py", "test_bart.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))    # stable: the rest


# a worker whose resident memory passed this drops its compiled programs when a file ends
DROP_ABOVE_BYTES = 3 * 2**30


def resident_bytes() -> int | None:
    """This process's resident memory (Linux ``/proc/self/statm``), None where unknown."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@pytest.fixture(autouse=True, scope="module")
def _drop_compiled_programs():
    """A worker's compiled programs are dropped when a test file ends with the worker above
    ``DROP_ABOVE_BYTES`` resident (every file where that is unknown). An xdist worker lives
    for half the suite; kept, its programs grew it to 7 GB and more, and late in full runs a
    worker crashed inside XLA's compiler (a segmentation fault in ``backend_compile_and_load``
    or ``executable.serialize()``, once per full run in three runs; none in three runs that
    dropped them). Dropping them after every file instead cost 10 % more time on eight files run
    in one process (83 more compilations, 180 s against 163 s): programs that several files
    share were compiled again in each."""
    yield
    resident = resident_bytes()
    if "jax" in sys.modules and (resident is None or resident > DROP_ABOVE_BYTES):
        sys.modules["jax"].clear_caches()
        gc.collect()
