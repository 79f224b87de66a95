"""Freed host memory kept for reuse, so that XLA:CPU's per-call buffers are not faulted in anew.

XLA:CPU allocates the buffers of every program call afresh with ``malloc`` and frees them when
the call ends. glibc hands blocks of more than a few MiB back to the kernel when they are freed
(an ``munmap``, or a trim of a thread arena's heap), so the next call of the same program gets
fresh pages and faults each one in: a training step of a small BERT on a few hundred tokens
faults about 130 MiB, 4 KiB at a time, and spends a quarter of its time doing so.

``keep_freed_memory()`` tells glibc to serve every thread from the main arena's heap, never to
use a separate mapping and never to trim the heap, so the second call of a program reuses the
pages of the first. The cost: the process keeps its peak heap (freed memory is reused by the
process, not returned to the system). It must run before JAX starts its threads (before the
first computation): ``import textkit`` runs it unless ``TEXTKIT_KEEP_FREED_MEMORY=0``. Elsewhere
than glibc (macOS, musl) it does nothing, and it does nothing where JAX will run on an
accelerator (``accelerator_expected``, decided without starting JAX): the pages it keeps
help XLA:CPU's buffers only, and a GPU process's host allocations are better returned.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
import importlib.util
import os
import pkgutil
import platform

__all__ = ["accelerator_expected", "keep_freed_memory"]

_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8   # glibc's mallopt parameters
_NEVER = 2**31 - 1


def accelerator_expected() -> bool:
    """Whether JAX's default backend will be an accelerator, decided before JAX starts: the
    first platform of ``JAX_PLATFORMS`` (or ``JAX_PLATFORM_NAME``) when set, else whether a
    GPU / TPU plugin is installed (a ``jax_plugins`` entry point or module, or ``libtpu``)."""
    platforms = os.environ.get("JAX_PLATFORMS") or os.environ.get("JAX_PLATFORM_NAME") or ""
    if platforms.strip():
        return platforms.split(",")[0].strip().lower() != "cpu"
    if importlib.metadata.entry_points(group="jax_plugins"):
        return True
    namespace = importlib.util.find_spec("jax_plugins")
    if namespace is not None and namespace.submodule_search_locations:
        if any(True for _ in pkgutil.iter_modules(namespace.submodule_search_locations)):
            return True
    return importlib.util.find_spec("libtpu") is not None


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse (module docstring); True where it applied, False
    off glibc, where an accelerator is expected, or with ``TEXTKIT_KEEP_FREED_MEMORY=0``."""
    if os.environ.get("TEXTKIT_KEEP_FREED_MEMORY", "1") == "0" or accelerator_expected():
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    return all(libc.mallopt(option, value) == 1 for option, value in (
        (_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _NEVER)))
