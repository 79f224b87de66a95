"""Train a translation model (Transformer or GNMT) and report sacreBLEU on the test set.

With no arguments it trains a tiny Transformer on the built-in toy corpus in a few minutes:

    python examples/nmt/train.py
    python examples/nmt/train.py --dataset multi30k --data-dir ../shared/data/multi30k-en-de \\
        --model transformer_small --save-dir runs/m30k

Pipeline: SentencePiece model(s) trained on the train split (cached in --save-dir), bucketed
token-budget batches with a few fixed shapes, the jit-compiled train step, validation BLEU with
beam search every --eval-interval steps, Orbax checkpoints (latest N and best), averaging of the
last N, then cased and lowercased test BLEU with sacreBLEU signatures. ``--resume`` continues
from the latest checkpoint (parameters, optimizer, data position). Outputs under --save-dir:
``config.json``, ``spm*.model``, ``checkpoints/``, ``final/`` (evaluated params), ``summary.json``.

The same command runs on one device, on all local devices (data parallel over a ``data`` mesh
axis) and as several processes (``--coordinator``/``--num-processes``/``--process-id`` or the
environment, see docs/distributed.md). ``--batch-tokens`` is the global budget and every bucket's
global rows are rounded down to a multiple of ``--batch-rows-multiple``, so the global batches
are the same for every layout whose device count divides that multiple.
"""

from __future__ import annotations

import argparse
import ast
import math
import time
import zlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import optax
from tqdm import tqdm

from textkit import parallel
from textkit.data import get_dataset, toy_translation
from textkit.models import Translator
from textkit.precision import Policy, dynamic_loss_scale
from textkit.training import (
    CheckpointManager,
    average_checkpoints,
    create_train_state,
    inverse_sqrt_schedule,
    make_train_step,
)
from textkit.training.seq2seq import (
    TranslationDir,
    bleu_scores,
    build_translation_model,
    encode_pairs,
    init_params,
    make_seq2seq_loader,
    make_seq2seq_loss,
    write_json_atomic,
    write_text_atomic,
)

# name -> (default source/target language, train / valid / test segment)
DATASETS = {
    "toy": (("src", "tgt"), ("train", "valid", "test")),
    "multi30k": (("en", "de"), ("train", "val", "test")),
    "iwslt2015": (("en", "vi"), ("train", "val", "test")),
    "wmt2014": (("en", "de"), ("train", "newstest2013", "newstest2014")),
}
# settings that must not change when a run is resumed (data, vocabulary, model, data order)
RESUME_KEYS = ("dataset", "src_lang", "tgt_lang", "toy_sizes", "spm_vocab_size",
               "spm_model_type", "joint_spm",
               "max_length", "model", "model_overrides", "precision", "batch_tokens",
               "num_buckets", "batch_rows_multiple", "seed")
# launch settings: not part of the run's configuration
LAUNCH_KEYS = ("resume", "coordinator", "num_processes", "process_id")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="transformer_tiny", help="a translation preset")
    p.add_argument("--model-overrides", default="",
                   help="config fields, e.g. 'd_model=128,dropout=0.1'")
    p.add_argument("--dataset", default="toy", choices=sorted(DATASETS))
    p.add_argument("--data-dir", default=None, help="folder of the corpus files")
    p.add_argument("--src-lang", default=None)
    p.add_argument("--tgt-lang", default=None)
    p.add_argument("--toy-sizes", default="12000,200,500", help="toy train,valid,test pairs")
    p.add_argument("--precision", default="float32",
                   choices=["float32", "mixed_bfloat16", "mixed_float16"])
    p.add_argument("--spm-vocab-size", type=int, default=None,
                   help="SentencePiece vocabulary size (default: 1000 for toy, else 8000)")
    p.add_argument("--spm-model-type", default="bpe", choices=["bpe", "unigram"])
    p.add_argument("--joint-spm", action=argparse.BooleanOptionalAction, default=True,
                   help="one SentencePiece model and shared embeddings for both sides")
    p.add_argument("--max-length", type=int, default=128,
                   help="drop training pairs with a side longer than this (subword tokens)")
    p.add_argument("--batch-tokens", type=int, default=2048,
                   help="global token budget per batch (padded length x rows), all processes")
    p.add_argument("--batch-rows-multiple", type=int, default=None,
                   help="round every bucket's global rows down to a multiple of this; it must "
                        "be a multiple of the device count (default: lcm(8, devices), so the "
                        "global batch is the same on 1, 2, 4 or 8 devices)")
    p.add_argument("--num-buckets", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=200)
    p.add_argument("--clip-norm", type=float, default=1.0)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--max-steps", type=int, default=None, help="overrides --epochs")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--time-budget-min", type=float, default=None,
                   help="stop training after this many minutes of training time (evaluation "
                        "excluded), then evaluate and test as at --max-steps")
    p.add_argument("--eval-interval", type=int, default=500,
                   help="steps between validation BLEU + checkpoint (0: at the end only)")
    p.add_argument("--valid-size", type=int, default=0,
                   help="validate on the first N valid pairs (0: all)")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty")
    p.add_argument("--decode-batch-size", type=int, default=64)
    p.add_argument("--average-last", type=int, default=1,
                   help="average the last N checkpoints at the end (1: none)")
    p.add_argument("--save-dir", default="runs/nmt_toy")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-interval", type=int, default=20)
    p.add_argument("--coordinator", default=None,
                   help="host:port of process 0 for a multi-process run (or TEXTKIT_COORDINATOR)")
    p.add_argument("--num-processes", type=int, default=None,
                   help="processes in the job (or TEXTKIT_NUM_PROCESSES)")
    p.add_argument("--process-id", type=int, default=None,
                   help="this process's index (or TEXTKIT_PROCESS_ID)")
    args = p.parse_args(argv)
    (default_src, default_tgt), _ = DATASETS[args.dataset]
    args.src_lang = args.src_lang or default_src
    args.tgt_lang = args.tgt_lang or default_tgt
    args.model_overrides = parse_overrides(args.model_overrides)
    if args.spm_vocab_size is None:
        args.spm_vocab_size = 1000 if args.dataset == "toy" else 8000
    return args


