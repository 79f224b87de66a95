"""What a run leaves to look at: metrics.jsonl, TensorBoard event files, curves.png, the
``python -m textkit.plot`` command, and a resumed run that drops rows past its checkpoint."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from textkit.plot import panels_of, plot_runs, read_metrics
from textkit.training import FitConfig, RunDir, create_train_state, fit, make_train_step
from textkit.training.writers import (
    CurvesWriter,
    JsonlWriter,
    MetricWriter,
    TensorBoardWriter,
    run_writers,
)

ROOT = Path(__file__).resolve().parents[1]


def loss_fn(params, batch, rng):
    residual = batch["x"] @ params["w"] - batch["y"]                      # [B]
    return jnp.sum(residual ** 2), (jnp.float32(batch["x"].shape[0]), {})


class Batches:
    """A fixed list of batches, iterable once per epoch."""

    def __init__(self, count: int = 6):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(count, 8, 4)).astype(np.float32)
        self.batches = [{"x": x[i], "y": x[i] @ np.arange(4, dtype=np.float32)}
                        for i in range(count)]

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def train(run: Path, config: FitConfig, writers, manager=None):
    tx = optax.sgd(0.05)
    state = create_train_state({"w": jnp.zeros(4)}, tx, jax.random.key(0))
    return fit(state, make_train_step(loss_fn, tx), Batches(), config, writers=writers,
               evaluate=lambda s: {"valid_error": float(jnp.sum(
                   (s.params["w"] - jnp.arange(4.0)) ** 2))},
               learning_rate=lambda s: 0.05, checkpoints=manager, log=lambda m: None)


def event_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """The scalars of every TensorBoard event file under ``directory``, parsed record by
    record (TFRecord framing: length, crc, Event proto, crc) with tensorboardX's protos."""
    from tensorboardX.proto import event_pb2

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_every_writer_satisfies_the_protocol(tmp_path):
    for writer in run_writers(tmp_path):
        assert isinstance(writer, MetricWriter)
    assert run_writers(tmp_path, main_process=False) == []     # only process 0 writes
    assert not any(isinstance(w, TensorBoardWriter)
                   for w in run_writers(tmp_path, tensorboard=False))


def test_fit_writes_jsonl_events_and_curves(tmp_path):
    config = FitConfig(epochs=2, log_every=2, eval_each_epoch=True, progress=False)
    train(tmp_path, config, run_writers(tmp_path))
    rows = read_metrics(tmp_path)
    train_rows = [r for r in rows if r["kind"] == "train"]
    eval_rows = [r for r in rows if r["kind"] == "eval"]
    assert [r["step"] for r in train_rows] == [2, 4, 6, 8, 10, 12]
    assert [(r["step"], r["epoch"]) for r in eval_rows] == [(6, 1), (12, 2)]
    for row in train_rows:
        assert {"loss", "learning_rate", "tokens_per_s", "grad_norm", "wall_s"} <= set(row)
        assert row["learning_rate"] == pytest.approx(0.05) and row["tokens_per_s"] > 0
    assert "loss_scale" not in train_rows[0]                     # float32: no loss scaling
    assert train_rows[-1]["loss"] < train_rows[0]["loss"]         # it learns
    assert eval_rows[1]["valid_error"] < eval_rows[0]["valid_error"]

    scalars = event_scalars(tmp_path / "tensorboard")
    assert [step for step, _ in scalars["train/loss"]] == [2, 4, 6, 8, 10, 12]
    assert scalars["train/loss"][0][1] == pytest.approx(train_rows[0]["loss"], rel=1e-6)
    assert [step for step, _ in scalars["eval/valid_error"]] == [6, 12]

    png = (tmp_path / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width >= 900 and height >= 250 and len(png) > 10_000   # three panels, drawn
    assert [key for _, key, _ in panels_of([rows])] == ["loss", "learning_rate", "valid_error"]


def test_a_resumed_run_drops_rows_past_its_checkpoint_and_appends(tmp_path):
    run = RunDir(tmp_path)
    manager = run.checkpoint_manager(max_to_keep=3)
    writers = [JsonlWriter(tmp_path / "metrics.jsonl"), TensorBoardWriter(tmp_path / "tb")]
    train(tmp_path, FitConfig(max_steps=6, log_every=1, eval_every=3, progress=False),
          writers, manager)
    manager.close()
    with open(tmp_path / "metrics.jsonl", "a", encoding="utf-8") as f:   # a killed run's rows
        f.write(json.dumps({"kind": "train", "step": 7, "loss": 1.0}) + "\n")
        f.write('{"kind": "train", "step": 8, "lo')                      # and a torn line
    manager = run.checkpoint_manager(max_to_keep=3)
    writers = [JsonlWriter(tmp_path / "metrics.jsonl"), TensorBoardWriter(tmp_path / "tb")]
    train(tmp_path, FitConfig(max_steps=9, log_every=1, eval_every=3, resume=True,
                              progress=False), writers, manager)
    manager.close()
    steps = [r["step"] for r in read_metrics(tmp_path) if r["kind"] == "train"]
    assert steps == list(range(1, 10))                    # 7 and the torn 8 were dropped
    walls = [r["wall_s"] for r in read_metrics(tmp_path)]
    assert walls == sorted(walls)                         # the clock goes on from the first run


def test_plot_command_draws_several_runs(tmp_path):
    for name, rate in (("slow", 0.01), ("fast", 0.05)):
        writer = JsonlWriter(tmp_path / name / "metrics.jsonl")
        writer.start(0)
        for step in range(1, 6):
            writer.write("train", step, 0, {"loss": 1.0 / (1 + rate * step),
                                            "learning_rate": rate})
        writer.write("eval", 5, 1, {"valid_bleu": 10 * rate})
        writer.close()
    out = tmp_path / "both.png"
    done = subprocess.run([sys.executable, "-m", "textkit.plot", str(tmp_path / "slow"),
                           str(tmp_path / "fast"), "-o", str(out)], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "2 run(s)" in done.stdout and out.read_bytes()[:4] == b"\x89PNG"
    assert "WARNING" not in done.stderr and "font cache" not in done.stderr
    missing = subprocess.run([sys.executable, "-m", "textkit.plot", str(tmp_path / "none")],
                             capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 2 and "metrics.jsonl does not exist" in missing.stderr


def test_plot_main_in_process_writes_one_panel_per_metric(tmp_path, capsys):
    """``textkit.plot.__main__.main`` itself (the subprocess test above is not measured by
    coverage): the PNG's size follows the panels (3 in a row, 4.6 x 3.4 inches at 100 dpi),
    labels are checked against the runs, and a missing run is exit status 2."""
    from textkit.plot.__main__ import main

    for name, rate in (("a", 0.01), ("b", 0.05)):
        writer = JsonlWriter(tmp_path / name / "metrics.jsonl")
        writer.start(0)
        for step in range(1, 4):
            writer.write("train", step, 0, {"loss": 2.0 - rate * step, "learning_rate": rate})
        writer.write("eval", 3, 1, {"valid_ppl": 5.0 + rate})
        writer.close()
    out = tmp_path / "deep" / "runs.png"
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(out), "--title", "t",
                 "--labels", "first,second"]) == 0
    assert capsys.readouterr().out == f"2 run(s) -> {out}\n"
    png = out.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (3 * 460, 340)    # loss, lr, valid_ppl
    assert not list(out.parent.glob("*.partial.png"))
    assert main([str(tmp_path / "a"), "-o", str(tmp_path / "one.png")]) == 0
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "a"), str(tmp_path / "b"), "--labels", "only-one"])
    assert exit_info.value.code == 2
    assert "--labels gives 1 labels for 2 runs" in capsys.readouterr().err
    assert main([str(tmp_path / "none"), "-o", str(tmp_path / "none.png")]) == 2
    assert "metrics.jsonl does not exist" in capsys.readouterr().err
    assert not (tmp_path / "none.png").exists()


