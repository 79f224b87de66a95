"""Train a word-level language model (LSTM, AWD-LSTM or Transformer LM) with truncated BPTT.

The training stream is cut into ``--batch-size`` rows and ``--bptt``-token windows; recurrent
models carry their state from one window to the next through the jitted step (reset at each
epoch). After every epoch the validation perplexity is computed over all validation tokens, the
learning rate decays (on a plateau, or every epoch from ``--decay-start``), and a checkpoint is
saved; the best one by validation perplexity is kept. At the end the best checkpoint is scored
on the test set: perplexity = exp(total NLL / number of test tokens), every token of the test
file counted, end-of-sentence tokens included.

Examples (the built-in generated corpus needs no download)::

    python examples/language_model/train.py --model lstm_lm_tiny --epochs 3
    python examples/language_model/train.py --dataset ptb --data-dir ../shared/data/ptb \\
        --model lstm_lm_200 --batch-size 20 --bptt 35 --optimizer sgd --lr 35 --clip-norm 0.143 \\
        --decay-on epoch --decay-start 4 --lr-decay 0.5 --epochs 13 --save-dir runs/ptb_small

The loss minimised is the mean NLL per token. Zaremba et al.'s "lr 1, clip 5" apply to the sum
over the ``bptt`` time steps of the batch-mean loss, i.e. a gradient ``bptt`` times larger: the
same updates are ``--lr 35 --clip-norm 0.143`` here (PyTorch's word_language_model: lr 20,
clip 0.25, the defaults below).

The same command runs on one device, on all local devices and as several processes
(``--coordinator``/``--num-processes``/``--process-id`` or the environment, see
docs/distributed.md). ``--batch-size`` is the global number of rows: every process builds the
same windows and feeds its contiguous block of rows, which the mesh splits over its devices, so
the global batch, and the result, do not depend on the layout. The recurrent state stays split
over the devices between steps. Every process evaluates the whole validation and test streams
itself, on its own copy of the parameters.

Writes ``<save-dir>/config.json``, ``vocab.json``, ``train.log``, ``checkpoints/`` and
``summary.json`` (the common schema of ``RunDir.summary`` plus valid_ppl, test_ppl, best_epoch).

With ``--init-from DIR`` (a decoder-only checkpoint: GPT-2, Llama, Mistral, Qwen2/3, Gemma,
SmolLM) the recipe fine-tunes it on raw text instead (``textkit.cli.causal_lm``; its flags:
``--init-from DIR --help``): documents packed into ``--max-length`` rows, padding never in the
loss, the best checkpoint by validation perplexity exported to ``<run>/export``::

    python examples/language_model/train.py --init-from DIR --train-file train.txt \
        --valid-file valid.txt --test-file test.txt --documents wikitext --max-steps 200
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import jax

from textkit import parallel
from textkit.cli import causal_lm, parse_config, run_main
from textkit.tasks.language_model import (
    LanguageModelConfig,
    LanguageModelTask,
    process_rows,
    train_step_shardings,
)
from textkit.training import create_train_state, fit, launch, run_writers

# settings that may change when a run is resumed (its length and logging)
RESUMABLE = ("fit",)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--init-from" in argv or any(a.startswith("--init-from=") for a in argv):
        return causal_lm.train(argv)
    config = parse_config(LanguageModelConfig, argv, __doc__.splitlines()[0])
    record = config.record()
    run, mesh = launch(config.save_dir, record, resume=config.fit.resume,
                       runs_folder=config.runs_folder, processes=config.launch,
                       check=[k for k in record if k not in RESUMABLE])
    run.log(f"{jax.device_count()} device(s) in {jax.process_count()} process(es)")
    task = LanguageModelTask(config, run)
    data = {split: task.read_split(split) for split in task.splits}
    task.prepare(data)
    model = task.build_model()
    loader = task.make_loader(data["train"], train=True)
    optimizer, learning_rate = task.optimizer(config.fit.epochs * len(loader))
    init_key, state_key = jax.random.split(jax.random.key(config.seed))
    state = parallel.replicate(create_train_state(
        task.init_params(model, init_key), optimizer, state_key), mesh)
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
    run.log(f"model {config.model}: {num_params:,} parameters, policy {model.config.policy}")
    train_step = task.make_train_step(model, optimizer, **train_step_shardings(mesh, state))
    place = lambda state: parallel.replicate(state, mesh)
    manager = run.checkpoint_manager(best_metric="valid_ppl", best_mode="min")
    result = fit(
        state, train_step, loader, config.fit, checkpoints=manager,
        evaluate=lambda state: {"valid_ppl": task.evaluate(model, state.params,
                                                           data["valid"])["ppl"]},
        place=place, on_epoch_end=None if config.decay_on == "budget" else (
            lambda state, record, history: place(
                task.decay_learning_rate(state, record, history))),
        initial_carry=lambda: parallel.global_batch(
            process_rows(task.initial_carry(model)()), mesh),
        to_device=lambda window: parallel.global_batch(process_rows(window), mesh),
        learning_rate=learning_rate, log=run.log, desc=config.model,
        writers=run_writers(run.root, tensorboard=config.tensorboard,
                            main_process=run.main_process))
    best_state, _ = manager.restore("best", result.state)
    best = next(h for h in result.progress.history if h["step"] == manager.best_step())
    test = task.evaluate(model, best_state.params, data["test"])
    manager.close()
    run.log(f"test perplexity {test['ppl']:.2f} = exp(total NLL {test['nll']:,.1f} / "
            f"{test['tokens']:,.0f} test tokens, every token incl. <eos>) with the epoch-"
            f"{best['epoch']} checkpoint (valid ppl {best['valid_ppl']:.2f})")
    summary = run.summary("language_model", record, result, num_params=num_params, results={
        "vocab_words": len(task.vocab) - 1, "best_epoch": best["epoch"],
        "valid_ppl": best["valid_ppl"], "test_ppl": test["ppl"], "test_nll": test["nll"],
        "test_tokens": int(test["tokens"]), "unigram_test_ppl": task.unigram_test_ppl})
    run.log(f"{config.model} on {config.dataset}: {summary['steps']} steps, test perplexity "
            f"{test['ppl']:.2f}, {summary['wall_s']:.0f}s -> {run.root}")
    return summary


if __name__ == "__main__":
    run_main(main)
