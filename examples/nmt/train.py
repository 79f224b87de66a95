"""Train a translation model (Transformer or GNMT) and report sacreBLEU on the test set.

With no arguments it trains a tiny Transformer on the built-in toy corpus in a few minutes:

    python examples/nmt/train.py
    python examples/nmt/train.py --dataset multi30k --data-dir ../shared/data/multi30k-en-de \\
        --model transformer_small --save-dir runs/m30k

Pipeline: SentencePiece model(s) trained on the train split (cached in --save-dir), the split
streamed from its files and encoded once into a memory-mapped token store (``store/``, rebuilt
when a file or the tokenizer changes), bucketed token-budget batches with a few fixed shapes
(``--accum-steps`` micro-batches per update), the jit-compiled train step, validation BLEU with
beam search every --eval-interval steps, Orbax checkpoints (latest N and best), averaging of the
last N, then cased and lowercased test BLEU with sacreBLEU signatures. ``--resume`` continues
from the latest checkpoint (parameters, optimizer, data position). Outputs under --save-dir:
``config.json``, ``spm*.model``, ``store/``, ``checkpoints/``, ``final/`` (evaluated params),
``summary.json``.

The same command runs on one device, on all local devices (data parallel over a ``data`` mesh
axis) and as several processes (``--coordinator``/``--num-processes``/``--process-id`` or the
environment, see docs/distributed.md). ``--batch-tokens`` is the global budget and every bucket's
global rows are rounded down to a multiple of ``--batch-rows-multiple``, so the global batches
are the same for every layout whose device count divides that multiple.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from typing import Any

import jax

from textkit import parallel
from textkit.decoding import Translator
from textkit.models import parse_overrides
from textkit.tasks import translation
from textkit.training import (
    RunDir,
    create_train_state,
    ema_params_of,
    fit,
    launch,
    make_train_step,
)

# settings that must not change when a run is resumed (data, vocabulary, model, data order)
RESUME_KEYS = ("dataset", "src_lang", "tgt_lang", "toy_sizes", "spm_vocab_size",
               "spm_model_type", "joint_spm", "max_length", "model", "model_overrides", "init_from",
               "precision", "batch_tokens", "num_buckets", "batch_rows_multiple", "accum_steps",
               "seed")
# settings added after older run directories were written, with the value those runs had
ADDED_SINCE = {"accum_steps": 1}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="transformer_tiny", help="a translation preset")
    p.add_argument("--model-overrides", default="",
                   help="config fields, e.g. 'd_model=128,dropout=0.1'")
    p.add_argument("--dataset", default="toy", choices=sorted(translation.DATASETS))
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
    p.add_argument("--encode-workers", type=int, default=None,
                   help="processes encoding the train split into its token store (default: "
                        "0 for the toy corpus, else the CPU count, at most 8)")
    p.add_argument("--max-length", type=int, default=128,
                   help="drop training pairs with a side longer than this (subword tokens)")
    p.add_argument("--batch-tokens", type=int, default=2048,
                   help="global token budget per batch (padded length x rows), all processes")
    p.add_argument("--batch-rows-multiple", type=int, default=None,
                   help="round every bucket's global rows down to a multiple of this; it must "
                        "be a multiple of the device count (default: lcm(8, devices), so the "
                        "global batch is the same on 1, 2, 4 or 8 devices)")
    p.add_argument("--accum-steps", type=int, default=1,
                   help="gradient accumulation: micro-batches of --batch-tokens per update, "
                        "run in one compiled step (the update's budget is N x --batch-tokens)")
    p.add_argument("--num-buckets", type=int, default=12,
                   help="length buckets: one padded shape and one compiled train program "
                        "each (Multi30k: 12 buckets -> 8 shapes; fewer waste more padding)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--lr-schedule", default="inverse_sqrt", choices=translation.SCHEDULES,
                   help="budget: warm-up, constant, then linear decay reaching 0 exactly at "
                        "--max-steps / the last epoch / the end of --time-budget-min")
    p.add_argument("--decay-fraction", type=float, default=0.2,
                   help="budget schedule: the final fraction of the steps that decays")
    p.add_argument("--ema-decay", type=float, default=None,
                   help="keep an EMA of the parameters and evaluate/test it (e.g. 0.999)")
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
    p.add_argument("--save-interval", type=int, default=0,
                   help="steps between extra checkpoints without validation, e.g. close "
                        "together at the end for --average-last (0: none)")
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
    p.add_argument("--init-from", default=None,
                   help="fine-tune a Marian / OPUS-MT checkpoint directory with its own "
                        "tokenizers (--model, --spm-* and --joint-spm are then unused)")
    p.add_argument("--log-interval", type=int, default=20)
    parallel.add_launch_arguments(p)
    args = p.parse_args(argv)
    (default_src, default_tgt), _ = translation.DATASETS[args.dataset]
    return argparse.Namespace(**{
        **vars(args), "src_lang": args.src_lang or default_src,
        "tgt_lang": args.tgt_lang or default_tgt, "encode_workers": (
            args.encode_workers if args.encode_workers is not None
            else 0 if args.dataset == "toy" else min(os.cpu_count() or 1, 8)),
        "spm_vocab_size": args.spm_vocab_size or (1000 if args.dataset == "toy" else 8000)})


def rows_per_process(batch_rows_multiple: int | None) -> int:
    """This process's share of ``--batch-rows-multiple`` (default ``lcm(8, devices)``).

    Global rows ``round_down(budget // length, M)`` equal the processes' rows
    ``round_down((budget / P) // length, M / P)`` concatenated, so the global batch does not
    depend on the number of processes; each process's rows split evenly over its devices.
    """
    devices = jax.device_count()
    multiple = batch_rows_multiple or math.lcm(8, devices)
    if multiple % devices:
        raise SystemExit(f"--batch-rows-multiple {multiple} must be a multiple of the "
                         f"{devices} devices (so that every device gets equal rows)")
    return multiple // jax.process_count()


def report(run: RunDir, summary: dict[str, Any], test: dict[str, Any]) -> None:
    """The closing lines: compiles, the two sacreBLEU scores with signatures, a summary."""
    config = summary["config"]
    run.log(f"compiled {summary['num_compiles']} train-step program(s) for "
            f"{summary['num_bucket_shapes']} bucket shapes; {summary['num_decode_shapes']} "
            f"decode shapes\ntest BLEU {test['bleu']:.2f}  {test['signature']}\n"
            f"test BLEU {test['bleu_lowercase']:.2f}  {test['signature_lowercase']}\n"
            f"{config['model']} on {config['dataset']}: {summary['steps']} steps, "
            f"{summary['num_params']:,} params, {summary['tokens_per_s']:.0f} train tokens/s, "
            f"test BLEU {test['bleu']:.2f} (lowercase {test['bleu_lowercase']:.2f}), "
            f"{summary['wall_s']:.0f}s -> {run.summary_path}")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    run, mesh, config = launch(args, check=RESUME_KEYS, added=ADDED_SINCE)   # first JAX call
    translation.check_max_length(args.model, parse_overrides(args.model_overrides),
                                 args.max_length)
    where = dict(data_dir=args.data_dir, src_lang=args.src_lang, tgt_lang=args.tgt_lang,
                 toy_sizes=args.toy_sizes.split(","), seed=args.seed)
    train_text = translation.train_source(args.dataset, **where)     # streamed from the files
    valid_pairs, test_pairs = (translation.load_pairs(args.dataset, split, **where)
                               for split in (1, 2))
    valid_pairs = valid_pairs[:args.valid_size or None]
    pretrained = args.init_from and translation.init_from(args.init_from, args.precision,
                                                          args.model_overrides)
    src_tok, tgt_tok = pretrained[2:] if pretrained else translation.tokenizers(
        run, args.joint_spm, train_text, args.spm_vocab_size, seed=args.seed,
        model_type=args.spm_model_type)
    samples = translation.trainable(translation.encode_corpus(
        run, train_text, src_tok, tgt_tok, num_workers=args.encode_workers), args.max_length)
    loader = translation.make_loader(
        samples, parallel.per_process(args.batch_tokens, "--batch-tokens"),
        pad_id=tgt_tok.pad_id, bos_id=tgt_tok.bos_id, eos_id=tgt_tok.eos_id,
        num_buckets=args.num_buckets, seed=args.seed, num_shards=jax.process_count(),
        shard_id=jax.process_index(), accum_steps=args.accum_steps,
        batch_rows_multiple=rows_per_process(args.batch_rows_multiple))
    model = pretrained.model if pretrained else translation.build_model(
        args.model, src_vocab_size=len(src_tok), tgt_vocab_size=len(tgt_tok),
        pad_id=src_tok.pad_id, precision=args.precision, shared_vocab=args.joint_spm,
        **parse_overrides(args.model_overrides))
    run.log(f"{args.dataset} {args.src_lang}->{args.tgt_lang}: {len(samples)} train pairs "
            f"(of {len(train_text)}), {len(valid_pairs)} valid, {len(test_pairs)} test; "
            f"vocab {len(src_tok)}/{len(tgt_tok)}; {len(loader)} batches per epoch; "
            f"{jax.device_count()} device(s) in {jax.process_count()} process(es)\n"
            f"{loader.batch_sampler.stats()}")

    optimizer, learning_rate = translation.optimizer(
        args.lr, args.warmup_steps, args.clip_norm, args.precision, schedule=args.lr_schedule,
        total_steps=args.max_steps or args.epochs * len(loader),
        decay_fraction=args.decay_fraction, ema_decay=args.ema_decay)
    init_key, train_key = jax.random.split(jax.random.PRNGKey(args.seed))
    state = parallel.replicate(create_train_state(
        pretrained.params if pretrained else translation.init_params(model, init_key),
        optimizer, train_key), mesh)
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
    train_step = make_train_step(translation.make_loss(model, args.label_smoothing), optimizer,
                                 accum_steps=args.accum_steps,
                                 **parallel.train_step_shardings(mesh, state))
    translator = Translator(model, src_tok, tgt_tok, beam_size=args.beam_size,
                            alpha=args.alpha, batch_size=args.decode_batch_size,
                            max_source_length=args.max_length)  # longer lines: truncated

    def bleu(params: Any, pairs: list[tuple[str, str]]) -> dict[str, Any]:
        """Every process decodes everything itself, on its own copy of ``params``."""
        return translation.evaluate(translator, parallel.local_copy(params), pairs)

    manager = run.checkpoint_manager(max_to_keep=max(args.average_last, 1),
                                     best_metric="valid_bleu")
    result = fit(
        state, train_step, loader, max_steps=args.max_steps,
        epochs=None if args.max_steps else args.epochs,
        evaluate=lambda state: {"valid_bleu": bleu(ema_params_of(state), valid_pairs)["bleu"]},
        eval_every=args.eval_interval, save_every=args.save_interval, checkpoints=manager,
        resume=args.resume, place=lambda state: parallel.replicate(state, mesh),
        time_budget_min=args.time_budget_min, log_every=args.log_interval,
        to_device=lambda batch: parallel.global_batch(batch, mesh),
        count_tokens=translation.count_tokens, log=run.log,
        learning_rate=learning_rate, desc=args.model)
    source, params, valid_bleu = translation.choose_final(
        manager, result.state, args.average_last,
        lambda params: bleu(params, valid_pairs)["bleu"], run.log)
    run.save_final(result.progress.step, params, source)  # every process: a collective save
    test = bleu(params, test_pairs)
    run.write_text("test.hyp", "".join(h + "\n" for h in test["hypotheses"]))
    summary = run.summary("translation", config, result, num_params=num_params, results={
        "evaluated": source, "valid_bleu": valid_bleu, "test_bleu": test["bleu"],
        "signature": test["signature"], "test_bleu_lowercase": test["bleu_lowercase"],
        "signature_lowercase": test["signature_lowercase"],
        "num_bucket_shapes": len(loader.batch_sampler.bucket_shapes),
        "num_decode_shapes": len(translator.compiled_shapes)})
    report(run, summary, test)
    return summary


if __name__ == "__main__":
    main()
