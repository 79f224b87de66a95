"""Data-pipeline throughput on Multi30k train (en-de).

1. tokens/s through FixedBucketSampler + batchify (textkit.batchify.Pad to the bucket shape) +
   DataLoader (worker threads) over pre-numericalised ids. Tokens are real (non-padding) source
   plus target tokens of the emitted batches (whitespace tokens + eos on each side).
2. SentencePiece encode throughput: a unigram model trained in a temporary directory, then the
   whole corpus (en + de) encoded with the batched API; tokens are the pieces produced.

Usage: python benchmarks/data_pipeline.py [--epochs 5] [--num-workers 2] [--quick]
Last output line: {"tokens_per_s": X, "spm_encode_tokens_per_s": Y}
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from textkit.batchify import Seq2SeqBatchify
from textkit.data import DataLoader, FixedBucketSampler
from textkit.data.tokenizers import SentencePieceTokenizer, WhitespaceTokenizer
from textkit.vocab import Vocab

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k-en-de" / "tok"


def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def numericalise(src_lines: list[str], tgt_lines: list[str]):
    """Samples (src + eos, tgt) as lists of ids, and the (src, tgt) lengths as the sampler
    sees them (bos/eos included: ``Seq2SeqBatchify`` adds bos and eos to the target)."""
    tokenizer = WhitespaceTokenizer()
    src_tokens, tgt_tokens = tokenizer.encode(src_lines), tokenizer.encode(tgt_lines)
    src_vocab, tgt_vocab = Vocab(src_tokens), Vocab(tgt_tokens)
    src_ids, tgt_ids = src_vocab.numericalize(src_tokens), tgt_vocab.numericalize(tgt_tokens)
    samples = [(s.tolist() + [src_vocab.eos_id], t.tolist()) for s, t in zip(src_ids, tgt_ids)]
    lengths = np.array([(len(s), len(t) + 1) for s, t in samples], dtype=np.int64)
    return samples, lengths, (src_vocab.pad_id, tgt_vocab.bos_id, tgt_vocab.eos_id)


def loader_throughput(samples, lengths, special_ids, epochs: int, num_workers: int) -> float:
    """``special_ids``: (pad, bos, eos)."""
    sampler = FixedBucketSampler(lengths, 64, num_buckets=16, bucket_scheme="exp", shuffle=True)
    loader = DataLoader(samples, sampler, Seq2SeqBatchify(*special_ids),
                        num_workers=num_workers)
    print(sampler.stats(), flush=True)
    tokens = 0
    start = time.perf_counter()
    with tqdm(total=epochs * len(loader), desc="loader", unit="batch", file=sys.stdout) as bar:
        for _ in range(epochs):
            for batch in loader:
                tokens += int(batch["src_lengths"].sum() + batch["tgt_lengths"].sum())
                bar.update()
    elapsed = time.perf_counter() - start
    print(f"loader: {tokens} tokens in {elapsed:.2f}s over {epochs} epoch(s), "
          f"{num_workers} worker thread(s)", flush=True)
    return tokens / elapsed


def spm_throughput(lines: list[str], vocab_size: int) -> float:
    """Train on ``lines`` in a temporary directory, then time one batched encode of them."""
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = SentencePieceTokenizer.train(
            lines, os.path.join(tmp, "spm"), vocab_size=vocab_size,
            model_type="unigram", seed=0, num_threads=os.cpu_count(),
        )
        start = time.perf_counter()
        ids = tokenizer.encode(lines)
        elapsed = time.perf_counter() - start
    pieces = sum(map(len, ids))
    print(f"sentencepiece: {len(lines)} sentences -> {pieces} pieces in {elapsed:.2f}s "
          f"(vocab {vocab_size})", flush=True)
    return pieces / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--spm-vocab-size", type=int, default=8000)
    parser.add_argument("--quick", action="store_true",
                        help="1 epoch, 5,000 sentence pairs, SentencePiece vocab at most 1000")
    args = parser.parse_args()
    paths = [args.data_dir / f"train.lc.norm.tok.{side}" for side in ("en", "de")]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        sys.exit(f"Multi30k files not found: {missing}; pass --data-dir")
    src_lines, tgt_lines = (read_lines(p) for p in paths)
    if len(src_lines) != len(tgt_lines):
        sys.exit(f"{paths[0]} has {len(src_lines)} lines but {paths[1]} has {len(tgt_lines)}")
    epochs = args.epochs
    if args.quick:
        src_lines, tgt_lines, epochs = src_lines[:5000], tgt_lines[:5000], 1

    start = time.perf_counter()
    samples, lengths, special_ids = numericalise(src_lines, tgt_lines)
    print(f"numericalised {len(samples)} pairs in {time.perf_counter() - start:.2f}s", flush=True)
    tokens_per_s = loader_throughput(samples, lengths, special_ids, epochs, args.num_workers)
    vocab_size = min(1000, args.spm_vocab_size) if args.quick else args.spm_vocab_size
    spm_tokens_per_s = spm_throughput(src_lines + tgt_lines, vocab_size)
    print(f"tokens/s: loader {tokens_per_s:,.0f}, sentencepiece encode {spm_tokens_per_s:,.0f} "
          f"({os.cpu_count()} cores)", flush=True)
    print(json.dumps({"tokens_per_s": round(tokens_per_s),
                      "spm_encode_tokens_per_s": round(spm_tokens_per_s)}))


if __name__ == "__main__":
    main()
