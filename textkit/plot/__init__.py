"""Pictures of training runs: the curves of one or several run directories in one PNG.

``plot_runs([run, ...], "curves.png")`` reads each run's ``metrics.jsonl`` (the rows ``fit``
writes) and draws, against the step: the loss (training, and validation where evaluation
records it as ``valid_loss`` or ``valid_nll``), the learning rate, and one panel per other
evaluation metric (not the counts of evaluated examples or tokens), each run a colour of its
own, named once in a legend below the panels. The training loss is the mean over what the
task's loss weighs (tokens, or examples for a classifier). Headless (matplotlib's Agg canvas,
no display, no global pyplot state). ``textkit-plot RUN [RUN ...] -o runs.png`` (``python -m
textkit.plot``) is the command-line form. Never imports jax.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from textkit.errors import RunDirError

__all__ = ["figure_of", "panels_of", "plot_runs", "read_metrics"]

_TRAIN_PANELS = (("loss", "training loss"), ("learning_rate", "learning rate"))
_SKIPPED = {"kind", "step", "epoch", "wall_s", "train_s", "count", "tokens"}
VALIDATION_LOSS = ("valid_loss", "valid_nll")
"""Evaluation metrics drawn in the loss panel, beside the training loss."""
_BOTH_LOSSES = "training and validation loss"


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` file, or of the one in a run directory (a damaged
    last line, from a killed run, is skipped; a damaged line before it, or bytes that are not
    UTF-8, are a ``RunDirError`` naming the file and the line)."""
    path = Path(path)
    if path.suffix != ".jsonl":
        path = path / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {path.parent} a run directory "
                                "written by textkit's fit?")
    lines = path.read_bytes().splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        try:
            rows.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            if number == len(lines):       # cut by a killed run: the rows before it stand
                break
            raise RunDirError(f"{path}, line {number}: not a JSON row of metrics ({err}); "
                              "only the last line of a killed run may be cut") from err
    return rows


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _is_metric(key: str, value: Any) -> bool:
    """A number worth a panel: not bookkeeping, nor a count of evaluated examples / tokens."""
    return (key not in _SKIPPED and not key.endswith(("_count", "_tokens"))
            and _number(value) is not None)


def panels_of(runs: Sequence[Sequence[dict[str, Any]]]) -> list[tuple[str, str, str]]:
    """``(kind, metric, title)`` of every panel the rows of ``runs`` fill: the training loss
    (with the validation loss, ``VALIDATION_LOSS``, where evaluation records it) and learning
    rate, then each other evaluation metric in order of appearance."""
    panels = [("train", key, title) for key, title in _TRAIN_PANELS
              if any(row.get("kind") == "train" and _number(row.get(key)) is not None
                     for rows in runs for row in rows)]
    seen: list[str] = []
    for rows in runs:
        for row in rows:
            if row.get("kind") != "eval":
                continue
            seen += [k for k, v in row.items() if _is_metric(k, v) and k not in seen]
    if panels and panels[0][1] == "loss" and any(k in seen for k in VALIDATION_LOSS):
        panels[0] = ("train", "loss", _BOTH_LOSSES)
        seen = [k for k in seen if k not in VALIDATION_LOSS]
    return panels + [("eval", key, f"{key.replace('_', ' ')} (evaluation)") for key in seen]


def _points(rows: Sequence[dict[str, Any]], kind: str,
            keys: Sequence[str]) -> tuple[list[float], list[float]]:
    """Steps and values of the rows of ``kind`` holding a number under one of ``keys``."""
    steps, values = [], []
    for row in rows:
        found = [v for v in (_number(row.get(k)) for k in keys) if v is not None]
        if row.get("kind") == kind and found:
            steps.append(row["step"])
            values.append(found[0])
    return steps, values


def _figure(count: int) -> Any:
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)  # no font-cache notice
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    columns = min(count, 3)
    rows = -(-count // columns)
    figure = Figure(figsize=(4.6 * columns, 3.4 * rows), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots(rows, columns, squeeze=False).ravel()


def _line(label: str, style: str, marker: str | None, color: str = "0.3") -> Any:
    """A legend entry: a line of ``style`` (and ``marker``) in ``color``."""
    from matplotlib.lines import Line2D

    return Line2D([], [], color=color, linestyle=style, marker=marker, markersize=3,
                  label=label)


def figure_of(runs: Sequence[str | Path], *, title: str | None = None,
              labels: Sequence[str] | None = None) -> Any:
    """The matplotlib ``Figure`` of the curves of the run directories ``runs``.

    One panel per metric (``panels_of``), steps on the x axis, one colour per run, named in
    one legend (``labels``, default the directory names) when there are several. ``title``
    (default: the runs as ``<runs folder>/<run>``, joined by "vs") heads the picture."""
    rows = [read_metrics(run) for run in runs]
    names = [f"{Path(run).resolve().parent.name}/{Path(run).name}" for run in runs]
    labels = list(labels) if labels is not None else [Path(run).name for run in runs]
    panels = panels_of(rows)
    if not panels:
        raise ValueError(f"no metric rows to draw in {[str(r) for r in runs]}")
    figure, axes = _figure(len(panels))
    for ax, (kind, key, heading) in zip(axes, panels):
        validation = heading == _BOTH_LOSSES
        for i, run_rows in enumerate(rows):
            steps, values = _points(run_rows, kind, [key])
            ax.plot(steps, values, marker="o" if kind == "eval" else None, markersize=3,
                    linewidth=1.2, color=f"C{i}")
            if validation:
                steps, values = _points(run_rows, "eval", VALIDATION_LOSS)
                ax.plot(steps, values, marker="o", markersize=3, linewidth=1.2,
                        linestyle="--", color=f"C{i}")
        if validation:
            ax.legend(handles=[_line("training", "-", None), _line("validation", "--", "o")],
                      fontsize=8)
        ax.set_title(heading, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(key.replace("_", " "))
        ax.grid(alpha=0.3)
        if key == "learning_rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    if len(runs) > 1:
        figure.legend(handles=[_line(label, "-", None, f"C{i}") for i, label in
                               enumerate(labels)], loc="outside lower center",
                      ncols=min(len(labels), 4), fontsize=9)
    figure.suptitle(" vs ".join(names) if title is None else title, fontsize=11)
    return figure


def plot_runs(runs: Sequence[str | Path], output: str | Path, *, title: str | None = None,
              labels: Sequence[str] | None = None) -> Path:
    """Draw the curves of the run directories ``runs`` (``figure_of``) into the PNG
    ``output``; returns it."""
    figure = figure_of(runs, title=title, labels=labels)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial.png")
    figure.savefig(partial)
    partial.replace(output)                # atomic: a reader never sees half a picture
    return output
