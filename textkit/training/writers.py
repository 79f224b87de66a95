"""Metric writers: where ``fit`` records each log point and each evaluation.

A writer is any object with the three methods of ``MetricWriter``; ``fit`` calls ``start``
once (with the step it starts from: rows past it, left by a run that was killed after its last
checkpoint, are dropped), ``write`` at every log point (``kind="train"``) and evaluation
(``kind="eval"``), and ``close`` at the end. A user's own writer (W&B, MLflow, ...) is a small
class with these methods, passed in ``fit(..., writers=[...])``.

``JsonlWriter``: ``metrics.jsonl``, one JSON object per row (``{"kind", "step", "epoch",
"wall_s", ...values}``). ``TensorBoardWriter``: event files through tensorboardX (no
TensorFlow), one scalar per value under ``train/`` or ``eval/``; a resumed run purges the later
steps. ``CurvesWriter``: ``curves.png`` (``textkit.plot``) redrawn from ``metrics.jsonl`` after
each evaluation and at the end.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from textkit._io import write_text_atomic
from textkit.plot import plot_runs, read_metrics

__all__ = ["CurvesWriter", "JsonlWriter", "MetricWriter", "TensorBoardWriter", "run_writers"]


@runtime_checkable
class MetricWriter(Protocol):
    """What ``fit`` calls on each of its ``writers``."""

    def start(self, step: int) -> None:
        """Called once before training, with the step the run starts from (0, or the
        restored checkpoint's): rows past ``step`` are dropped."""

    def write(self, kind: str, step: int, epoch: int, values: Mapping[str, float]) -> None:
        """One row: ``kind`` ``"train"`` (a log point) or ``"eval"`` (an evaluation)."""

    def close(self) -> None:
        """The end of training (files flushed)."""


def _numbers(values: Mapping[str, Any]) -> dict[str, float]:
    """The int and float entries of ``values`` as floats (non-finite ones kept)."""
    return {k: float(v) for k, v in values.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


class JsonlWriter:
    """``metrics.jsonl`` in a run directory: one object per row, appended and flushed."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.started = time.time()
        self._file: Any = None

    def start(self, step: int) -> None:
        if self.path.is_file():
            kept = [row for row in read_metrics(self.path) if row.get("step", 0) <= step]
            write_text_atomic(self.path, "".join(json.dumps(row) + "\n" for row in kept))
            if kept:
                self.started -= float(kept[-1].get("wall_s", 0.0))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close)

    def write(self, kind: str, step: int, epoch: int, values: Mapping[str, float]) -> None:
        row = {"kind": kind, "step": int(step), "epoch": int(epoch),
               "wall_s": round(time.time() - self.started, 3)}
        row.update({k: (v if math.isfinite(v) else str(v)) for k, v in _numbers(values).items()})
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class TensorBoardWriter:
    """TensorBoard event files under ``directory`` (tensorboardX): ``train/<name>`` and
    ``eval/<name>`` scalars against the step."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._writer: Any = None

    def start(self, step: int) -> None:
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(str(self.directory),
                                     purge_step=step + 1 if step else None)

    def write(self, kind: str, step: int, epoch: int, values: Mapping[str, float]) -> None:
        for name, value in _numbers(values).items():
            self._writer.add_scalar(f"{kind}/{name}", value, global_step=int(step))
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class CurvesWriter:
    """``curves.png`` beside ``metrics.jsonl``, redrawn after each evaluation and at the end
    (``textkit.plot.plot_runs``)."""

    def __init__(self, run_root: str | Path):
        self.root = Path(run_root)

    def start(self, step: int) -> None:
        pass

    def write(self, kind: str, step: int, epoch: int, values: Mapping[str, float]) -> None:
        if kind == "eval":
            self.draw()

    def draw(self) -> None:
        if (self.root / "metrics.jsonl").is_file():
            plot_runs([self.root], self.root / "curves.png")   # titled <runs folder>/<run>

    def close(self) -> None:
        self.draw()


def run_writers(root: str | Path, *, tensorboard: bool = True,
                main_process: bool = True) -> list[MetricWriter]:
    """The writers of a run directory: ``metrics.jsonl``, ``curves.png`` and (unless
    ``tensorboard`` is False) event files under ``tensorboard/``; none but on process 0."""
    if not main_process:
        return []
    root = Path(root)
    writers: list[MetricWriter] = [JsonlWriter(root / "metrics.jsonl"), CurvesWriter(root)]
    if tensorboard:
        writers.append(TensorBoardWriter(root / "tensorboard"))
    return writers
