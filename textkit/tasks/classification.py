"""Sentence classification as a task: corpora, fixed-shape batches, the loss/accuracy
function, the optimizer (frozen embeddings, Kim's max-norm), evaluation and k-fold
cross-validation.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from textkit.batchify import ClassificationBatchify
from textkit.batchify.tasks import Sample
from textkit.data import (
    DataLoader,
    FixedBucketSampler,
    get_dataset,
    kfold_indices,
    toy_sentiment,
)
from textkit.data.samplers import bucket_boundaries
from textkit.models.classifier import init_classifier, trainable_mask
from textkit.precision import Policy
from textkit.training.losses import cross_entropy
from textkit.training.optim import freeze, max_norm, with_loss_scaling

__all__ = [
    "DATASETS",
    "ClassificationBatchify",
    "CrossValidation",
    "FoldResult",
    "bucket_keys",
    "cross_validate",
    "evaluate",
    "init_params",
    "load_segments",
    "make_loader",
    "make_loss",
    "optimizer",
]

DATASETS = ("toy", "mr", "sst2", "imdb")
# segment -> the named corpus's segment: mr has no split (cross-validation over "all")
_SEGMENTS = {"mr": {"all": "all"}, "sst2": {"train": "train", "test": "dev"},
             "imdb": {"train": "train", "test": "test"}}


def load_segments(dataset: str, data_dir: str | None = None, *, toy_sentences: int = 4000,
                  seed: int = 0) -> dict[str, tuple[list[str], np.ndarray]]:
    """``{segment: (texts, labels int32)}``: ``all`` for mr, else ``train`` and ``test``."""
    if dataset == "toy":
        out = {}
        for segment, size in (("train", toy_sentences), ("test", max(toy_sentences // 8, 1))):
            pairs = toy_sentiment(segment, size, seed=seed)
            out[segment] = ([t for t, _ in pairs], np.array([y for _, y in pairs], np.int32))
        return out
    out = {}
    for segment, name in _SEGMENTS[dataset].items():
        data = get_dataset(dataset, name, root=data_dir)
        if len(data.texts) == 0:
            raise ValueError(f"the {dataset} {name} split in {data_dir} holds no sentence")
        out[segment] = (data.texts, data.labels)
    return out


def bucket_keys(lengths: np.ndarray, num_buckets: int) -> list[int]:
    """Bucket upper bounds over every sample's length, rounded up to multiples of 8 (one set
    for training and evaluation, so both compile the same few shapes)."""
    bounds = bucket_boundaries(int(lengths.min()), int(lengths.max()), num_buckets)
    return sorted({int(-(-b // 8) * 8) for b in bounds.tolist()})


def make_loader(samples: Sequence[Sample], pad_id: int, batch_size: int,
                keys: Sequence[int], *, shuffle: bool, seed: int = 0,
                num_workers: int = 1) -> DataLoader:
    """A ``DataLoader`` of fixed-shape batches: ``batch_size`` rows, lengths from ``keys``
    (``bucket_keys``); partial batches keep their shape with dummy rows."""
    sampler = FixedBucketSampler([len(ids) for ids, _ in samples], batch_size,
                                 bucket_keys=keys, shuffle=shuffle, seed=seed,
                                 round_to=None, last_batch="pad")
    return DataLoader(samples, sampler, ClassificationBatchify(pad_id), num_workers=num_workers)


def make_loss(model: Any) -> Callable[..., Any]:
    """``loss_fn(params, batch, rng) -> (loss_sum, (weight_sum, {"correct": n}))`` for
    ``make_train_step`` / ``make_eval_step``: weighted cross-entropy (float32) and the weighted
    count of correct argmax predictions. Dropout is on when ``rng`` is a key."""

    def loss_fn(params: Any, batch: Mapping[str, Any], rng: jax.Array | None):
        rngs = None if rng is None else {"dropout": rng}
        logits = model.apply({"params": params}, batch["tokens"],
                             deterministic=rng is None, rngs=rngs)      # [B, C] float32
        labels, weights = batch["labels"], batch["weights"]
        loss_sum, weight_sum = cross_entropy(logits, labels, weights)
        hits = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)  # [B]
        return loss_sum, (weight_sum, {"correct": jnp.sum(hits * weights)})

    return loss_fn


def init_params(model: Any, rng: jax.Array, pretrained: np.ndarray | None = None) -> Any:
    """The classifier's params; ``pretrained`` float [vocab_size, embed_dim] fills the
    embedding tables (every mode but ``rand``, where it is refused)."""
    return init_classifier(model, rng, pretrained)


def optimizer(name: str, learning_rate: float, *, max_norm_limit: float | None = None,
              policy: Policy | str = "float32") -> optax.GradientTransformation:
    """``"adadelta"`` (rho 0.95, eps 1e-6, as Kim) or ``"adam"`` on the trainable params
    (frozen embedding tables get no updates and no state), then Kim's max-norm constraint on
    the output layer when ``max_norm_limit`` is set; dynamic loss scaling by ``policy``."""
    if name == "adadelta":
        tx = optax.adadelta(learning_rate, rho=0.95, eps=1e-6)
    elif name == "adam":
        tx = optax.adam(learning_rate)
    else:
        raise ValueError(f"optimizer must be 'adadelta' or 'adam', got {name!r}")
    tx = freeze(tx, trainable_mask)
    if max_norm_limit:
        tx = optax.chain(tx, max_norm(max_norm_limit))
    return with_loss_scaling(tx, policy)


def evaluate(eval_step: Callable, params: Any,
             batches: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Accuracy, mean loss and sample count over ``batches`` (dummy rows excluded).

    ``eval_step`` is ``make_eval_step(make_loss(model))``.
    """
    totals = None
    for batch in batches:
        metrics = eval_step(params, batch)
        totals = metrics if totals is None else jax.tree.map(jnp.add, totals, metrics)
    if totals is None:
        raise ValueError("evaluate got no batches")
    totals = jax.device_get(totals)
    count = float(totals["tokens"])
    return {"accuracy": float(totals["correct"]) / max(count, 1.0),
            "loss": float(totals["loss_sum"]) / max(count, 1.0), "count": int(count)}


@dataclasses.dataclass
class FoldResult:
    """One fold: test ``accuracy`` and ``loss`` after the last epoch, sample counts, the
    evaluation records of ``fit`` (``history``) and training+evaluation seconds."""

    fold: int
    accuracy: float
    loss: float
    train_samples: int
    test_samples: int
    history: list[dict[str, Any]]
    wall_s: float


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
