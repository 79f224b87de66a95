"""Every README code block as a newcomer meets it.

Python blocks run as printed (the tour; a block that loads a downloaded checkpoint runs on the
tiny fixture of the same family, linked under the downloaded name; a registry download of word
vectors, ``create(...)``, by a few random vectors). Bash blocks: each
``python examples/...`` command names a script whose ``--help`` lists every flag it uses, and
each checkpoint directory a command or block loads is a placeholder (``DIR``), a run directory
(``runs/...``) or the ``--local-dir`` of an ``hf download`` line above it.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import subprocesses

import textkit.embedding
from textkit.embedding import TokenEmbedding

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# a downloaded checkpoint -> the tiny fixture of its family that stands in for it offline
FIXTURES = ROOT / "tests" / "fixtures"
STAND_INS = {"opus-mt-en-de": FIXTURES / "tiny_marian",
             "all-MiniLM-L6-v2": FIXTURES / "sentence" / "bert_mean_normalize"}
CHECKPOINT_FLAGS = ("--pretrained", "--init-from")


def blocks(language: str) -> list[tuple[int, str]]:
    """(offset in the README, code) of every ```language block."""
    text = README.read_text(encoding="utf-8")
    return [(m.start(1), m.group(1))
            for m in re.finditer(rf"```{language}\n(.*?)```", text, re.DOTALL)]


def commands() -> list[tuple[int, list[str]]]:
    """(offset of its line, argv) of every command of the bash blocks, without redirections."""
    found = []
    for offset, code in blocks("bash"):
        lines = code.replace("\\\n", "  ").splitlines(keepends=True)  # same offsets
        for start, line in zip(offset + np.cumsum([0, *map(len, lines)]), lines):
            words = shlex.split(line, comments=True)
            for command in " ".join(map(shlex.quote, words)).split(" '&&' "):
                argv = shlex.split(command)
                cut = [i for i, word in enumerate(argv) if word in ("<", ">")]
                if argv:
                    found.append((int(start), argv[:cut[0]] if cut else argv))
    return found


def downloads() -> dict[str, int]:
    """``--local-dir`` of each ``hf download`` command -> its offset in the README."""
    return {argv[argv.index("--local-dir") + 1]: offset for offset, argv in commands()
            if argv[:2] == ["hf", "download"]}


def needs_download(path: str) -> bool:
    return not (path.isupper() or path.startswith("runs/"))


def loaded_checkpoints(code: str) -> list[str]:
    return re.findall(r'load_(?:pretrained|translator)\("([^"]+)"', code)


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


TOUR_FACTS = """
import json as _json
print(_json.dumps({"tokens_shape": list(out.tokens.shape),
                   "rows": int(batch["src_tokens"].shape[0]), "epoch": result.progress.epoch,
                   "max_token": int(out.tokens.max()),
                   "vocab": list(vocab.idx_to_token), "eos": vocab.eos_token}))
"""


@pytest.mark.slow
def test_readme_tour_runs(tmp_path):
    """The tour as printed, in a process of its own with XLA's defaults: its 400 training steps
    ran in 72 s there against 104 s at the test session's LLVM level 0, and 85 s against 95 s
    with its elemental fusion emitter (conftest.py), which pay off for compile-bound tests, not
    for this one."""
    script = tmp_path / "tour.py"
    script.write_text(tour_code() + TOUR_FACTS, encoding="utf-8")
    env = subprocesses.cpu_env(1)
    env["XLA_FLAGS"] = " ".join(flag for flag in env["XLA_FLAGS"].split()
                                if not flag.startswith(tuple(subprocesses.FAST_COMPILE)))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    *printed, facts = done.stdout.strip().splitlines()
    facts = json.loads(facts)
    assert facts["tokens_shape"][:2] == [facts["rows"], 1]
    assert facts["epoch"] == 20
    assert facts["max_token"] < len(facts["vocab"])
    source, _, translation = printed[-1].partition(" -> ")
    assert source.split() and translation.split()          # words, not ids
    assert set(translation.split()) <= set(facts["vocab"]) - {facts["eos"]}


def test_ci_runs_the_readme_test_command_ruff_and_the_fast_tier():
    """``.ci/run`` runs README command 2 verbatim, the pinned ruff, and the fast tests of the
    JAX-facing layers on 3.12."""
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


def recipe_commands() -> list[list[str]]:
    return [argv for _, argv in commands()
            if argv and argv[0].endswith("python") and argv[1].startswith("examples/")]


@pytest.mark.parametrize("argv", recipe_commands(), ids=lambda argv: argv[1])
def test_readme_recipe_flags_exist(argv, monkeypatch, capsys):
    """The script exists and its ``--help`` lists every flag the README passes it."""
    script = ROOT / argv[1]
    assert script.is_file(), f"README runs {argv[1]}, which does not exist"
    name = "readme_" + "_".join(script.relative_to(ROOT).parts[1:])
    module = subprocesses.load_script(script, name)
    monkeypatch.setattr(sys, "argv", [str(script), *argv[2:], "--help"])  # the mode it picks
    with pytest.raises(SystemExit) as exit_:
        module.main()
    assert exit_.value.code == 0
    usage = capsys.readouterr().out
    flags = [word for word in argv[2:] if word.startswith("--")]
    assert flags == [] or all(re.search(rf"{flag}\b", usage) for flag in flags), (argv, usage)


def test_readme_checkpoints_name_their_download_step():
    """A checkpoint a block loads is downloaded (``hf download ... --local-dir NAME``) above it."""
    steps = downloads()
    uses = [(offset, argv[i + 1]) for offset, argv in commands()
            for i, word in enumerate(argv[:-1]) if word in CHECKPOINT_FLAGS]
    uses += [(offset, name) for offset, code in blocks("python")
             for name in loaded_checkpoints(code)]
    assert uses and steps
    for _, code in blocks("python"):
        for line in code.splitlines():
            assert "create(" not in line or "downloads" in line, f"say that {line!r} downloads"
    for offset, name in uses:
        if needs_download(name):
            assert name in steps and steps[name] <= offset, f"no download step above {name!r}"
    for _, argv in commands():
        if argv[:2] == ["hf", "download"]:  # ORG/NAME --local-dir NAME
            assert argv[2].count("/") == 1 and argv[2].split("/")[1] == argv[4], argv


def other_python_blocks() -> list[str]:
    """The Python blocks besides the tour (which test_readme_tour_runs runs)."""
    codes = [code for _, code in blocks("python")]
    assert codes[0] == tour_code()
    return codes[1:]


def random_vectors(kind: str, source: str, **options) -> TokenEmbedding:
    """Stands in for ``textkit.embedding.create`` (a download): 8-d vectors of a few words."""
    words = ["king", "queen", "man", "woman", "cat", "dog"]
    return TokenEmbedding(words, np.random.default_rng(0).normal(size=(6, 8)).astype(np.float32))


@pytest.mark.slow
@pytest.mark.parametrize("code", other_python_blocks(), ids=lambda code: code.splitlines()[0])
def test_readme_python_block_runs(code, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(textkit.embedding, "create", random_vectors)
    for name in loaded_checkpoints(code):
        assert name in STAND_INS, f"no offline stand-in for {name!r}: add a tiny fixture"
        if not (tmp_path / name).exists():
            (tmp_path / name).symlink_to(STAND_INS[name])
    exec(compile(code, str(README), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == code.count("\nprint(")