def test_plot_refuses_runs_without_rows(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="no metric rows"):
        plot_runs([tmp_path], tmp_path / "x.png")
    CurvesWriter(tmp_path / "absent").close()             # nothing to draw: no file, no error
    assert not (tmp_path / "absent" / "curves.png").exists()


def test_curves_merge_the_losses_skip_counts_and_name_runs_once(tmp_path):
    """One loss panel (training, and validation where evaluation records it), no panel for a
    count of evaluated examples, one legend of the runs above the panels, a title."""
    from textkit.plot import figure_of

    for name, rate in (("a", 0.01), ("b", 0.05)):
        writer = JsonlWriter(tmp_path / "runs" / name / "metrics.jsonl")
        writer.start(0)
        for step in range(1, 4):
            writer.write("train", step, 0, {"loss": 2.0 - rate * step, "learning_rate": rate})
            writer.write("eval", step, 0, {"valid_loss": 2.1 - rate * step, "valid_count": 10,
                                           "valid_accuracy": 0.5 + rate * step})
        writer.close()
    runs = [tmp_path / "runs" / "a", tmp_path / "runs" / "b"]
    rows = [read_metrics(run) for run in runs]
    assert panels_of(rows) == [
        ("train", "loss", "training and validation loss"),
        ("train", "learning_rate", "learning rate"),
        ("eval", "valid_accuracy", "valid accuracy (evaluation)")]
    trained_only = [[row for row in rows[0] if row["kind"] == "train"]]
    assert panels_of(trained_only)[0][2] == "training loss"   # no "per token": it may be not
    figure = figure_of(runs)
    assert figure.get_suptitle() == "runs/a vs runs/b"
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["a", "b"]
    visible = [ax for ax in figure.axes if ax.get_visible()]
    assert [ax.get_legend() is not None for ax in visible] == [True, False, False]
    assert [t.get_text() for t in visible[0].get_legend().get_texts()] == [
        "training", "validation"]
    assert len(visible[0].get_lines()) == 4           # two runs, two losses each
    assert not figure_of(runs[:1]).legends            # one run: nothing to tell apart


def test_plot_usage_names_the_console_script(monkeypatch, capsys):
    from textkit.plot.__main__ import main

    monkeypatch.setattr(sys, "argv", ["/venv/bin/textkit-plot"])
    with pytest.raises(SystemExit):
        main(["--help"])
    assert capsys.readouterr().out.startswith("usage: textkit-plot ")


def test_read_metrics_skips_a_cut_last_line_and_names_damage_before_it(tmp_path):
    from textkit.errors import RunDirError

    rows = [json.dumps({"kind": "train", "step": s, "loss": 1.0}) for s in (1, 2)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(rows) + '\n{"kind": "tra', encoding="utf-8")
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
    path.write_text(rows[0] + '\n{"kind": "tra\n' + rows[1] + "\n", encoding="utf-8")
    with pytest.raises(RunDirError, match=rf"{path}, line 2: not a JSON row"):
        read_metrics(tmp_path)
    path.write_bytes(rows[0].encode() + b"\n\xff\xfe\n" + rows[1].encode() + b"\n")
    with pytest.raises(RunDirError, match="line 2"):
        read_metrics(path)
