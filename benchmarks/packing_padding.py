"""Padding and batch shapes of the sequence-classification training loader, bucketed against
packed (``classify.py --pack``), on a real dataset; prints JSON. No training, no weights: the
tokenizer comes from ``--pretrained DIR`` (``--init random``), the loader is the recipe's.
``--compile`` also times the ahead-of-time compilation of the recipe's train step (``--model``,
float32) for every batch shape of the loader, one after the other, on the default backend.

    python benchmarks/packing_padding.py --pretrained ../shared/data/tokenizers/bert-base-uncased \\
        --dataset glue_sst2 --data-dir ../shared/data/glue-sst2 --max-length 64 --batch-tokens 1024
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import jax
import jax.numpy as jnp

from textkit.tasks.encoder_task import bucket_padding
from textkit.tasks.sequence_classification import (
    SequenceClassificationConfig,
    SequenceClassificationTask,
)
from textkit.training import create_train_state


def compile_seconds(task: SequenceClassificationTask, loader) -> list[float]:
    """Seconds to lower and compile the train step for each of ``loader``'s batch shapes."""
    model = task.build_model()
    tx, _ = task.optimizer(1000)
    key = jax.random.key(0)
    state = jax.eval_shape(lambda: create_train_state(
        model.init(key, jnp.zeros((1, 8), jnp.int32))["params"], tx, key))
    step = task.make_train_step(model, tx)
    seconds = []
    for batch in loader.shape_batches():
        start = time.perf_counter()
        step.lower(state, batch).compile()
        seconds.append(time.perf_counter() - start)
    return seconds


def measure(args: argparse.Namespace, pack: bool, save_dir: str) -> dict[str, float]:
    config = SequenceClassificationConfig(
        pretrained=args.pretrained, init="random", model=args.model, dataset=args.dataset,
        data_dir=args.data_dir, max_length=args.max_length, batch_tokens=args.batch_tokens,
        num_buckets=args.num_buckets, pack=pack, max_per_row=args.max_per_row,
        save_dir=save_dir)
    task = SequenceClassificationTask(config, run=None, log=lambda _: None)
    data = {"train": task.read_split("train")}
    task.prepare(data)
    start = time.perf_counter()
    loader = task.make_loader(data["train"], train=True)
    padding = bucket_padding(loader, args.max_length)
    planned = time.perf_counter() - start
    compiled = compile_seconds(task, loader) if args.compile else []
    return {"compile_s": sum(compiled), "compile_s_per_shape": compiled,
            "backend": jax.default_backend(), "pack": pack, "steps_per_epoch": len(loader),
            "padding_fraction": padding["bucket_padding"],
            "max_length_padding": padding["max_length_padding"],
            "tokens_saved": padding["tokens_saved"], "num_shapes": padding["num_shapes"],
            "real_tokens": padding["real_tokens"],
            "encode_and_plan_s": planned}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrained", required=True)
    parser.add_argument("--model", default="bert_base_uncased")
    parser.add_argument("--dataset", default="glue_sst2")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--batch-tokens", type=int, default=1024)
    parser.add_argument("--num-buckets", type=int, default=8)
    parser.add_argument("--max-per-row", type=int, default=None,
                        help="examples per packed row at most (default: the recipe's, "
                        "--max-length // 4)")
    parser.add_argument("--modes", default="buckets,packed",
                        help="the loaders measured, in this order (each compile in a fresh "
                        "process is the fairest: --modes packed, then --modes buckets)")
    parser.add_argument("--compile", action="store_true",
                        help="also time the train step's compilation per batch shape")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as save_dir:
        results = [measure(args, mode == "packed", save_dir)
                   for mode in args.modes.split(",")]
    print(json.dumps({"config": vars(args), "results": results}, indent=1))


if __name__ == "__main__":
    main()
