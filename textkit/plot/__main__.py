"""``python -m textkit.plot RUN [RUN ...] [-o runs.png]``: the curves of several runs on the
same axes, in one PNG (for comparing schedules, precisions, models)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from textkit.plot import plot_runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m textkit.plot", description=__doc__,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories (each with metrics.jsonl)")
    parser.add_argument("-o", "--output", default="runs.png", help="the PNG to write")
    parser.add_argument("--title", default="", help="a title above the panels")
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
