"""One SST-2 fine-tuning epoch of the BERT-mini shape: textkit's recipe against transformers'
``Trainer`` (torch, CPU), epoch seconds and their ratio ``epoch_ratio`` (transformers / textkit).

Both sides read one random checkpoint of BERT-mini's shape (4 layers x 256, 4 heads, ffn 1,024,
vocabulary 30,522, ``BertForSequenceClassification``) written by textkit's ``save_pretrained``
with bert-base-uncased's tokenizer (``../shared/data/tokenizers``), and the SST-2 training
sentences (``../shared/data/glue-sst2``), truncated to ``--max-length`` tokens:

- textkit: ``examples/finetune/classify.py``'s ``main`` for one epoch with token-budget buckets
  whose ``--batch-tokens`` is chosen so that the epoch has as many steps as 32 sentences per step
  (``textkit_rows_per_step`` in the JSON: the mean sentences per step), AdamW; the epoch time
  is ``fit``'s training time (tracing and compilation of every bucket shape included,
  evaluation excluded).
- transformers: ``Trainer`` with ``per_device_train_batch_size=32``, length-grouped batches
  (``group_by_length``) and dynamic padding (``DataCollatorWithPadding``), AdamW, no
  evaluation or saving; the epoch time is its ``train_runtime``. It runs in its own process
  (``hf_finetune.py`` with ``--peer-python``), the two sides alternate round by round, and
  the figures are medians.

``--pack`` runs textkit's recipe with ``--pack`` (several sentences to a row of
``--max-length`` tokens: one batch shape, almost no padding) and ``--batch-tokens`` set to the
rows that give the same number of steps as 32 sentences per step; the Trainer is unchanged.

``--precision mixed_bfloat16`` runs both sides with bfloat16 compute and float32 weights
(textkit's ``--precision mixed_bfloat16``, the Trainer's ``bf16=True``: torch's CPU autocast).

Without ``../shared`` (or with ``--quick``) a generated corpus and WordPiece vocabulary stand in;
without torch / transformers in the peer's Python (or with ``--no-peer``) the JSON line has
``peer_skipped`` instead of the ratio. The last output line is one JSON object.

    python benchmarks/finetune.py --peer-python /tmp/hfenv/bin/python
    python benchmarks/finetune.py --quick --no-peer --rounds 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jax
import numpy as np
from cpu_info import cpu_info

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT / "examples" / "finetune"))

import classify  # noqa: E402

from textkit.data import toy_sentiment  # noqa: E402
from textkit.data.labelled_text import read_labelled  # noqa: E402
from textkit.data.packing import default_max_per_row, pack_rows  # noqa: E402
from textkit.models import Encoder, EncoderConfig  # noqa: E402
from textkit.pretrained import EncoderTokenizer, save_pretrained  # noqa: E402
from textkit.tasks.encoder_task import token_buckets, train_wordpiece  # noqa: E402

BERT_MINI = dict(hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024)
ROWS_PER_STEP = 32
PRECISIONS = ("float32", "mixed_bfloat16")


def corpus(workdir: Path, quick: bool, sentences: int | None) -> tuple[Path, EncoderTokenizer]:
    """The training TSV (SST-2's, or generated; ``valid.tsv`` beside it holds its first 64
    rows, for the recipe's closing evaluation) and the tokenizer."""
    sst2 = SHARED / "glue-sst2" / "train.tsv"
    if quick or not sst2.is_file():
        pairs = toy_sentiment("train", sentences or 400)
        rows = [(t, str(y)) for t, y in pairs]
        tokenizer = train_wordpiece([t for t, _ in rows], 1000, "bert")
    else:
        data = read_labelled(sst2, text="sentence", label="label", label_names=("0", "1"))
        rows = [(t, str(y)) for t, y in zip(data.texts, data.labels.tolist())]
        tokenizer = EncoderTokenizer.from_directory(SHARED / "tokenizers" / "bert-base-uncased",
                                                    "bert")
    rows = rows[:sentences] if sentences else rows
    path = workdir / "train.tsv"
    path.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    (workdir / "valid.tsv").write_text("sentence\tlabel\n" + "".join(
        f"{t}\t{y}\n" for t, y in rows[:64]))
    return path, tokenizer


def write_checkpoint(directory: Path, tokenizer: EncoderTokenizer, quick: bool) -> Path:
    """A random BERT-mini (``--quick``: 2 x 64) with ``tokenizer``, in transformers' layout."""
    sizes = dict(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128) if quick \
        else BERT_MINI
    config = EncoderConfig(architecture="bert", head="sequence_classification", num_labels=2,
                           vocab_size=max(len(tokenizer), 30522 if not quick else 0),
                           pad_id=tokenizer.pad_id, **sizes)
    model = Encoder(config)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), np.zeros((1, 8), np.int32))["params"]
    return save_pretrained(model, jax.tree_util.tree_map(np.asarray, params), tokenizer,
                           directory / "checkpoint")


