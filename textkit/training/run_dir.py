"""``RunDir``: the save directory of one training run, the same layout for every task.

::

    <root>/config.json     the run's configuration, written once, checked on --resume
    <root>/train.log       process 0's log (every line ``log`` printed)
    <root>/checkpoints/    Orbax steps (TrainState + JSON extra: loop progress, sampler state)
    <root>/final/          the parameters that were evaluated on the test set (swapped in whole)
    <root>/summary.json    one schema for every task (see ``summary``)
    <root>/.lock           the lock of the process that runs it (``run_lock``: its pid, host)

A directory belongs to one run at a time: ``start`` takes ``<root>/.lock`` (``run_lock``) before
any file is read or written, and a second process on it is refused naming the holder's pid.
A reused directory is refused unless the run resumes, and a resumed run must have the same
configuration (``config.json``), so a second run never mixes with the first one's checkpoints.
Only process 0 writes the JSON and log files; checkpoints are saved by every process (Orbax
saves collectively).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jax
from jax.experimental import multihost_utils
from tqdm import tqdm

from textkit import parallel
from textkit._io import write_json_atomic, write_text_atomic
from textkit.errors import RunDirError
from textkit.training.checkpoint import CheckpointManager
from textkit.training.run_lock import RunInUseError, RunLock

__all__ = ["LATEST", "DamagedRunFileError", "RunDir", "find_run", "launch", "run_directory"]


LATEST = "latest"
"""The link in a recipe's runs folder to its newest run directory."""


class DamagedRunFileError(RunDirError, ValueError):
    """A file of a run directory that is damaged (named: the file and what was expected)."""


def _latest(folder: Path) -> Path:
    """The run ``<folder>/latest`` links to, named under ``folder`` (as the user named it)."""
    return folder / os.readlink(folder / LATEST)


def find_run(path: str | Path) -> Path:
    """``path``, or the run its ``latest`` link points at when ``path`` is a runs folder
    (holds no ``config.json`` but a ``latest`` link)."""
    path = Path(path)
    if not (path / "config.json").is_file() and (path / LATEST).is_symlink():
        return _latest(path)
    return path


def run_directory(save_dir: str | Path | None, runs_folder: str | Path, *,
                  resume: bool) -> Path:
    """Where a run goes: ``save_dir`` when given; else with ``resume`` the newest run of
    ``runs_folder`` (its ``latest`` link), and otherwise a new ``<runs_folder>/<date-time>``
    directory (the time of process 0, so every process picks the same one)."""
    if save_dir is not None:
        return Path(save_dir)
    folder = Path(runs_folder)
    if resume:
        if not (folder / LATEST).is_symlink():
            raise RunDirError(f"--resume without --save-dir continues the newest run of "
                              f"{folder}, but {folder / LATEST} does not exist")
        return _latest(folder)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(
        parallel.main_process_value(int(time.time()))))
    path, number = folder / stamp, 1
    while path.exists():
        number += 1
        path = folder / f"{stamp}-{number}"
    return path


def _link_latest(run: Path) -> None:
    """Point ``<run's folder>/latest`` at ``run`` (replaced atomically)."""
    link = run.parent / LATEST
    partial = run.parent / f".{LATEST}.partial"
    partial.unlink(missing_ok=True)
    partial.symlink_to(run.name, target_is_directory=True)
    partial.replace(link)


def launch(save_dir: str | Path | None, config: Mapping[str, Any], *, resume: bool,
           runs_folder: str | Path = "runs/run",
           processes: parallel.LaunchConfig | None = None,
           check: Iterable[str] | None = None, added: Mapping[str, Any] | None = None,
           ) -> tuple[RunDir, jax.sharding.Mesh]:
    """A recipe's start: join the other processes (``processes``: the first JAX call), build
    the device mesh, and open the run directory (``run_directory``: ``save_dir``, or a new
    one under ``runs_folder`` linked as its ``latest``) for ``config`` (``RunDir.open`` with
    ``resume``, ``check`` and ``added``). Returns ``(run, mesh)``."""
    processes = processes or parallel.LaunchConfig()
    parallel.initialize(processes.coordinator, processes.num_processes, processes.process_id)
    mesh = parallel.make_mesh()
    run = RunDir.start(save_dir, runs_folder, config, resume=resume, check=check, added=added,
                       main_process=parallel.is_main_process())
    return run, mesh


