"""How the commands fail (issue 60): bad input to ``generate`` and ``translate`` ends in one line
naming the flag or the line (before the model is loaded where it can be); plain output is one
line per prompt; a documented-optional flag left out still finishes a run; the end-of-run writes
are idempotent on resume; Ctrl-C and a closed pipe end a command in one line, or quietly."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import subprocesses
from test_loop import make_loader, start

from textkit.training import CheckpointManager, FitConfig, RunDir, fit

ROOT = Path(__file__).resolve().parents[1]
DECODER = ROOT / "tests" / "fixtures" / "decoders" / "mistral"    # 128 positions
MARIAN = ROOT / "tests" / "fixtures" / "tiny_marian"


def generate(monkeypatch, capsys, argv: list[str], stdin: bytes | None = None,
             ) -> tuple[int, str, str]:
    """``textkit-generate --pretrained DECODER argv`` in this process: (status, out, err)."""
    from textkit.cli.generate import main

    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    try:
        status = main(["--pretrained", str(DECODER), *argv])
    except SystemExit as exit_:
        status = exit_.code
    out = capsys.readouterr()
    return status, out.out, out.err


LONG = " ".join(["a"] * 300).encode()


@pytest.mark.parametrize("argv, stdin, says", [
    ([], b"", "error: no prompts: standard input is empty"),
    ([], b"ok\ncaf\xe9 au lait\n", "error: standard input, line 2: not UTF-8"),
    (["--prompt", "a", "--batch-size", "0"], None,
     "argument --batch-size: expected an integer >= 1, got '0'"),
    (["--prompt", "a", "--precision", "fp16"], None,
     "argument --precision: cannot parse precision policy 'fp16'"),
    (["--prompt", "a", "--sample", "--temperature", "0"], None,
     "argument --temperature: expected a number > 0, got '0'"),
    (["--prompt", "a", "--sample", "--num-beams", "2"], None, "--sample with --num-beams 2"),
    (["--max-new-tokens", "8"], b"short\n" + LONG + b"\n",
     "error: standard input, line 2: the prompt has"),
], ids=["empty-stdin", "not-utf8", "batch-size-0", "precision", "temperature",
        "sample-with-beams", "too-long"])
def test_generate_refuses_bad_input_in_one_line(monkeypatch, capsys, argv, stdin, says):
    status, out, err = generate(monkeypatch, capsys, argv, stdin)
    lines = err.strip().splitlines()
    assert status == 2 and out == "" and len(lines) == 1, err
    assert says in lines[0]
    assert "config.json" not in lines[0] and "truncate=True" not in lines[0]
    if "too long" in says or "prompt has" in says:
        assert "--truncate" in lines[0] and "--max-new-tokens 8" in lines[0]


def test_generate_reads_crlf_lines_as_lf_lines(monkeypatch, capsys):
    argv = ["--jsonl", "--max-new-tokens", "3"]
    crlf = generate(monkeypatch, capsys, argv, b"the cat\r\nsat on\r\n")
    lf = generate(monkeypatch, capsys, argv, b"the cat\nsat on\n")
    assert crlf[0] == lf[0] == 0 and crlf[1] == lf[1] and len(lf[1].splitlines()) == 2


def test_plain_output_is_one_line_per_prompt(monkeypatch, capsys):
    """Generated line feeds, carriage returns and backslashes are escaped: line i is prompt
    i's, whatever the model writes."""
    from textkit.cli.generate import one_line
    from textkit.decoding import Generation, Generator

    pieces = [(0, "x\ny"), (1, "back\\slash\r\n"), (0, " z"), (2, ""),
              *[(i, Generation(t, [])) for i, t in [(1, "back\\slash\r\n"), (0, "x\ny z"),
                                                    (2, "")]]]
    monkeypatch.setattr(Generator, "generate_stream", lambda self, *a, **k: iter(pieces))
    status, out, _ = generate(monkeypatch, capsys, [], b"p0\np1\np2\n")
    assert status == 0
    assert out.split("\n") == ["x\\ny z", "back\\\\slash\\r\\n", "", ""]
    assert one_line("a\\n\nb") == "a\\\\n\\nb"


