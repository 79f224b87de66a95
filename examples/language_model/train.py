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
``summary.json`` (config, valid_ppl, test_ppl, wall_s, tokens_per_s, per-epoch history).
"""

from __future__ import annotations

import argparse
import ast
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from textkit import parallel
from textkit.data import BPTTBatches, LanguageModelCorpus, get_dataset
from textkit.data.toy import write_toy_lm_corpus
from textkit.models import get_model, list_models
from textkit.precision import Policy, dynamic_loss_scale
from textkit.training import CheckpointManager, create_train_state, perplexity
from textkit.training.files import write_json_atomic
from textkit.training.language_model import (
    initial_carry,
    learning_rate_of,
    lm_optimizer,
    lm_train_step_shardings,
    make_lm_eval_step,
    make_lm_train_step,
    next_learning_rate,
    stream_nll,
    stream_windows,
    unigram_perplexity,
    with_learning_rate,
)
from textkit.vocab import Vocab

DATASETS = ("toy", "ptb", "wikitext2", "wikitext103")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="lstm_lm_tiny",
                   help=f"preset: {', '.join(list_models('language_model'))}")
    p.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field of the preset, e.g. dropout=0.5 (repeatable)")
    p.add_argument("--dataset", choices=DATASETS, default="toy")
    p.add_argument("--data-dir", help="folder with the corpus files (ptb.train.txt, "
                   "wiki.train.tokens, ...); for toy, where to write the generated corpus")
    p.add_argument("--toy-sentences", type=int, default=20000,
                   help="training sentences of the toy corpus (valid/test get a tenth each)")
    p.add_argument("--precision", default="float32",
                   help="precision policy, e.g. float32, mixed_bfloat16, mixed_float16")
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--bptt", type=int, default=35, help="training window length (tokens)")
    p.add_argument("--eval-bptt", type=int,
                   help="evaluation window (batch size 1, state carried); default --bptt")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--lr", type=float, default=20.0,
                   help="learning rate for the per-token mean loss (Adam: ~1e-3)")
    p.add_argument("--lr-decay", type=float, default=0.25, help="learning-rate decay factor")
    p.add_argument("--decay-on", choices=("plateau", "epoch"), default="plateau",
                   help="plateau: decay when valid ppl does not improve; epoch: every epoch")
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
    p.add_argument("--coordinator", default=None,
                   help="host:port of process 0 for a multi-process run (or TEXTKIT_COORDINATOR)")
    p.add_argument("--num-processes", type=int, default=None,
                   help="processes in the job (or TEXTKIT_NUM_PROCESSES)")
    p.add_argument("--process-id", type=int, default=None,
                   help="this process's index (or TEXTKIT_PROCESS_ID)")
    args = p.parse_args(argv)
    if args.eval_bptt is None:
        args.eval_bptt = args.bptt
    return args


def parse_model_args(pairs: list[str]) -> dict[str, Any]:
    """``["dropout=0.5", "tie_weights=False"]`` -> ``{"dropout": 0.5, "tie_weights": False}``."""
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--model-arg {pair!r}: expected KEY=VALUE")
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[key] = value
    return overrides


class Log:
    """Prints (through tqdm, so bars stay intact) and appends to ``train.log``; process 0 only."""

    def __init__(self, path: Path, enabled: bool):
        self.path, self.enabled = path, enabled

    def __call__(self, message: str) -> None:
        if not self.enabled:
            return
        tqdm.write(message)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(message + "\n")


def load_corpora(args: argparse.Namespace, log: Log) -> dict[str, LanguageModelCorpus]:
    """``{"train", "valid", "test"}`` corpora; every line ends with ``<eos>``."""
    if args.dataset == "toy":
        sizes = {"train": args.toy_sentences, "valid": max(args.toy_sentences // 10, 1),
                 "test": max(args.toy_sentences // 10, 1)}
        folder = Path(args.data_dir or tempfile.mkdtemp(prefix="textkit_toy_lm_"))
        paths = write_toy_lm_corpus(folder, seed=args.seed, sizes=sizes)
        log(f"toy corpus written to {folder} ({sizes})")
        return {segment: LanguageModelCorpus(path) for segment, path in paths.items()}
    return {segment: get_dataset(args.dataset, segment, root=args.data_dir,
                                 progress=parallel.is_main_process())
            for segment in ("train", "valid", "test")}


def build_vocab(train: LanguageModelCorpus) -> Vocab:
    """The training words plus ``<pad>`` (no ``<bos>``: LM streams only use ``<eos>``)."""
    return Vocab(train.tokens, bos_token=None)


def local_rows(tree: Any) -> Any:
    """This process's block of rows of a global host batch (or recurrent state):
    ``[p * b:(p + 1) * b]`` with ``b = rows / process count``."""
    def rows(x: Any) -> np.ndarray:
        x = np.asarray(x)
        size = parallel.per_process(x.shape[0], "--batch-size")
        return x[jax.process_index() * size:(jax.process_index() + 1) * size]
    return jax.tree_util.tree_map(rows, tree)


def to_device(batch: dict[str, np.ndarray]) -> Any:
    """A host batch on this process's first device, for evaluation on a local copy."""
    return jax.device_put(batch, jax.local_devices()[0])


