"""Config fields that are command-line flags: ``flag(default, help, group=...)``.

Configs are frozen dataclasses. A field declared with ``flag`` is the recipe flag of the same
name (``clip_norm`` is ``--clip-norm``) in an argument group of ``GROUPS``; ``textkit.cli``
builds the parsers from them. Fields declared without ``flag`` are set by the program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

__all__ = ["GROUPS", "flag"]

GROUPS = ("data", "model", "training", "evaluation", "output", "launch")
"""The argument groups of a recipe's ``--help``, in order."""


def flag(default: Any, help: str, *, group: str, choices: Sequence[Any] | None = None,
         aliases: Sequence[str] = ()) -> Any:
    """A dataclass field that is the flag ``--<name>`` of ``group`` (``choices`` restricts its
    values; ``aliases`` are extra spellings). ``help`` is the field's documentation."""
    if group not in GROUPS:
        raise ValueError(f"group must be one of {GROUPS}, got {group!r}")
    return dataclasses.field(default=default, metadata={
        "help": help, "group": group, "choices": None if choices is None else tuple(choices),
        "aliases": tuple(aliases)})