def _barrier(name: str) -> None:
    """Wait for every process (nothing to wait for in a single-process run)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def _lock(root: Path, main_process: bool) -> RunLock | None:
    """The run's lock, taken by process 0 for every process; all of them stop when it is
    held elsewhere (or cannot be taken), so none waits on the others' collectives."""
    lock, error = None, None
    if main_process:
        try:
            lock = RunLock(root)
        except RunDirError as err:
            error = err
    if parallel.main_process_decides(error is not None):
        raise error or RunInUseError(f"{root} cannot be locked by process 0 of this run (its "
                                     "log names the reason): nothing was written")
    return lock


@dataclasses.dataclass
class RunDir:
    """The files of one run under ``root``; ``main_process`` writes the JSON and log files."""

    root: Path
    main_process: bool = True
    started: float = dataclasses.field(default_factory=time.perf_counter)
    lock: RunLock | None = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.root = Path(self.root)

    @classmethod
    def start(cls, save_dir: str | Path | None, runs_folder: str | Path,
              config: Mapping[str, Any], *, resume: bool, main_process: bool = True,
              check: Iterable[str] | None = None, reuse_flag: str = "--resume",
              added: Mapping[str, Any] | None = None) -> RunDir:
        """The run directory of a recipe (``run_directory``), opened for ``config``
        (``open``); a new directory under ``runs_folder`` becomes its ``latest``. Logs where
        the run goes."""
        root = run_directory(save_dir, runs_folder, resume=resume)
        run = cls(root, main_process=main_process, lock=_lock(root, main_process))
        try:
            run.open(config, resume=resume, check=check, reuse_flag=reuse_flag, added=added)
        except BaseException:
            if run.lock is not None:
                run.lock.abandon()        # a refused run leaves the directory as it was
            raise
        if save_dir is None and main_process and not resume:
            _link_latest(root)
        run.log(f"run directory: {root}")
        return run

    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    @property
    def summary_path(self) -> Path:
        return self.root / "summary.json"

    @property
    def log_path(self) -> Path:
        return self.root / "train.log"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def final(self) -> Path:
        return self.root / "final"

    def open(self, config: Mapping[str, Any], *, resume: bool,
             check: Iterable[str] | None = None, reuse_flag: str = "--resume",
             added: Mapping[str, Any] | None = None) -> None:
        """Check ``root`` can hold this run, then write ``config.json`` once (process 0).

        Refuses (``RunDirError``) a directory whose ``config.json`` differs from ``config`` in
        a key of ``check`` (default: every key; settings such as a step limit or a time budget
        may change on resume), and, unless ``resume``, one that holds checkpoints or a
        finished run's ``summary.json`` (the message names ``reuse_flag``). ``added``: settings
        introduced after older run directories were written, with the value those runs had; a
        ``config.json`` without such a key counts as holding that value.
        """
        config = json.loads(json.dumps(dict(config)))  # as it reads back from disk
        if self.config_path.is_file():
            old = {**json.loads(json.dumps(dict(added or {}))), **self.read_config()}
            keys = set(old) | set(config) if check is None else set(check)
            changed = sorted(k for k in keys if old.get(k) != config.get(k))
            if changed:
                advice = (f"to continue it, give the settings it was started with (its "
                          f"{self.config_path.name}); to start a new run, give another "
                          f"--save-dir (or, without --save-dir, leave out {reuse_flag})"
                          ) if resume else "use another --save-dir"
                raise RunDirError(f"{self.root} holds a run with different {changed} "
                                 f"({[old.get(k) for k in changed]} there, "
                                 f"{[config.get(k) for k in changed]} now): {advice}")
        used = ((self.checkpoints.is_dir() and any(self.checkpoints.iterdir()))
                or self.summary_path.is_file())
        if used and not resume:
            raise RunDirError(f"{self.root} already holds a run (checkpoints or summary.json): "
                             f"pass {reuse_flag} to reuse it, or use another --save-dir")
        if self.main_process:
            self.root.mkdir(parents=True, exist_ok=True)
            if not (resume and self.config_path.is_file()):  # a resumed run keeps its own
                write_json_atomic(self.config_path, config)

    def read_config(self) -> dict[str, Any]:
        if not self.config_path.is_file():
            raise FileNotFoundError(f"{self.config_path} does not exist: is {self.root} the "
                                    "--save-dir of a training run?")
        try:
            config = json.loads(self.config_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise DamagedRunFileError(f"{self.config_path} is not valid JSON ({err}): the "
                                      "file is damaged or truncated") from None
        if not isinstance(config, dict):
            raise DamagedRunFileError(f"{self.config_path} holds a JSON "
                                      f"{type(config).__name__}, not an object of settings")
        return config

    def log(self, message: str) -> None:
        """Print ``message`` (through tqdm, so bars stay intact) and append it to
        ``train.log``; process 0 only."""
        if not self.main_process:
            return
        tqdm.write(message)
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(message + "\n")

    def checkpoint_manager(self, *, max_to_keep: int = 1, best_metric: str | None = None,
                           best_mode: str = "max") -> CheckpointManager:
        return CheckpointManager(self.checkpoints, max_to_keep=max_to_keep,
                                 best_metric=best_metric, best_mode=best_mode)

    def save_final(self, step: int, params: Any, source: str) -> None:
        """Save the evaluated parameters to ``final/`` (one Orbax step); every process must
        call it. Written beside it (``.final.partial/``) and then swapped in, so that
        ``final/`` is always whole and a run resumed after writing it (stopped before its
        summary) writes it again instead of being refused a step already on disk."""
        partial, old = self.root / ".final.partial", self.root / ".final.old"
        if self.main_process:
            shutil.rmtree(partial, ignore_errors=True)   # left by a run stopped writing it
        _barrier("textkit final parameters: staging folder cleared")
        with CheckpointManager(partial, max_to_keep=1) as manager:
            manager.save(step, params, extra={"source": source})
            manager.wait_until_finished()
        if self.main_process:
            shutil.rmtree(old, ignore_errors=True)
            if self.final.exists():
                self.final.rename(old)
            partial.rename(self.final)
            shutil.rmtree(old, ignore_errors=True)
        _barrier("textkit final parameters: swapped in")

    def load_final(self, target: Any) -> tuple[Any, dict[str, Any]]:
        """(params, extra) from ``final/``; ``target`` is a params pytree of the same structure."""
        if not self.final.is_dir():
            raise FileNotFoundError(f"{self.final} does not exist: the training run in "
                                    f"{self.root} did not finish")
        with CheckpointManager(self.final, max_to_keep=1) as manager:
            return manager.restore("latest", target)

    def write_text(self, name: str, text: str) -> None:
        """Write ``<root>/<name>`` atomically (process 0)."""
        if self.main_process:
            write_text_atomic(self.root / name, text)

    def summary(self, task: str, config: Mapping[str, Any], fit: Any, *,
                num_params: int, results: Mapping[str, Any]) -> dict[str, Any]:
        """Write and return ``summary.json``, one schema for every task.

        Keys: ``task``, ``config``, ``num_params``, ``steps``, ``epochs``, ``train_s``,
        ``compile_s``, ``tokens_per_s`` (counted tokens per second of training, compilation
        excluded: ``Progress.tokens_per_s``), ``num_compiles``, ``last_loss``, ``stopped_by``,
        ``data_crc32`` (checksum of every batch fed, in order), ``history`` (one record per
        evaluation), ``wall_s``,
        ``device``, ``num_devices``, ``num_processes``, ``jax``,
        then the task's ``results`` (e.g. ``test_bleu``, ``test_ppl``, ``accuracy_mean``).
        ``fit`` is the ``FitResult`` of ``textkit.training.fit`` (or None: no training).
        """
        progress = fit.progress if fit is not None else None
        summary = {
            "task": task, "config": dict(config), "num_params": int(num_params),
            "steps": progress.step if progress else 0,
            "epochs": progress.epoch if progress else 0,
            "train_s": progress.train_s if progress else 0.0,
            "compile_s": progress.compile_s if progress else 0.0,
            "tokens_per_s": progress.tokens_per_s if progress else 0.0,
            "num_compiles": fit.num_compiles if fit is not None else 0,
            "last_loss": progress.last_loss if progress else None,
            "stopped_by": fit.stopped_by if fit is not None else None,
            "data_crc32": progress.data_crc32 if progress else 0,
            "history": progress.history if progress else [],
            "wall_s": time.perf_counter() - self.started,
            "device": jax.devices()[0].device_kind, "num_devices": jax.device_count(),
            "num_processes": jax.process_count(), "jax": jax.__version__,
            **results,
        }
        if self.main_process:
            write_json_atomic(self.summary_path, summary)
        return summary
