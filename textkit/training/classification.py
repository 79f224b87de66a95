"""Sentence classification glue: padded fixed-shape batches, the loss/accuracy function, one
fold's train-and-evaluate loop and a k-fold cross-validation driver.

Batches (dicts of numpy arrays) have fixed shapes from a ``FixedBucketSampler``:

* ``tokens``  int32 [B, T]: token ids, padded with the vocab's ``<pad>`` id;
* ``lengths`` int32 [B]: real tokens per row (0 for dummy rows);
* ``labels``  int32 [B]: class ids (0 for dummy rows);
* ``weights`` float32 [B]: 1 for real samples, 0 for the dummy rows that keep a bucket's batch
  size fixed. Loss and accuracy count only weighted rows, so evaluation runs with the training
  batch shapes and never compiles a smaller last batch.

The model is any flax module called as ``model.apply({"params": p}, tokens, deterministic=...,
rngs={"dropout": key}) -> logits float32 [B, C]`` (``textkit.models.classifier``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

from textkit.batchify import Pad, Stack
from textkit.batchify.shape import BatchShape
from textkit.data import DataLoader, FixedBucketSampler, kfold_indices
from textkit.training.losses import cross_entropy
from textkit.training.train_step import TrainState

__all__ = [
    "ClassificationBatchify",
    "ClassificationLoss",
    "CrossValidation",
    "FoldResult",
    "bucketed_loader",
    "cross_validate",
    "evaluate_classifier",
    "max_norm",
    "train_and_evaluate",
]

Sample = tuple[np.ndarray, int]  # (token ids int32 [n], label)


class ClassificationBatchify:
    """``(ids, label)`` samples -> ``{"tokens", "lengths", "labels", "weights"}`` (see module
    docstring); with a ``BatchShape`` the batch has exactly its rows and length."""

    def __init__(self, pad_id: int):
        self.pad_id = int(pad_id)
        self._pad = Pad(pad_val=self.pad_id, ret_length=True, dtype=np.int32)
        self._labels = Stack(np.int32)
        self._weights = Stack(np.float32)

    def __call__(self, samples: Sequence[Sample], shape: BatchShape | None = None
                 ) -> dict[str, np.ndarray]:
        tokens, lengths = self._pad([ids for ids, _ in samples], shape)
        return {"tokens": tokens, "lengths": lengths.astype(np.int32),
                "labels": self._labels([label for _, label in samples], shape),
                "weights": self._weights(np.ones(len(samples), np.float32), shape)}


def bucketed_loader(samples: Sequence[Sample], pad_id: int, batch_size: int,
                    bucket_keys: Sequence[int], *, shuffle: bool, seed: int = 0,
                    num_workers: int = 1) -> DataLoader:
    """A ``DataLoader`` of fixed-shape batches: ``batch_size`` rows, lengths from
    ``bucket_keys`` (shared by training and evaluation so both compile the same few shapes);
    partial batches keep their shape with dummy rows."""
    sampler = FixedBucketSampler([len(ids) for ids, _ in samples], batch_size,
                                 bucket_keys=bucket_keys, shuffle=shuffle, seed=seed,
                                 round_to=None, last_batch="pad")
    return DataLoader(samples, sampler, ClassificationBatchify(pad_id), num_workers=num_workers)


class ClassificationLoss:
    """``loss_fn(params, batch, rng) -> (loss_sum, (weight_sum, {"correct": n}))`` for
    ``make_train_step`` / ``make_eval_step``: weighted cross-entropy (float32) and the weighted
    count of correct argmax predictions. Dropout is on when ``rng`` is a key.

    ``num_traces`` counts how often jax traced it, i.e. how many programs were compiled.
    """

    def __init__(self, model: Any):
        self.model = model
        self.num_traces = 0

    def __call__(self, params: Any, batch: Mapping[str, Any], rng: jax.Array | None):
        self.num_traces += 1
        rngs = None if rng is None else {"dropout": rng}
        logits = self.model.apply({"params": params}, batch["tokens"],
                                  deterministic=rng is None, rngs=rngs)      # [B, C] float32
        labels, weights = batch["labels"], batch["weights"]
        loss_sum, weight_sum = cross_entropy(logits, labels, weights)
        hits = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)  # [B]
        return loss_sum, (weight_sum, {"correct": jnp.sum(hits * weights)})


def max_norm(limit: float, layer: str = "output") -> optax.GradientTransformation:
    """Kim's (2014) l2 constraint as the last link of an optax chain: changes the updates so
    that after ``optax.apply_updates`` every column of ``params[layer]["kernel"]`` [features,
    classes] (one output unit's weight vector) has l2 norm at most ``limit``; longer ones are
    rescaled to ``limit``. Every other leaf's update passes through unchanged."""
    if limit <= 0:
        raise ValueError(f"max-norm limit must be > 0, got {limit}")

    def project(updates: Any, params: Any) -> Any:
        if params is None:
            raise ValueError("max_norm needs params: call tx.update(grads, state, params)")

        def constrain(path, update, param):
            names = [getattr(k, "key", None) for k in path]
            if names[-2:] != [layer, "kernel"]:
                return update
            stepped = param.astype(jnp.float32) + update.astype(jnp.float32)   # [F, C]
            norms = jnp.linalg.norm(stepped, axis=0, keepdims=True)            # [1, C]
            scale = jnp.minimum(1.0, limit / jnp.maximum(norms, 1e-12))
            return (stepped * scale - param.astype(jnp.float32)).astype(update.dtype)

        return jax.tree_util.tree_map_with_path(constrain, updates, params)

    return optax.stateless(project)


def evaluate_classifier(eval_step: Callable, params: Any,
                        batches: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Accuracy, mean loss and sample count over ``batches`` (dummy rows excluded).

    ``eval_step`` is ``make_eval_step(ClassificationLoss(model))``.
    """
    totals = None
    for batch in batches:
        metrics = eval_step(params, batch)
        totals = metrics if totals is None else jax.tree.map(jnp.add, totals, metrics)
    if totals is None:
        raise ValueError("evaluate_classifier got no batches")
    totals = jax.device_get(totals)
    count = float(totals["tokens"])
    return {"accuracy": float(totals["correct"]) / max(count, 1.0),
            "loss": float(totals["loss_sum"]) / max(count, 1.0), "count": int(count)}


@dataclasses.dataclass
class FoldResult:
    """One fold: test ``accuracy`` and ``loss`` after the last epoch, sample counts, the
    per-epoch training (and optionally test) metrics with each epoch's training seconds
    (``train_s``, compilation included), and training+evaluation seconds."""

    fold: int
    accuracy: float
    loss: float
    train_samples: int
    test_samples: int
    history: list[dict[str, float]]
    wall_s: float


def train_and_evaluate(train_step: Callable, eval_step: Callable, state: TrainState,
                       train_loader: DataLoader, test_loader: DataLoader, *, epochs: int,
                       fold: int = 0, eval_every_epoch: bool = False, progress: bool = True,
                       on_epoch: Callable[[dict[str, float]], None] | None = None,
                       ) -> tuple[TrainState, FoldResult]:
    """Train ``epochs`` epochs over ``train_loader``, then evaluate on ``test_loader``.

    ``train_step``/``eval_step`` come from ``make_train_step``/``make_eval_step`` with a
    ``ClassificationLoss``; build them once and reuse them for every fold, so the programs
    compile once per bucket shape. Progress is a tqdm bar over all steps of the fold;
    ``on_epoch(record)`` receives each epoch's metrics (the last one after the test).
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    start = time.perf_counter()
    history: list[dict[str, float]] = []
    bar = tqdm(total=epochs * len(train_loader), desc=f"fold {fold}", unit="step",
               disable=not progress, leave=False)
    for epoch in range(epochs):
        train_loader.batch_sampler.set_epoch(epoch)
        epoch_start = time.perf_counter()
        sums = None
        for batch in train_loader:
            state, metrics = train_step(state, batch)
            step = {"loss_sum": metrics["loss"] * metrics["tokens"],
                    "correct": metrics["correct"], "tokens": metrics["tokens"]}
            sums = step if sums is None else jax.tree.map(jnp.add, sums, step)
            bar.update(1)
        sums = jax.device_get(sums)
        record = {"epoch": epoch + 1, "train_loss": float(sums["loss_sum"] / sums["tokens"]),
                  "train_accuracy": float(sums["correct"] / sums["tokens"]),
                  "train_s": time.perf_counter() - epoch_start}
        if eval_every_epoch or epoch + 1 == epochs:  # the result is the last epoch's
            test = evaluate_classifier(eval_step, state.params, test_loader)
            record.update(test_accuracy=test["accuracy"], test_loss=test["loss"])
        history.append(record)
        bar.set_postfix(loss=f"{record['train_loss']:.3f}",
                        acc=f"{record['train_accuracy']:.3f}")
        if on_epoch is not None:
            on_epoch(record)
    bar.close()
    return state, FoldResult(fold=fold, accuracy=test["accuracy"], loss=test["loss"],
                             train_samples=len(train_loader.dataset),
                             test_samples=test["count"], history=history,
                             wall_s=time.perf_counter() - start)


@dataclasses.dataclass
class CrossValidation:
    """Fold results with the mean and (population, ddof=0) standard deviation of accuracy."""

    folds: list[FoldResult]

    @property
    def accuracy_mean(self) -> float:
        return float(np.mean([f.accuracy for f in self.folds]))

    @property
    def accuracy_std(self) -> float:
        return float(np.std([f.accuracy for f in self.folds]))


def cross_validate(labels: Sequence[int] | np.ndarray, folds: int,
                   run_fold: Callable[[int, np.ndarray, np.ndarray], FoldResult], *,
                   seed: int = 0, only_folds: Sequence[int] | None = None) -> CrossValidation:
    """Stratified k-fold cross-validation over ``len(labels)`` samples.

    ``run_fold(k, train_idx, test_idx)`` (int64 index arrays from ``kfold_indices``: disjoint,
    covering, label proportions kept) trains and evaluates fold ``k``. ``only_folds`` runs a
    subset of the folds (e.g. ``[0]`` for a quick check); the splits do not change.
    """
    labels = np.asarray(labels)
    splits = kfold_indices(len(labels), folds, seed=seed, labels=labels)
    chosen = range(folds) if only_folds is None else list(only_folds)
    for k in chosen:
        if not 0 <= k < folds:
            raise ValueError(f"fold {k} out of range for {folds} folds")
    return CrossValidation([run_fold(k, *splits[k]) for k in chosen])
