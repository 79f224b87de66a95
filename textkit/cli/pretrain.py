"""The encoder pretraining recipe (``examples/pretrain/train.py``): pretrain an encoder from raw
text (masked LM or ELECTRA, ``textkit.tasks.pretraining``) with ``training.fit`` and export
it with ``save_pretrained`` to ``<run>/export``, where ``examples/finetune/*.py --pretrained``
and transformers load it.

``--train-file A B C`` takes several files (kept in order). Checkpoints, ``--resume`` (the
data position and the masks continue exactly), ``--max-steps`` / ``--epochs`` /
``--time-budget-min`` (the warm-up and decay fit the budget), ``--precision``,
``--accum-steps`` and several devices or processes work as in the other recipes. With
``--valid-file`` the held-out MLM loss and masked-token accuracy (ELECTRA: and the
discriminator's accuracy) are measured every ``--eval-every`` steps and at the end, into
``metrics.jsonl``, TensorBoard and ``curves.png``. The final parameters are exported (a
pretraining run does not pick an earlier checkpoint).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import jax

from textkit import parallel
from textkit.cli.flags import parse_config
from textkit.tasks.pretraining import PretrainingConfig, PretrainingTask
from textkit.training import create_train_state, fit, launch, run_writers

__all__ = ["RESUME_KEYS", "joined_files", "train"]

RESUME_KEYS = ("dataset", "objective", "pretrained", "init", "model", "model_overrides",
               "precision", "vocab_size", "generator_size", "train_file", "documents",
               "max_length", "cross_documents", "pairs", "mask_probability", "mask_rate",
               "random_rate", "whole_word_masking", "max_predictions", "toy_documents",
               "batch_size", "accum_steps", "optimizer", "seed")
"""Settings a resumed run must share with the run it continues."""


def joined_files(argv: Sequence[str], name: str = "--train-file") -> list[str]:
    """``argv`` with the values after ``name`` (up to the next flag) joined by commas, the
    form a tuple flag parses: ``--train-file A B`` -> ``--train-file A,B``."""
    out: list[str] = []
    values: list[str] | None = None
    for arg in argv:
        if values is not None and not arg.startswith("-"):
            values.append(arg)
            continue
        if values is not None:
            out.append(",".join(values))
            values = None
        out.append(arg)
        if arg == name:
            values = []
    if values is not None:
        out.append(",".join(values))
    return out


def train(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the recipe (module docstring) with the command line ``argv``; the summary."""
    argv = joined_files(sys.argv[1:] if argv is None else argv)
    config = parse_config(PretrainingConfig, argv, __doc__.splitlines()[0])
    run, mesh = launch(config.save_dir, config.record(), resume=config.fit.resume,
                       runs_folder=config.runs_folder, processes=config.launch,
                       check=RESUME_KEYS)
    run.log(f"{jax.device_count()} device(s) in {jax.process_count()} process(es)")
    task = PretrainingTask(config, run)
    data = {split: task.read_split(split) for split in task.splits}
    task.prepare(data)
    loader = task.make_loader(data["train"], train=True)
    model = task.build_model()
    total_steps = config.fit.max_steps or config.fit.epochs * len(loader)
    optimizer, learning_rate = task.optimizer(total_steps)
    init_key, train_key = jax.random.split(jax.random.key(config.seed))
    state = parallel.replicate(create_train_state(task.init_params(model, init_key), optimizer,
                                                  train_key), mesh)
    sizes = {part: sum(x.size for x in jax.tree_util.tree_leaves(p))
             for part, p in state.params.items()}
    run.log(f"{config.objective} on {task.data_name}: parameters {sizes}, policy "
            f"{model.config.policy}; {len(loader)} batches of {config.accum_steps} x "
            f"{config.batch_size} x {config.max_length} tokens per epoch")
    train_step = task.make_train_step(model, optimizer, accum_steps=config.accum_steps,
                                      **parallel.train_step_shardings(mesh, state))
    evaluate = None
    if "valid" in data:
        def evaluate(state: Any) -> dict[str, float]:
            scores = task.evaluate(model, state.params, data["valid"])
            return {f"valid_{k}": v for k, v in scores.items()}
    result = fit(state, train_step, loader, config.fit, checkpoints=run.checkpoint_manager(),
                 evaluate=evaluate, place=lambda state: parallel.replicate(state, mesh),
                 to_device=lambda batch: parallel.global_batch(batch, mesh),
                 count_tokens=task.count_tokens, log=run.log, learning_rate=learning_rate,
                 writers=run_writers(run.root, tensorboard=config.tensorboard,
                                     main_process=run.main_process),
                 desc=f"pretraining {config.objective}")
    scores = {k: v for k, v in (result.progress.history or [{}])[-1].items()
              if k.startswith("valid_")}
    export = None
    if config.export and run.main_process:
        export = str(task.export(model, result.state.params, run.root / "export"))
    summary = run.summary(task.name, config.record(), result, num_params=sum(sizes.values()),
                          results={**scores, "parameters": sizes, "export": export,
                                   "corpus": task.corpus(data["train"]).stats})
    shown = ", ".join(f"{k} {v:.4g}" for k, v in scores.items())
    run.log(f"pretraining ({config.objective}) on {task.data_name}: {summary['steps']} steps"
            f"{', ' + shown if shown else ''}; {summary['tokens_per_s']:.0f} tokens/s, "
            f"{summary['wall_s']:.0f}s -> {run.root}")
    return summary
