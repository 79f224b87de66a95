"""Atomic file writing: write under a temporary name in the same folder, then rename.

A reader never sees a half-written file or folder, and a failure leaves nothing behind
(DESIGN.md, conventions). What is written gets the permissions a plain ``open`` or ``mkdir``
would give it under the process's umask (``tempfile`` creates 0600 files and 0700 folders, which
a colleague in the group could not read). Standard library only: imported by the jax-free
packages.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_dir", "atomic_path", "scratch_dir", "write_bytes_atomic",
           "write_json_atomic", "write_text_atomic"]


def _umask() -> int:
    """The process's umask, read from ``/proc`` where it is there (setting it to read it
    back would race other threads creating files)."""
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary file path next to ``path``; on a clean exit rename it to ``path``.

    The parent folder is created; the file gets the mode ``open`` would give it (0666 less
    the umask). On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextlib.contextmanager
def scratch_dir(parent: str | os.PathLike, prefix: str) -> Iterator[Path]:
    """Yield a fresh folder inside ``parent``; it is deleted, with what is left in it, on exit."""
    Path(parent).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty staging folder next to ``path`` (mode 0777 less the umask, as ``mkdir``
    gives); on a clean exit it replaces ``path``.

    An existing folder ``path`` is moved aside first and deleted after the swap. On an
    exception the staging folder is removed and ``path`` is left as it was.
    """
    path = Path(path)
    with scratch_dir(path.parent, f".{path.name}.") as staging:
        os.chmod(staging, 0o777 & ~_umask())
        yield staging
        if not path.exists():
            os.replace(staging, path)
            return
        with scratch_dir(path.parent, f".{path.name}.old.") as old:
            os.replace(path, old / path.name)
            os.replace(staging, path)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, value: Any) -> None:
    """Write ``value`` as indented, key-sorted JSON (plus a newline) to ``path`` atomically."""
    write_text_atomic(path, json.dumps(value, indent=2, sort_keys=True) + "\n")
