"""``textkit-word2vec``: train word vectors (skip-gram or CBOW, negative sampling; fastText
subwords) on a text file -- the recipe ``examples/word_embeddings/train.py`` runs.

The text is read one sentence per line, lowercased (``--no-lowercase`` keeps the case) and
split on whitespace, as gensim's ``LineSentence`` reads the same lowercased file. The settings
are gensim's (``textkit.embedding.Word2VecConfig``: ``--vector-size``, ``--window``,
``--min-count``, ``--negative``, ``--sample``, ``--epochs``, ``--alpha``, ``--min-n``,
``--max-n``, ``--bucket``; ``--subwords`` for fastText's character n-grams).

Examples::

    python examples/word_embeddings/train.py --train-file ../shared/data/ptb/ptb.train.txt \\
        --objective skipgram --save-dir runs/w2v_ptb
    python examples/word_embeddings/train.py --train-file text.txt --objective cbow \\
        --subwords --save-dir runs/ft_text --resume     # continue after the last epoch saved

Writes to ``--save-dir``: ``config.json``, ``train.log``, ``vectors.txt`` (word2vec text),
``vectors.bin`` (word2vec C binary), ``embedding/`` (``TokenEmbedding.save``'s folder; with
``--subwords`` it holds the n-gram rows, so ``TokenEmbedding.load`` gives unseen words
vectors), ``checkpoints/epoch-N.npz`` (the matrices after the last finished epoch: ``--resume``
continues from it) and ``summary.json`` (words/s, loss per epoch, and the scores on the
similarity and analogy sets of ``--eval-dir``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from textkit.cli import run_main
from textkit.cli.flags import parse_config
from textkit.embedding import (
    EpochReport,
    TokenEmbedding,
    Word2VecConfig,
    Word2VecState,
    build_corpus,
    evaluate_analogy,
    evaluate_similarity,
    load_state,
    read_analogy_questions,
    read_sentences,
    read_similarity_pairs,
    save_state,
    train_word2vec,
    write_word2vec_binary,
    write_word2vec_text,
)
from textkit.errors import ConfigError
from textkit.settings import flag
from textkit.training import RunDir

SIMILARITY_SETS = ("wordsim353.tsv", "simlex999.txt")
ANALOGY_SET = "questions-words.txt"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The recipe's flags: the data, the output and gensim's training settings."""

    train_file: str = flag("", "the training text, one sentence per line", group="data")
    lowercase: bool = flag(True, "lowercase the text before splitting it on whitespace",
                           group="data")
    eval_dir: str = flag("../shared/data/embeddings/eval", "folder with wordsim353.tsv, "
                         "simlex999.txt and questions-words.txt, scored at the end ('' : "
                         "no scoring)", group="evaluation")
    save_dir: str = flag("", "the run directory (required)", group="output")
    resume: bool = flag(False, "continue the run in --save-dir from its last finished epoch",
                        group="output")
    model: Word2VecConfig = dataclasses.field(default_factory=Word2VecConfig)

    def record(self) -> dict[str, Any]:
        """The settings ``config.json`` keeps (paths absolute, ``resume`` left out)."""
        record = dataclasses.asdict(self)
        record.pop("resume")
        for name in ("train_file", "eval_dir", "save_dir"):
            record[name] = os.path.abspath(record[name]) if record[name] else ""
        return record


def _check(config: TrainConfig) -> None:
    if not config.train_file:
        raise ConfigError("--train-file is required: a text file, one sentence per line")
    if not config.save_dir:
        raise ConfigError("--save-dir is required: the folder the vectors are written to")
    if config.eval_dir:
        missing = [name for name in (*SIMILARITY_SETS, ANALOGY_SET)
                   if not (Path(config.eval_dir) / name).is_file()]
        if missing:
            raise ConfigError(f"--eval-dir {config.eval_dir}: {missing} not found (expected "
                              "the evaluation sets there; --eval-dir '' skips scoring)")


def _last_checkpoint(run: RunDir) -> Path | None:
    files = sorted(run.checkpoints.glob("epoch-*.npz"),
                   key=lambda p: int(p.stem.removeprefix("epoch-")))
    return files[-1] if files else None