def test_fit_without_evaluation_finishes_under_a_best_metric(tmp_path):
    """A checkpoint manager ranking by a validation metric and no evaluation (a recipe run
    without --valid-file): the saves are unranked, the run ends (was: "lack best_metric")."""
    state, step = start()
    manager = CheckpointManager(tmp_path, max_to_keep=1, best_metric="valid_ppl",
                                best_mode="min")
    result = fit(state, step, make_loader(), FitConfig(max_steps=5, eval_every=2,
                                                       progress=False), checkpoints=manager)
    assert result.progress.step == 5 and manager.latest_step() == 5
    manager.close()


def test_final_parameters_are_written_again_on_resume(tmp_path):
    """A run stopped after writing ``final/`` and before its summary writes it again when
    resumed, the same step included (was: "Orbax refused to save step ...")."""
    run = RunDir(tmp_path)
    run.save_final(30, {"w": np.zeros(3, np.float32)}, "first")
    run.save_final(30, {"w": np.ones(3, np.float32)}, "again")
    params, extra = run.load_final({"w": np.zeros(3, np.float32)})
    np.testing.assert_array_equal(params["w"], np.ones(3))
    assert extra["source"] == "again"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


def _wait_reading_stdin(process: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait until ``process`` blocks in ``read`` on its standard input (Linux ``/proc``)."""
    syscall = Path(f"/proc/{process.pid}/syscall")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        fields = syscall.read_text().split()
        if fields[:2] == ["0", "0x0"]:                     # read(0, ...), x86-64
            return
        time.sleep(0.05)
    pytest.fail(f"the command never read its standard input: {process.poll()}")


@pytest.mark.skipif(not Path("/proc/self/syscall").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("command", [
    ["examples/language_model/generate.py", "--pretrained", str(DECODER)],
    ["examples/nmt/translate.py", "--pretrained", str(MARIAN)],
], ids=["generate", "translate"])
def test_ctrl_c_ends_a_command_in_one_line(command):
    process = subprocess.Popen([sys.executable, *command], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=subprocesses.cpu_env(1))
    try:
        _wait_reading_stdin(process)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err.decode()[-3000:]
    assert err.decode() == "stopped by SIGINT: the output written before it is kept\n"
    assert out == b""


@pytest.mark.slow
def test_generate_into_a_closed_pipe_ends_quietly():
    process = subprocess.Popen(
        [sys.executable, "examples/language_model/generate.py", "--pretrained", str(DECODER),
         "--max-new-tokens", "2", *["--prompt", "the cat"] * 3], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocesses.cpu_env(1))
    process.stdout.close()                        # the reader is gone before the first line
    _, err = process.communicate(timeout=300)
    assert process.returncode == 141, err.decode()[-3000:]
    assert err.decode() == ""


@pytest.mark.slow
def test_causal_lm_without_valid_or_test_file_finishes_exports_and_summarises(tmp_path):
    recipe = subprocesses.load_script(ROOT / "examples" / "language_model" / "train.py",
                                      "lm_train_optional_flags")
    train = tmp_path / "train.txt"
    train.write_text("the cat sat on the mat\na dog runs in the park today\n" * 6)
    summary = recipe.main(["--init-from", str(ROOT / "tests" / "fixtures" / "decoders" / "qwen2"),
                           "--train-file", str(train), "--max-length", "16", "--batch-size", "4",
                           "--max-steps", "3", "--save-dir", str(tmp_path / "run"),
                           "--no-tensorboard", "--no-progress"])
    assert summary["steps"] == 3 and summary["best_step"] is None
    assert (Path(summary["export"]) / "config.json").is_file()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 3


@pytest.mark.parametrize("argv, says", [
    (["--precision", "fp16"], "--precision: cannot parse precision policy 'fp16'"),
    (["--train-file", "train.tsv"], "--train-file needs --valid-file too"),
    (["--train-file", "{tmp}/no.tsv", "--valid-file", "{tmp}/no.tsv"],
     "--train-file {tmp}/no.tsv: no such file"),
    (["--pretrained", "{tmp}/no"], "--pretrained {tmp}/no: no such directory"),
    (["--eval-every", "-1"], "--eval-every must be >= 0"),
    (["--time-budget-min", "0"], "--time-budget-min must be > 0"),
], ids=["precision", "train-file-alone", "missing-file", "missing-checkpoint", "eval-every",
        "time-budget"])
def test_a_recipe_refuses_a_bad_setting_before_writing_anything(tmp_path, capsys, argv, says):
    classify = subprocesses.load_script(ROOT / "examples" / "finetune" / "classify.py",
                                        "classify_bad_settings")
    with pytest.raises(SystemExit) as exit_:
        classify.main(["--dataset", "toy", "--max-steps", "1", "--save-dir",
                       str(tmp_path / "run"), *(a.format(tmp=tmp_path) for a in argv)])
    lines = capsys.readouterr().err.strip().splitlines()
    says = says.format(tmp=tmp_path)
    assert exit_.value.code == 2 and len(lines) == 1 and says in lines[0], lines
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_pretraining_without_valid_file_finishes_exports_and_summarises(tmp_path):
    pretrain = subprocesses.load_script(ROOT / "examples" / "pretrain" / "train.py",
                                        "pretrain_optional_flags")
    text = tmp_path / "train.txt"
    words = "the a big small horse dog sang ran under over today now".split()
    rng = np.random.default_rng(0)
    text.write_text("\n\n".join("\n".join(" ".join(rng.choice(words, 5)) for _ in range(6))
                                for _ in range(30)) + "\n", encoding="utf-8")
    summary = pretrain.main([
        "--train-file", str(text), "--model", "bert_tiny", "--model-overrides",
        "hidden_size=16,num_layers=1,num_heads=2,intermediate_size=32", "--vocab-size", "80",
        "--max-length", "32", "--batch-size", "4", "--max-steps", "2", "--save-dir",
        str(tmp_path / "run"), "--no-tensorboard", "--no-progress"])
    assert summary["steps"] == 2 and (Path(summary["export"]) / "config.json").is_file()
    assert (tmp_path / "run" / "summary.json").is_file()


@pytest.mark.slow
def test_nmt_run_stopped_after_its_final_parameters_resumes_to_the_end(tmp_path):
    """The issue's reproduction: a finished run's ``final/`` (step 4) copied over a run
    stopped two steps short (before its summary), then ``--resume``: the run ends, writes
    ``final/`` again and summarises (was: "Orbax refused to save step 4 in .../final")."""
    import shutil

    from test_nmt_recipe import FAST

    train = subprocesses.load_script(ROOT / "examples" / "nmt" / "train.py", "nmt_final_resume")
    common = [*FAST, "--no-tensorboard", "--no-progress"]
    train.main([*common, "--max-steps", "4", "--save-dir", str(tmp_path / "whole")])
    train.main([*common, "--max-steps", "2", "--save-dir", str(tmp_path / "cut")])
    (tmp_path / "cut" / "summary.json").unlink()
    shutil.rmtree(tmp_path / "cut" / "final")
    shutil.copytree(tmp_path / "whole" / "final", tmp_path / "cut" / "final")
    summary = train.main([*common, "--max-steps", "4", "--resume", "--save-dir",
                          str(tmp_path / "cut")])
    assert summary["steps"] == 4 and (tmp_path / "cut" / "summary.json").is_file()
    assert sorted(p.name for p in (tmp_path / "cut" / "final").iterdir()) == ["4"]
    assert not (tmp_path / "cut" / ".final.partial").exists()
