"""Where a step of ``finetune.py``'s textkit epoch goes: XLA:CPU's trace of the recipe's two
step programs, per step.

Runs ``finetune.py``'s textkit side (``classify.py`` for one epoch, ``--pack`` unless
``--buckets``) on the first ``--sentences`` sentences twice: once to compile, then again under
``jax.profiler.trace`` with the Python tracer off. XLA dumps the optimised HLO of the programs,
so each traced instruction gets its result shape and ``op_name``. Per step (medians over the
traced steps):

- ``gradients_ms`` / ``update_ms``: wall time of the gradient program (``jit_traced``) and of
  AdamW's update (``jit_update``), first instruction's start to last's end;
- ``gradients_busy_ms`` / ``update_busy_ms``: their instructions' durations summed; XLA:CPU runs
  independent instructions on both threads at once, so busy time can exceed wall time (the
  first step's gradient run also holds the precompiling call: the medians leave it out, the
  per-instruction sums below count it as one step more);
- ``products_busy_ms``: the gradient program's instructions that compute a dot (a ``dot`` or a
  fusion holding one, YNNPACK's included);
- ``others_busy_ms``: the gradient program's other instructions, summed by the last part of
  their ``op_name`` (the jax operation: ``convert_element_type``, ``erfc``, ...), the eight
  largest;
- ``gap_ms``: the host's time between the programs (dispatch, the training loop);
- ``top``: the ten costliest instructions, ``[program, instruction, result shape, busy ms per
  step, the tail of its op_name]``.

The last output line is one JSON object (those keys, ``steps``, ``precision``, ``pack``,
``quick``, ``cpu``).

    python benchmarks/finetune_profile.py --precision mixed_bfloat16
    python benchmarks/finetune_profile.py --quick
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile
from pathlib import Path

import jax
import numpy as np
from cpu_info import cpu_info
from decode_profile import instruction_ops, trace_events
from finetune import (
    ROWS_PER_STEP,
    batch_tokens_for,
    corpus,
    packed_batch_tokens,
    textkit_epoch,
    write_checkpoint,
)

from textkit.data.labelled_text import read_labelled

PROGRAMS = ("jit_traced", "jit_update")


def dumped_modules(dump: Path) -> dict[str, dict[str, tuple[bool, str, str]]]:
    """Each step program's instructions (``instruction_ops``: dot or not, ``op_name``, shape),
    from the last optimised dump of that program."""
    modules = {}
    for program in PROGRAMS:
        files = sorted(dump.glob(f"module_*.{program}.cpu_after_optimizations.txt"))
        if not files:
            raise RuntimeError(f"XLA dumped no optimised {program} under {dump}")
        modules[program] = instruction_ops(files[-1].read_text())
    return modules


def program_runs(events: list[dict]) -> list[list]:
    """The step programs' runs in time order: ``[program, start, end, busy]`` in
    microseconds; one run is one call of one program (the programs alternate, but for the
    gradient program's precompiling call, which joins the first step's)."""
    timed = sorted((e for e in events if e.get("ph") == "X"
                    and (e.get("args") or {}).get("hlo_module") in PROGRAMS),
                   key=lambda e: e["ts"])
    runs: list[list] = []
    for event in timed:
        program, start = event["args"]["hlo_module"], float(event["ts"])
        end = start + float(event.get("dur", 0))
        if runs and runs[-1][0] == program:
            runs[-1][2] = max(runs[-1][2], end)
            runs[-1][3] += end - start
        else:
            runs.append([program, start, end, end - start])
    return runs


def step_profile(events: list[dict], modules: dict[str, dict]) -> dict:
    """The per-step figures of the module docstring from the trace's ``events`` and the
    programs' instructions (``dumped_modules``)."""
    runs = program_runs(events)
    steps = sum(run[0] == "jit_update" for run in runs)
    if not steps:
        raise RuntimeError("the trace holds no update program's instructions")

    def median_ms(program: str, busy: bool) -> float:
        return 1e-3 * statistics.median(run[3] if busy else run[2] - run[1]
                                        for run in runs if run[0] == program)

    gaps = [later[1] - earlier[2] for earlier, later in zip(runs, runs[1:])]
    calls = collections.Counter(run[0] for run in runs)
    busy: collections.Counter = collections.Counter()
    for event in events:
        program = (event.get("args") or {}).get("hlo_module")
        if event.get("ph") == "X" and program in PROGRAMS and event["name"] in modules[program]:
            busy[program, event["name"]] += 1e-3 * float(event.get("dur", 0)) / calls[program]
    products = sum(ms for (program, name), ms in busy.items()
                   if program == "jit_traced" and modules[program][name][0])
    others: collections.Counter = collections.Counter()
    for (program, name), ms in busy.items():
        if program == "jit_traced" and not modules[program][name][0]:
            others[modules[program][name][1].rsplit("/", 1)[-1] or name] += ms
    top = [[program.removeprefix("jit_"), name, modules[program][name][2], round(ms, 3),
            modules[program][name][1][-80:]] for (program, name), ms in busy.most_common(10)]
    return {"gradients_ms": round(median_ms("jit_traced", False), 2),
            "gradients_busy_ms": round(median_ms("jit_traced", True), 2),
            "products_busy_ms": round(products, 2),
            "update_ms": round(median_ms("jit_update", False), 2),
            "update_busy_ms": round(median_ms("jit_update", True), 2),
            "gap_ms": round(1e-3 * statistics.median(gaps), 2) if gaps else 0.0,
            "others_busy_ms": {k: round(ms, 2) for k, ms in others.most_common(8)},
            "steps": steps, "top": top}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", choices=("float32", "mixed_bfloat16"), default="float32")
    parser.add_argument("--sentences", type=int, default=1000,
                        help="the first N training sentences (default: 1000)")
    parser.add_argument("--buckets", action="store_true",
                        help="token-budget buckets instead of packed rows")
    parser.add_argument("--quick", action="store_true",
                        help="finetune.py's 2 x 64 model on generated sentences (a smoke run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="textkit-finetune-profile-") as tmp:
        work = Path(tmp)
        dump = work / "hlo"
        # read when jax creates its CPU client: at the first computation, which is still to come
        os.environ["XLA_FLAGS"] = " ".join(filter(None, [
            os.environ.get("XLA_FLAGS"), f"--xla_dump_to={dump}", "--xla_dump_hlo_as_text",
            "--xla_dump_hlo_module_re=" + "|".join(PROGRAMS)]))
        machine = cpu_info()
        print(f"cpu: {machine['cpu']}; has {machine['features']}", flush=True)
        train, tokenizer = corpus(work, args.quick, args.sentences)
        checkpoint = write_checkpoint(work, tokenizer, args.quick)
        texts = read_labelled(train, text="sentence", label="label", label_names=("0", "1")).texts
        max_length = 66
        lengths = np.array([len(e.ids) for e in tokenizer.encodings(texts, None, max_length)])
        batch_tokens, _ = (batch_tokens_for(lengths, ROWS_PER_STEP, 8) if args.buckets
                           else packed_batch_tokens(lengths, ROWS_PER_STEP, max_length))

        def epoch(run: str) -> dict:
            return textkit_epoch(checkpoint, train, max_length, batch_tokens, 8, work / run,
                                 args.precision, not args.buckets)

        epoch("compile")
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
        with jax.profiler.trace(str(work / "trace"), create_perfetto_trace=True,
                                profiler_options=options):
            traced = epoch("traced")
        events = trace_events(work / "trace")
        modules = dumped_modules(dump)
    result = {**step_profile(events, modules), "epoch_steps": traced["steps"],
              "precision": args.precision, "pack": not args.buckets, "quick": args.quick}
    print(f"{args.precision}: gradients {result['gradients_ms']} ms (busy "
          f"{result['gradients_busy_ms']}, products {result['products_busy_ms']}), update "
          f"{result['update_ms']} ms (busy {result['update_busy_ms']}), gap {result['gap_ms']} "
          f"ms; {result['steps']} steps; the gradients' other instructions: "
          f"{result['others_busy_ms']}")
    for row in result["top"]:
        print("  " + "  ".join(map(str, row)))
    print(json.dumps({**result, "cpu": machine}))


if __name__ == "__main__":
    main()
