"""Faults during a save end cleanly (issue 44): a write that fails (a full disk, simulated by a
file-size limit in a subprocess; a checksum file that cannot be written) is one CheckpointError
naming the cause and the last verified step, with no traceback wall, the earlier step intact
and restorable; a step without its checksum file is never silently trusted."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

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


# runs argv[2:] as a Python command line with a file-size limit of argv[1] bytes
LIMITED = ("import os, resource, signal, sys\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
           "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), "
           "resource.RLIM_INFINITY))\nos.execv(sys.executable, [sys.executable, *sys.argv[2:]])")
LM = Path(__file__).resolve().parents[1] / "examples" / "language_model" / "train.py"


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


@pytest.mark.slow
def test_the_lm_recipe_on_a_full_disk_stops_cleanly_and_resumes(tmp_path):
    """Epoch 1 saved; epoch 2 resumed with 200 kB files at most (curves.png and the logs fit,
    the 1 MB checkpoint does not): one message, step 6 intact; then --resume finishes."""
    run = tmp_path / "run"
    args = [str(LM), "--model", "lstm_lm_tiny", "--model-overrides",
            "embed_size=128,hidden_size=128", "--toy-sentences", "300", "--no-progress",
            "--data-dir", str(tmp_path / "data"), "--save-dir", str(run)]
    env = subprocesses.cpu_env(1)

    def recipe(*argv, limit=None):
        prefix = ["-c", LIMITED, str(limit)] if limit else []
        return subprocess.run([sys.executable, *prefix, *args, *argv], capture_output=True,
                              text=True, env=env, timeout=300)

    assert recipe("--epochs", "1").returncode == 0
    step_6 = snapshot(run / "checkpoints")
    full = recipe("--epochs", "2", "--resume", limit=200_000)
    assert full.returncode == 2 and "Traceback" not in full.stderr, full.stderr[-3000:]
    assert full.stderr.strip().splitlines()[-1].startswith(
        f"error: cannot save step 12 in {run / 'checkpoints'}: File too large")
    assert full.stderr.strip().endswith("the last verified checkpoint, step 6, is intact: "
                                        "--resume continues from it")
    assert snapshot(run / "checkpoints") == step_6              # nothing lost, nothing partial
    resumed = recipe("--epochs", "2", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from epoch 1, step 6" in resumed.stdout + resumed.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 12 and [h["epoch"] for h in summary["history"]] == [1, 2]


def test_run_main_ends_a_refused_write_anywhere_with_one_line(capsys):
    from textkit.cli import run_main

    def full_disk():
        raise OSError(errno.ENOSPC, "No space left on device", "run/curves.png")

    with pytest.raises(SystemExit) as exit_:
        run_main(full_disk)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "error: No space left on device: run/curves.png (a full disk, a quota or a read-only "
        "directory?); the checkpoints saved before it are intact: --resume continues from the "
        "last one\n")
    with pytest.raises(FileNotFoundError):              # other OS errors keep their traceback
        run_main(lambda: open("/nonexistent/file"))


def test_a_read_only_directory_during_a_save_is_named(tmp_path, monkeypatch):
    manager = CheckpointManager(tmp_path, max_to_keep=1)
    manager.save(1, {"w": jnp.ones((8,))})
    before = snapshot(tmp_path)

    def read_only(step, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / f"{step}"))

    monkeypatch.setattr(manager._manager, "save", read_only)
    with pytest.raises(CheckpointError, match=rf"cannot save step 2 in {tmp_path}: Permission "
                       rf"denied \({tmp_path / '2'}\); the last verified checkpoint, step 1, "
                       "is intact"):
        manager.save(2, {"w": jnp.zeros((8,))})
    monkeypatch.undo()
    assert snapshot(tmp_path) == before and manager.all_steps() == [1]
    manager.close()


STOPPED = """
import os, signal, sys
from textkit.cli import run_main

def main():
    print("written before", end="\\n")           # buffered: the stop must flush it
    if sys.argv[1] == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    raise KeyboardInterrupt

run_main(main, resumable=sys.argv[2] == "resumable")
"""


@pytest.mark.parametrize("stop, status", [("sigterm", 143), ("ctrl_c", 130)])
@pytest.mark.parametrize("resumable", ["resumable", "output"])
def test_run_main_ends_a_stop_signal_with_one_line(stop, status, resumable):
    """The process ends at once (the output flushed), with 128 + the signal's number and one
    line saying what is kept: the checkpoints (a training run) or the output (a command)."""
    import subprocess
    import sys

    from subprocesses import cpu_env

    done = subprocess.run([sys.executable, "-c", STOPPED, stop, resumable], capture_output=True,
                          text=True, env=cpu_env(1), timeout=120)
    assert done.returncode == status, done.stderr[-3000:]
    name = "SIGTERM" if stop == "sigterm" else "SIGINT"
    kept = ("the checkpoints saved before it are intact: --resume continues from the last one"
            if resumable == "resumable" else "the output written before it is kept")
    assert done.stderr == f"stopped by {name}: {kept}\n"
    assert done.stdout == "written before\n"


@pytest.mark.slow
def test_the_lm_recipe_stopped_by_sigterm_says_so_and_resumes(tmp_path):
    """SIGTERM once the first checkpoint is written: one line, status 143, every step on disk
    verified; --resume finishes the run."""
    import signal
    import time

    run = tmp_path / "run"
    args = [sys.executable, str(LM), "--model", "lstm_lm_tiny", "--toy-sentences", "300",
            "--no-progress", "--data-dir", str(tmp_path / "data"), "--save-dir", str(run),
            "--epochs", "40"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=subprocesses.cpu_env(1))
    deadline = time.monotonic() + 240
    while not list((run / "checkpoints").glob(f"*/{CHECKSUMS}")):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 143, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == ("stopped by SIGTERM: the checkpoints saved before it "
                                            "are intact: --resume continues from the last one")
    with CheckpointManager(run / "checkpoints") as manager:
        steps = manager.all_steps()
    assert steps and not (run / "summary.json").exists()
    resumed = subprocess.run([*args, "--resume"], capture_output=True, text=True,
                             env=subprocesses.cpu_env(1), timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == 40 * 6


def test_run_main_works_off_the_main_thread():
    """Signal handlers belong to the main thread: elsewhere run_main runs without one."""
    import threading

    from textkit.cli import run_main

    ran = []
    thread = threading.Thread(target=run_main, args=(lambda: ran.append(True),))
    thread.start()
    thread.join()
    assert ran == [True]


def test_asyncio_reports_of_abandoned_orbax_writes_are_dropped(tmp_path, capsys):
    """A failed save's other writes fail unawaited; asyncio reports each when it is collected
    (at exit, after the one error): those reports are dropped, any other task's kept."""
    import logging

    CheckpointManager(tmp_path / "ckpt").save(1, {"w": jnp.ones((4,))})
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("asyncio")
    logger.addHandler(handler)
    try:
        logger.error("Task exception was never retrieved\nfuture: <Task finished coro=<"
                     "async_serialize_from_host() defined at .../orbax/checkpoint/x.py:1>>")
        logger.error("Task exception was never retrieved\nfuture: <Task coro=<mine()>>")
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage().splitlines()[-1] for r in records] == ["future: <Task coro=<mine()>>"]