def parse_overrides(text: str) -> dict[str, Any]:
    """'a=1,b=0.1,c=sinusoidal' -> {"a": 1, "b": 0.1, "c": "sinusoidal"}."""
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--model-overrides: expected key=value, got {item!r}")
        try:
            overrides[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            overrides[key.strip()] = value.strip()
    return overrides


def load_pairs(args: argparse.Namespace, split: int) -> list[tuple[str, str]]:
    """(source, target) text pairs of split 0 (train), 1 (valid) or 2 (test)."""
    segment = DATASETS[args.dataset][1][split]
    if args.dataset == "toy":
        size = int(args.toy_sizes.split(",")[split])
        return toy_translation(segment, num_sentences=size, seed=args.seed)
    data = get_dataset(args.dataset, segment, root=args.data_dir, src_lang=args.src_lang,
                       tgt_lang=args.tgt_lang)
    return list(data)


def make_optimizer(args: argparse.Namespace) -> tuple[optax.GradientTransformation, Any]:
    schedule = inverse_sqrt_schedule(args.lr, args.warmup_steps)
    optimizer = optax.chain(optax.clip_by_global_norm(args.clip_norm),
                            optax.adam(schedule, b1=0.9, b2=0.98, eps=1e-9))
    if Policy.parse(args.precision).needs_loss_scaling:
        optimizer = dynamic_loss_scale(optimizer)
    return optimizer, schedule


def rows_per_shard_multiple(args: argparse.Namespace) -> int:
    """Resolve ``--batch-rows-multiple`` (global) and return this process's share of it.

    Global rows ``round_down(budget // length, M)`` equal the processes' rows
    ``round_down((budget / P) // length, M / P)`` concatenated, so the global batch does not
    depend on the number of processes; each process's rows split evenly over its devices.
    """
    devices, processes = jax.device_count(), jax.process_count()
    if args.batch_rows_multiple is None:
        args.batch_rows_multiple = math.lcm(8, devices)
    if args.batch_rows_multiple % devices:
        raise SystemExit(f"--batch-rows-multiple {args.batch_rows_multiple} must be a multiple "
                         f"of the {devices} devices (so that every device gets equal rows)")
    return args.batch_rows_multiple // processes


def device_batch(batch: dict[str, np.ndarray], mesh: jax.sharding.Mesh) -> Any:
    """This process's host batch -> the global batch, split over the mesh's ``data`` axis."""
    return parallel.global_batch(batch, mesh)


def check_resumable(run: TranslationDir, config: dict[str, Any], resume: bool) -> None:
    if not run.config_path.is_file():
        return
    old = run.read_config()
    changed = [k for k in RESUME_KEYS if old.get(k) != config.get(k)]
    if changed:
        raise SystemExit(f"{run.root} holds a run with different {changed} "
                         f"({[old.get(k) for k in changed]}); use another --save-dir")
    if not resume and run.checkpoints.is_dir() and any(run.checkpoints.iterdir()):
        raise SystemExit(f"{run.checkpoints} already has checkpoints: pass --resume to "
                         "continue that run, or use another --save-dir")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    parallel.initialize(args.coordinator, args.num_processes, args.process_id)  # first JAX call
    start = time.perf_counter()
    main_process = parallel.is_main_process()
    mesh = parallel.make_mesh()
    rows_multiple = rows_per_shard_multiple(args)
    run = TranslationDir(args.save_dir)
    config = {k: v for k, v in vars(args).items() if k not in LAUNCH_KEYS}
    check_resumable(run, config, args.resume)

    train_pairs, valid_pairs, test_pairs = (load_pairs(args, split) for split in range(3))
    if args.valid_size:
        valid_pairs = valid_pairs[:args.valid_size]
    src_tok, tgt_tok = run.tokenizers(args.joint_spm, train_pairs, args.spm_vocab_size,
                                      seed=args.seed, model_type=args.spm_model_type)
    samples = encode_pairs(train_pairs, src_tok, tgt_tok, max_length=args.max_length)
    loader = make_seq2seq_loader(
        samples, parallel.per_process(args.batch_tokens, "--batch-tokens"),
        pad_id=tgt_tok.pad_id, bos_id=tgt_tok.bos_id, eos_id=tgt_tok.eos_id,
        num_buckets=args.num_buckets, seed=args.seed, num_shards=jax.process_count(),
        shard_id=jax.process_index(), batch_rows_multiple=rows_multiple)
    model = build_translation_model(
        args.model, src_vocab_size=len(src_tok), tgt_vocab_size=len(tgt_tok),
        pad_id=src_tok.pad_id, precision=args.precision, shared_vocab=args.joint_spm,
        **args.model_overrides)
    config.update(src_vocab_size=len(src_tok), tgt_vocab_size=len(tgt_tok))
    if main_process:
        write_json_atomic(run.config_path, config)
        print(f"{args.dataset} {args.src_lang}->{args.tgt_lang}: {len(samples)} train pairs "
              f"(of {len(train_pairs)}), {len(valid_pairs)} valid, {len(test_pairs)} test; "
              f"vocab {len(src_tok)}/{len(tgt_tok)}; {len(loader)} batches per epoch; "
              f"{jax.device_count()} device(s) in {jax.process_count()} process(es)")
        print(loader.batch_sampler.stats())

    optimizer, schedule = make_optimizer(args)
    init_key, train_key = jax.random.split(jax.random.PRNGKey(args.seed))
    state = parallel.replicate(
        create_train_state(init_params(model, init_key), optimizer, train_key), mesh)
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
    max_steps = args.max_steps or args.epochs * len(loader)
    manager = CheckpointManager(run.checkpoints, max_to_keep=max(args.average_last, 1),
                                best_metric="valid_bleu")
    progress = {"data_crc32": 0, "train_tokens": 0, "train_seconds": 0.0, "valid_bleu": {}}
    if args.resume and manager.latest_step() is not None:
        state, extra = manager.restore("latest", state)
        state = parallel.replicate(state, mesh)
        loader.load_state_dict(extra["sampler"])
        progress = extra["progress"]
        if main_process:
            print(f"resumed from step {int(state.step)} of {manager.directory}")

    loss_fn = make_seq2seq_loss(model, args.label_smoothing)
    train_step = make_train_step(loss_fn, optimizer,
                                 **parallel.train_step_shardings(mesh, state))
    translator = Translator(model, None, src_tok, tgt_tok, beam_size=args.beam_size,
                            alpha=args.alpha, batch_size=args.decode_batch_size)

    def translate(params: Any, pairs: list[tuple[str, str]]) -> dict[str, Any]:
        """Every process decodes everything itself, on its own copy of ``params``."""
        translator.params = parallel.local_copy(params)
        hypotheses = translator.translate([s for s, _ in pairs])
        return {**bleu_scores(hypotheses, [t for _, t in pairs]), "hypotheses": hypotheses}

    step = int(state.step)
    bar = tqdm(total=max_steps, initial=step, unit="step", disable=not main_process,
               desc=f"{args.model} {args.precision}")
    window_tokens, window_start = 0, time.perf_counter()
    segment_start = time.perf_counter()
    step_tokens = []  # the global batches' token counts, read when the loss is read
    loss = float("nan")  # the last logged training loss

    def count_tokens() -> int:
        tokens = int(sum(float(t) for t in step_tokens))
        progress["train_tokens"] += tokens
        step_tokens.clear()
        return tokens

    while step < max_steps:
        for batch in loader:
            progress["data_crc32"] = zlib.crc32(batch["src_tokens"].tobytes(),
                                                progress["data_crc32"])
            state, metrics = train_step(state, device_batch(batch, mesh))
            step_tokens.append(metrics["tokens"] + metrics["src_tokens"])
            step += 1
            bar.update(1)
            if step % args.log_interval == 0 or step == max_steps:
                loss = float(metrics["loss"])  # waits for the step
                window_tokens += count_tokens()
                now = time.perf_counter()
                rate = window_tokens / (now - window_start)
                bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:.0f}",
                                lr=f"{float(schedule(step - 1)):.2e}")
                window_tokens, window_start = 0, now
                if args.time_budget_min and parallel.main_process_decides(
                        progress["train_seconds"] + now - segment_start
                        >= 60 * args.time_budget_min):
                    max_steps = step  # out of time: the last evaluation and save happen now
                    bar.write(f"time budget of {args.time_budget_min:g} min reached at step "
                              f"{step}")
            if step == max_steps or (args.eval_interval and step % args.eval_interval == 0):
                jax.block_until_ready(state)
                count_tokens()
                progress["train_seconds"] += time.perf_counter() - segment_start
                valid = translate(state.params, valid_pairs)
                progress["valid_bleu"][str(step)] = valid["bleu"]
                if main_process:
                    bar.write(f"step {step}: loss {float(metrics['loss']):.3f}, valid BLEU "
                              f"{valid['bleu']:.2f} ({valid['bleu_lowercase']:.2f} lowercase)")
                manager.save(step, state, extra={"sampler": loader.state_dict(),
                                                 "progress": progress},
                             metrics={"valid_bleu": valid["bleu"]})
                segment_start = window_start = time.perf_counter()
                window_tokens = 0
            if step >= max_steps:
                break
    bar.close()
    manager.wait_until_finished()

    # the evaluated parameters: the best checkpoint, or the average of the last N if better
    best_step = manager.best_step()
    params = manager.restore("best", state)[0].params
    chosen = (f"best checkpoint (step {best_step})", params,
              progress["valid_bleu"][str(best_step)])
    if args.average_last > 1 and len(manager.all_steps()) > 1:
        last_n = min(args.average_last, len(manager.all_steps()))
        averaged = average_checkpoints(manager, state, last_n=last_n)
        valid_avg = translate(averaged, valid_pairs)["bleu"]
        if main_process:
            print(f"average of the last {last_n} checkpoints: valid BLEU {valid_avg:.2f}")
        if valid_avg >= chosen[2]:
            chosen = (f"average of the last {last_n} checkpoints", averaged, valid_avg)
    source, params, valid_bleu = chosen
    run.save_final(step, params, source)  # every process: Orbax saves collectively

    test = translate(params, test_pairs)
    wall = time.perf_counter() - start
    tokens_per_s = progress["train_tokens"] / max(progress["train_seconds"], 1e-9)
    summary = {
        "config": config, "num_params": int(num_params), "steps": step,
        "evaluated": source, "valid_bleu": valid_bleu,
        "test_bleu": test["bleu"], "signature": test["signature"],
        "test_bleu_lowercase": test["bleu_lowercase"],
        "signature_lowercase": test["signature_lowercase"],
        "wall_s": wall, "train_s": progress["train_seconds"],
        "train_tokens_per_s": tokens_per_s, "last_loss": loss,
        "num_compiles": loss_fn.num_traces,
        "num_bucket_shapes": len(loader.batch_sampler.bucket_shapes),
        "num_decode_shapes": len(translator.compiled_shapes),
        "device": jax.devices()[0].device_kind, "num_devices": jax.device_count(),
        "num_processes": jax.process_count(), "data_crc32": progress["data_crc32"],
    }
    if main_process:
        write_json_atomic(run.summary_path, summary)
        write_text_atomic(run.test_hypotheses_path, "".join(h + "\n" for h in test["hypotheses"]))
        print(f"compiled {loss_fn.num_traces} train-step program(s) for "
              f"{summary['num_bucket_shapes']} bucket shapes; "
              f"{summary['num_decode_shapes']} decode shapes")
        print(f"test BLEU {test['bleu']:.2f}  {test['signature']}")
        print(f"test BLEU {test['bleu_lowercase']:.2f}  {test['signature_lowercase']}")
        print(f"{args.model} on {args.dataset}: {step} steps, {num_params:,} params, "
              f"{tokens_per_s:.0f} train tokens/s, test BLEU {test['bleu']:.2f} "
              f"(lowercase {test['bleu_lowercase']:.2f}), {wall:.0f}s -> {run.summary_path}")
    return summary


if __name__ == "__main__":
    main()
