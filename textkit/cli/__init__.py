"""Command-line entry points and the flag parsing the recipes share.

``flags``: frozen config dataclasses as command lines (``parse_config``). The installed command
lines (``pyproject.toml``'s ``[project.scripts]``) call ``translate.main``
(``textkit-translate``), ``finetune.main`` (``textkit-finetune``), ``generate.main``
(``textkit-generate``) and ``word2vec.main`` (``textkit-word2vec``); the recipes in
``examples/`` run the same code. ``run_main`` runs a recipe's ``main`` and turns a
``textkit.TextkitError`` into ``error: <message>`` on stderr and exit status 2 (no traceback:
the message says what to change), and so a write that fails for want of room or permission (a
full disk, a quota, a read-only directory) anywhere in the run. SIGTERM (a scheduler's stop) and
SIGINT (Ctrl-C) end it the same way, in one line saying that the checkpoints saved before are
intact, with status 128 + the signal's number; a checkpoint being written when the signal came
is never taken for a finished one (``CheckpointManager`` verifies every step it restores).
"""

from __future__ import annotations

import errno
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

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


def run_main(main: Callable[[], Any]) -> None:
    """Call ``main()``; a ``TextkitError``, or an ``OSError`` of ``STORAGE_ERRORS``, exits with
    status 2 after printing its message; SIGTERM and SIGINT exit with 128 + their number after
    one line (module docstring)."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if main_thread else None
    try:
        main()
    except TextkitError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:
        if err.errno not in STORAGE_ERRORS:
            raise
        where = f": {err.filename}" if err.filename else ""
        print(f"error: {err.strerror}{where} (a full disk, a quota or a read-only directory?); "
              "the checkpoints saved before it are intact: --resume continues from the last "
              "one", file=sys.stderr)
        sys.exit(2)
    except (Stopped, KeyboardInterrupt) as err:
        signum = err.signum if isinstance(err, Stopped) else int(signal.SIGINT)
        print(f"stopped by {signal.Signals(signum).name}: the checkpoints saved before it are "
              "intact: --resume continues from the last one", file=sys.stderr)
        sys.exit(128 + signum)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
