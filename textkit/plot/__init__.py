"""Pictures of training runs: the curves of one or several run directories in one PNG.

``plot_runs([run, ...], "curves.png")`` reads each run's ``metrics.jsonl`` (the rows ``fit``
writes) and draws, against the step: the training loss, the learning rate, and one panel per
evaluation metric, each run a line of its own (labelled by its directory name). Headless
(matplotlib's Agg canvas, no display, no global pyplot state). ``python -m textkit.plot RUN
[RUN ...] -o runs.png`` is the command-line form. Never imports jax.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["panels_of", "plot_runs", "read_metrics"]

_TRAIN_PANELS = (("loss", "training loss (per token)"), ("learning_rate", "learning rate"))
_SKIPPED = {"kind", "step", "epoch", "wall_s", "train_s", "count", "tokens"}


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` file, or of the one in a run directory (a damaged
    last line, from a killed run, is skipped)."""
    path = Path(path)
    if path.suffix != ".jsonl":
        path = path / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {path.parent} a run directory "
                                "written by textkit's fit?")
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def panels_of(runs: Sequence[Sequence[dict[str, Any]]]) -> list[tuple[str, str, str]]:
    """``(kind, metric, title)`` of every panel the rows of ``runs`` fill: the training loss
    and learning rate, then each evaluation metric in order of appearance."""
    panels = [("train", key, title) for key, title in _TRAIN_PANELS
              if any(row.get("kind") == "train" and _number(row.get(key)) is not None
                     for rows in runs for row in rows)]
    seen: list[str] = []
    for rows in runs:
        for row in rows:
            if row.get("kind") != "eval":
                continue
            seen += [k for k, v in row.items() if k not in _SKIPPED and k not in seen
                     and _number(v) is not None]
    return panels + [("eval", key, f"{key.replace('_', ' ')} (evaluation)") for key in seen]


def _figure(count: int) -> Any:
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)  # no font-cache notice
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    columns = min(count, 3)
    rows = -(-count // columns)
    figure = Figure(figsize=(4.6 * columns, 3.4 * rows), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots(rows, columns, squeeze=False).ravel()


def plot_runs(runs: Sequence[str | Path], output: str | Path, *, title: str = "",
              labels: Sequence[str] | None = None) -> Path:
    """Draw the curves of the run directories ``runs`` into the PNG ``output``; returns it.

    One panel per metric (``panels_of``), steps on the x axis, one line per run."""
    rows = [read_metrics(run) for run in runs]
    labels = list(labels) if labels is not None else [Path(run).name for run in runs]
    panels = panels_of(rows)
    if not panels:
        raise ValueError(f"no metric rows to draw in {[str(r) for r in runs]}")
    figure, axes = _figure(len(panels))
    for ax, (kind, key, heading) in zip(axes, panels):
        for run_rows, label in zip(rows, labels):
            points = [(row["step"], _number(row.get(key))) for row in run_rows
                      if row.get("kind") == kind and _number(row.get(key)) is not None]
            if points:
                steps, values = zip(*points)
                ax.plot(steps, values, marker="o" if kind == "eval" else None,
                        markersize=3, linewidth=1.2, label=label)
        ax.set_title(heading, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(key.replace("_", " "))
        ax.grid(alpha=0.3)
        if key == "learning_rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        if len(runs) > 1:
            ax.legend(fontsize=8)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    if title:
        figure.suptitle(title, fontsize=11)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial.png")
    figure.savefig(partial)
    partial.replace(output)                # atomic: a reader never sees half a picture
    return output
