"""Load speed and peak memory of word vectors: textkit vs gensim.

Generates a GloVe-style text file (100,000 x 300 by default, N(0, 0.5) values written with
6 decimals, seeded) and times, each in a fresh Python process (peak RSS from getrusage in that
process: VmHWM, i.e. getrusage's peak RSS without what a fork inherits; imports are excluded
from the time but included in the RSS):

  textkit_text     TokenEmbedding.from_file(path, "glove")
  gensim_text      KeyedVectors.load_word2vec_format(path, no_header=True)
  textkit_cached   TokenEmbedding.load(cache) (mmap) plus one lookup (builds the token dict)
  gensim_binary    KeyedVectors.load_word2vec_format(w2v.bin, binary=True)

Usage: python benchmarks/embedding_load.py [--rows 100000] [--dim 300] [--quick]
Last output line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CASES = ("textkit_text", "gensim_text", "textkit_cached", "gensim_binary")


def generate(path: Path, rows: int, dim: int, seed: int = 0) -> None:
    """Write the GloVe-style file (no header) atomically."""
    rng = np.random.default_rng(seed)
    tmp = path.with_suffix(".part")
    with open(tmp, "w") as f:
        for start in range(0, rows, 10000):
            block = rng.normal(0.0, 0.5, size=(min(10000, rows - start), dim))
            lines = [f"w{start + i} " + " ".join(f"{x:.6f}" for x in row)
                     for i, row in enumerate(block.tolist())]
            f.write("\n".join(lines) + "\n")
            print(f"  generated {start + len(lines):,} / {rows:,} rows", flush=True)
    tmp.replace(path)


def child(case: str, path: str) -> None:
    """Run one case in this (fresh) process and print its JSON result."""
    if case.startswith("textkit"):
        from textkit.embedding import TokenEmbedding
    else:
        from gensim.models import KeyedVectors
    start = time.perf_counter()
    if case == "textkit_text":
        count = len(TokenEmbedding.from_file(path, "glove", progress=False))
    elif case == "textkit_cached":
        emb = TokenEmbedding.load(path)
        emb["w0"]
        count = len(emb)
    elif case == "gensim_text":
        count = len(KeyedVectors.load_word2vec_format(path, binary=False, no_header=True))
    else:
        count = len(KeyedVectors.load_word2vec_format(path, binary=True))
    seconds = time.perf_counter() - start
    print(json.dumps({"case": case, "seconds": seconds, "peak_rss_mib": peak_rss_mib(),
                      "count": count}))


def peak_rss_mib() -> float:
    """This process's peak RSS. VmHWM is per address space; getrusage's ru_maxrss can carry
    the forking parent's peak across exec, so it is only the fallback."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(case: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", case, str(path)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=1, help="best of N per case")
    parser.add_argument("--quick", action="store_true", help="5,000 x 50, for a smoke test")
    parser.add_argument("--workdir", type=Path,
                        default=Path(tempfile.gettempdir()) / "textkit_embedding_bench")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.quick:
        args.rows, args.dim = 5000, 50
    args.workdir.mkdir(parents=True, exist_ok=True)
    text = args.workdir / f"glove_{args.rows}x{args.dim}.txt"
    if not text.exists():
        print(f"generating {text}", flush=True)
        generate(text, args.rows, args.dim)
    print(f"{text}: {text.stat().st_size / 2**20:.0f} MiB", flush=True)

    from textkit.embedding import TokenEmbedding

    cache = args.workdir / f"glove_{args.rows}x{args.dim}.cache"
    if not cache.exists():
        TokenEmbedding.from_file(text, "glove").save(cache)
    try:
        from gensim.models import KeyedVectors
    except ImportError:
        KeyedVectors = None
    binary = args.workdir / f"glove_{args.rows}x{args.dim}.w2v.bin"
    if KeyedVectors is not None and not binary.exists():
        KeyedVectors.load_word2vec_format(text, no_header=True).save_word2vec_format(
            binary, binary=True)

    inputs = {"textkit_text": text, "textkit_cached": cache, "gensim_text": text,
              "gensim_binary": binary}
    results = {}
    for case in CASES:
        if case.startswith("gensim") and KeyedVectors is None:
            print(f"{case}: gensim not installed, skipped", flush=True)
            continue
        runs = [run_child(case, inputs[case]) for _ in range(args.repeats)]
        best = min(runs, key=lambda r: r["seconds"])
        assert best["count"] == args.rows, best
        results[case] = best
        print(f"{case:15s} {best['seconds']:8.3f} s   peak RSS {best['peak_rss_mib']:7.1f} MiB",
              flush=True)

    summary = {"rows": args.rows, "dim": args.dim,
               "file_mib": round(text.stat().st_size / 2**20, 1)}
    for case in CASES:
        if case in results:
            summary[f"{case}_s"] = round(results[case]["seconds"], 6)
    summary["textkit_peak_rss_mib"] = round(results["textkit_text"]["peak_rss_mib"], 1)
    summary["textkit_cached_peak_rss_mib"] = round(results["textkit_cached"]["peak_rss_mib"], 1)
    if "gensim_text" in results:
        summary["gensim_peak_rss_mib"] = round(results["gensim_text"]["peak_rss_mib"], 1)
        summary["text_speedup"] = round(
            results["gensim_text"]["seconds"] / results["textkit_text"]["seconds"], 2)
        summary["cached_speedup_vs_gensim_binary"] = round(
            results["gensim_binary"]["seconds"] / results["textkit_cached"]["seconds"], 2)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
