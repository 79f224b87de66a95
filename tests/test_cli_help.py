"""``--help`` of the command lines: every flag's default printed once (the help's own words, or
``(default: ...)``, never both)."""

from __future__ import annotations

import re

import pytest

from textkit.cli import translate
from textkit.cli.flags import parser_for
from textkit.tasks import get_task, list_tasks


def _defaults_per_flag(text: str) -> dict[str, int]:
    """How often each flag's entry of a ``--help`` text says "default"."""
    entries = re.split(r"\n  (?=-)", text)        # an entry: its flag, its help lines
    return {entry.split()[0]: entry.count("default") for entry in entries[1:]}


@pytest.mark.parametrize("task", list_tasks())
def test_recipe_flags_name_one_default(task):
    counts = _defaults_per_flag(parser_for(get_task(task).config_class).format_help())
    assert counts and all(n <= 1 for n in counts.values()), {
        flag: n for flag, n in counts.items() if n > 1}
    assert counts["--lr"] == 1 and counts["--save-dir"] == 1


def test_translate_flags_name_one_default(capsys):
    with pytest.raises(SystemExit):
        translate.parse_args(["--help"])
    counts = _defaults_per_flag(capsys.readouterr().out)
    assert counts["--beam-size"] == 1 and counts["--max-length"] == 1
    assert all(n <= 1 for n in counts.values()), counts
