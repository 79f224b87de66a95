"""Padding waste and number of distinct batch shapes on Multi30k train (en-de), batch 64.

Lengths are whitespace tokens + 1 (eos) on each side. The padding fraction is
padding cells / all cells of the padded (src + tgt) batches; dummy rows count as padding.
A shape is (rows, src_len, tgt_len): XLA compiles one program per shape.

  random:         shuffled batches of 64, padded to the batch maximum
  fixed_bucket:   FixedBucketSampler, 16 exp-width buckets keyed on (src, tgt), exact keys
  token_budget:   the same buckets with a 4096-token budget per batch (rows = 4096 // max key)
  *_round8:       the same with padded lengths rounded up to a multiple of 8 (rounding alone
                  costs ~0.21 of padding on this corpus, so the 0.12 target needs round_to=1)

Usage: python benchmarks/bucketing.py [--data-dir ../shared/data/multi30k-en-de/tok]
Last output line: one JSON object.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from textkit.data.samplers import FixedBucketSampler

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k-en-de" / "tok"
BATCH_SIZE = 64
TOKEN_BUDGET = 4096
BUCKETS = dict(num_buckets=16, bucket_scheme="exp")


def read_lengths(path: Path) -> np.ndarray:
    """Whitespace tokens + 1 (eos) per line, int64 [num_lines]."""
    with open(path, encoding="utf-8") as f:
        return np.fromiter((len(line.split()) + 1 for line in f), np.int64)


def summarize(batches: list[tuple[int, int, int, int]]) -> dict:
    """batches: (rows, src_len, tgt_len, real_tokens) per padded batch."""
    table = np.asarray(batches, dtype=np.int64)
    cells = int((table[:, 0] * (table[:, 1] + table[:, 2])).sum())
    shapes = {tuple(row) for row in table[:, :3].tolist()}
    return {
        "pad_fraction": round(1.0 - int(table[:, 3].sum()) / cells, 4),
        "num_shapes": len(shapes),
        "num_batches": len(table),
    }


def random_batches(lengths: np.ndarray, seed: int = 0) -> dict:
    order = np.random.default_rng(seed).permutation(len(lengths))
    batches = []
    for start in range(0, len(order), BATCH_SIZE):
        chunk = lengths[order[start : start + BATCH_SIZE]]
        batches.append((len(chunk), *chunk.max(axis=0).tolist(), int(chunk.sum())))
    return summarize(batches)


def sampler_batches(lengths: np.ndarray, **kwargs) -> dict:
    sampler = FixedBucketSampler(lengths, shuffle=True, seed=0, **BUCKETS, **kwargs)
    batches = [
        (batch.shape.rows, *batch.shape.lengths, int(lengths[batch.indices].sum()))
        for batch in sampler
    ]
    result = summarize(batches)
    assert abs(result["pad_fraction"] - sampler.padding_fraction()) < 1e-4
    result["batch_sizes"] = sorted(set(sampler.bucket_batch_sizes.tolist()))
    print(sampler.stats(), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    paths = [args.data_dir / f"train.lc.norm.tok.{side}" for side in ("en", "de")]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        sys.exit(f"Multi30k files not found: {missing}; pass --data-dir")
    start = time.perf_counter()
    src, tgt = (read_lengths(p) for p in paths)
    if len(src) != len(tgt):
        sys.exit(f"{paths[0]} has {len(src)} lines but {paths[1]} has {len(tgt)}")
    lengths = np.stack([src, tgt], axis=1)
    print(f"read {len(lengths)} sentence pairs from {args.data_dir}", flush=True)

    results = {"random": random_batches(lengths)}
    setups = {
        "fixed_bucket": dict(batch_size=BATCH_SIZE, round_to=1),
        "token_budget": dict(batch_size=TOKEN_BUDGET, batch_size_unit="tokens", round_to=1),
        "fixed_bucket_round8": dict(batch_size=BATCH_SIZE, round_to=8),
        "token_budget_round8": dict(batch_size=TOKEN_BUDGET, batch_size_unit="tokens", round_to=8),
    }
    for name, kwargs in setups.items():
        print(f"--- {name}", flush=True)
        results[name] = sampler_batches(lengths, **kwargs)
    for name, result in results.items():
        print(f"{name:>20}: pad_fraction={result['pad_fraction']:.4f} "
              f"num_shapes={result['num_shapes']} num_batches={result['num_batches']}",
              flush=True)
    print(f"done in {time.perf_counter() - start:.1f}s", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
