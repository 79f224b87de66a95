"""Where a decoding step's time goes: XLA:CPU's per-instruction trace of one compiled search.

Runs one of ``decode.py``'s cases (``--case synthetic``: ``transformer_base``; ``marian``: the
OPUS-MT en-de shape with its 58,101-entry vocabulary; 32 sources x 24 tokens, 32 forced steps)
for a mode (``decode.MODES``) under ``jax.profiler.trace``, reads the
Perfetto trace back, and sums each instruction's time; instructions are grouped by what they
do, read from the optimized HLO (matmul, attention product, top-k, cache gather, cache write,
copy, other). Figures are milliseconds per generated step (total / runs / 32). The last
output line is one JSON object (``ms_per_step``, ``by_kind``, ``top``, ``cpu``).

    python benchmarks/decode_profile.py --mode beam4
    python benchmarks/decode_profile.py --case marian --mode beam4_int8
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from cpu_info import cpu_info
from decode import (
    BATCH,
    MODES,
    SRC_LEN,
    STEPS,
    checkpoint_model_case,
    compile_search,
    mode_params,
    synthetic_case,
    write_marian_checkpoint,
)

INSTRUCTION = re.compile(  # name, result shape, opcode, the rest of the line
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = (\([^=]*?\)|\S+) (\w[\w\-]*)\((.*)$", re.M)


def hlo_computations(hlo: str) -> dict[str, str]:
    """Computation name -> its text, from the optimized HLO text of a program."""
    computations = {}
    for block in re.split(r"\n(?=\S)", hlo):   # one block per computation
        header = re.match(r"(?:ENTRY\s+)?%?([\w.\-]+)", block)
        if header:
            computations[header.group(1)] = block
    return computations


def instruction_kinds(hlo: str) -> dict[str, str]:
    """Instruction name -> kind, from the optimized HLO text of the program."""
    kinds = {}
    computations = hlo_computations(hlo)
    for name, shape, opcode, _ in INSTRUCTION.findall(hlo):
        kind = opcode
        if opcode == "fusion" or opcode == "call":
            line = re.search(rf"%?{re.escape(name)} = .*", hlo).group(0)
            called = re.search(r"calls=%?([\w.\-]+)", line)
            body = computations.get(called.group(1), "") if called else ""
            ops = set(re.findall(r" = (?:\([^=]*?\)|\S+) (\w[\w\-]*)\(", body))
            batched = "lhs_batch_dims" in body
            kind = ("fused argmax" if {"iota", "reduce"} <= ops
                    else "fused batched dot" if "dot" in ops and batched
                    else "fused dot" if "dot" in ops else "fused gather" if "gather" in ops
                    else "fused scatter/update" if ops & {"scatter", "dynamic-update-slice"}
                    else "fused elementwise")
        elif opcode == "custom-call":
            line = re.search(rf"%?{re.escape(name)} = .*", hlo).group(0)
            target = re.search(r'custom_call_target="([^"]+)"', line)
            kind = f"custom-call {target.group(1) if target else ''}".strip()
        kinds[name] = f"{kind} {shape}" if kind == "dot" else kind
    return kinds


def group(kind: str) -> str:
    """Coarse group of an instruction kind."""
    if kind == "fused batched dot" or kind.startswith("dot") and kind.count(",") >= 3:
        return "attention product (batched dot)"
    if kind.startswith("dot") or kind == "fused dot":
        return "matmul"
    if "topk" in kind.lower() or kind in ("sort", "fused argmax"):
        return "top-k / argmax"
    if "gather" in kind:
        return "gather (cache/beam reorder)"
    if "scatter" in kind or "dynamic-update-slice" in kind:
        return "cache write"
    if kind in ("copy", "transpose"):
        return "copy/transpose"
    return kind if kind.startswith("custom-call") else "other (elementwise, reduce, control)"


def instruction_ops(hlo: str) -> dict[str, tuple[bool, str, str]]:
    """Instruction name -> (whether it computes a dot, its ``op_name``, its result shape without
    layout), from the optimized HLO text; a fusion computes a dot when its called computation
    holds one."""
    blocks = hlo_computations(hlo)
    ops = {}
    for name, shape, opcode, rest in INSTRUCTION.findall(hlo):
        called = re.search(r"calls=%?([\w.\-]+)", rest)
        body = blocks.get(called.group(1), "") if called else ""
        is_dot = opcode == "dot" or " dot(" in body
        op_name = re.search(r'op_name="([^"]*)"', rest)
        ops[name] = (is_dot, op_name.group(1) if op_name else "", shape.split("{")[0])
    return ops


def trace_events(directory: Path) -> list[dict]:
    files = sorted(directory.rglob("*.trace.json.gz"))
    if not files:
        raise RuntimeError(f"jax.profiler wrote no Perfetto trace under {directory}")
    with gzip.open(files[-1], "rt") as handle:
        data = json.load(handle)
    return data["traceEvents"] if isinstance(data, dict) else data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=["synthetic", "marian"], default="synthetic")
    parser.add_argument("--mode", choices=MODES, default="beam4")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gather", action="store_true",
                        help="the search without the beam hooks: tiled cache gathered every "
                             "step, never grown (the path before issue 17)")
    parser.add_argument("--quick", action="store_true",
                        help="decode.py's tiny model: checks that the script runs")
    args = parser.parse_args()
    machine = cpu_info()
    print(f"cpu: {machine['cpu']}; has {machine['features']}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        case = (checkpoint_model_case("marian", write_marian_checkpoint(Path(tmp), args.quick),
                                      "float32")
                if args.case == "marian" else synthetic_case(args.quick, "float32"))
    src = jax.numpy.asarray(np.random.default_rng(0).integers(
        4, 990 if args.quick else 32000, size=(BATCH, SRC_LEN)), np.int32)
    compiled, _ = compile_search(case, args.mode, src, gather=args.gather)
    params = mode_params(case, args.mode)
    kinds = instruction_kinds(compiled.as_text())
    compiled(params, src).block_until_ready()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for _ in range(args.runs):
                compiled(params, src).block_until_ready()
        wall = time.perf_counter() - start
        events = trace_events(Path(tmp))
    per_step = 1e-3 / (args.runs * STEPS)     # microseconds -> ms per step
    by_name: collections.Counter = collections.Counter()
    for event in events:
        if event.get("ph") == "X" and event.get("name") in kinds:
            by_name[event["name"]] += float(event.get("dur", 0))
    if not by_name:
        raise RuntimeError("the trace has no per-instruction events of the program")
    by_group: collections.Counter = collections.Counter()
    for name, micros in by_name.items():
        by_group[group(kinds[name])] += micros
    total = sum(by_group.values()) * per_step
    print(f"{args.mode}: {wall / args.runs * 1e3 / STEPS:.2f} ms per step wall (profiled), "
          f"{total:.2f} ms per step in traced instructions")
    for name, micros in by_group.most_common():
        print(f"  {name:40s} {micros * per_step:8.2f} ms/step")
    top = [(name, kinds[name], round(micros * per_step, 3))
           for name, micros in by_name.most_common(15)]
    for name, kind, ms in top:
        print(f"    {ms:8.3f} ms/step  {name} ({kind})")
    ms_per_step = round(wall / args.runs * 1e3 / STEPS, 2)
    print(json.dumps({"case": args.case, "mode": args.mode, "gather": args.gather,
                      "quick": args.quick,
                      "ms_per_step": ms_per_step, "traced_ms_per_step": round(total, 3),
                      "by_kind": {k: round(v * per_step, 3) for k, v in by_group.items()},
                      "top": top, "cpu": machine}))


if __name__ == "__main__":
    main()
