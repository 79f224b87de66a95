"""Checkpoints over ``orbax.checkpoint.CheckpointManager``: keep-N, best-by-metric, JSON extra.

Each step directory holds two items: ``state`` (any pytree, e.g. a ``TrainState``, saved with
Orbax's standard handler) and ``extra`` (a small JSON dict: the sampler's ``state_dict()``, the
epoch, metrics, the config). Orbax writes a step into a temporary directory and renames it when
complete, so a step interrupted mid-write is never listed or restored.

A ``TrainState``'s ``frozen`` part (a LoRA run's base model) is not saved: training never
changes it, so a step holds the trained parameters and the optimizer state only, and ``restore``
takes the frozen part from its ``target``.

Retention: the ``max_to_keep`` most recent steps are kept; with ``best_metric`` the best step by
``metrics[best_metric]`` is kept as well (``best_mode`` "max" or "min").

Trust: once a step is written, process 0 records the SHA-256 of every file in it
(``textkit_checksums.json`` inside the step directory); ``restore`` verifies them first and
names the damaged file. ``restore("latest")`` falls back to the newest intact step, reporting
each damaged one by path and setting it aside (``<step>.damaged``); a step without checksums (a
run stopped between saving it and recording them) is set aside as ``<step>.unverified`` when an
older verified step exists, and otherwise restored only after being read in full against
Orbax's metadata, with a warning. A step Orbax refuses to save (at or below a step on disk) is
an error.

Faults: a save that fails (a full disk, a read-only directory) is one ``CheckpointError`` naming
the cause and the last verified step (``--resume`` continues from it); the partial step is
removed, and the tracebacks Orbax's threads log for it are held back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from textkit._io import write_json_atomic as _write_json
from textkit.errors import TextkitError
from textkit.training.train_step import TrainState


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic | jax.Array) and np.ndim(value) == 0:
        return np.asarray(value).item()
    if isinstance(value, np.ndarray | jax.Array):
        return np.asarray(value).tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _to_json_tree(name: str, value: Mapping[str, Any]) -> dict[str, Any]:
    """Plain-Python copy of ``value`` (numpy/jax scalars and arrays converted)."""
    try:
        return json.loads(json.dumps(dict(value), default=_json_default))
    except TypeError as error:
        raise TypeError(f"checkpoint {name} must be JSON serialisable: {error}") from None


CHECKSUMS = "textkit_checksums.json"


_PARTIAL = ".orbax-checkpoint-tmp"
"""The suffix of the folder Orbax writes a step into before renaming it."""


class CheckpointError(TextkitError, RuntimeError):
    """A checkpoint that cannot be saved or trusted: a refused save, a damaged or missing file."""


class UnverifiedCheckpointError(CheckpointError):
    """A step without its checksum file: it cannot be verified by checksums."""


def _drop_closed_loop_reports() -> None:
    """When a save fails, the writes Orbax abandons still finish and call back into its closed
    event loop, each printing a ``RuntimeError: Event loop is closed`` traceback (before the
    save raises, or after), and asyncio reports the failures of the writes nobody awaited: drop
    those reports (and only those) from ``sys.unraisablehook`` and the ``asyncio`` logger,
    installed once per process by the first save."""
    previous = sys.unraisablehook
    if getattr(previous, "textkit_drops_closed_loop", False):
        return

    def hook(unraisable: Any) -> None:
        error = unraisable.exc_value
        if not (isinstance(error, RuntimeError) and str(error) == "Event loop is closed"):
            previous(unraisable)

    hook.textkit_drops_closed_loop = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook
    logging.getLogger("asyncio").addFilter(_orbax_write_unretrieved)


def _orbax_write_unretrieved(record: logging.LogRecord) -> bool:
    """False for asyncio's "Task exception was never retrieved" report of an Orbax write (the
    writes a failed save abandons, reported when they are collected, even at exit): the save
    already raised one error for them."""
    message = record.getMessage()
    return not (message.startswith("Task exception was never retrieved")
                and "orbax" in message)


def _reason(error: Exception) -> str:
    """A failed save's cause in a few words: the OS error when there is one."""
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror} ({error.filename or type(error).__name__})"
    text = str(error)
    code = re.search(r"os_error_code='?(\d+)", text)
    if code:
        where = re.search(r'Failed writing: "([^"]+)"', text)
        return os.strerror(int(code.group(1))) + (f" (writing {where.group(1)})" if where else "")
    return text.splitlines()[0][:300] if text else type(error).__name__


