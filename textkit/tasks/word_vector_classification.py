"""Sentence classification on word vectors (random or pretrained; TextCNN, (Bi)LSTM
classifiers) as a task, registered as ``classification``: corpora, fixed-shape batches, the
loss/accuracy function, the optimizer (frozen embeddings, Kim's max-norm), evaluation and k-fold
cross-validation. ``ClassificationTask``'s methods (the ``Task`` API) call the building blocks
here (``classifier_loader``, ``classifier_loss_fn``, ``classifier_optimizer``) with the run's
settings.

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
from typing import Any, ClassVar, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from textkit.batchify import ClassificationBatchify
from textkit.batchify.tasks import Sample
from textkit.data import (
    DataLoader,
    FixedBucketSampler,
    WhitespaceTokenizer,
    get_dataset,
    get_dataset_info,
    kfold_indices,
    toy_sentiment,
)
from textkit.data.samplers import bucket_boundaries
from textkit.embedding import TokenEmbedding
from textkit.embedding import create as create_embedding
from textkit.errors import ConfigError
from textkit.models import config_class, get_model
from textkit.models.classifier import EMBEDDING_MODES, init_classifier, trainable_mask
from textkit.precision import Policy
from textkit.settings import flag
from textkit.tasks.base import LearningRate, LossFn, Params, Task, TaskConfig, register_task
from textkit.training.loop import FitConfig
from textkit.training.losses import cross_entropy
from textkit.training.optim import freeze, max_norm, with_loss_scaling
from textkit.training.run_dir import RunDir
from textkit.training.train_step import CompiledStep, make_eval_step
from textkit.vocab import Vocab

__all__ = [
    "ClassificationBatchify",
    "ClassificationConfig",
    "ClassificationTask",
    "CrossValidation",
    "FoldResult",
    "LabelledTexts",
    "accuracy",
    "bucket_keys",
    "classifier_loader",
    "classifier_loss_fn",
    "classifier_optimizer",
    "cross_validate",
]

def bucket_keys(lengths: np.ndarray, num_buckets: int) -> list[int]:
    """Bucket upper bounds over every sample's length, rounded up to multiples of 8 (one set
    for training and evaluation, so both compile the same few shapes)."""
    bounds = bucket_boundaries(int(lengths.min()), int(lengths.max()), num_buckets)
    return sorted({int(-(-b // 8) * 8) for b in bounds.tolist()})


def classifier_loader(samples: Sequence[Sample], pad_id: int, batch_size: int,
                      keys: Sequence[int], *, shuffle: bool, seed: int = 0,
                      num_workers: int = 1) -> DataLoader:
    """A ``DataLoader`` of fixed-shape batches: ``batch_size`` rows, lengths from ``keys``
    (``bucket_keys``); partial batches keep their shape with dummy rows."""
    sampler = FixedBucketSampler([len(ids) for ids, _ in samples], batch_size,
                                 bucket_keys=keys, shuffle=shuffle, seed=seed,
                                 round_to=None, last_batch="pad")
    return DataLoader(samples, sampler, ClassificationBatchify(pad_id), num_workers=num_workers)


def classifier_loss_fn(model: nn.Module) -> LossFn:
    """``loss_fn(params, batch, rng) -> (loss_sum, (weight_sum, {"correct": n}))`` for
    ``make_train_step`` / ``make_eval_step``: weighted cross-entropy (float32) and the weighted
    count of correct argmax predictions. Dropout is on when ``rng`` is a key."""

    def loss_fn(params: Params, batch: Mapping[str, Any], rng: jax.Array | None):
        rngs = None if rng is None else {"dropout": rng}
        logits = model.apply({"params": params}, batch["tokens"],
                             deterministic=rng is None, rngs=rngs)      # [B, C] float32
        labels, weights = batch["labels"], batch["weights"]
        loss_sum, weight_sum = cross_entropy(logits, labels, weights)
        hits = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)  # [B]
        return loss_sum, (weight_sum, {"correct": jnp.sum(hits * weights)})

    return loss_fn


def classifier_optimizer(name: str, learning_rate: float, *, max_norm_limit: float | None = None,
                         policy: Policy | str = "float32",
                         ) -> tuple[optax.GradientTransformation, LearningRate]:
    """``(optimizer, learning_rate)``: ``"adadelta"`` (rho 0.95, eps 1e-6, as Kim) or
    ``"adam"`` on the trainable params (frozen embedding tables get no updates and no state),
    then Kim's max-norm constraint on the output layer when ``max_norm_limit`` is set; dynamic
    loss scaling by ``policy``. The rate is constant: ``learning_rate(state)`` returns it."""
    if name == "adadelta":
        tx = optax.adadelta(learning_rate, rho=0.95, eps=1e-6)
    elif name == "adam":
        tx = optax.adam(learning_rate)
    else:
        raise ValueError(f"optimizer must be 'adadelta' or 'adam', got {name!r}")
    tx = freeze(tx, trainable_mask)
    if max_norm_limit:
        tx = optax.chain(tx, max_norm(max_norm_limit))
    return with_loss_scaling(tx, policy), lambda state: learning_rate


def accuracy(eval_step: Callable, params: Params,
             batches: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Accuracy, mean loss and sample count over ``batches`` (dummy rows excluded).

    ``eval_step`` is ``make_eval_step(classifier_loss_fn(model))``.
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


# ------------------------------------------------------------------------------------ the task
class LabelledTexts(NamedTuple):
    """A classification split: ``texts`` and their class ids ``labels`` int32 [N]."""

    texts: list[str]
    labels: np.ndarray

    def select(self, indices: Sequence[int] | np.ndarray) -> LabelledTexts:
        """The examples at ``indices`` (e.g. one cross-validation fold)."""
        return LabelledTexts([self.texts[i] for i in indices], self.labels[np.asarray(indices)])


@dataclasses.dataclass(frozen=True)
class ClassificationConfig(TaskConfig):
    """A sentence-classification run (``examples/sentiment/train.py``). Each field is the
    recipe flag of the same name (``max_norm`` is ``--max-norm``, ``precision`` is
    ``--precision``). ``lr`` left unset is the optimizer's default (adadelta 1.0, adam 1e-3)."""

    model: str = flag("textcnn", "a classifier preset (textkit.models.list_models"
                      "('classification'))", group="model")
    toy_sentences: int = flag(4000, "training sentences of the toy corpus (test gets an "
                              "eighth)", group="data")
    folds: int = flag(10, "cross-validation folds (datasets without a test split: mr)",
                      group="evaluation")
    run_folds: tuple[int, ...] | None = flag(None, "comma-separated subset of folds to run, "
                                             "e.g. 0 (the splits stay those of --folds)",
                                             group="evaluation")
    mode: str = flag("rand", "embedding mode (Kim 2014)", group="model",
                     choices=EMBEDDING_MODES)
    embedding_path: str | None = flag(None, "pretrained vector file (format detected)",
                                      group="model")
    embedding_source: str | None = flag(None, "pretrained vectors from the registry, "
                                        "KIND:NAME, e.g. glove:glove.6B.100d", group="model")
    embedding_root: str | None = flag(None, "folder for registry vector files", group="model")
    embed_dim: int = flag(300, "embedding size for --mode rand", group="model")
    dropout: float = flag(0.5, "dropout rate of the classifier", group="model")
    min_freq: int = flag(1, "words seen fewer times map to <unk>", group="data")
    max_length: int | None = flag(None, "truncate sentences to this many tokens", group="data")
    num_buckets: int = flag(8, "length buckets (one compiled program each)", group="data")
    batch_size: int = flag(50, "sentences per batch", group="data")
    optimizer: str = flag("adadelta", "adadelta (rho 0.95, eps 1e-6, as Kim) or adam",
                          group="training", choices=("adadelta", "adam"))
    lr: float | None = flag(None, "learning rate (default: adadelta 1.0, adam 1e-3)",
                            group="training")
    max_norm: float | None = flag(
        None, "Kim's l2 constraint: rescale each output unit's weight vector to at most this "
        "norm after every update (Kim: 3); off by default", group="training")
    runs_name = "sentiment"
    overwrite: bool = flag(False, "replace the run already in --save-dir (it keeps no "
                           "checkpoints)", group="output")
    fit: FitConfig = FitConfig(epochs=10)

    tiny: ClassVar[Mapping[str, Any]] = {"toy_sentences": 64, "batch_size": 8, "num_buckets": 2,
                                         "embed_dim": 16}

    def __post_init__(self):
        super().__post_init__()
        if self.lr is None:
            object.__setattr__(self, "lr", {"adadelta": 1.0, "adam": 1e-3}[self.optimizer])
        pretrained = self.embedding_path or self.embedding_source
        if self.embedding_path and self.embedding_source:
            raise ConfigError("give --embedding-path or --embedding-source, not both")
        if (self.mode == "rand") == bool(pretrained):
            raise ConfigError(f"--mode {self.mode} " + (
                "takes no pretrained vectors" if pretrained
                else "needs --embedding-path or --embedding-source"))
        if self.embedding_source and ":" not in self.embedding_source:
            raise ConfigError(f"--embedding-source {self.embedding_source!r}: expected "
                              "KIND:NAME")
        if self.fit.resume:
            raise ConfigError("classification keeps no checkpoints: it cannot --resume "
                              "(--overwrite replaces a finished run)")


