"""README's tour runs as written (the first Python block under "## A tour")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def tour_code() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## A tour"):]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "README has no Python block under '## A tour'"
    return match.group(1)


def test_readme_tour_ends_by_printing_a_translation():
    """Its last statement prints text, not a bare expression that a script shows nowhere."""
    last = tour_code().rstrip().split("\n\n")[-1]
    assert last.splitlines()[-2].startswith("print(") and "vocab.to_tokens" in last


@pytest.mark.slow
def test_readme_tour_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(tour_code(), str(README), "exec"), namespace)
    out, vocab = namespace["out"], namespace["vocab"]
    assert out.tokens.shape[:2] == (namespace["batch"]["src_tokens"].shape[0], 1)
    assert namespace["result"].progress.epoch == 20
    assert int(out.tokens.max()) < len(vocab)
    source, _, translation = capsys.readouterr().out.splitlines()[-1].partition(" -> ")
    assert source.split() and translation.split()          # words, not ids
    assert set(translation.split()) <= set(vocab.idx_to_token) - {vocab.eos_token}


def test_ci_runs_the_readme_test_command_ruff_and_the_fast_tier():
    """``.ci/run`` runs README command 2 verbatim, the pinned ruff, and the fast tier on 3.12."""
    text = README.read_text(encoding="utf-8")
    command = re.search(r"# 2\. install and run the tests\n(.+)\n", text).group(1).strip()
    script = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    lines = [line.strip() for line in script.splitlines()]
    assert command in lines, "README's test command is not in .ci/run verbatim"
    assert ".venv/bin/ruff check ." in lines and '-m "not slow"' in script
    assert "--cov=textkit" in script
    pyproject = (README.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'"ruff==[\d.]+"', pyproject) and '"pytest-cov>=' in pyproject
    development = text[text.index("## Development"):]
    assert "python -m pytest -q -n 2 --dist loadfile -m \"not slow\"" in development


def test_readme_stays_short():
    """The README is the guide's front page; detail belongs in docs/ (12,000 characters at most)."""
    assert len(README.read_bytes()) <= 12_000
