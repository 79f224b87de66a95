"""Evaluate word vectors on similarity (Spearman) and analogy (accuracy) sets; print a table.

Usage:
  python examples/word_embeddings/evaluate.py --embedding-path glove.6B.100d.txt \\
      --similarity wordsim353.tsv simlex999.txt --analogy questions-words.txt
  python examples/word_embeddings/evaluate.py --embedding glove:glove.6B.100d ...

Words are matched case-insensitively within the first --restrict-vocab rows (gensim's defaults),
unless --case-sensitive is given.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from textkit.cli import run_main
from textkit.cli.flags import HelpFormatter
from textkit.embedding import (
    TokenEmbedding,
    create,
    evaluate_analogy,
    evaluate_similarity,
    read_analogy_questions,
    read_similarity_pairs,
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=HelpFormatter)
    model = parser.add_argument_group("model", "the vectors")
    source = model.add_mutually_exclusive_group(required=True)
    source.add_argument("--embedding-path", type=Path, help="vector file (any supported format)")
    source.add_argument("--embedding", help="registry source as KIND:NAME, e.g. glove:glove.6B.50d")
    model.add_argument("--format", default=None, help="file format (default: detect)")
    model.add_argument("--encoding-errors", default="strict",
                       help="undecodable bytes in the file: strict, replace or ignore")
    data = parser.add_argument_group("data")
    data.add_argument("--similarity", type=Path, nargs="*", default=[],
                      help="WordSim-353 / SimLex-999 style TSV files")
    data.add_argument("--analogy", type=Path, nargs="*", default=[],
                      help="Google analogy format files")
    evaluation = parser.add_argument_group("evaluation")
    evaluation.add_argument("--method", choices=["3CosAdd", "3CosMul"], default="3CosAdd",
                            help="analogy scoring")
    evaluation.add_argument("--restrict-vocab", type=int, default=300000,
                            help="match words within the first N rows of the file")
    evaluation.add_argument("--case-sensitive", action="store_true",
                            help="compare words case-sensitively")
    output = parser.add_argument_group("output")
    output.add_argument("--sections", action="store_true", help="also print analogy sections")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    start = time.perf_counter()
    if args.embedding_path is not None:
        emb = TokenEmbedding.from_file(args.embedding_path, args.format,
                                       encoding_errors=args.encoding_errors)
        name = args.embedding_path.name
    else:
        kind, _, source = args.embedding.partition(":")
        emb = create(kind, source, encoding_errors=args.encoding_errors)
        name = args.embedding
    print(f"loaded {name}: {len(emb):,} x {emb.dim} in {time.perf_counter() - start:.2f} s")
    options = dict(restrict_vocab=args.restrict_vocab, case_insensitive=not args.case_sensitive)
    rows = []
    for path in args.similarity:
        pairs, scores = read_similarity_pairs(path)
        result = evaluate_similarity(emb, pairs, scores, **options)
        rows.append((path.name, "spearman", result.spearman, result.pairs_used,
                     result.pairs_dropped))
    for path in args.analogy:
        result = evaluate_analogy(emb, read_analogy_questions(path), args.method, **options)
        rows.append((path.name, f"acc {args.method}", result.accuracy, result.answered,
                     result.skipped))
        if args.sections:
            for section, (correct, total) in result.sections.items():
                accuracy = correct / total if total else float("nan")
                rows.append((f"  {section}", "acc", accuracy, total, None))
    print(f"{'dataset':<32} {'metric':<14} {'score':>8} {'used':>7} {'dropped':>8}")
    for dataset, metric, score, used, dropped in rows:
        print(f"{dataset:<32} {metric:<14} {score:8.4f} {used:7d} "
              f"{'' if dropped is None else dropped:>8}")


if __name__ == "__main__":
    run_main(main, resumable=False)