_OWN_WAIT = "Waiting for previous save to complete"
"""Orbax's warning when a save waited over a second for the one before. Every textkit save
waits for itself to finish (``save``), so saves never overlap: the wait Orbax reports is that
one, counted again at the next save, and the line is dropped."""


@contextlib.contextmanager
def _held_orbax_errors() -> Iterator[list[logging.LogRecord]]:
    """Hold back the ERROR records (with their tracebacks) that Orbax's threads log while a save
    runs; the caller turns a failed save into one error and replays them otherwise. Drops the
    ``_OWN_WAIT`` warning."""
    held: list[logging.LogRecord] = []

    def hold(record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            held.append(record)
            return False
        return not str(record.msg).startswith(_OWN_WAIT)

    _drop_closed_loop_reports()
    logger = logging.getLogger("absl")
    logger.addFilter(hold)
    try:
        yield held
    finally:
        logger.removeFilter(hold)


def _file_digests(step_dir: Path) -> dict[str, str]:
    """``{relative path: sha256 hex}`` of every file under ``step_dir`` but the checksum file."""
    digests = {}
    for path in sorted(step_dir.rglob("*")):
        if path.is_file() and path.name != CHECKSUMS:
            sha = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    sha.update(block)
            digests[path.relative_to(step_dir).as_posix()] = sha.hexdigest()
    return digests


def verify_step(step_dir: str | os.PathLike) -> None:
    """Raise ``CheckpointError`` naming the first file of ``step_dir`` that is missing or whose
    SHA-256 differs from the one recorded at save time (``UnverifiedCheckpointError`` when the
    step has no checksums)."""
    step_dir = Path(step_dir)
    record = step_dir / CHECKSUMS
    if not record.is_file():
        raise UnverifiedCheckpointError(f"{step_dir} has no {CHECKSUMS}: it cannot be verified "
                                        "(the run stopped before recording its checksums?)")
    try:
        expected = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{record} is unreadable ({error}): the step is damaged") from None
    actual = _file_digests(step_dir)
    for name, digest in expected.items():
        if name not in actual:
            raise CheckpointError(f"checkpoint file {step_dir / name} is missing")
        if actual[name] != digest:
            raise CheckpointError(f"checkpoint file {step_dir / name} is damaged: sha256 "
                                  f"{actual[name]}, saved as {digest}")


class CheckpointManager:
    """Save and restore ``(state pytree, extra JSON)`` per step under ``directory``."""

    def __init__(
        self,
        directory: str | os.PathLike,
        max_to_keep: int | None = 5,
        best_metric: str | None = None,
        best_mode: str = "max",
    ):
        if best_mode not in ("max", "min"):
            raise ValueError(f"best_mode must be 'max' or 'min', got {best_mode!r}")
        if max_to_keep is not None and max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1 or None, got {max_to_keep}")
        self.best_metric = best_metric
        policies: list[Any] = [ocp.checkpoint_managers.LatestN(n=max_to_keep)]
        best_fn = None
        if best_metric is not None:
            best_fn = lambda metrics: float(metrics[best_metric])
            policies.append(ocp.checkpoint_managers.BestN(
                get_metric_fn=best_fn, reverse=best_mode == "min", n=1,
                keep_checkpoints_without_metrics=False))
        options = ocp.CheckpointManagerOptions(
            best_fn=best_fn,
            best_mode=best_mode,
            preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(policies),
            create=True,
        )
        self._manager = ocp.CheckpointManager(
            os.path.abspath(os.fspath(directory)), options=options,
            item_names=("state", "extra"))

    @property
    def directory(self) -> str:
        return os.fspath(self._manager.directory)

    def save(
        self,
        step: int,
        state: Any,
        *,
        extra: Mapping[str, Any] | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        """Save ``state`` and ``extra`` as ``step`` (asynchronously; see ``wait_until_finished``).

        ``metrics`` are stored with the step (also inside ``extra["metrics"]``) and rank steps
        for ``best_metric``, which they must then contain.
        """
        metrics = _to_json_tree("metrics", metrics or {})
        if self.best_metric is not None and metrics and self.best_metric not in metrics:
            raise ValueError(
                f"step {step}: metrics {sorted(metrics)} lack best_metric {self.best_metric!r}")
        extra = _to_json_tree("extra", {**(extra or {}), "metrics": metrics})
        with _held_orbax_errors() as held:
            try:
                saved = self._manager.save(
                    int(step),
                    args=ocp.args.Composite(state=ocp.args.StandardSave(_trained_part(state)),
                                            extra=ocp.args.JsonSave(extra)),
                    metrics=metrics or None,
                )
                if saved:
                    self._manager.wait_until_finished()
            except Exception as error:  # Orbax raises many types (OSError, ValueError, ...)
                raise self._save_failed(int(step), _reason(error)) from None
        for record in held:
            logging.getLogger("absl").handle(record)
        if not saved:
            raise CheckpointError(
                f"Orbax refused to save step {step} in {self.directory} (steps on disk: "
                f"{self.all_steps()}): a step at or below one already saved; use another "
                "directory or resume the run that wrote them")
        if jax.process_index() == 0:
            self._record_checksums(int(step))

    def _record_checksums(self, step: int) -> None:
        """Write the step's checksum file; a step whose checksums cannot be written is set
        aside (``<step>.unverified``) and the save fails."""
        step_dir = self.step_dir(step)
        try:
            _write_json(step_dir / CHECKSUMS, _file_digests(step_dir))
        except OSError as error:
            with contextlib.suppress(OSError):
                step_dir.rename(step_dir.with_name(f"{step}.unverified"))
            raise self._save_failed(step, f"its checksums could not be written: "
                                          f"{_reason(error)}") from None

    def _save_failed(self, step: int, reason: str) -> CheckpointError:
        """The error of a failed save of ``step``, its partial folder removed."""
        if jax.process_index() == 0:
            for partial in Path(self.directory).glob(f"{step}{_PARTIAL}*"):
                shutil.rmtree(partial, ignore_errors=True)
        self._manager.reload()
        verified = [s for s in self.all_steps() if (self.step_dir(s) / CHECKSUMS).is_file()]
        last = (f"the last verified checkpoint, step {verified[-1]}, is intact: --resume "
                "continues from it" if verified else "no earlier checkpoint was saved")
        return CheckpointError(f"cannot save step {step} in {self.directory}: {reason}; {last}")

    def step_dir(self, step: int) -> Path:
        """The directory of ``step``."""
        return Path(self.directory) / str(int(step))

    def restore(
        self, step: int | str | None = None, target: Any = None
    ) -> tuple[Any, dict[str, Any]]:
        """Restore ``(state, extra)`` of ``step``: an int, ``"latest"``/None, or ``"best"``.

        ``target`` is a pytree of the saved structure (e.g. a freshly created ``TrainState``, or
        ``jax.eval_shape`` of one); its leaves' shapes, dtypes and shardings are used. The step's
        files are verified first (``CheckpointError`` naming a damaged file); ``"latest"``
        falls back to the newest intact step, warning about each damaged one.
        """
        self.wait_until_finished()
        resolved = self._resolve(step)
        candidates = [resolved]
        if step is None or step == "latest":
            candidates += [s for s in reversed(self.all_steps()) if s < resolved]
        errors: list[str] = []
        aside: dict[int, str] = {}
        for candidate in candidates:
            try:
                restored = self._restore_step(candidate, target, verify=True)
            except UnverifiedCheckpointError as error:
                errors.append(str(error))
                aside[candidate] = "unverified"
                continue
            except CheckpointError as error:
                if len(candidates) == 1:
                    raise
                errors.append(str(error))
                aside[candidate] = "damaged"
                warnings.warn(f"{error}; trying an earlier step", stacklevel=2)
                continue
            self._set_aside({c: kind for c, kind in aside.items() if c > candidate})
            return restored
        for candidate in [c for c, kind in aside.items() if kind == "unverified"]:
            try:
                restored = self._restore_step(candidate, target, verify=False)
            except CheckpointError as error:
                errors.append(str(error))
                aside[candidate] = "damaged"
                continue
            warnings.warn(f"{self.step_dir(candidate)} has no {CHECKSUMS} and no verified step "
                          "is left: restored after reading it in full against Orbax's "
                          "metadata", stacklevel=2)
            self._set_aside({c: kind for c, kind in aside.items() if c > candidate})
            return restored
        raise CheckpointError(f"no intact checkpoint in {self.directory}: " + "; ".join(errors))

    def _set_aside(self, steps: Mapping[int, str]) -> None:
        """Rename damaged or unverified steps to ``<step>.<kind>`` (kept for inspection, no
        longer listed, with a warning for each), so that the resumed run can save those step
        numbers again."""
        if not steps:
            return
        if jax.process_index() == 0:
            for step, kind in steps.items():
                aside = self.step_dir(step).with_name(f"{step}.{kind}")
                self.step_dir(step).rename(aside)
                if kind == "unverified":
                    warnings.warn(f"{self.step_dir(step)} has no {CHECKSUMS}: set aside as "
                                  f"{aside}, restoring an earlier verified step", stacklevel=3)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices("textkit damaged checkpoints set aside")
        self._manager.reload()

    def _restore_step(self, step: int, target: Any, *, verify: bool) -> tuple[Any, dict[str, Any]]:
        if verify:
            verify_step(self.step_dir(step))
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(_trained_part(target)),
                    extra=ocp.args.JsonRestore()))
        except Exception as error:  # Orbax raises many types for a damaged step
            raise CheckpointError(f"cannot restore step {step} from {self.step_dir(step)}: "
                                  f"{type(error).__name__}: {error}") from error
        state = restored.state
        if isinstance(target, TrainState) and target.frozen is not None:
            state = state.replace(frozen=target.frozen)
        return state, dict(restored.extra)

    def _resolve(self, step: int | str | None) -> int:
        if step is None or step == "latest":
            resolved = self.latest_step()
        elif step == "best":
            if self.best_metric is None:
                raise ValueError("restore('best') needs a manager created with best_metric")
            resolved = self.best_step()
        elif isinstance(step, int | np.integer):
            resolved = int(step)
            if resolved not in self.all_steps():
                raise FileNotFoundError(
                    f"no checkpoint for step {resolved} in {self.directory}; "
                    f"available: {self.all_steps()}")
        else:
            raise ValueError(f"step must be an int, None, 'latest' or 'best', got {step!r}")
        if resolved is None:
            raise FileNotFoundError(f"no checkpoints in {self.directory}")
        return resolved

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def best_step(self) -> int | None:
        """The best step by ``best_metric`` (None without one or before any save)."""
        if self.best_metric is None:
            return None
        return self._manager.best_step()

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def wait_until_finished(self) -> None:
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _trained_part(state: Any) -> Any:
    """``state`` without a ``TrainState``'s frozen part (module docstring)."""
    return state.replace(frozen=None) if isinstance(state, TrainState) else state