@register_task
class ClassificationTask(Task):
    """Sentence classification with any model of the ``classification`` family called as
    ``model.apply({"params": p}, tokens, deterministic=...) -> logits [B, C]``: whitespace
    tokens, a vocabulary of every loaded split (Kim's setup, so test words get their
    pretrained vectors), optional pretrained vectors, one set of bucket lengths for training
    and evaluation (``evaluate`` -> ``{"accuracy", "loss", "count"}``). A dataset without a
    test split (mr) is cross-validated (``cross_validate``)."""

    name = "classification"
    config_class = ClassificationConfig
    toy_splits = ("train", "test")
    eval_metric = "accuracy"
    config: ClassificationConfig

    def __init__(self, config: ClassificationConfig, run: RunDir,
                 log: Callable[[str], None] | None = None):
        super().__init__(config, run, log)
        self.vocab: Vocab | None = None
        self.keys: list[int] = []
        self.embedding_matrix: np.ndarray | None = None
        self.coverage: dict[str, int] | None = None
        self.num_classes = 2
        self._eval_steps: dict[int, CompiledStep] = {}

    def read_split(self, split: str) -> LabelledTexts:
        config = self.config
        if config.dataset == "toy":
            size = config.toy_sentences if split == "train" else max(config.toy_sentences // 8, 1)
            pairs = toy_sentiment(split, size, seed=config.seed)
            return LabelledTexts([t for t, _ in pairs],
                                 np.array([y for _, y in pairs], np.int32))
        segment = get_dataset_info(config.dataset).splits[split]
        data = get_dataset(config.dataset, segment, root=config.data_dir)
        if len(data.texts) == 0:
            raise ConfigError(f"the {config.dataset} {segment} split in {config.data_dir} "
                              "holds no sentence")
        return LabelledTexts(list(data.texts), np.asarray(data.labels, np.int32))

    def tokens(self, data: LabelledTexts) -> list[list[str]]:
        """Whitespace tokens of every text, truncated to ``max_length``."""
        tokens = WhitespaceTokenizer().encode(data.texts)
        limit = self.config.max_length
        return [t[:limit] for t in tokens] if limit else tokens

    def prepare(self, data: Mapping[str, LabelledTexts]) -> None:
        """The vocabulary of every split, the bucket lengths, the class count and (modes
        other than ``rand``) the pretrained embedding matrix for the vocabulary."""
        config = self.config
        tokens = [t for split in data.values() for t in self.tokens(split)]
        self.vocab = Vocab(tokens, min_freq=config.min_freq, bos_token=None, eos_token=None)
        lengths = np.array([len(t) for t in tokens])
        self.keys = bucket_keys(lengths, config.num_buckets)
        self.num_classes = int(max(int(split.labels.max()) for split in data.values())) + 1
        self.log(f"{config.dataset}: " + ", ".join(
            f"{s} {len(v.texts):,}" for s, v in data.items()) + f" sentences; vocabulary "
            f"{len(self.vocab):,}; lengths {lengths.min()}-{lengths.max()}; bucket keys "
            f"{self.keys}")
        if config.mode != "rand":
            embedding = self.load_embedding()
            found = embedding.for_vocab(self.vocab, unknown="normal")
            self.embedding_matrix = found.matrix
            self.coverage = {"found": found.found, "vocab": len(self.vocab),
                             "dim": embedding.dim}
            self.log(f"pretrained vectors ({len(embedding):,} x {embedding.dim}) cover "
                     f"{found.found:,} of {len(self.vocab):,} vocab tokens; the others start "
                     "from N(0, std of the vectors)")

    def load_embedding(self) -> TokenEmbedding:
        """The vectors of ``--embedding-path`` or ``--embedding-source``."""
        config = self.config
        if config.embedding_path:
            return TokenEmbedding.from_file(config.embedding_path, encoding_errors="replace")
        kind, _, name = config.embedding_source.partition(":")
        return create_embedding(kind, name, root=config.embedding_root,
                                encoding_errors="replace")

    def samples(self, data: LabelledTexts) -> list[Sample]:
        """``(ids, label)`` of every example."""
        return list(zip(self.vocab.numericalize(self.tokens(data)), data.labels.tolist()))

    def make_loader(self, data: LabelledTexts, *, train: bool, fold: int = 0) -> DataLoader:
        """Batches of ``batch_size`` rows at the bucket lengths (dummy rows keep a partial
        batch's shape); cross-validation fold ``fold`` shuffles with seed ``seed + fold``."""
        config = self.config
        return classifier_loader(self.samples(data), self.vocab.pad_id, config.batch_size,
                                 self.keys, shuffle=train, seed=config.seed + fold)

    def build_model(self) -> nn.Module:
        """The preset for the vocabulary, class count and policy, with ``embed_dim`` (the
        vectors' size in pretrained modes), ``mode`` and ``dropout`` where its config has
        those fields, then ``--model-overrides``."""
        config = self.config
        fields = {f.name for f in dataclasses.fields(config_class(config.model))}
        embed_dim = (self.embedding_matrix.shape[1] if self.embedding_matrix is not None
                     else config.embed_dim)
        optional = {"embed_dim": embed_dim, "mode": config.mode, "dropout": config.dropout}
        return get_model(config.model, vocab_size=len(self.vocab),
                         num_classes=self.num_classes, pad_id=self.vocab.pad_id,
                         policy=config.precision,
                         **{**{k: v for k, v in optional.items() if k in fields},
                            **config.overrides})

    def init_params(self, model: nn.Module, rng: jax.Array) -> Params:
        """The classifier's params, the embedding tables filled with the pretrained vectors
        (every mode but ``rand``)."""
        return init_classifier(model, rng, self.embedding_matrix)

    def make_loss(self, model: nn.Module) -> LossFn:
        return classifier_loss_fn(model)

    def optimizer(self, total_steps: int) -> tuple[optax.GradientTransformation, LearningRate]:
        config = self.config
        return classifier_optimizer(config.optimizer, config.lr, policy=config.precision,
                                    max_norm_limit=config.max_norm)

    def evaluate(self, model: nn.Module, params: Params,
                 data: LabelledTexts | DataLoader) -> dict[str, float]:
        """Accuracy, mean loss and count over ``data`` (a split, or its evaluation loader)."""
        if id(model) not in self._eval_steps:
            self._eval_steps[id(model)] = make_eval_step(self.make_loss(model))
        batches = data if isinstance(data, DataLoader) else self.make_loader(data, train=False)
        return accuracy(self._eval_steps[id(model)], params, batches)
