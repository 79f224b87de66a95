"""Train a sentence classifier (Kim's TextCNN, LSTM or BiLSTM) on word embeddings.

Datasets: ``toy`` (a generated sentiment corpus, no download: train 4,000 / test 500 by default),
``mr`` (movie-review polarity, no split: stratified k-fold cross-validation with ``--folds``),
``sst2`` (GLUE SST-2: train / dev, test labels are hidden) and ``imdb`` (train / test). Tokens
are whitespace-separated; the vocabulary holds every word of the loaded segments seen at least
``--min-freq`` times (as in Kim's setup, so test words get their pretrained vectors).
Embedding modes (Kim 2014): ``rand``, ``static``, ``non-static``, ``multichannel``; the
pretrained modes need ``--embedding-path`` (a GloVe / word2vec / fastText file) or
``--embedding-source kind:name`` (textkit's registry).

Batches come from a ``FixedBucketSampler`` with one set of bucket lengths for training and
evaluation; partial batches keep their shape with dummy rows, so each step compiles once per
bucket for the whole run (all folds). The reported accuracy of a fold is the test accuracy
after the last epoch (no model selection on test data).

Examples::

    python examples/sentiment/train.py                       # toy corpus, TextCNN-rand
    python examples/sentiment/train.py --dataset mr --data-dir ../shared/data/mr-polarity \\
        --model textcnn --mode rand --optimizer adam --lr 1e-3 --batch-size 50 --epochs 3 \\
        --max-norm 3    # the README gives its measured 10-fold accuracy
    python examples/sentiment/train.py --dataset mr --data-dir ../shared/data/mr-polarity \\
        --mode static --embedding-path glove.840B.300d.txt --run-folds 0

Writes ``<save-dir>/config.json``, ``train.log`` and ``summary.json`` (the common schema of
``RunDir.summary`` plus accuracy_mean, accuracy_std over folds (ddof=0), folds (per-fold
accuracy, sample counts, evaluation records, seconds), vocabulary and embedding coverage).
Each fold trains from scratch in a few minutes, so the recipe keeps no checkpoints: it neither
resumes nor runs on several devices.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import jax

from textkit.cli import parse_config, run_main
from textkit.tasks.word_vector_classification import (
    ClassificationConfig,
    ClassificationTask,
    CrossValidation,
    FoldResult,
    LabelledTexts,
    cross_validate,
)
from textkit.training import RunDir, create_train_state, fit, run_writers


def run_fold(task: ClassificationTask, parts: tuple[Any, ...], fold: int,
             train: LabelledTexts, test: LabelledTexts, fits: list) -> FoldResult:
    """Train fresh parameters on ``train``; the test accuracy after the last epoch. ``parts``:
    the model, optimizer, learning rate and train step that every fold shares (one compiled
    program per bucket for the whole run)."""
    model, optimizer, learning_rate, train_step = parts
    config, start = task.config, time.perf_counter()
    init_key, state_key = jax.random.split(jax.random.key(config.seed + fold))
    state = create_train_state(task.init_params(model, init_key), optimizer, state_key)
    test_loader = task.make_loader(test, train=False)
    fits.append(fit(
        state, train_step, task.make_loader(train, train=True, fold=fold), config.fit,
        evaluate=lambda state: {f"test_{k}": v for k, v in task.evaluate(
            model, state.params, test_loader).items()},
        learning_rate=learning_rate, log=task.log, desc=f"fold {fold}",
        writers=run_writers(task.run.root if "test" in task.splits
                            else task.run.root / f"fold{fold}", tensorboard=config.tensorboard)))
    final = fits[-1].progress.history[-1]
    return FoldResult(fold=fold, accuracy=final["test_accuracy"], loss=final["test_loss"],
                      train_samples=len(train.texts), test_samples=final["test_count"],
                      history=fits[-1].progress.history, wall_s=time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    config = parse_config(ClassificationConfig, argv, __doc__.splitlines()[0])
    run = RunDir.start(config.save_dir, config.runs_folder, config.record(),
                       resume=config.overwrite, check=(), reuse_flag="--overwrite")
    task = ClassificationTask(config, run)
    data = {split: task.read_split(split) for split in task.splits}
    task.prepare(data)
    model = task.build_model()
    optimizer, learning_rate = task.optimizer(0)
    parts = (model, optimizer, learning_rate, task.make_train_step(model, optimizer))
    fits: list = []
    if "test" in data:
        cv = CrossValidation([run_fold(task, parts, 0, data["train"], data["test"], fits)])
    else:                          # no test split (mr): stratified k-fold cross-validation
        train = data["train"]
        cv = cross_validate(train.labels, config.folds, lambda k, in_fold, out_fold: run_fold(
            task, parts, k, train.select(in_fold), train.select(out_fold), fits),
            seed=config.seed, only_folds=config.run_folds)
    summary = run.summary("classification", config.record(), fits[-1], num_params=sum(
        x.size for x in jax.tree_util.tree_leaves(fits[-1].state.params)), results={
        "accuracy_mean": cv.accuracy_mean, "accuracy_std": cv.accuracy_std,
        "folds": [vars(f) for f in cv.folds],
        "train_eval_s": round(sum(f.wall_s for f in cv.folds), 2), "vocab_size": len(task.vocab),
        "embedding_coverage": task.coverage, "bucket_keys": task.keys,
        "policy": config.precision})
    run.log(f"{len(cv.folds)} fold(s): accuracy {100 * cv.accuracy_mean:.2f} ± "
            f"{100 * cv.accuracy_std:.2f} %, {parts[3].num_traces} compiled "
            f"programs, wall {summary['wall_s']:.1f} s -> {run.root}")
    return summary


if __name__ == "__main__":
    run_main(main)