def average_checkpoints(
    manager: CheckpointManager,
    target: Any,
    *,
    steps: Sequence[int] | None = None,
    last_n: int | None = None,
    select: Any = lambda state: state.params,
) -> Any:
    """Average ``select(state)`` over checkpoints; float leaves averaged in float32, cast back.

    Give either ``steps`` or ``last_n`` (the most recent saved steps). ``target`` is the saved
    state's structure as for ``restore``; ``select`` picks the part to average (the params of a
    ``TrainState`` by default). Non-float leaves are taken from the last step.
    """
    if (steps is None) == (last_n is None):
        raise ValueError("give exactly one of steps or last_n")
    manager.wait_until_finished()
    available = manager.all_steps()
    if last_n is not None:
        if not 1 <= last_n <= len(available):
            raise ValueError(f"last_n={last_n} but {len(available)} checkpoints: {available}")
        steps = available[-last_n:]
    steps = [int(step) for step in steps]
    if not steps:
        raise ValueError("steps is empty")

    total = None
    for step in steps:
        part = select(manager.restore(step, target)[0])
        as_f32 = jax.tree_util.tree_map(
            lambda x: jnp.asarray(x, jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating)
            else x, part)
        total = as_f32 if total is None else jax.tree_util.tree_map(
            lambda acc, x: acc + x if jnp.issubdtype(x.dtype, jnp.floating) else x,
            total, as_f32)
    template = select(target)
    return jax.tree_util.tree_map(
        lambda acc, like: (acc / len(steps)).astype(like.dtype)
        if jnp.issubdtype(like.dtype, jnp.floating) else acc,
        total, template)
