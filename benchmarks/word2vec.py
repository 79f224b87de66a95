"""Word-vector training, textkit vs gensim: input words per second and the evaluation scores.

Each side trains in its own fresh process (gensim never beside JAX) on the same text, read
the same way (each line lowercased and split on whitespace), with the same settings (gensim's
names: vector_size 100, window 5, min_count 5, negative 5, sample 1e-3, alpha 0.025, epochs 5;
fastText: min_n 3, max_n 6, bucket 2,000,000; gensim with ``--workers`` threads):

  skipgram   textkit objective=skipgram        gensim Word2Vec(sg=1)
  cbow       textkit objective=cbow            gensim Word2Vec(sg=0, cbow_mean=1)
  fasttext   textkit skipgram + subwords       gensim FastText(sg=1)

Input words per second: the corpus tokens times the epochs over the training time; gensim's
is ``model.train``'s wall time (vocabulary and initial vectors made before it), textkit's is
``train_word2vec``'s wall time less its compilation (initial vectors made before it; the
compilation time is in the JSON too). Each child then scores WordSim-353 and SimLex-999
(Spearman, gensim's vocabulary rules, the pairs used) and the analogies; the fastText runs
also score every pair with the model's lookup, words outside the vocabulary by their n-gram
vectors (``subword_*``). With ``--held-out`` they train on the text without any word of the
two similarity sets, so every word of ``subword_*`` is one never seen.

Usage: python benchmarks/word2vec.py [--train-file FILE ...] [--modes skipgram,cbow,fasttext]
           [--seeds 1,2,3] [--workers 2] [--held-out] [--quick]
Default text: PTB train + Multi30k train (English, tokenised) from ../shared/data.
Last output line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
DEFAULT_FILES = (DATA / "ptb" / "ptb.train.txt",
                 DATA / "multi30k-en-de" / "tok" / "train.lc.norm.tok.en")
EVAL = DATA / "embeddings" / "eval"
SIMILARITY = ("wordsim353.tsv", "simlex999.txt")
ANALOGY = "questions-words.txt"
MODES = ("skipgram", "cbow", "fasttext")


def read_lowercased(path: str) -> list[list[str]]:
    with open(path, encoding="utf-8") as f:
        return [line.lower().split() for line in f.read().splitlines()]


def similarity_words() -> set[str]:
    words = set()
    for name in SIMILARITY:
        for line in (EVAL / name).read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                words.update(w.lower() for w in line.split("\t")[:2])
    return words


def subword_spearman(vector) -> dict[str, float]:
    """Spearman of every similarity pair scored with ``vector(word)`` (unseen words: n-gram
    vectors); a pair with a zero vector is left out."""
    from scipy.stats import spearmanr

    out = {}
    for name in SIMILARITY:
        gold, cosine = [], []
        for line in (EVAL / name).read_text(encoding="utf-8").splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            a, b, score = line.split("\t")[:3]
            u, v = vector(a.lower()), vector(b.lower())
            norm = float(np.linalg.norm(u) * np.linalg.norm(v))
            if norm > 0:
                gold.append(float(score))
                cosine.append(float(np.dot(u, v)) / norm)
        out[f"subword_{name}"] = {"spearman": float(spearmanr(gold, cosine).statistic),
                              "pairs_used": len(gold)}
    return out


def child_textkit(mode: str, path: str, settings: dict) -> dict:
    from textkit.embedding import (
        Word2VecConfig,
        build_corpus,
        evaluate_analogy,
        evaluate_similarity,
        read_analogy_questions,
        read_sentences,
        read_similarity_pairs,
        train_word2vec,
    )
    from textkit.embedding.word2vec import initial_state

    config = Word2VecConfig(objective="cbow" if mode == "cbow" else "skipgram",
                            subwords=mode == "fasttext", **settings)
    corpus = build_corpus(read_sentences(path), config.min_count)
    state = initial_state(config, len(corpus.words))
    start = time.perf_counter()
    model = train_word2vec(corpus, config, state=state)
    train_s = time.perf_counter() - start
    emb = model.embedding()
    result = {"tokens": corpus.total_tokens, "vocab": len(corpus.words), "train_s": train_s,
              "compile_s": model.compile_s,
              "words_s": corpus.total_tokens * config.epochs / (train_s - model.compile_s)}
    options = dict(restrict_vocab=300_000, case_insensitive=True)
    for name in SIMILARITY:
        pairs, gold = read_similarity_pairs(EVAL / name)
        try:
            score = evaluate_similarity(emb, pairs, gold, **options)
            result[name] = {"spearman": score.spearman, "pairs_used": score.pairs_used}
        except ValueError:  # fewer than 2 pairs in the vocabulary (a held-out run)
            result[name] = {"spearman": None, "pairs_used": 0}
    analogy = evaluate_analogy(emb, read_analogy_questions(EVAL / ANALOGY), **options)
    result[ANALOGY] = {"accuracy": analogy.accuracy if analogy.answered else None,
                       "answered": analogy.answered}
    if mode == "fasttext":
        result.update(subword_spearman(lambda w: emb[w]))
    return result


def child_gensim(mode: str, path: str, settings: dict, workers: int) -> dict:
    from gensim.models import FastText, Word2Vec

    sentences = read_lowercased(path)
    common = dict(vector_size=settings["vector_size"], window=settings["window"],
                  min_count=settings["min_count"], negative=settings["negative"],
                  sample=settings["sample"], alpha=settings["alpha"],
                  epochs=settings["epochs"], seed=settings["seed"], workers=workers,
                  sg=0 if mode == "cbow" else 1, hs=0)
    if mode == "fasttext":
        model = FastText(min_n=settings["min_n"], max_n=settings["max_n"],
                         bucket=settings["bucket"], **common)
    else:
        model = Word2Vec(cbow_mean=1, **common)
    model.build_vocab(sentences)
    tokens = sum(map(len, sentences))
    start = time.perf_counter()
    model.train(sentences, total_examples=len(sentences), epochs=settings["epochs"])
    train_s = time.perf_counter() - start
    result = {"tokens": tokens, "vocab": len(model.wv), "train_s": train_s,
              "words_s": tokens * settings["epochs"] / train_s}
    for name in SIMILARITY:
        total = sum(1 for line in (EVAL / name).read_text().splitlines()
                    if line.strip() and not line.startswith("#"))
        try:
            _, spearman, oov = model.wv.evaluate_word_pairs(EVAL / name)
            result[name] = {"spearman": float(spearman.statistic),
                            "pairs_used": round(total * (1 - oov / 100))}
        except ValueError:  # no pair in the vocabulary (a held-out or generated text)
            result[name] = {"spearman": None, "pairs_used": 0}
    score, sections = model.wv.evaluate_word_analogies(EVAL / ANALOGY)
    answered = len(sections[-1]["correct"]) + len(sections[-1]["incorrect"])
    result[ANALOGY] = {"accuracy": float(score) if answered else None,
                       "answered": answered}
    if mode == "fasttext":
        result.update(subword_spearman(lambda w: model.wv[w]))
    return result


def run_child(side: str, mode: str, path: Path, settings: dict, workers: int) -> dict:
    command = [sys.executable, __file__, "--child", side, mode, str(path),
               json.dumps(settings), str(workers)]
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{side} {mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_text(files: list[Path], target: Path, drop: set[str]) -> None:
    """The training files concatenated (lowercased), without the words of ``drop``."""
    with open(target, "w", encoding="utf-8") as out:
        for path in files:
            for line in read_lowercased(str(path)):
                out.write(" ".join(w for w in line if w not in drop) + "\n")


def generated_text(target: Path, sentences: int = 3000, seed: int = 0) -> None:
    """Two planted topics and filler words, for ``--quick``."""
    rng = np.random.default_rng(seed)
    topics = [[f"animal{i}" for i in range(20)], [f"colour{i}" for i in range(20)]]
    filler = [f"w{i}" for i in range(200)]
    with open(target, "w") as f:
        for i in range(sentences):
            words = list(rng.choice(topics[i % 2], 6)) + list(rng.choice(filler, 4))
            f.write(" ".join(words) + "\n")


def _score(result: dict) -> str:
    value = result.get("spearman", result.get("accuracy"))
    return "-" if value is None else f"{value:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-file", type=Path, nargs="*", default=list(DEFAULT_FILES))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--seeds", default="1", help="comma-separated seeds, each side")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2, help="gensim's threads")
    parser.add_argument("--held-out", action="store_true",
                        help="fastText: train without the similarity sets' words")
    parser.add_argument("--quick", action="store_true",
                        help="a generated text, 1 epoch, small vectors: a smoke test")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        side, mode, path, settings, workers = args.child
        settings = json.loads(settings)
        result = (child_textkit(mode, path, settings) if side == "textkit"
                  else child_gensim(mode, path, settings, int(workers)))
        print(json.dumps(result))
        return

    from cpu_info import cpu_info

    settings = dict(vector_size=100, window=5, min_count=5, negative=5, sample=1e-3,
                    alpha=0.025, epochs=args.epochs, min_n=3, max_n=6, bucket=2_000_000)
    modes = args.modes.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "train.txt"
        if args.quick:
            settings.update(vector_size=16, epochs=1, bucket=10_000)
            generated_text(text)
        else:
            write_text(args.train_file, text, set())
        held_out = Path(tmp) / "held_out.txt"
        if args.held_out:
            write_text([text], held_out, similarity_words())
        summary: dict = {"quick": args.quick, "workers": args.workers, "seeds": seeds,
                         "settings": settings, "held_out": args.held_out,
                         "files": [str(p) for p in args.train_file] if not args.quick else []}
        for mode in modes:
            path = held_out if args.held_out and mode == "fasttext" else text
            for side in ("textkit", "gensim"):
                runs = []
                for seed in seeds:
                    run = run_child(side, mode, path, {**settings, "seed": seed}, args.workers)
                    runs.append(run)
                    scores = " ".join(f"{k.split('.')[0]} {_score(v)}"
                                      for k, v in run.items() if isinstance(v, dict))
                    print(f"{mode:9s} {side:8s} seed {seed}: {run['words_s']:10,.0f} words/s "
                          f"(train {run['train_s']:.1f} s) {scores}", flush=True)
                summary[f"{mode}_{side}"] = runs
                summary[f"{mode}_{side}_words_s"] = statistics.median(r["words_s"] for r in runs)
                summary["tokens"] = runs[0]["tokens"]
            summary[f"{mode}_ratio"] = (summary[f"{mode}_textkit_words_s"]
                                        / summary[f"{mode}_gensim_words_s"])
            print(f"{mode}: textkit / gensim words/s = {summary[f'{mode}_ratio']:.2f}",
                  flush=True)
    summary["cpu"] = cpu_info()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