def evaluate(emb: TokenEmbedding, eval_dir: Path) -> dict[str, Any]:
    """Spearman on the similarity sets and 3CosAdd accuracy on the analogies, with gensim's
    vocabulary rules (first 300,000 rows, case-insensitive), and the pairs covered."""
    options = dict(restrict_vocab=300_000, case_insensitive=True)
    scores: dict[str, Any] = {}
    for name in SIMILARITY_SETS:
        pairs, gold = read_similarity_pairs(eval_dir / name)
        result = evaluate_similarity(emb, pairs, gold, **options)
        scores[name] = {"spearman": result.spearman, "pairs_used": result.pairs_used,
                        "pairs": len(pairs)}
    result = evaluate_analogy(emb, read_analogy_questions(eval_dir / ANALOGY_SET), **options)
    scores[ANALOGY_SET] = {"accuracy": result.accuracy, "answered": result.answered,
                           "questions": result.answered + result.skipped}
    return scores


def train(argv: Sequence[str] | None = None, *, prog: str | None = None) -> dict[str, Any]:
    """Run the recipe (module docstring) with the command line ``argv``; the summary."""
    config = parse_config(TrainConfig, argv, "Train word vectors on a text file.", prog=prog)
    _check(config)
    run = RunDir.start(config.save_dir, "runs/word_embeddings", config.record(),
                       resume=config.resume)
    start = time.perf_counter()
    corpus = build_corpus(read_sentences(config.train_file, config.lowercase),
                          config.model.min_count, source=f"--train-file {config.train_file}")
    run.log(f"corpus: {corpus.total_tokens:,} tokens, vocabulary {len(corpus.words):,} words "
            f"(min_count {config.model.min_count}), read in {time.perf_counter() - start:.1f} s")
    checkpoint = _last_checkpoint(run) if config.resume else None
    state = load_state(checkpoint, config.model, len(corpus.words)) if checkpoint else None
    if state is not None:
        run.log(f"resuming after epoch {state.epochs_done} ({checkpoint})")
    epochs: list[dict[str, float]] = []

    def on_epoch(report: EpochReport, state: Word2VecState) -> None:
        previous = _last_checkpoint(run)
        save_state(run.checkpoints / f"epoch-{report.epoch}.npz", state)
        if previous is not None and previous.name != f"epoch-{report.epoch}.npz":
            previous.unlink()
        epochs.append(dataclasses.asdict(report))
        run.log(f"epoch {report.epoch}/{config.model.epochs}: {report.words_per_s:,.0f} "
                f"words/s, loss {report.loss:.4f}, alpha {report.alpha:.5f}, "
                f"{report.seconds:.1f} s")

    model = train_word2vec(corpus, config.model, state=state, on_epoch=on_epoch)
    emb = model.embedding()
    save = Path(config.save_dir)
    write_word2vec_text(save / "vectors.txt", emb.idx_to_token, emb.idx_to_vec)
    write_word2vec_binary(save / "vectors.bin", emb.idx_to_token, emb.idx_to_vec)
    emb.save(save / "embedding")
    scores = evaluate(emb, Path(config.eval_dir)) if config.eval_dir else {}
    summary = run.summary("word_embeddings", config.record(), None,
                          num_params=model.inputs.size + model.outputs.size, results={
                              "vocab_size": len(corpus.words),
                              "corpus_tokens": corpus.total_tokens,
                              "compile_s": model.compile_s, "epoch_reports": epochs,
                              "scores": scores})
    train_s = sum(e["seconds"] for e in epochs)
    words_per_s = corpus.total_tokens * len(epochs) / train_s if train_s else 0.0
    line = ", ".join(f"{name} {value.get('spearman', value.get('accuracy')):.4f} "
                     f"({value.get('pairs_used', value.get('answered'))} used)"
                     for name, value in scores.items())
    run.log(f"{config.model.objective}{' + subwords' if config.model.subwords else ''}: "
            f"{len(corpus.words):,} words x {config.model.vector_size}, {len(epochs)} epoch(s) "
            f"at {words_per_s:,.0f} words/s{'; ' + line if line else ''}; "
            f"wall {summary['wall_s']:.1f} s -> {save}")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """``textkit-word2vec [flags]``: ``train``; a ``TextkitError`` exits with status 2 and its
    message."""
    run_main(lambda: train(argv, prog="textkit-word2vec"))
    return 0
