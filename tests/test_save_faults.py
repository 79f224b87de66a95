"""Faults during a save end cleanly (issue 44): a write that fails (a full disk, simulated by a
file-size limit in a subprocess; a checksum file that cannot be written) is one CheckpointError
naming the cause and the last verified step, with no traceback wall, the earlier step intact
and restorable; a step without its checksum file is never silently trusted."""

from __future__ import annotations

import errno
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import subprocesses

from textkit.training import CheckpointManager
from textkit.training import checkpoint as checkpoint_module
from textkit.training.checkpoint import CHECKSUMS, CheckpointError

# saves step 1, then step 2 under a 20 kB file-size limit (writes fail with EFBIG, as they fail
# with ENOSPC on a full disk), through run_main as a recipe would end
FULL_DISK = """
import resource, signal, sys
import jax.numpy as jnp
import numpy as np
from textkit.cli import run_main
from textkit.training import CheckpointManager

def main():
    manager = CheckpointManager(sys.argv[1], max_to_keep=1)
    manager.save(1, {"w": jnp.ones((1000,))})
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (20000, resource.RLIM_INFINITY))
    manager.save(2, {"w": jnp.asarray(np.random.default_rng(0).random(100000), jnp.float32)})

run_main(main)
"""


def snapshot(directory):
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_full_disk_during_a_save_is_one_message_and_the_last_step_survives(tmp_path):
    ckpt = tmp_path / "ckpt"
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(ckpt)], capture_output=True,
                          text=True, env=subprocesses.cpu_env(1), timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith(f"error: cannot save step 2 in {ckpt}: File too large (writing "
                                f"{ckpt}/2.orbax-checkpoint-tmp/")
    assert errors[0].endswith("the last verified checkpoint, step 1, is intact: --resume "
                              "continues from it")
    assert sorted(p.name for p in ckpt.iterdir()) == ["1"]     # no partial step 2 left
    with CheckpointManager(ckpt, max_to_keep=1) as manager:
        state, _ = manager.restore("latest", {"w": jnp.zeros((1000,))})
        assert float(state["w"].sum()) == 1000.0
        manager.save(2, {"w": jnp.full((1000,), 2.0)})           # room again: it goes on
        assert manager.all_steps() == [2]


def test_a_checksum_file_that_cannot_be_written_sets_the_step_aside(tmp_path, monkeypatch):
    manager = CheckpointManager(tmp_path, max_to_keep=None)
    manager.save(1, {"w": jnp.ones((8,))})
    before = snapshot(tmp_path / "1")

    def full_disk(path, value):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(checkpoint_module, "_write_json", full_disk)
    with pytest.raises(CheckpointError, match=r"cannot save step 2 in .*: its checksums could "
                       r"not be written: No space left on device .*step 1, is intact"):
        manager.save(2, {"w": jnp.full((8,), 2.0)})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2.unverified"]
    assert manager.all_steps() == [1] and snapshot(tmp_path / "1") == before
    state, _ = manager.restore("latest", {"w": jnp.zeros((8,))})
    assert float(state["w"][0]) == 1.0
    manager.close()


def test_a_step_without_checksums_is_set_aside_for_an_older_verified_one(tmp_path):
    manager = CheckpointManager(tmp_path, max_to_keep=None)
    for step in (1, 2):
        manager.save(step, {"w": jnp.full((8,), float(step))}, extra={"step": step})
    (manager.step_dir(2) / CHECKSUMS).unlink()
    unverified = snapshot(manager.step_dir(2))
    with pytest.warns(UserWarning, match=r"2 has no textkit_checksums.json: set aside as .*"
                      r"2\.unverified"):
        state, extra = manager.restore("latest", {"w": jnp.zeros((8,))})
    assert extra["step"] == 1 and float(state["w"][0]) == 1.0
    assert snapshot(tmp_path / "2.unverified") == unverified      # kept, byte for byte
    assert manager.all_steps() == [1]
    manager.close()


def test_a_lone_step_without_checksums_is_read_in_full_with_a_warning(tmp_path):
    manager = CheckpointManager(tmp_path, max_to_keep=None)
    manager.save(3, {"w": jnp.arange(8.0)})
    (manager.step_dir(3) / CHECKSUMS).unlink()
    with pytest.warns(UserWarning, match=r"no verified step is left: restored after reading "
                      "it in full"):
        state, _ = manager.restore("latest", {"w": jnp.zeros((8,))})
    np.testing.assert_array_equal(np.asarray(state["w"]), np.arange(8.0))
    assert manager.all_steps() == [3]
    manager.close()
