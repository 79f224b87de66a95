"""The causal-LM recipe (``examples/language_model/train.py --init-from DIR``): fine-tune a
decoder-only checkpoint (or train a ``causal_lm`` preset) on packed raw-text documents with
``training.fit``, keep the best checkpoint by validation perplexity (without ``--valid-file``:
the last step), score the test text (where ``--test-file`` is given), and export the result
with ``save_pretrained`` to ``<run>/export`` (transformers loads it).

Checkpoints, ``--resume``, ``--max-steps`` / ``--epochs`` / ``--time-budget-min`` (the warm-up
and decay fit the budget), ``--precision`` and several devices work as in the other recipes;
the task is ``textkit.tasks.causal_lm``. ``python -m textkit.cli.causal_lm --model PRESET
--train-file FILE ...`` trains a ``causal_lm`` preset from scratch the same way (a byte-level
BPE of ``--vocab-size`` trained on the data).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from textkit import parallel
from textkit.cli import run_main
from textkit.cli.flags import parse_config
from textkit.tasks.causal_lm import CausalLMConfig, CausalLMTask
from textkit.tasks.lora import LORA_ADDED, with_lora
from textkit.training import create_train_state, fit, launch, run_writers

__all__ = ["RESUME_KEYS", "train"]

RESUME_KEYS = ("dataset", "init_from", "model", "model_overrides", "precision", "train_file",
               "documents", "max_length", "vocab_size", "batch_size", "seed", "lora")
"""Settings a resumed run must share with the run it continues."""


def train(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the recipe (module docstring) with the command line ``argv``; the summary."""
    config = parse_config(CausalLMConfig, argv, __doc__.splitlines()[0])
    run, mesh = launch(config.save_dir, config.record(), resume=config.fit.resume,
                       runs_folder=config.runs_folder, processes=config.launch,
                       check=RESUME_KEYS, added=LORA_ADDED)
    task = with_lora(CausalLMTask(config, run))
    data = {split: task.read_split(split) for split in task.splits}
    task.prepare(data)
    loader = task.make_loader(data["train"], train=True)
    model = task.build_model()
    total_steps = config.fit.max_steps or config.fit.epochs * len(loader)
    optimizer, learning_rate = task.optimizer(total_steps)
    init_key, train_key = jax.random.split(jax.random.PRNGKey(config.seed))
    state = parallel.replicate(create_train_state(task.init_params(model, init_key), optimizer,
                                                  train_key, frozen=task.frozen_params()), mesh)
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
    source = config.init_from or f"{config.model} (random init)"
    run.log(f"{source}: {num_params:,} parameters, policy {model.config.policy}; "
            f"{len(loader)} batches of {config.batch_size} x {config.max_length} tokens")
    train_step = task.make_train_step(model, optimizer,
                                      **parallel.train_step_shardings(mesh, state))
    validated = "valid" in data     # without --valid-file: the last step, nothing ranked
    manager = run.checkpoint_manager(max_to_keep=1, best_metric="valid_ppl" if validated
                                     else None, best_mode="min")
    result = fit(state, train_step, loader, config.fit, checkpoints=manager,
                 evaluate=(lambda state: {"valid_ppl": task.evaluate(
                     model, state.params, data["valid"])["ppl"]}) if validated else None,
                 place=lambda state: parallel.replicate(state, mesh),
                 to_device=lambda batch: parallel.global_batch(batch, mesh),
                 count_tokens=task.count_tokens, log=run.log, learning_rate=learning_rate,
                 writers=run_writers(run.root, tensorboard=config.tensorboard,
                                     main_process=run.main_process),
                 desc=f"causal_lm {task.data_name}")
    if validated:
        best, _ = manager.restore("best", result.state)
        params = best.params
    else:
        params = result.state.params
    scores = {f"{split}_{k}": v for split in ("valid", "test") if split in data
              for k, v in task.evaluate(model, params, data[split]).items()}
    export = None
    if config.export and run.main_process:
        export = str(task.export(model, params, run.root / "export"))
    summary = run.summary(task.name, config.record(), result, num_params=num_params,
                          results={**scores, "best_step": manager.best_step(),
                                   "export": export})
    shown = ", ".join(f"{k} {v:.4g}" for k, v in scores.items() if k.endswith("ppl"))
    run.log(f"causal_lm on {task.data_name} from {source}: {summary['steps']} steps"
            f"{', ' + shown if shown else ''}; {summary['wall_s']:.0f}s -> {run.root}")
    return summary


if __name__ == "__main__":      # python -m textkit.cli.causal_lm: a preset from scratch too
    run_main(train)
