"""Bad inputs at the training edges: damaged checkpoints, refused saves, non-finite losses,
reused save directories, empty or over-long splits in the recipes."""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import pytest
import subprocesses

from textkit.errors import TextkitError
from textkit.training import CheckpointManager, RunDir
from textkit.training.checkpoint import CHECKSUMS, CheckpointError

ROOT = Path(__file__).resolve().parents[1]


def save_steps(directory, steps=(1, 2, 3)):
    manager = CheckpointManager(directory, max_to_keep=None)
    for step in steps:
        manager.save(step, {"w": jnp.full((64,), float(step))}, extra={"step": step})
    return manager


def largest_file(step_dir):
    files = [p for p in step_dir.rglob("*") if p.is_file() and p.name != CHECKSUMS]
    return max(files, key=lambda p: p.stat().st_size)


def snapshot(directory):
    """{relative path: bytes} of every file under ``directory``."""
    return {str(f.relative_to(directory)): f.read_bytes()
            for f in sorted(Path(directory).rglob("*")) if f.is_file()}


def entries(directory):
    return sorted(p.name for p in Path(directory).iterdir())


def flip_byte(path, offset=-8):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_flipped_bytes_in_the_latest_step_fall_back_to_the_newest_intact_one(tmp_path):
    manager = save_steps(tmp_path / "ckpt")
    damaged = largest_file(manager.step_dir(3))
    flip_byte(damaged)
    before = {step: snapshot(manager.step_dir(step)) for step in (1, 2, 3)}
    with pytest.warns(UserWarning, match=str(damaged)):
        state, extra = manager.restore("latest", {"w": jnp.zeros((64,))})
    assert extra["step"] == 2 and float(state["w"][0]) == 2.0
    # the damaged step is kept aside byte for byte, the others untouched, no step written
    assert entries(tmp_path / "ckpt") == ["1", "2", "3.damaged"]
    assert snapshot(tmp_path / "ckpt" / "3.damaged") == before[3]
    assert {step: snapshot(manager.step_dir(step)) for step in (1, 2)} == {
        1: before[1], 2: before[2]}
    assert manager.all_steps() == [1, 2]
    assert float(manager.restore(1, {"w": jnp.zeros((64,))})[0]["w"][0]) == 1.0
    manager.save(3, {"w": jnp.full((64,), 30.0)}, extra={"step": 3})  # the step is free again
    assert manager.restore("latest", {"w": jnp.zeros((64,))})[1]["step"] == 3
    manager.close()


def test_a_damaged_named_step_is_an_error_naming_the_file(tmp_path):
    manager = save_steps(tmp_path / "ckpt")
    damaged = largest_file(manager.step_dir(2))
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])   # truncated
    before = snapshot(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match="damaged") as error:
        manager.restore(2, {"w": jnp.zeros((64,))})
    assert str(damaged) in str(error.value)
    # a named step is not set aside: every file stays as it was, nothing is added
    assert snapshot(tmp_path / "ckpt") == before and entries(tmp_path / "ckpt") == ["1", "2", "3"]
    assert manager.restore(3, {"w": jnp.zeros((64,))})[1]["step"] == 3
    manager.close()


def test_no_intact_step_is_a_clear_error(tmp_path):
    manager = save_steps(tmp_path / "ckpt", steps=(1, 2))
    for step in (1, 2):
        flip_byte(largest_file(manager.step_dir(step)))
    before = snapshot(tmp_path / "ckpt")
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match="no intact checkpoint"):
        manager.restore("latest", {"w": jnp.zeros((64,))})
    assert snapshot(tmp_path / "ckpt") == before              # nothing renamed or removed
    assert entries(tmp_path / "ckpt") == ["1", "2"]
    manager.close()


def test_a_refused_save_is_an_error(tmp_path):
    manager = save_steps(tmp_path / "ckpt", steps=(5,))
    before = snapshot(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match="refused to save step 3"):
        manager.save(3, {"w": jnp.zeros((64,))})
    manager.wait_until_finished()
    assert entries(tmp_path / "ckpt") == ["5"] and manager.all_steps() == [5]  # no step 3
    assert snapshot(tmp_path / "ckpt") == before
    manager.close()


