"""Bad inputs at the training edges: damaged checkpoints, refused saves, non-finite losses,
reused save directories, empty or over-long splits in the recipes."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from textkit.training import CheckpointManager
from textkit.training.checkpoint import CHECKSUMS, CheckpointError


def save_steps(directory, steps=(1, 2, 3)):
    manager = CheckpointManager(directory, max_to_keep=None)
    for step in steps:
        manager.save(step, {"w": jnp.full((64,), float(step))}, extra={"step": step})
    return manager


def largest_file(step_dir):
    files = [p for p in step_dir.rglob("*") if p.is_file() and p.name != CHECKSUMS]
    return max(files, key=lambda p: p.stat().st_size)


def flip_byte(path, offset=-8):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_flipped_bytes_in_the_latest_step_fall_back_to_the_newest_intact_one(tmp_path):
    manager = save_steps(tmp_path / "ckpt")
    damaged = largest_file(manager.step_dir(3))
    flip_byte(damaged)
    with pytest.warns(UserWarning, match=str(damaged)):
        state, extra = manager.restore("latest", {"w": jnp.zeros((64,))})
    assert extra["step"] == 2 and float(state["w"][0]) == 2.0
    assert (tmp_path / "ckpt" / "3.damaged").is_dir()        # kept for inspection
    manager.save(3, {"w": jnp.full((64,), 30.0)}, extra={"step": 3})  # the step is free again
    assert manager.restore("latest", {"w": jnp.zeros((64,))})[1]["step"] == 3
    manager.close()


def test_a_damaged_named_step_is_an_error_naming_the_file(tmp_path):
    manager = save_steps(tmp_path / "ckpt")
    damaged = largest_file(manager.step_dir(2))
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])   # truncated
    with pytest.raises(CheckpointError, match="damaged") as error:
        manager.restore(2, {"w": jnp.zeros((64,))})
    assert str(damaged) in str(error.value)
    manager.close()


def test_no_intact_step_is_a_clear_error(tmp_path):
    manager = save_steps(tmp_path / "ckpt", steps=(1, 2))
    for step in (1, 2):
        flip_byte(largest_file(manager.step_dir(step)))
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match="no intact checkpoint"):
        manager.restore("latest", {"w": jnp.zeros((64,))})
    manager.close()


def test_a_refused_save_is_an_error(tmp_path):
    manager = save_steps(tmp_path / "ckpt", steps=(5,))
    with pytest.raises(CheckpointError, match="refused to save step 3"):
        manager.save(3, {"w": jnp.zeros((64,))})
    manager.close()