def batch_tokens_for(lengths: np.ndarray, rows: int, num_buckets: int) -> tuple[int, float]:
    """The ``--batch-tokens`` whose epoch (the recipe's ``token_buckets``) has ``ceil(N / rows)``
    steps or fewer (the smallest such budget), and its mean rows per step."""
    target = -(-len(lengths) // rows)
    low, high = 8, 8 * int(lengths.max()) * rows
    while low < high:
        mid = (low + high) // 2
        steps = len(token_buckets(lengths, mid, num_buckets))
        low, high = (low, mid) if steps <= target else (mid + 1, high)
    return low, len(lengths) / len(token_buckets(lengths, low, num_buckets))


def packed_batch_tokens(lengths: np.ndarray, rows: int, max_length: int) -> tuple[int, float]:
    """The ``--batch-tokens`` of ``--pack`` (packed rows of ``max_length`` tokens, the recipe's
    default ``--max-per-row``) whose epoch has ``ceil(N / rows)`` steps or fewer, and its mean
    sentences per step."""
    target = -(-len(lengths) // rows)
    packed = len(pack_rows(lengths, max_length, default_max_per_row(max_length)))
    per_step = -(-packed // target)
    return per_step * max_length, len(lengths) / -(-packed // per_step)


def textkit_epoch(checkpoint: Path, train: Path, max_length: int, batch_tokens: int,
                  num_buckets: int, save_dir: Path, precision: str,
                  pack: bool) -> dict[str, float]:
    """One epoch of the recipe; its training seconds, steps and tokens."""
    shutil.rmtree(save_dir, ignore_errors=True)
    summary = classify.main((["--pack"] if pack else []) + [
        "--pretrained", str(checkpoint), "--train-file", str(train), "--precision", precision,
        "--valid-file", str(train.with_name("valid.tsv")),
        "--max-length", str(max_length), "--batch-tokens", str(batch_tokens),
        "--num-buckets", str(num_buckets), "--epochs", "1", "--lr", "2e-5", "--no-export",
        "--no-progress", "--no-tensorboard", "--no-eval-each-epoch", "--save-dir",
        str(save_dir)])
    return {"epoch_s": summary["train_s"], "steps": summary["steps"],
            "tokens_per_s": summary["tokens_per_s"]}


def peer_epoch(python: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One epoch of transformers' Trainer in its own process (``hf_finetune.py``)."""
    result = subprocess.run([python, str(Path(__file__).with_name("hf_finetune.py"))],
                            input=json.dumps(spec), capture_output=True, text=True)
    lines = result.stdout.strip().splitlines()
    if result.returncode or not lines:
        return {"error": (result.stderr or result.stdout).strip().splitlines()[-1:]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", default=None,
                        help="a Python with torch and transformers (default: this one)")
    parser.add_argument("--no-peer", action="store_true", help="time textkit only")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=None,
                        help="the first N training sentences (default: all)")
    parser.add_argument("--max-length", type=int, default=66,
                        help="the sequence cap of both sides (SST-2's longest is 66 tokens)")
    parser.add_argument("--num-buckets", type=int, default=8)
    parser.add_argument("--precision", choices=PRECISIONS, default="float32",
                        help="both sides: float32, or bfloat16 compute with float32 weights "
                             "(textkit --precision mixed_bfloat16, Trainer bf16=True)")
    parser.add_argument("--pack", action="store_true",
                        help="textkit packs several sentences into each row (classify --pack)")
    parser.add_argument("--quick", action="store_true",
                        help="a 2 x 64 model on 400 generated sentences (a smoke run)")
    args = parser.parse_args()
    print(json.dumps({"cpu": cpu_info()}), flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="textkit-finetune-bench-"))
    try:
        train, tokenizer = corpus(workdir, args.quick, args.sentences)
        checkpoint = write_checkpoint(workdir, tokenizer, args.quick)
        texts = read_labelled(train, text="sentence", label="label",
                              label_names=("0", "1")).texts
        lengths = np.array([len(e.ids) for e in tokenizer.encodings(texts, None,
                                                                  args.max_length)])
        batch_tokens, mean_rows = (
            packed_batch_tokens(lengths, ROWS_PER_STEP, args.max_length) if args.pack
            else batch_tokens_for(lengths, ROWS_PER_STEP, args.num_buckets))
        print(f"{len(texts):,} sentences, {int(lengths.sum()):,} tokens; textkit "
              f"--batch-tokens {batch_tokens} ({mean_rows:.1f} sentences per step)", flush=True)
        spec = {"checkpoint": str(checkpoint), "train": str(train),
                "max_length": args.max_length, "batch_size": ROWS_PER_STEP,
                "precision": args.precision}
        mine: list[dict[str, float]] = []
        theirs: list[dict[str, Any]] = []
        skipped = "--no-peer" if args.no_peer else None
        for round_ in range(args.rounds):
            order = ("textkit", "hf") if round_ % 2 == 0 else ("hf", "textkit")
            for side in order:
                if side == "textkit":
                    mine.append(textkit_epoch(checkpoint, train, args.max_length, batch_tokens,
                                              args.num_buckets, workdir / "run",
                                              args.precision, args.pack))
                    print(f"round {round_}: textkit {mine[-1]}", flush=True)
                elif skipped is None:
                    result = peer_epoch(args.peer_python or sys.executable, spec)
                    if "error" in result:
                        skipped = f"transformers side failed: {result['error']}"
                    else:
                        theirs.append(result)
                        print(f"round {round_}: transformers {result}", flush=True)
        out: dict[str, Any] = {
            "sentences": len(texts), "max_length": args.max_length, "precision": args.precision,
            "pack": args.pack, "batch_tokens": batch_tokens,
            "textkit_rows_per_step": round(mean_rows, 2),
            "textkit_steps": mine[0]["steps"], "rounds": args.rounds,
            "textkit_epoch_s": round(statistics.median(m["epoch_s"] for m in mine), 2),
            "quick": args.quick}
        if theirs:
            out["hf_epoch_s"] = round(statistics.median(t["epoch_s"] for t in theirs), 2)
            out["hf_steps"] = theirs[0]["steps"]
            out["epoch_ratio"] = round(out["hf_epoch_s"] / out["textkit_epoch_s"], 2)
        else:
            out["peer_skipped"] = skipped
        print(json.dumps(out), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
