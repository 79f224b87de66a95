"""One process per run directory: a second one is refused before it touches a file, a lock
left by a killed process never blocks, and one process may reopen its own run."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import subprocesses

from textkit.cli import run_main
from textkit.errors import RunDirError
from textkit.training import RunDir
from textkit.training.run_lock import LOCK_NAME, RunInUseError, RunLock

HOLD = ("import sys, time\nfrom textkit.training.run_lock import RunLock\n"
        "lock = RunLock(sys.argv[1])\nprint('held', flush=True)\ntime.sleep(60)\n")


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture
def held_by_another(tmp_path):
    """``tmp_path/run`` locked through a descriptor of its own, as another process would,
    with a first run's config.json and metrics.jsonl in it."""
    root = tmp_path / "run"
    root.mkdir()
    (root / "config.json").write_text('{"seed": 1}')
    (root / "metrics.jsonl").write_text('{"step": 1}\n')
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, b"424242 otherhost\n")
    yield root
    os.close(fd)


def test_a_second_run_is_refused_naming_the_directory_and_the_holder(held_by_another):
    before = files(held_by_another)
    with pytest.raises(RunInUseError, match=rf"{held_by_another} is in use by another run "
                       r"\(process 424242 on host otherhost"):
        RunDir.start(held_by_another, "unused", {"seed": 2}, resume=True)
    assert files(held_by_another) == before            # config.json, metrics.jsonl untouched


def test_a_recipe_on_a_held_directory_exits_with_the_message(held_by_another, capsys):
    from textkit.cli.finetune import finetune
    from textkit.tasks import SequenceClassificationTask

    before = files(held_by_another)
    with pytest.raises(SystemExit) as exit_:
        run_main(lambda: finetune(SequenceClassificationTask,
                                  ["--save-dir", str(held_by_another)], "test"))
    assert exit_.value.code == 2
    assert "process 424242 on host otherhost" in capsys.readouterr().err
    assert files(held_by_another) == before


def test_one_process_may_reopen_its_own_run_and_release_frees_it(tmp_path):
    first = RunDir.start(tmp_path, "unused", {"seed": 1}, resume=False)
    again = RunDir.start(tmp_path, "unused", {"seed": 1}, resume=True)
    assert (tmp_path / LOCK_NAME).read_text().startswith(f"{os.getpid()} ")
    first.lock.release()
    again.lock.release()
    fd = os.open(tmp_path / LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)      # nobody holds it any more
    finally:
        os.close(fd)


def test_a_lock_left_by_a_killed_process_never_blocks(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)],
                              env=subprocesses.cpu_env(1), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunInUseError, match=f"process {holder.pid} on host"):
            RunLock(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (tmp_path / LOCK_NAME).read_text().startswith(f"{holder.pid} ")   # left behind
    RunLock(tmp_path).release()


def test_an_unwritable_directory_is_named_before_anything_is_written(tmp_path, monkeypatch):
    import errno

    from textkit.training import run_lock

    real_open = os.open

    def read_only(path, *args, **kwargs):
        if str(path).endswith(LOCK_NAME):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(run_lock.os, "open", read_only)
    with pytest.raises(RunDirError, match=rf"cannot write the lock file {tmp_path / LOCK_NAME} "
                       r"of run directory .* \(Read-only file system\)"):
        RunDir.start(tmp_path, "unused", {}, resume=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_two_process_run_on_a_held_directory_stops_on_every_process(held_by_another):
    """Process 0 finds the lock held; both processes stop with status 2 (none waits for the
    other in a collective), and the directory's files are untouched."""
    before = files(held_by_another)
    port = subprocesses.free_port()
    script = str(subprocesses.ROOT / "examples" / "language_model" / "train.py")
    processes = [subprocess.Popen(
        [sys.executable, script, "--model", "lstm_lm_tiny", "--toy-sentences", "60",
         "--data-dir", str(held_by_another.parent / "data"), "--save-dir", str(held_by_another),
         "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)],
        env=subprocesses.cpu_env(1), stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        errors = [p.communicate(timeout=300)[1] for p in processes]
    finally:
        for p in processes:
            p.kill()
    assert [p.returncode for p in processes] == [2, 2], errors
    assert "process 424242 on host otherhost" in errors[0]
    assert "cannot be locked by process 0 of this run" in errors[1]
    assert files(held_by_another) == before


def test_a_run_refused_after_taking_the_lock_leaves_the_directory_as_it_was(tmp_path):
    first = RunDir.start(tmp_path, "unused", {"seed": 1}, resume=False)
    first.lock.release()
    (tmp_path / "summary.json").write_text("{}")            # a finished run
    (tmp_path / LOCK_NAME).write_text("1 earlierhost\n")      # its lock file, left behind
    before = files(tmp_path)
    with pytest.raises(RunDirError, match="different"):
        RunDir.start(tmp_path, "unused", {"seed": 2}, resume=True)
    with pytest.raises(RunDirError, match="already holds a run"):
        RunDir.start(tmp_path, "unused", {"seed": 1}, resume=False)
    assert files(tmp_path) == before
    (tmp_path / LOCK_NAME).unlink()
    with pytest.raises(RunDirError, match="already holds a run"):
        RunDir.start(tmp_path, "unused", {"seed": 1}, resume=False)
    assert LOCK_NAME not in files(tmp_path)                  # none left where none was
