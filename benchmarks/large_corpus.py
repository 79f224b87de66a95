"""A WMT-sized corpus through the NMT data path: build the token store, then stream one epoch.

1. ``generate``: a deterministic parallel corpus of ``--pairs`` (default 2,000,000) sentence
   pairs written to two files, sentence lengths drawn from Multi30k's (gamma fit: mean ~12 words
   English, ~11 German; 1-60 words), words from a Zipf-distributed 20,000-word vocabulary; the
   target is a word-by-word mapping of the source with local swaps (so it is learnable text, not
   noise). A SentencePiece BPE model (8,000 pieces) is trained on 200,000 of its sentences.
2. ``build``: ``translation.encode_corpus`` streams the files into the memory-mapped store with
   ``--workers`` encoding processes (what ``examples/nmt/train.py`` does at start-up).
3. ``epoch``: opens the store and streams one epoch of batches (``--batch-tokens`` per batch)
   through ``FixedBucketSampler`` + ``Seq2SeqBatchify`` + ``DataLoader``; tokens/s counts real
   source + target tokens of the emitted batches.
4. ``in-memory`` (with ``--compare-in-memory``): the path before the store, on the same files:
   ``ParallelTextDataset`` + ``encode_pairs`` (Python lists), then the same epoch over the lists
   (the peer of step 3: ``epoch_ratio`` = store / lists tokens per second).

Each phase runs in its own process; its peak RSS is the largest sum of the resident sets of the
phase's process and its children, sampled every 50 ms. Last line:
``{"pairs", "build_s", "build_peak_rss_mib", "epoch_tokens_per_s", "train_peak_rss_mib", ...}``.

    python benchmarks/large_corpus.py [--pairs 2000000] [--workers 2] [--compare-in-memory]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from cpu_info import cpu_info

VOCAB_WORDS, SPM_PIECES, SPM_SENTENCES = 20000, 8000, 200_000


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class PeakRSS:
    """Peak of (this process + descendants) resident memory, sampled in a thread, in MiB."""

    def __enter__(self) -> PeakRSS:
        self.peak_kib, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._take()
            self._stop.wait(0.05)

    def _take(self) -> None:
        me = os.getpid()
        total = sum(_rss_kib(p) for p in [me, *_descendants(me)])
        self.peak_kib = max(self.peak_kib, total)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._take()   # a phase shorter than one sampling interval still gets a sample

    @property
    def mib(self) -> float:
        return round(self.peak_kib / 1024, 1)


# --------------------------------------------------------------------------------- phases
def generate(work: Path, pairs: int) -> dict:
    """The corpus files (streamed in chunks) and the SentencePiece model."""
    from textkit.data import SentencePieceTokenizer

    rng = np.random.default_rng(0)
    syllables = ["ka", "lo", "mi", "ner", "sto", "ba", "re", "tu", "vin", "da", "el", "po"]
    words = np.array(["".join(rng.choice(syllables, rng.integers(1, 4))) + str(i % 7)
                      for i in range(VOCAB_WORDS)])
    mapped = np.array([w[::-1] for w in words])                    # target "translation"
    zipf = 1.0 / np.arange(1, VOCAB_WORDS + 1)
    zipf /= zipf.sum()
    start = time.perf_counter()
    sample: list[str] = []
    with open(work / "train.en", "w") as src, open(work / "train.de", "w") as tgt:
        for begin in range(0, pairs, 100_000):
            n = min(100_000, pairs - begin)
            lengths = np.clip(rng.gamma(4.0, 3.0, n).astype(int) + 1, 1, 60)
            ids = rng.choice(VOCAB_WORDS, size=int(lengths.sum()), p=zipf)
            cuts = np.cumsum(lengths)[:-1]
            src_lines, tgt_lines = [], []
            for sentence in np.split(ids, cuts):
                target = mapped[sentence]
                if len(target) > 2:
                    target[[0, 1]] = target[[1, 0]]
                src_lines.append(" ".join(words[sentence]))
                tgt_lines.append(" ".join(target[: max(1, len(target) - (len(target) > 8))]))
            src.write("\n".join(src_lines) + "\n")
            tgt.write("\n".join(tgt_lines) + "\n")
            if len(sample) < SPM_SENTENCES:
                sample += src_lines[:SPM_SENTENCES // 20] + tgt_lines[:SPM_SENTENCES // 20]
    generate_s = time.perf_counter() - start
    SentencePieceTokenizer.train(sample[:SPM_SENTENCES], work / "spm.model",
                                 vocab_size=SPM_PIECES, model_type="bpe", seed=0,
                                 hard_vocab_limit=False, verbose=False)
    return {"generate_s": round(generate_s, 1),
            "corpus_mib": round(sum((work / f).stat().st_size
                                    for f in ("train.en", "train.de")) / 2**20, 1)}


def build(work: Path, workers: int) -> dict:
    from textkit.data import ParallelLines, SentencePieceTokenizer
    from textkit.tasks import translation

    shutil.rmtree(work / "run", ignore_errors=True)       # always a fresh build
    tokenizer = SentencePieceTokenizer.load(work / "spm.model")
    with PeakRSS() as rss:
        start = time.perf_counter()
        store = translation.encode_corpus(SimpleNamespace(root=work / "run"),
                                          ParallelLines(work / "train.en", work / "train.de"),
                                          tokenizer, tokenizer, num_workers=workers)
        build_s = time.perf_counter() - start
    return {"build_s": round(build_s, 3), "build_peak_rss_mib": rss.mib,
            "store_tokens": store.num_tokens,
            "store_mib": round(sum(p.stat().st_size for p in store.directory.iterdir())
                               / 2**20, 1)}


def epoch(work: Path, batch_tokens: int) -> dict:
    from textkit.data import ParallelLines, SentencePieceTokenizer
    from textkit.tasks import translation

    tokenizer = SentencePieceTokenizer.load(work / "spm.model")
    with PeakRSS() as rss:
        start = time.perf_counter()
        store = translation.trainable(translation.encode_corpus(
            SimpleNamespace(root=work / "run"),
            ParallelLines(work / "train.en", work / "train.de"), tokenizer, tokenizer),
            max_length=128)
        loader = translation.seq2seq_loader(store, batch_tokens, pad_id=tokenizer.pad_id,
                                         bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id,
                                         num_buckets=16, seed=0, num_workers=1)
        setup_s = time.perf_counter() - start
        streamed = stream_epoch(loader)
    return {**streamed, "open_s": round(setup_s, 1), "train_peak_rss_mib": rss.mib}


def stream_epoch(loader, prefix: str = "epoch") -> dict:
    """One pass over ``loader``: real source + target tokens per second, batches, tokens."""
    tokens, batches = 0, 0
    start = time.perf_counter()
    for batch in loader:
        tokens += int(batch["src_lengths"].sum() + batch["tgt_lengths"].sum())
        batches += 1
    seconds = time.perf_counter() - start
    return {f"{prefix}_tokens_per_s": round(tokens / seconds), f"{prefix}_s": round(seconds, 3),
            f"{prefix}_batches": batches, f"{prefix}_tokens": tokens}


def in_memory(work: Path, batch_tokens: int) -> dict:
    from textkit.data import ParallelTextDataset, SentencePieceTokenizer
    from textkit.tasks import translation

    tokenizer = SentencePieceTokenizer.load(work / "spm.model")
    with PeakRSS() as rss:
        start = time.perf_counter()
        pairs = list(ParallelTextDataset(work / "train.en", work / "train.de"))
        samples = translation.encode_pairs(pairs, tokenizer, tokenizer, max_length=128)
        loader = translation.seq2seq_loader(samples, batch_tokens, pad_id=tokenizer.pad_id,
                                         bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id,
                                         num_buckets=16, seed=0, num_workers=1)
        load_s = time.perf_counter() - start
        streamed = stream_epoch(loader, prefix="in_memory_epoch")
    return {"in_memory_s": round(load_s, 3), **streamed, "in_memory_peak_rss_mib": rss.mib}


PHASES = {"generate": lambda a, w: generate(w, a.pairs),
          "build": lambda a, w: build(w, a.workers),
          "epoch": lambda a, w: epoch(w, a.batch_tokens),
          "in-memory": lambda a, w: in_memory(w, a.batch_tokens)}


def run_phase(phase: str, args: argparse.Namespace, work: Path) -> dict:
    """``phase`` in a fresh process (its own memory); its JSON result line."""
    command = [sys.executable, __file__, "--phase", phase, "--work-dir", str(work),
               "--pairs", str(args.pairs), "--workers", str(args.workers),
               "--batch-tokens", str(args.batch_tokens)]
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    print(f"{phase}: {result}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=2_000_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="encoding processes for the build")
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--work-dir", default=None, help="keep the corpus and store here")
    parser.add_argument("--compare-in-memory", action="store_true",
                        help="also time the earlier in-memory path on the same corpus")
    parser.add_argument("--phase", choices=sorted(PHASES), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(PHASES[args.phase](args, Path(args.work_dir))))
        return
    machine = cpu_info()
    print(f"cpu: {machine['cpu']}; {os.cpu_count()} cores; has {machine['features']}",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        summary: dict = {"pairs": args.pairs}
        if not (work / "spm.model").is_file():
            summary.update(run_phase("generate", args, work))
        summary.update(run_phase("build", args, work))
        summary.update(run_phase("epoch", args, work))
        if args.compare_in_memory:
            summary.update(run_phase("in-memory", args, work))
            summary["epoch_ratio"] = round(summary["epoch_tokens_per_s"]
                                           / summary["in_memory_epoch_tokens_per_s"], 2)
    summary["cpu"] = machine
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
