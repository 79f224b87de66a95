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


@pytest.mark.slow
def test_readme_tour_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(tour_code(), str(README), "exec"), namespace)
    out, vocab = namespace["out"], namespace["vocab"]
    assert out.tokens.shape[:2] == (namespace["batch"]["src_tokens"].shape[0], 1)
    assert namespace["result"].progress.epoch == 1
    assert int(out.tokens.max()) < len(vocab)
