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
        --model lstm_lm_200 --batch-size 20 --bptt 35 --optimizer sgd --lr 35 --clip 0.143 \\
        --decay-on epoch --decay-start 4 --lr-decay 0.5 --epochs 13 --save-dir runs/ptb_small

The loss minimised is the mean NLL per token. Zaremba et al.'s "lr 1, clip 5" apply to the sum
over the ``bptt`` time steps of the batch-mean loss, i.e. a gradient ``bptt`` times larger: the
same updates are ``--lr 35 --clip 0.143`` here (PyTorch's word_language_model: lr 20, clip 0.25,
the defaults below).

The same command runs on one device, on all local devices and as several processes
(``--coordinator``/``--num-processes``/``--process-id`` or the environment, see
docs/distributed.md). ``--batch-size`` is the global number of rows: every process builds the
same windows and feeds its contiguous block of rows, which the mesh splits over its devices, so
the global batch, and the result, do not depend on the layout. The recurrent state stays split
over the devices between steps. Every process evaluates the whole validation and test streams
itself, on its own copy of the parameters.

Writes ``<save-dir>/config.json``, ``vocab.json``, ``train.log``, ``checkpoints/`` and
``summary.json`` (the common schema of ``RunDir.summary`` plus valid_ppl, test_ppl, best_epoch).
"""

from __future__ import annotations

import argparse
from typing import Any

import jax

from textkit import parallel
from textkit.models import list_models
from textkit.tasks import language_model as lm
from textkit.training import create_train_state, fit, launch
from textkit.training.optim import learning_rate_of, with_learning_rate


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="lstm_lm_tiny",
                   help=f"preset: {', '.join(list_models('language_model'))}")
    p.add_argument("--model-overrides", "--model-arg", action="append", default=[],
                   metavar="KEY=VALUE[,KEY=VALUE]",
                   help="config fields of the preset, e.g. dropout=0.5 (repeatable)")
    p.add_argument("--dataset", choices=lm.DATASETS, default="toy")
    p.add_argument("--data-dir", help="folder with the corpus files (ptb.train.txt, "
                   "wiki.train.tokens, ...); for toy, where to write the generated corpus")
    p.add_argument("--toy-sentences", type=int, default=20000,
                   help="training sentences of the toy corpus (valid/test get a tenth each)")
    p.add_argument("--precision", default="float32",
                   help="precision policy, e.g. float32, mixed_bfloat16, mixed_float16")
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--bptt", type=int, default=35, help="training window length (tokens)")
    p.add_argument("--eval-stride", type=int, default=None,
                   help="sliding-window evaluation: windows of --eval-bptt tokens this many "
                        "apart, each token scored once with >= eval-bptt - stride tokens of "
                        "context and no carried state (for the Transformer LM)")
    p.add_argument("--eval-bptt", type=int,
                   help="evaluation window (batch size 1, state carried); default --bptt")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--lr", type=float, default=20.0,
                   help="learning rate for the per-token mean loss (Adam: ~1e-3)")
    p.add_argument("--lr-decay", type=float, default=0.25, help="learning-rate decay factor")
    p.add_argument("--decay-on", choices=("plateau", "epoch", "budget"), default="plateau",
                   help="plateau: decay when valid ppl does not improve; epoch: every epoch; "
                        "budget: warm-up, constant, then linear decay reaching 0 exactly at "
                        "the end of --epochs or of --time-budget-min")
    p.add_argument("--warmup-steps", type=int, default=0, help="budget schedule warm-up")
    p.add_argument("--decay-fraction", type=float, default=0.2,
                   help="budget schedule: the final fraction of the steps that decays")
    p.add_argument("--decay-start", type=int, default=1,
                   help="first epoch after which the learning rate may decay")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--clip", type=float, default=0.25,
                   help="global gradient-norm clip of the per-token mean loss (0: off)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--time-budget-min", type=float,
                   help="stop training after this many minutes of training (then validate "
                        "and test); evaluation time is not counted")
    p.add_argument("--save-dir", default="runs/language_model")
    p.add_argument("--resume", action="store_true",
                   help="continue from the latest checkpoint in --save-dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=20, help="steps between progress updates")
    parallel.add_launch_arguments(p)
    args = p.parse_args(argv)
    return argparse.Namespace(**{**vars(args), "eval_bptt": args.eval_bptt or args.bptt})


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    run, mesh, config = launch(args, check=[k for k in vars(args) if k not in (   # first JAX
        "epochs", "time_budget_min", "log_every", "resume", *parallel.LAUNCH_ARGS)])
    run.log(f"{jax.device_count()} device(s) in {jax.process_count()} process(es)")
    parallel.per_process(args.batch_size, "--batch-size")
    corpora = lm.load_corpora(args.dataset, args.data_dir, toy_sentences=args.toy_sentences,
                              seed=args.seed, log=run.log)
    vocab = lm.build_vocab(corpora["train"])
    ids = {segment: corpus.token_ids(vocab) for segment, corpus in corpora.items()}
    unigram = lm.unigram_perplexity(ids["train"], ids["test"], len(vocab))
    run.log(f"vocabulary: {len(vocab) - 1:,} words (incl. <unk>, <eos>) + <pad>; tokens "
            + ", ".join(f"{s} {len(v):,}" for s, v in ids.items())
            + f"; unigram baseline (ML on train): test perplexity {unigram:.1f}")
    if run.main_process:
        vocab.save(run.root / "vocab.json")

    model = lm.build_model(args.model, args.model_overrides, vocab, args.precision)
    init_key, state_key = jax.random.split(jax.random.key(args.seed))
    loader = lm.make_loader(ids["train"], args.batch_size, args.bptt, vocab.pad_id)
    budget = args.decay_on == "budget"
    optimizer = lm.optimizer(
        args.optimizer, args.lr, clip_norm=args.clip or None, weight_decay=args.weight_decay,
        policy=args.precision, schedule="budget" if budget else "held",
        warmup_steps=args.warmup_steps, total_steps=args.epochs * len(loader),
        decay_fraction=args.decay_fraction)
    state = parallel.replicate(create_train_state(
        lm.init_params(model, init_key, vocab.eos_id), optimizer, state_key), mesh)
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
    run.log(f"model {args.model}: {num_params:,} parameters, policy {model.config.policy}")
    excluded = (vocab.pad_id,)
    train_step = lm.make_train_step(model, optimizer, excluded_ids=excluded,
                                    **lm.train_step_shardings(mesh, state))
    eval_step = lm.make_eval_step(model, excluded_ids=excluded)
    windows = {s: lm.stream_windows(ids[s], args.eval_bptt, vocab.eos_id, vocab.pad_id)
               if not args.eval_stride else lm.sliding_windows(
                   ids[s], args.eval_bptt, args.eval_stride, vocab.eos_id, vocab.pad_id)
               for s in ("valid", "test")}

    def decay(state: Any, record: dict[str, Any], history: list[dict[str, Any]]) -> Any:
        """After each epoch: the next learning rate, from the validation perplexity."""
        lr = learning_rate_of(state.opt_state)
        best = min((h["valid_ppl"] for h in history), default=float("inf"))
        new_lr = lm.next_learning_rate(lr, epoch=record["epoch"], factor=args.lr_decay,
                                       improved=record["valid_ppl"] < best,
                                       decay_on=args.decay_on, decay_start=args.decay_start)
        record.update(lr=lr, next_lr=new_lr)
        return parallel.replicate(state.replace(
            opt_state=with_learning_rate(state.opt_state, new_lr)), mesh)

    manager = run.checkpoint_manager(best_metric="valid_ppl", best_mode="min")
    result = fit(
        state, train_step, loader, epochs=args.epochs, eval_each_epoch=True,
        checkpoints=manager, resume=args.resume,
        evaluate=lambda state: {"valid_ppl": lm.evaluate(
            eval_step, model, state.params, ids["valid"], windows["valid"],
            reset=bool(args.eval_stride))["ppl"]},
        place=lambda state: parallel.replicate(state, mesh),
        on_epoch_end=None if budget else decay,
        time_budget_min=args.time_budget_min, log_every=args.log_every,
        initial_carry=lambda: parallel.global_batch(
            lm.process_rows(model.initial_state(args.batch_size)), mesh),
        to_device=lambda window: parallel.global_batch(lm.process_rows(window), mesh),
        learning_rate=lambda state: learning_rate_of(state.opt_state), log=run.log,
        desc=args.model)
    best_state, extra = manager.restore("best", result.state)
    best_record = next(h for h in result.progress.history if h["step"] == manager.best_step())
    test = lm.evaluate(eval_step, model, best_state.params, ids["test"], windows["test"],
                       reset=bool(args.eval_stride))
    manager.close()
    run.log(f"test perplexity {test['ppl']:.2f} = exp(total NLL {test['nll']:,.1f} / "
            f"{test['tokens']:,.0f} test tokens, every token incl. <eos>) with the epoch-"
            f"{best_record['epoch']} checkpoint (valid ppl {best_record['valid_ppl']:.2f}); "
            f"unigram baseline {unigram:.1f}")
    return run.summary("language_model", config, result, num_params=num_params, results={
        "vocab_words": len(vocab) - 1, "best_epoch": best_record["epoch"],
        "valid_ppl": best_record["valid_ppl"], "test_ppl": test["ppl"], "test_nll": test["nll"],
        "test_tokens": int(test["tokens"]), "unigram_test_ppl": unigram})


if __name__ == "__main__":
    main()
