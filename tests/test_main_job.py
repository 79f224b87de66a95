"""The README's first command as a new user runs it: twice in a row without --save-dir (a
new run directory each time, a ``latest`` link), quietly (no third-party WARNING), ending in a
summary line; ``translate.py`` keeping one line per input line; every recipe's ``--help``
grouped with defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPES = {"nmt": ROOT / "examples" / "nmt" / "train.py",
           "lm": ROOT / "examples" / "language_model" / "train.py",
           "sentiment": ROOT / "examples" / "sentiment" / "train.py"}
# the main job, made small: 120 test sentences (sacreBLEU warned from 100 tokenised lines on)
SMALL_NMT = ["--toy-sizes", "400,8,120", "--max-steps", "6", "--eval-every", "3",
             "--beam-size", "1", "--spm-vocab-size", "200", "--num-buckets", "2",
             "--model-overrides", "d_model=32,d_ff=64,num_encoder_layers=1,"
             "num_decoder_layers=1", "--log-every", "2"]


def run(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          input=stdin, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done


@pytest.mark.slow
def test_main_job_runs_twice_quietly_and_translates_line_by_line(tmp_path):
    first = run([str(RECIPES["nmt"]), *SMALL_NMT], tmp_path)
    second = run([str(RECIPES["nmt"]), *SMALL_NMT], tmp_path)
    folder = tmp_path / "runs" / "nmt_toy"
    runs = sorted(p for p in folder.iterdir() if p.name != "latest")
    assert len(runs) == 2 and (folder / "latest").resolve() == runs[1].resolve()
    for done, directory in zip((first, second), runs):
        output = done.stdout + done.stderr
        assert "WARNING" not in output, output[-3000:]
        assert "detokenize" not in output
        assert output.count("the toy corpus is tokenised by design") == 1   # said once
        last = done.stdout.strip().splitlines()[-1]
        assert f"-> runs/nmt_toy/{directory.name}" in last and "test BLEU" in last, last
        for name in ("metrics.jsonl", "curves.png", "summary.json", "config.json"):
            assert (directory / name).is_file(), name
        assert list((directory / "tensorboard").glob("events.out.tfevents.*"))
    summary = json.loads((runs[1] / "summary.json").read_text())
    assert summary["steps"] == 6

    resumed = run([str(RECIPES["nmt"]), *SMALL_NMT[:2], *SMALL_NMT[4:], "--max-steps", "8",
                   "--resume"], tmp_path)     # no --save-dir: the newest run goes on
    assert f"run directory: runs/nmt_toy/{runs[1].name}" in resumed.stdout + resumed.stderr
    assert json.loads((runs[1] / "summary.json").read_text())["steps"] == 8

    lines = "ein hund läuft .\n\n   \nzwei männer spielen fußball .\n"
    done = run([str(ROOT / "examples" / "nmt" / "translate.py"), "--checkpoint",
                "runs/nmt_toy"], tmp_path, stdin=lines)
    out = done.stdout.split("\n")
    assert len(out) == 5 and out[-1] == ""              # one line per input line
    assert out[1] == "" and out[2] == ""
    alone = run([str(ROOT / "examples" / "nmt" / "translate.py"), "--checkpoint",
                 "runs/nmt_toy"], tmp_path, stdin="zwei männer spielen fußball .\n")
    assert alone.stdout == out[3] + "\n"                # the blank lines changed nothing else
    assert "WARNING" not in done.stderr


def test_translator_decodes_no_empty_source():
    from textkit.decoding import Translator

    class Tokenizer:
        def encode(self, texts):
            return [[5, 6] for _ in texts]

        def decode(self, ids):
            return [f"t{len(row)}" for row in ids]

    translator = Translator.__new__(Translator)      # only translate() is under test
    translator.src_tokenizer = translator.tgt_tokenizer = Tokenizer()
    decoded = []

    def translate_ids(params, sources, progress=False):
        decoded.append(sources)
        return [[1, 2, 3]] * len(sources)

    translator.translate_ids = translate_ids
    assert translator.translate(None, ["a b", "", "  \t", "c"]) == ["t3", "", "", "t3"]
    assert decoded == [[[5, 6], [5, 6]]]                 # the empty lines were never decoded
    assert translator.translate(None, ["", " "]) == ["", ""] and len(decoded) == 1


@pytest.mark.slow
def test_an_explicit_save_dir_keeps_its_refusal(tmp_path):
    from subprocesses import load_script

    from textkit.errors import TextkitError

    script = load_script(RECIPES["sentiment"], "sentiment_explicit")
    args = ["--toy-sentences", "200", "--epochs", "1", "--embed-dim", "8", "--model-overrides",
            "num_filters=4", "--no-progress", "--save-dir", str(tmp_path / "run"),
            "--no-tensorboard"]
    script.main(args)
    with pytest.raises(TextkitError, match="--overwrite"):
        script.main(args)
    assert not (tmp_path / "run" / "tensorboard").exists()
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


@pytest.mark.slow
def test_default_run_folders_of_the_other_recipes(tmp_path, monkeypatch, capsys):
    from subprocesses import load_script

    monkeypatch.chdir(tmp_path)
    lm = load_script(RECIPES["lm"], "lm_default_folder")
    lm.main(["--toy-sentences", "200", "--epochs", "1", "--no-progress", "--bptt", "10"])
    sentiment = load_script(RECIPES["sentiment"], "sentiment_default_folder")
    sentiment.main(["--toy-sentences", "200", "--epochs", "1", "--embed-dim", "8",
                    "--model-overrides", "num_filters=4", "--no-progress"])
    for folder in ("lm_toy", "sentiment_toy"):
        latest = tmp_path / "runs" / folder / "latest"
        assert (latest / "summary.json").is_file() and (latest / "curves.png").is_file()
    out = capsys.readouterr().out.strip().splitlines()
    assert "accuracy" in out[-1] and "-> runs/sentiment_toy/" in out[-1]
    assert any("test perplexity" in line and "-> runs/lm_toy/" in line for line in out)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_help_groups_the_flags_with_defaults(recipe):
    done = subprocess.run([sys.executable, str(RECIPES[recipe]), "--help"],
                          capture_output=True, text=True, env={**os.environ,
                                                               "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    for group in ("data:", "model:", "training:", "evaluation:", "output:"):
        assert f"\n{group}\n" in done.stdout, (group, done.stdout[:2000])
    assert "(default: " in done.stdout and "--precision" in done.stdout