def run(args: argparse.Namespace) -> dict[str, Any]:
    wall_start = time.perf_counter()
    parallel.initialize(args.coordinator, args.num_processes, args.process_id)  # first JAX call
    is_main = parallel.is_main_process()
    mesh = parallel.make_mesh()
    launch = ("resume", "coordinator", "num_processes", "process_id")
    save_dir = Path(args.save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    log = Log(save_dir / "train.log", is_main)
    log(f"config: {json.dumps(vars(args), sort_keys=True)}; {jax.device_count()} device(s) in "
        f"{jax.process_count()} process(es)")
    parallel.per_process(args.batch_size, "--batch-size")

    corpora = load_corpora(args, log)
    vocab = build_vocab(corpora["train"])
    ids = {segment: corpus.token_ids(vocab) for segment, corpus in corpora.items()}
    words = len(vocab) - 1  # every entry but <pad> occurs in the training text
    log(f"vocabulary: {words:,} words (incl. <unk>, <eos>) + <pad>; tokens "
        + ", ".join(f"{s} {len(v):,}" for s, v in ids.items()))
    unigram = unigram_perplexity(ids["train"], ids["test"], len(vocab))
    log(f"unigram baseline (ML on train): test perplexity {unigram:.1f}")

    policy = Policy.parse(args.precision)
    model_args = {**parse_model_args(args.model_arg), "vocab_size": len(vocab),
                  "pad_id": vocab.pad_id, "policy": args.precision}
    model = get_model(args.model, **model_args)
    excluded = (vocab.pad_id,)
    if is_main:
        write_json_atomic(save_dir / "config.json", {
            "model": args.model, "model_args": model_args,
            "args": {k: v for k, v in vars(args).items() if k not in launch}})
        vocab.save(save_dir / "vocab.json")

    key = jax.random.key(args.seed)
    init_key, state_key = jax.random.split(key)
    dummy = jnp.full((args.batch_size, args.bptt), vocab.eos_id, jnp.int32)
    params = model.init(init_key, dummy)["params"]
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(params))
    optimizer = lm_optimizer(args.optimizer, args.lr, clip_norm=args.clip or None,
                             weight_decay=args.weight_decay)
    if policy.needs_loss_scaling:
        optimizer = dynamic_loss_scale(optimizer)
    state = parallel.replicate(create_train_state(params, optimizer, state_key), mesh)
    log(f"model {args.model}: {num_params:,} parameters, policy {policy}")

    train_step = make_lm_train_step(model, optimizer, excluded_ids=excluded,
                                    **lm_train_step_shardings(mesh, state))
    eval_step = make_lm_eval_step(model, excluded_ids=excluded)
    train_windows = BPTTBatches(ids["train"], args.batch_size, args.bptt, last_batch="keep",
                                pad_id=vocab.pad_id)
    eval_windows = {segment: stream_windows(ids[segment], args.eval_bptt, vocab.eos_id,
                                            vocab.pad_id) for segment in ("valid", "test")}

    def evaluate(params: Any, segment: str) -> tuple[float, float, float]:
        """Every process scores the whole stream itself, on its own copy of ``params``."""
        nll, count = stream_nll(eval_step, parallel.local_copy(params), eval_windows[segment],
                                initial_carry(model, 1), to_device)
        if count != len(ids[segment]):
            raise RuntimeError(f"{segment}: scored {count} tokens, expected {len(ids[segment])}")
        return perplexity(nll, count), nll, count

    checkpoints = CheckpointManager(save_dir / "checkpoints", max_to_keep=1,
                                    best_metric="valid_ppl", best_mode="min")
    start_epoch, best_ppl, history = 1, float("inf"), []
    train_s = train_tokens = compile_s = 0.0  # compile_s: first steps (trace + compile)
    if args.resume and checkpoints.latest_step() is not None:
        state, extra = checkpoints.restore("latest", target=state)
        state = parallel.replicate(state, mesh)
        start_epoch = extra["epoch"] + 1
        best_ppl, history = extra["best_valid_ppl"], extra["history"]
        train_s, train_tokens, compile_s = (extra["train_s"], extra["train_tokens"],
                                            extra["compile_s"])
        log(f"resumed from epoch {extra['epoch']} (lr {learning_rate_of(state.opt_state):g}, "
            f"best valid ppl {best_ppl:.2f})")

    out_of_time, loss = False, float("nan")  # loss: the last logged training loss
    for epoch in range(start_epoch, args.epochs + 1):
        carry = parallel.global_batch(local_rows(initial_carry(model, args.batch_size)), mesh)
        lr = learning_rate_of(state.opt_state)
        bar = tqdm(range(len(train_windows)), desc=f"epoch {epoch}", unit="win",
                   disable=not is_main, dynamic_ncols=True)
        epoch_start = tick = time.perf_counter()
        epoch_tokens = tick_tokens = 0.0
        for index in bar:
            window = train_windows[index]
            batch = parallel.global_batch(local_rows(window), mesh)
            state, carry, metrics = train_step(state, batch, carry)
            tokens = float(window["mask"].sum())  # the global window: every process has it
            epoch_tokens += tokens
            tick_tokens += tokens
            if index == 0 and epoch == start_epoch:
                jax.block_until_ready(metrics["loss"])
                tick, tick_tokens = time.perf_counter(), 0.0
                first_step_s = tick - epoch_start
                compile_s += first_step_s
                log(f"first step (trace + compile) {first_step_s:.1f}s")
            last = index == len(train_windows) - 1
            if (index + 1) % args.log_every == 0 or last:
                loss = float(metrics["loss"])  # waits for the step
                now = time.perf_counter()
                bar.set_postfix(loss=f"{loss:.3f}", ppl=f"{np.exp(loss):.1f}", lr=f"{lr:g}",
                                tok_s=f"{tick_tokens / (now - tick):,.0f}")
                tick, tick_tokens = now, 0.0
                if not np.isfinite(loss):
                    raise FloatingPointError(f"epoch {epoch}, window {index}: loss is {loss}")
                elapsed = train_s + now - epoch_start
                if args.time_budget_min and parallel.main_process_decides(
                        elapsed >= 60 * args.time_budget_min):
                    out_of_time = True
                    break
        bar.close()
        jax.block_until_ready(state.params)
        epoch_s = time.perf_counter() - epoch_start
        train_s += epoch_s
        steady_s = epoch_s - (first_step_s if epoch == start_epoch else 0.0)
        train_tokens += epoch_tokens

        eval_start = time.perf_counter()
        valid_ppl, _, _ = evaluate(state.params, "valid")
        eval_s = time.perf_counter() - eval_start
        improved = valid_ppl < best_ppl
        best_ppl = min(best_ppl, valid_ppl)
        new_lr = next_learning_rate(lr, epoch=epoch, improved=improved, factor=args.lr_decay,
                                    decay_on=args.decay_on, decay_start=args.decay_start)
        state = state.replace(opt_state=with_learning_rate(state.opt_state, new_lr))
        state = parallel.replicate(state, mesh)  # the new learning rate on every device
        history.append({"epoch": epoch, "lr": lr, "train_s": round(epoch_s, 2),
                        "tokens_per_s": round(epoch_tokens / steady_s, 1),
                        "valid_ppl": valid_ppl, "complete": not out_of_time})
        log(f"epoch {epoch}: valid ppl {valid_ppl:.2f}{' (best)' if improved else ''}, "
            f"lr {lr:g} -> {new_lr:g}, train {epoch_s:.0f}s ({epoch_tokens / steady_s:,.0f} "
            f"tokens/s), valid {eval_s:.0f}s"
            + (" [time budget reached mid-epoch]" if out_of_time else ""))
        checkpoints.save(epoch, state, metrics={"valid_ppl": valid_ppl},
                         extra={"epoch": epoch, "best_valid_ppl": best_ppl, "history": history,
                                "train_s": train_s, "train_tokens": train_tokens,
                                "compile_s": compile_s})
        if out_of_time:
            break

    if checkpoints.best_step() is None:
        raise SystemExit(f"no checkpoint in {checkpoints.directory}: nothing trained "
                         f"(--epochs {args.epochs}, resumed at epoch {start_epoch})")
    best_epoch = checkpoints.best_step()
    best_state, _ = checkpoints.restore("best", target=state)
    valid_ppl = next(h["valid_ppl"] for h in history if h["epoch"] == best_epoch)
    test_ppl, test_nll, test_count = evaluate(best_state.params, "test")
    checkpoints.close()
    log(f"test perplexity {test_ppl:.2f} = exp(total NLL {test_nll:,.1f} / {test_count:,.0f} "
        f"test tokens, every token incl. <eos>) with the epoch-{best_epoch} checkpoint "
        f"(valid ppl {valid_ppl:.2f}); unigram baseline {unigram:.1f}")
    summary = {
        "config": {k: v for k, v in vars(args).items() if k not in launch},
        "model_args": model_args, "num_params": int(num_params),
        "vocab_words": words, "best_epoch": best_epoch, "valid_ppl": valid_ppl,
        "test_ppl": test_ppl, "test_nll": test_nll, "test_tokens": int(test_count),
        "unigram_test_ppl": unigram, "train_s": round(train_s, 2),
        "compile_s": round(compile_s, 2),
        "wall_s": round(time.perf_counter() - wall_start, 2),
        # steady-state training throughput: first steps (compilation) excluded
        "tokens_per_s": round(train_tokens / max(train_s - compile_s, 1e-9), 1),
        "history": history,
        "device": str(jax.devices()[0].platform), "num_devices": jax.device_count(),
        "num_processes": jax.process_count(), "last_loss": loss, "jax": jax.__version__,
    }
    if is_main:
        write_json_atomic(save_dir / "summary.json", summary)
    log(json.dumps({k: summary[k] for k in ("valid_ppl", "test_ppl", "wall_s",
                                             "tokens_per_s", "best_epoch")}))
    return summary


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run(parse_args(argv))


if __name__ == "__main__":
    main()
