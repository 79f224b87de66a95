"""XLA:CPU's LLVM back end at optimisation level 0 for the whole test session, and the slowest
files handed to the xdist workers first (``LONGEST_FIRST``), and a worker's compiled programs
dropped when a file ends with the worker grown large.

``XLA_FLAGS`` is set when the session starts, so the xdist workers and the subprocesses they
start (recipes, benchmarks) inherit it. The suite's models are tiny: most of its time is
compiling, and level 0 compiles about twice as fast while the programs stay the same HLO (XLA's
graph passes still run; only LLVM's machine-code optimisation is skipped, which changes speed,
not IEEE results). Where this jaxlib still offers it (0.10 does; 0.12 dropped the flag), fusions
are also compiled by XLA:CPU's elemental IR emitter instead of its MLIR fusion emitters, which
build an MLIR context and pass pipeline per fusion: five compile-bound test files took 341 s
against 432 s, a quick decode benchmark 24 s against 30 s. Timings are never asserted, so
nothing checked depends on either. A flag already given in ``XLA_FLAGS`` is kept.

The processes the tests start (recipes, commands, benchmarks) share their compiled programs
through JAX's persistent compilation cache in one temporary folder for the session
(``share_compiled_programs``): the recipe tests run the same toy configurations again and again,
and a program compiled once is read back in every later process. The xdist workers themselves
keep it off: its writes (``executable.serialize()``) were one of the two places where a
long-lived worker crashed (see ``_drop_compiled_programs``), and a crashed xdist worker once left
the session hanging until CI's time limit.
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from subprocesses import FAST_COMPILE


def xla_accepts(flag: str) -> bool:
    """Whether this jaxlib's XLA knows ``flag`` (an unknown ``XLA_FLAGS`` entry aborts the
    process that reads it, so a child process is asked)."""
    env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
    code = "import jax; jax.numpy.zeros(1).block_until_ready()"
    probe = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           timeout=300)
    return probe.returncode == 0


def with_fast_compile(flags: str) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) with each of ``FAST_COMPILE`` that is not already
    given and that this jaxlib knows."""
    for name, value in FAST_COMPILE.items():
        if name not in flags and xla_accepts(f"{name}={value}"):
            flags = f"{flags} {name}={value}"
    return flags.strip()


# JAX's persistent cache settings for the processes the tests start: every program is kept
# (none is too quick or too small), and a size limit turns on JAX's file lock, so that two
# processes writing and reading one entry at once never see half a file
CACHE_SETTINGS = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    "JAX_COMPILATION_CACHE_MAX_SIZE": str(8 * 2**30),
}


def share_compiled_programs(config) -> None:
    """Point the processes the tests start at one compilation cache folder for the session
    (made by the controlling process, inherited by the xdist workers and their children, removed
    when the session ends); a folder the caller already set is kept. This process and the
    workers do not use it themselves."""
    if not hasattr(config, "workerinput") and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        folder = tempfile.mkdtemp(prefix="textkit-tests-compiled-")
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
        os.environ["JAX_COMPILATION_CACHE_DIR"] = folder
        for name, value in CACHE_SETTINGS.items():
            os.environ.setdefault(name, value)
    import jax

    jax.config.update("jax_enable_compilation_cache", False)


def pytest_configure(config):
    if not hasattr(config, "workerinput"):      # the xdist workers inherit the controller's
        os.environ["XLA_FLAGS"] = with_fast_compile(os.environ.get("XLA_FLAGS", ""))
    share_compiled_programs(config)
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
