"""Where ``pretrain.py``'s masked-LM training step spends its time: XLA:CPU's per-instruction
trace of the gradient program, grouped by what each instruction computes.

Builds ``pretrain.py``'s textkit step (BERT-base shape, 32 x 128, the masked-LM head at the
prediction slots, AdamW) for one mode, times its two programs (the gradients; the AdamW update)
unprofiled, then traces the gradient program once under ``jax.profiler.trace`` and sums each
instruction's time into groups read from its ``op_name`` (the module path jax records):

- ``dense products, forward`` / ``dense products, backward``: the layers' matmuls;
- ``attention products``: the batched query-key and probability-value products;
- ``masked-LM head products``: the tied decoder and the head's dense layer, both directions;
- ``feed-forward elementwise (GELU)``, ``layer norm``, ``attention softmax / mask / heads``,
  ``dropout``, ``masked-LM loss elementwise``, ``other`` (embeddings, residual adds, ...).

XLA:CPU runs independent instructions of one program concurrently, so the traced sum can
exceed the wall time; the shares are what to read. The last output line is one JSON object
(``grads_s``, ``update_s``, ``traced_s``, ``by_group`` in seconds, ``top``, ``cpu``).

    python benchmarks/pretrain_profile.py --mode float32
    python benchmarks/pretrain_profile.py --quick --runs 1
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
from cpu_info import cpu_info
from decode_profile import instruction_ops, trace_events
from grad_dots import time_call
from pretrain import BERT_BASE, LEARNING_RATE, POLICIES, QUICK, masked_batch, write_checkpoint

from textkit.pretrained import load_pretrained
from textkit.tasks.pretraining_objectives import PretrainingModel, pretraining_loss
from textkit.training import create_train_state, make_train_step


def group(is_dot: bool, op_name: str) -> str:
    """The group of an instruction (module docstring)."""
    backward = "transpose(" in op_name
    if is_dot:
        if "_masked_lm" in op_name:
            return "masked-LM head products"
        if "bhq" in op_name:
            return "attention products"
        return "dense products, backward" if backward else "dense products, forward"
    if "_masked_lm" in op_name or "take_along_axis" in op_name or "/jvp()/" in op_name:
        return "masked-LM loss elementwise"
    for key, label in (("/drop", "dropout"), ("norm/", "layer norm"),
                       ("feed_forward/", "feed-forward elementwise (GELU)"),
                       ("self_attention/", "attention softmax / mask / heads")):
        if key in op_name:
            return label
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=list(POLICIES), default="float32")
    parser.add_argument("--runs", type=int, default=3, help="unprofiled runs (medians)")
    parser.add_argument("--quick", action="store_true",
                        help="pretrain.py's tiny model: checks that the script runs")
    args = parser.parse_args()
    machine = cpu_info()
    print(f"cpu: {machine['cpu']}; has {machine['features']}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = write_checkpoint(Path(tmp), args.quick)
        pretrained = load_pretrained(checkpoint, policy=POLICIES[args.mode])
    vocab_size = (QUICK if args.quick else BERT_BASE)["vocab_size"]
    batch = {k: jnp.asarray(v) for k, v in masked_batch(args.quick, vocab_size).items()}
    tx = optax.adamw(LEARNING_RATE, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01)
    step = make_train_step(pretraining_loss(PretrainingModel(pretrained.model)), tx,
                           donate=False)
    state = create_train_state({"encoder": pretrained.params}, tx, jax.random.key(1))
    lowered = step.lower(state, batch)
    gradients, update = lowered.gradients.compile(), lowered.update.compile()
    grads, _, loss_parts = gradients(state, batch)
    grads_s = time_call(lambda: gradients(state, batch), args.runs)
    update_s = time_call(lambda: update(state, grads, *loss_parts), args.runs)
    ops = instruction_ops(gradients.as_text())
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            jax.block_until_ready(gradients(state, batch))
        events = trace_events(Path(tmp))
    by_name: collections.Counter = collections.Counter()
    for event in events:
        if event.get("ph") == "X" and event.get("name") in ops:
            by_name[event["name"]] += float(event.get("dur", 0)) * 1e-6
    if not by_name:
        raise RuntimeError("the trace has no per-instruction events of the program")
    by_group: collections.Counter = collections.Counter()
    for name, seconds in by_name.items():
        by_group[group(*ops[name][:2])] += seconds
    traced = sum(by_group.values())
    print(f"{args.mode}: gradients {grads_s:.3f} s, update {update_s:.3f} s; "
          f"traced instructions {traced:.3f} s")
    for name, seconds in by_group.most_common():
        print(f"  {name:36s} {seconds:8.3f} s  {100 * seconds / traced:5.1f} %")
    top = [(name, group(*ops[name][:2]), round(seconds, 4))
           for name, seconds in by_name.most_common(10)]
    print(json.dumps({"mode": args.mode, "quick": args.quick, "grads_s": round(grads_s, 4),
                      "update_s": round(update_s, 4), "traced_s": round(traced, 4),
                      "by_group": {k: round(v, 4) for k, v in by_group.items()},
                      "top": top, "cpu": machine}))


if __name__ == "__main__":
    main()
