"""Command-line entry points and the flag parsing the recipes share.

``flags``: frozen config dataclasses as command lines (``parse_config``). The installed
command lines (``pyproject.toml``'s ``[project.scripts]``) call ``translate.main``
(``textkit-translate``), ``finetune.main`` (``textkit-finetune``), ``generate.main``
(``textkit-generate``) and ``word2vec.main`` (``textkit-word2vec``); the recipes in
``examples/`` run the same code. ``run_main`` runs a
command's ``main`` (every recipe and every installed command goes through it) and turns a
``textkit.TextkitError`` into ``error: <message>`` on stderr and exit status 2 (no traceback:
the message says what to change), and so a write that fails for want of room or permission (a
full disk, a quota, a read-only directory) anywhere in the run. SIGTERM (a scheduler's stop)
and SIGINT (Ctrl-C) end it the same way, in one line, with status 128 + the signal's number:
for a training run (``resumable``) the line says that the checkpoints saved before are intact
and ``--resume`` continues (a checkpoint being written when the signal came is never taken for
a finished one: ``CheckpointManager`` verifies every step it restores); for a command that
writes its output as it goes (generate, translate) it says that what was written is kept.
Standard output closed by its reader (``| head``) ends the command quietly, with status 141
(128 + SIGPIPE, as a shell reports a command the pipe stopped), the lines written before kept.
A stop and a closed pipe end the process at once (``os._exit``, the output flushed): the
interpreter's teardown under XLA's threads, still compiling or computing, can crash it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from textkit.cli.flags import parse_config, parser_for
from textkit.errors import TextkitError
from textkit.settings import GROUPS, flag

__all__ = ["GROUPS", "flag", "parse_config", "parser_for", "run_main"]

STORAGE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES})
"""The ``OSError`` numbers of a write refused for want of room or permission."""


class Stopped(BaseException):
    """Raised in the main thread by SIGTERM while ``run_main`` runs (a ``BaseException``, as
    ``KeyboardInterrupt``: no ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum: int, frame: Any) -> None:
    raise Stopped(signum)


def _close_stdout() -> None:
    """Point standard output at ``os.devnull``, so that the flush of what is left in its
    buffer before the exit does not fail again on the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _exit_now(status: int) -> NoReturn:
    """Exit with ``status`` at once, standard output and error flushed. A stop comes at any
    point, also while XLA compiles or computes on its own threads, and the interpreter's
    teardown under them can crash (a segmentation fault instead of the status); what they do
    is abandoned, as a kill would abandon it (a checkpoint cut short is never taken for a
    finished one: ``CheckpointManager`` verifies every step it restores)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def run_main(main: Callable[[], Any], *, resumable: bool = True) -> None:
    """Call ``main()``; a ``TextkitError``, or an ``OSError`` of ``STORAGE_ERRORS``, exits with
    status 2 after printing its message; SIGTERM and SIGINT exit the process with 128 + their
    number after one line; a closed standard output exits it quietly with 141 (module
    docstring). ``resumable``: a training run (its messages point at ``--resume``), not a
    command whose output is its result."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if main_thread else None
    kept = ("the checkpoints saved before it are intact: --resume continues from the last one"
            if resumable else "the output written before it is kept")
    try:
        main()
    except TextkitError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:
        _close_stdout()
        _exit_now(128 + signal.SIGPIPE)
    except OSError as err:
        if err.errno not in STORAGE_ERRORS:
            raise
        where = f": {err.filename}" if err.filename else ""
        print(f"error: {err.strerror}{where} (a full disk, a quota or a read-only directory?); "
              f"{kept}", file=sys.stderr)
        sys.exit(2)
    except (Stopped, KeyboardInterrupt) as err:
        signum = err.signum if isinstance(err, Stopped) else int(signal.SIGINT)
        print(f"stopped by {signal.Signals(signum).name}: {kept}", file=sys.stderr)
        _exit_now(128 + signum)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
