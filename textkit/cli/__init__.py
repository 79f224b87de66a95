"""Command-line entry points and the flag parsing the recipes share.

``flags``: frozen config dataclasses as command lines (``parse_config``). The installed
command lines (``pyproject.toml``'s ``[project.scripts]``) call ``translate.main``
(``textkit-translate``), ``finetune.main`` (``textkit-finetune``) and ``generate.main``
(``textkit-generate``); the recipes in ``examples/`` run the same code. ``run_main`` runs a
recipe's ``main`` and turns a ``textkit.TextkitError`` into ``error: <message>`` on stderr and
exit status 2 (no traceback: the message says what to change), and so a write that fails for
want of room or permission (a full disk, a quota, a read-only directory) anywhere in the run.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable
from typing import Any

from textkit.cli.flags import parse_config, parser_for
from textkit.errors import TextkitError
from textkit.settings import GROUPS, flag

__all__ = ["GROUPS", "flag", "parse_config", "parser_for", "run_main"]

STORAGE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES})
"""The ``OSError`` numbers of a write refused for want of room or permission."""


def run_main(main: Callable[[], Any]) -> None:
    """Call ``main()``; a ``TextkitError``, or an ``OSError`` of ``STORAGE_ERRORS``, exits with
    status 2 after printing its message."""
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
