"""One process per run directory: an OS lock on ``<run>/.lock`` held for the run's life.

The lock is ``fcntl.flock`` on a file that records its holder (``pid host``). The kernel drops
it when the holder's last descriptor closes, so a crash or a SIGKILL releases it and a lock
file left behind by a dead process never blocks the next run. In a multi-process run the lock
belongs to the run: process 0 takes it for every process (``RunDir.start``).

Within one process a directory may be opened again (a recipe called twice, as tests do): the
second holder shares the first one's descriptor, and the lock goes when the last holder does.
A run refused after taking the lock (``abandon``: other settings, a finished run) puts the lock
file back as it found it, so a refused run leaves the directory byte for byte as it was.
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
import weakref
from pathlib import Path

from textkit.errors import RunDirError

__all__ = ["LOCK_NAME", "RunInUseError", "RunLock"]

LOCK_NAME = ".lock"
"""The lock file inside a run directory."""

_held: dict[Path, tuple[int, int]] = {}   # resolved lock path -> (descriptor, holders)
_found: dict[Path, bytes | None] = {}     # the lock file's bytes before we took it (None: new)
_guard = threading.Lock()


class RunInUseError(RunDirError):
    """The run directory is held by another process (named with its pid and host)."""


def _holder(fd: int) -> str:
    """Who the lock file says holds it, as ``process PID on HOST``."""
    try:
        fields = os.pread(fd, 256, 0).decode("utf-8", "replace").split()
    except OSError:
        fields = []
    if not fields:
        return "a process that has not yet written its pid"
    pid, host = fields[0], fields[1] if len(fields) > 1 else "?"
    return f"process {pid} on host {host}"


def _acquire(path: Path) -> int:
    """A descriptor of ``path`` holding its exclusive lock, with our pid written in (what was
    there before goes to ``_found``)."""
    existed = path.exists()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise RunDirError(f"cannot write the lock file {path} of run directory {path.parent} "
                          f"({err.strerror}): is it writable?") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise RunInUseError(
            f"{path.parent} is in use by another run ({holder}; lock file {path}): wait for "
            "that run to end, or use another --save-dir") from None
    except OSError as err:
        os.close(fd)
        raise RunDirError(f"cannot lock {path} ({err.strerror}): does the file system of "
                          f"{path.parent} support locks?") from None
    try:
        found = os.pread(fd, 4096, 0) if existed else None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
    except OSError as err:
        os.close(fd)
        raise RunDirError(f"cannot write the lock file {path} ({err.strerror})") from None
    _found[path] = found
    return fd


def _release(path: Path, restore: bool = False) -> None:
    """One holder fewer; the last one closes the descriptor (which drops the flock; the file
    stays, harmless, see above), with ``restore`` first putting the file back as found."""
    with _guard:
        fd, holders = _held[path]
        if holders > 1:
            _held[path] = (fd, holders - 1)
            return
        del _held[path]
        found = _found.pop(path, None)
        if restore and found is None:
            path.unlink(missing_ok=True)
        elif restore:
            os.ftruncate(fd, 0)
            os.pwrite(fd, found, 0)
    os.close(fd)


class RunLock:
    """The lock of run directory ``root`` (created if missing), held until ``release`` or
    until this object is collected; ``RunInUseError`` names the holder when another process
    has it."""

    def __init__(self, root: str | Path):
        root = Path(root)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise RunDirError(f"cannot create run directory {root} ({err.strerror})") from None
        self.path = (root / LOCK_NAME).resolve()
        with _guard:
            fd, holders = _held.get(self.path, (-1, 0))
            if fd < 0:
                fd = _acquire(self.path)
            _held[self.path] = (fd, holders + 1)
        self._finalizer = weakref.finalize(self, _release, self.path)

    def release(self) -> None:
        """Give the lock up (a no-op the second time)."""
        self._finalizer()

    def abandon(self) -> None:
        """Give the lock up, putting the lock file back as this process found it (a run
        refused at start-up); a no-op after ``release``."""
        if self._finalizer.detach() is not None:
            _release(self.path, restore=True)
