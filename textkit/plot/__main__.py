"""``textkit-plot RUN [RUN ...] [-o runs.png]`` (or ``python -m textkit.plot``): the curves of
several runs on the same axes, in one PNG (for comparing schedules, precisions, models)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from textkit.plot import plot_runs


def main(argv: Sequence[str] | None = None) -> int:
    prog = "textkit-plot" if Path(sys.argv[0]).name == "textkit-plot" else \
        "python -m textkit.plot"                # the usage line names the command typed
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("runs", nargs="+", help="run directories (each with metrics.jsonl)")
    parser.add_argument("-o", "--output", default="runs.png",
                        help="the PNG to write (default: runs.png)")
    parser.add_argument("--title", default=None,
                        help="a title above the panels (default: the runs, joined by 'vs')")
    parser.add_argument("--labels", default=None,
                        help="comma-separated legend labels (default: the directory names)")
    args = parser.parse_args(argv)
    labels = args.labels.split(",") if args.labels else None
    if labels is not None and len(labels) != len(args.runs):
        parser.error(f"--labels gives {len(labels)} labels for {len(args.runs)} runs")
    try:
        output = plot_runs(args.runs, args.output, title=args.title, labels=labels)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{len(args.runs)} run(s) -> {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
