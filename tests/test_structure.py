"""Code-shape rules: short functions, and the old import paths of moved names still work."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
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


@pytest.mark.parametrize("module,name", [
    ("textkit.training.seq2seq", "make_seq2seq_loader"),
    ("textkit.training.language_model", "make_lm_train_step"),
    ("textkit.training.classification", "bucketed_loader"),
])
def test_moved_training_modules_warn_and_still_work(module, name):
    sys.modules.pop(module, None)
    with pytest.warns(DeprecationWarning, match="textkit.tasks"):
        old = importlib.import_module(module)
    assert callable(getattr(old, name))


def test_moved_training_names_warn_from_the_package():
    import textkit.training

    with pytest.warns(DeprecationWarning, match="moved to textkit.tasks"):
        assert callable(textkit.training.Seq2SeqBatchify)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert callable(textkit.training.fit)       # current names do not warn


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
