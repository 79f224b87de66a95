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


def test_library_code_parses_no_flags_and_never_exits():
    """Only ``textkit/cli/`` and ``__main__.py`` modules parse flags or exit the process; the
    rest raises typed errors (``textkit.errors.TextkitError``)."""
    offenders = []
    for path in sorted((ROOT / "textkit").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[1] == "cli" or path.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Name | ast.Attribute):
                names = [node.id if isinstance(node, ast.Name) else node.attr]
            bad = [n for n in names if n in ("argparse", "SystemExit", "Namespace")
                   or (isinstance(node, ast.Attribute) and n == "exit"
                       and getattr(node.value, "id", None) == "sys")]
            offenders += [f"{relative}:{node.lineno} {n}" for n in bad]
    assert not offenders, offenders


def test_every_deliberate_error_derives_from_textkit_error():
    from textkit.data.download import ChecksumError, OfflineError, UnsafeArchiveError
    from textkit.embedding.errors import EmbeddingFormatError
    from textkit.errors import ConfigError, RunDirError, TextkitError
    from textkit.training.checkpoint import CheckpointError

    for error in (ChecksumError, OfflineError, UnsafeArchiveError, EmbeddingFormatError,
                  ConfigError, RunDirError, CheckpointError):
        assert issubclass(error, TextkitError), error
