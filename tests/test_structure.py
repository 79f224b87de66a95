"""Code-shape rules: short functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMITS = {"textkit": 90, "examples": 80}   # longest function, in lines, under each folder


def function_lengths(folder: Path) -> dict[str, int]:
    lengths = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                lengths[where] = node.end_lineno - node.lineno + 1
    return lengths


@pytest.mark.parametrize("folder", sorted(LIMITS))
def test_functions_are_short(folder):
    lengths = function_lengths(ROOT / folder)
    assert lengths, f"no functions found under {folder}"
    too_long = {where: n for where, n in lengths.items() if n > LIMITS[folder]}
    assert not too_long, f"functions over {LIMITS[folder]} lines: {too_long}"

