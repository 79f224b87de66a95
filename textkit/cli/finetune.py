"""The encoder fine-tuning recipe that ``examples/finetune/classify.py``, ``squad.py`` and
``ner.py`` run with their task: parse -> task pieces -> ``training.fit`` -> best checkpoint ->
scores -> export.

Training: token-budget buckets, or packed rows with ``classify.py --pack`` (the padding they save
against ``--max-length`` and the number of batch shapes are logged),
AdamW, evaluation each epoch (or every ``--eval-every`` steps), the best checkpoint by the task's
metric kept (``checkpoints/``), ``--resume``, several devices as in the translation recipe.
At the end the best parameters are scored on the validation split (and the test split where
there is one), exported with ``save_pretrained`` to ``<run>/export`` (transformers loads it),
and ``summary.json`` gets the scores. ``--predict FILE`` with ``--pretrained <run>/export``
writes ``predictions.jsonl`` (each label with its probability; ``predictions.json`` for SQuAD,
``predictions.conll`` for NER) into a new run directory under ``<runs folder>/predictions`` (or
``--save-dir``), or to ``--output FILE``, instead of training.

``main`` is the command line ``textkit-finetune {classify,squad,ner} [flags]`` (installed with
the package): the recipe of that name, as ``examples/finetune/<name>.py`` runs it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax

from textkit import parallel
from textkit._io import write_text_atomic
from textkit.cli import run_main
from textkit.cli.flags import Parser, parse_config
from textkit.errors import ConfigError
from textkit.tasks import get_task
from textkit.tasks.encoder_task import EncoderTask, bucket_padding
from textkit.tasks.lora import LORA_ADDED, with_lora
from textkit.training import RunDir, create_train_state, fit, launch, run_writers

__all__ = ["RECIPES", "RESUME_KEYS", "finetune", "main"]

RECIPES = {
    "classify": ("sequence_classification", "Fine-tune an encoder for sentence (pair) "
                 "classification or regression (GLUE, table files) and export it."),
    "squad": ("question_answering", "Fine-tune an encoder for extractive question answering "
              "(SQuAD v1.1 / v2.0) and export it."),
    "ner": ("token_classification", "Fine-tune an encoder for named-entity recognition (CoNLL "
            "columns) and export it."),
}
"""``textkit-finetune`` recipe name -> (registered task, description)."""

RESUME_KEYS = ("dataset", "pretrained", "init", "model", "model_overrides", "precision",
               "vocab_size", "max_length", "batch_tokens", "num_buckets", "train_file",
               "accum_steps", "seed", "lora")
"""Settings a resumed run must share with the run it continues."""


def main(argv: Sequence[str] | None = None) -> int:
    """``textkit-finetune RECIPE [flags]``: ``finetune`` with the task of ``RECIPES[RECIPE]``
    (``textkit-finetune classify --help`` lists its flags); a ``TextkitError`` exits with
    status 2 and its message."""
    parser = Parser(
        prog="textkit-finetune", description="Fine-tune an encoder and export it: "
        + "; ".join(f"{name}: {task}" for name, (task, _) in RECIPES.items()) + ".")
    parser.add_argument("recipe", choices=RECIPES)
    parser.add_argument("flags", nargs=argparse.REMAINDER,
                        help="the recipe's flags (textkit-finetune RECIPE --help)")
    args = parser.parse_args(argv)
    task, description = RECIPES[args.recipe]
    run_main(lambda: finetune(get_task(task), args.flags, description,
                              prog=f"textkit-finetune {args.recipe}"),
             resumable="--predict" not in args.flags)
    return 0


def finetune(task_cls: type[EncoderTask], argv: Sequence[str] | None,
             description: str, *, prog: str | None = None) -> dict[str, Any]:
    """Run the recipe (module docstring) for ``task_cls`` with the command line ``argv``
    (``prog``: the command's name in its usage line); returns the summary."""
    config = parse_config(task_cls.config_class, argv, description, prog=prog)
    if config.predict:
        return predict(task_cls, config)
    run, mesh = launch(config.save_dir, config.record(), resume=config.fit.resume,
                       runs_folder=config.runs_folder, processes=config.launch,
                       check=RESUME_KEYS, added=LORA_ADDED)
    task = with_lora(task_cls(config, run))
    data = {split: task.read_split(split) for split in task.splits}
    task.prepare(data)
    loader = task.make_loader(data["train"], train=True)
    padding = bucket_padding(loader, config.max_length)
    what = "packed rows" if getattr(config, "pack", False) else "buckets"
    run.log(f"{loader.batch_sampler.stats()}\npadding: {what} {padding['bucket_padding']:.1%}"
            f" of the padded tokens, --max-length {config.max_length} "
            f"{padding['max_length_padding']:.1%}: {what} save "
            f"{padding['tokens_saved']:.1%} of the tokens; {padding['num_shapes']} batch "
            f"shape(s) compiled")
    model = task.build_model()
    fit_config = config.fit
    total_steps = fit_config.max_steps or fit_config.epochs * len(loader)
    optimizer, learning_rate = task.optimizer(total_steps)
    init_key, train_key = jax.random.split(jax.random.PRNGKey(config.seed))
    state = parallel.replicate(create_train_state(task.init_params(model, init_key), optimizer,
                                                  train_key, frozen=task.frozen_params()), mesh)
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
    train_step = task.make_train_step(model, optimizer, accum_steps=config.accum_steps,
                                      **parallel.train_step_shardings(mesh, state))
    metric = f"valid_{task.eval_metric}"
    manager = run.checkpoint_manager(max_to_keep=1, best_metric=metric,
                                     best_mode=task.eval_mode)

    def evaluate(state: Any) -> dict[str, float]:
        scores = task.evaluate(model, state.params, data["valid"])
        return {f"valid_{k}": v for k, v in scores.items()}

    result = fit(state, train_step, loader, fit_config, checkpoints=manager, evaluate=evaluate,
                 place=lambda state: parallel.replicate(state, mesh),
                 to_device=lambda batch: parallel.global_batch(batch, mesh),
                 count_tokens=task.count_tokens, log=run.log, learning_rate=learning_rate,
                 writers=run_writers(run.root, tensorboard=config.tensorboard,
                                     main_process=run.main_process),
                 desc=f"{task.name} {task.data_name}")
    best_step = manager.best_step()
    best, extra = manager.restore("best", result.state)
    params = best.params
    scores = {k: v for k, v in extra["metrics"].items() if k.startswith("valid_")}
    if "test" in data:
        scores.update({f"test_{k}": v for k, v in task.evaluate(
            model, params, data["test"]).items()})
    export = None
    if config.export and run.main_process:
        export = str(task.export(model, params, run.root / "export",
                                 labels=task.export_labels()))
    task.write_outputs(run, model, params, data)
    summary = run.summary(task.name, config.record(), result, num_params=num_params, results={
        "best_step": best_step, "eval_metric": task.eval_metric, **scores,
        "padding": padding, "num_bucket_shapes": len(loader.batch_sampler.bucket_shapes),
        "export": export})
    shown = ", ".join(f"{k} {v:.4g}" for k, v in scores.items() if not k.endswith("count"))
    run.log(f"{task.name} on {task.data_name}: {summary['steps']} steps, {num_params:,} "
            f"params, best step {best_step}: {shown}; {summary['tokens_per_s']:.0f} train "
            f"tokens/s (compiling {summary['compile_s']:.0f}s apart), {summary['wall_s']:.0f}s "
            f"-> {run.root}")
    return summary


def predict(task_cls: type[EncoderTask], config: Any) -> dict[str, Any]:
    """Predictions of a fine-tuned export (``--pretrained``) for the inputs of
    ``--predict FILE``, written to ``--output FILE`` or into the new run directory (which logs
    the run): ``--save-dir``, or one under ``<runs folder>/predictions`` (the training runs'
    ``latest`` link never moves). An export, an input file or an output folder that is not
    there is refused before anything is written."""
    export = Path(config.pretrained)
    if not (export / "config.json").is_file():
        raise ConfigError(
            f"--pretrained {export}: no checkpoint there ({export / 'config.json'} does not "
            "exist); --predict reads the export of a finished fine-tuning run, e.g. "
            f"{config.runs_folder}/latest/export")
    if not Path(config.predict).is_file():
        raise ConfigError(f"--predict {config.predict}: no such file")
    if config.output and not Path(config.output).resolve().parent.is_dir():
        raise ConfigError(f"--output {config.output}: its folder does not exist")
    run = RunDir.start(config.save_dir, f"{config.runs_folder}/predictions", config.record(),
                       resume=False, check=())
    task = task_cls(config, run)
    data = task.read_inputs(config.predict)
    task.prepare_inputs(data)
    model = task.build_model()
    params = task.init_params(model, jax.random.PRNGKey(0))
    text, count = task.format_predictions(model, params, data)
    path = Path(config.output) if config.output else run.root / task.predictions_file
    if run.main_process:
        write_text_atomic(path, text)
    run.log(f"{count:,} predictions of {config.pretrained} for {config.predict} -> {path}")
    return {"predictions": str(path), "count": count}