# ------------------------------------------------------------------------------ the recipes
NMT_FAST = ["--spm-vocab-size", "200", "--batch-tokens", "512", "--batch-rows-multiple", "1",
            "--num-buckets", "2", "--eval-every", "0", "--beam-size", "1",
            "--decode-batch-size", "16", "--warmup-steps", "2", "--max-steps", "2",
            "--model-overrides", "d_model=32,d_ff=64,num_encoder_layers=1,num_decoder_layers=1"]


def nmt_script():
    return subprocesses.load_script(ROOT / "examples" / "nmt" / "train.py", "nmt_bad_inputs")


def test_nmt_recipe_refuses_an_empty_split_before_any_training(tmp_path):
    with pytest.raises(ValueError, match="toy valid split is empty"):
        nmt_script().main([*NMT_FAST, "--toy-sizes", "200,0,8", "--save-dir", str(tmp_path)])
    assert not (tmp_path / "spm.model").exists()          # refused before SentencePiece
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.slow
def test_lm_recipe_refuses_a_reused_save_dir_without_resume(tmp_path):
    lm = subprocesses.load_script(ROOT / "examples" / "language_model" / "train.py", "lm_bad")
    args = ["--model", "lstm_lm_tiny", "--toy-sentences", "200", "--epochs", "1",
            "--data-dir", str(tmp_path / "data"), "--save-dir", str(tmp_path / "run")]
    first = lm.main(args)
    before = snapshot(tmp_path / "run")
    assert {"summary.json", "config.json", "metrics.jsonl"} <= set(before)
    with pytest.raises(TextkitError, match="--resume"):
        lm.main(args)
    with pytest.raises(TextkitError, match="different"):
        lm.main([*args, "--seed", "1"])
    assert snapshot(tmp_path / "run") == before     # every file of the first run, unchanged
    assert json.loads(before["summary.json"])["test_ppl"] == first["test_ppl"]


def test_lm_corpora_refuse_an_empty_split(tmp_path, monkeypatch):
    from textkit.tasks import language_model

    def write_with_empty_valid(folder, seed, sizes):
        folder.mkdir(parents=True, exist_ok=True)
        paths = {s: folder / f"{s}.txt" for s in ("train", "valid", "test")}
        for segment, path in paths.items():
            path.write_text("" if segment == "valid" else "a b c\n", encoding="utf-8")
        return paths

    monkeypatch.setattr(language_model, "write_toy_lm_corpus", write_with_empty_valid)
    config = language_model.LanguageModelConfig(data_dir=str(tmp_path))
    task = language_model.LanguageModelTask(config, RunDir(tmp_path / "run"))
    task.read_split("train")
    with pytest.raises(ValueError, match="valid.txt: no samples"):
        task.read_split("valid")


@pytest.mark.slow
def test_sentiment_recipe_refuses_to_overwrite_a_finished_run(tmp_path):
    script = subprocesses.load_script(ROOT / "examples" / "sentiment" / "train.py", "sent_bad")
    args = ["--toy-sentences", "200", "--epochs", "1", "--embed-dim", "8",
            "--model-overrides", "num_filters=4", "--optimizer", "adam", "--save-dir",
            str(tmp_path), "--no-progress"]
    script.main(args)
    before = snapshot(tmp_path)
    with pytest.raises(TextkitError, match="--overwrite"):
        script.main(args)
    assert snapshot(tmp_path) == before              # the finished run's files, unchanged
    again = script.main([*args, "--overwrite"])
    assert json.loads((tmp_path / "summary.json").read_text())["wall_s"] == again["wall_s"]


def test_nmt_recipe_refuses_a_max_length_above_the_model_positions(tmp_path):
    with pytest.raises(TextkitError, match="--max-length 600 is above the 256 positions"):
        nmt_script().main(["--max-length", "600", "--save-dir", str(tmp_path)])
    assert not (tmp_path / "spm.model").exists()
