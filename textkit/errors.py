"""``TextkitError``: the one base class of the errors textkit raises on purpose.

Library code raises these and never exits the process; the recipes and ``textkit.cli`` entry points
turn them into a message and an exit status. Each also derives from the built-in class a
caller would expect (``ValueError`` for a bad value, ``FileNotFoundError`` for a missing file),
so ``except ValueError`` keeps working.
"""

from __future__ import annotations

__all__ = ["ConfigError", "DataFileError", "RunDirError", "TextkitError"]


class TextkitError(Exception):
    """Base class of every error textkit raises deliberately about its input."""


class ConfigError(TextkitError, ValueError):
    """A setting (a recipe flag, a config field) that cannot work, named with what was expected."""


class RunDirError(TextkitError):
    """A run directory that cannot hold this run (a finished run, different settings)."""


class DataFileError(TextkitError, ValueError):
    """A data file that does not follow its format, named with its line where there is one."""
