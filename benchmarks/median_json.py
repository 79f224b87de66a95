"""Medians across runs: the last JSON line of several benchmark runs in, one JSON line out.

Reads JSON objects, one per line, from stdin (other lines are skipped, so whole logs can be
piped in) and prints ``{"runs": N, "<key>": {"median", "min", "max"}, ...}`` for every numeric
key present in every run (nested objects flattened as ``outer.inner``). For figures quoted as
"medians of N runs", e.g. the decode ratios of README.md:

    for i in 1 2 3 4 5 6 7; do
        python benchmarks/decode.py --hf-python /path/to/venv/bin/python | tail -n 1
    done | python benchmarks/median_json.py
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Iterable


def flatten(record: dict, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of ``record`` keyed ``outer.inner`` (booleans are not numbers here)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = value
    return out


def medians(lines: Iterable[str]) -> dict:
    runs = []
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            try:
                runs.append(flatten(json.loads(line)))
            except json.JSONDecodeError:
                continue
    if not runs:
        raise SystemExit("median_json.py: no JSON line on stdin")
    keys = [k for k in runs[0] if all(k in run for run in runs)]
    summary: dict = {"runs": len(runs)}
    for key in keys:
        values = [run[key] for run in runs]
        summary[key] = {"median": statistics.median(values), "min": min(values),
                        "max": max(values)}
    return summary


if __name__ == "__main__":
    print(json.dumps(medians(sys.stdin)))
