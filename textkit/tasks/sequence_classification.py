"""Sentence and sentence-pair classification and regression with a pretrained encoder (GLUE):
``examples/finetune/classify.py``.

Examples are ``textkit.data.labelled_text.TextExamples`` from a catalogue entry (``glue_sst2``,
``glue_mrpc``, ...) or from table files (``--train-file``, TSV / CSV / JSON Lines with the
``--text-column`` / ``--pair-column`` / ``--label-column`` names). Each becomes ``input_ids``
(and ``token_type_ids``) truncated to ``--max-length`` (longest first) and a ``labels`` scalar:
the class id, or the float target with ``--regression`` (and ``glue_stsb``).

``evaluate`` gives ``accuracy`` and, for two classes, ``f1`` (of class 1, GLUE's MRPC / QQP
figure) and ``mcc`` (Matthews correlation, CoLA's); regression gives ``pearson``, ``spearman``
and ``mse``. The metric that ranks checkpoints is the dataset's GLUE figure (``--metric``).

``--pack`` packs the training examples several to a row of ``--max-length`` tokens (at most
``--max-per-row``, by default a quarter of ``--max-length``: a limit of 8 left 29 % of SST-2's
128-token rows empty; ``textkit.data.packing``), ``--batch-tokens // --max-length`` rows a batch:
one batch shape, less padding, the same loss as the examples unpacked (block-diagonal
attention, positions restarting per example: ``textkit.models.encoder``). Packed batches carry
``segment_ids``, ``position_ids`` int32 [B, T], ``example_starts`` int32 [B, K], and
``labels`` / ``weights`` / ``index`` [B, K] (weight 0 in unused slots); the logits are
[B, K, C]. Evaluation and prediction stay unpacked (buckets). Only this task packs (token
classification and question answering do not).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from textkit.batchify import PackedBatchify
from textkit.data import DataLoader, PackedSampler, get_dataset_info, toy_sentiment
from textkit.data.labelled_text import TextExamples, label_set, read_labelled
from textkit.data.packing import default_max_per_row
from textkit.errors import ConfigError
from textkit.settings import flag
from textkit.tasks.base import LossFn, Params, register_task
from textkit.tasks.encoder_task import EncoderTask, EncoderTaskConfig, model_inputs
from textkit.training.losses import cross_entropy
from textkit.training.run_dir import RunDir

__all__ = ["SequenceClassificationConfig", "SequenceClassificationTask", "classification_scores"]

_METRICS = {"glue_mrpc": "f1", "glue_qqp": "f1", "glue_cola": "mcc", "glue_stsb": "pearson"}


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), for Spearman's correlation."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), np.float64)
    ranks[order] = np.arange(len(x), dtype=np.float64)
    values, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse]


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1]) if a.std() and b.std() else 0.0


def classification_scores(predicted: np.ndarray, gold: np.ndarray, *, regression: bool,
                          num_labels: int) -> dict[str, float]:
    """Scores of ``predicted`` against ``gold`` ([N] class ids, or float targets with
    ``regression``): module docstring."""
    if regression:
        predicted, gold = predicted.astype(np.float64), gold.astype(np.float64)
        return {"pearson": _pearson(predicted, gold),
                "spearman": _pearson(_ranks(predicted), _ranks(gold)),
                "mse": float(np.mean((predicted - gold) ** 2)), "count": float(len(gold))}
    scores = {"accuracy": float(np.mean(predicted == gold)), "count": float(len(gold))}
    if num_labels == 2:
        tp = float(np.sum((predicted == 1) & (gold == 1)))
        fp = float(np.sum((predicted == 1) & (gold == 0)))
        fn = float(np.sum((predicted == 0) & (gold == 1)))
        tn = float(np.sum((predicted == 0) & (gold == 0)))
        scores["f1"] = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
        denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
        scores["mcc"] = float((tp * tn - fp * fn) / denominator) if denominator else 0.0
    return scores


@dataclasses.dataclass(frozen=True)
class SequenceClassificationConfig(EncoderTaskConfig):
    """A GLUE-style fine-tuning run (``examples/finetune/classify.py``); each field is the flag
    of the same name."""

    text_column: str = flag("sentence", "column (or JSON field) of the text in --train-file "
                            "etc.; a number for files without a header", group="data")
    pair_column: str | None = flag(None, "column of the second text (sentence-pair tasks)",
                                   group="data")
    label_column: str = flag("label", "column of the label", group="data")
    labels: tuple[str, ...] | None = flag(None, "the label set in id order, e.g. neg,pos "
                                          "(default: the training file's sorted values)",
                                          group="data")
    regression: bool = flag(False, "float targets and a mean-squared-error loss", group="data")
    metric: str | None = flag(None, "the score ranking checkpoints: accuracy, f1, mcc, "
                              "pearson, spearman (default: the dataset's GLUE figure)",
                              group="evaluation")
    toy_examples: int = flag(16000, "training examples of the generated toy data (valid gets "
                             "an eighth)", group="data")
    pack: bool = flag(False, "pack several training examples into each row of --max-length "
                      "tokens (block-diagonal attention, per-example positions: the same loss, "
                      "less padding, one batch shape); evaluation stays unpacked; "
                      "classification only", group="data")
    max_per_row: int | None = flag(None, "with --pack: at most this many examples in one row "
                                   "(a fixed number of logits slots per row; default: "
                                   "--max-length // 4)", group="data")
    runs_name: ClassVar[str] = "classify"

    def __post_init__(self):
        super().__post_init__()
        if self.max_per_row is None:
            object.__setattr__(self, "max_per_row", default_max_per_row(self.max_length))
        if self.max_per_row < 1:
            raise ConfigError(f"--max-per-row {self.max_per_row}: expected >= 1")


def _toy(split: str, size: int, seed: int) -> TextExamples:
    pairs = toy_sentiment(split, size, seed=seed)
    return TextExamples([t for t, _ in pairs], None, np.array([y for _, y in pairs], np.int32),
                        ("neg", "pos"))


@register_task
class SequenceClassificationTask(EncoderTask):
    """Sentence (pair) classification / regression with an encoder (module docstring)."""

    name = "sequence_classification"
    head = "sequence_classification"
    config_class = SequenceClassificationConfig
    toy_splits = ("train", "valid")
    eval_metric = "accuracy"
    config: SequenceClassificationConfig

    def __init__(self, config: SequenceClassificationConfig, run: RunDir,
                 log: Callable[[str], None] | None = None):
        super().__init__(config, run, log)
        self.regression = config.regression or config.dataset == "glue_stsb"
        self.label_names: list[str] = list(config.labels or ())
        self.eval_metric = config.metric or _METRICS.get(
            config.dataset, "pearson" if self.regression else "accuracy")
        pair_dataset = config.dataset != "toy" and "pair" in get_dataset_info(
            config.dataset).fields
        if config.train_file and pair_dataset and not config.pair_column:
            raise ConfigError(f"{config.dataset} is a sentence-pair task: --train-file needs "
                              "--pair-column (beside --text-column) naming its second text")

    # -------------------------------------------------------------------------------- data
    def toy(self, split: str, size: int) -> TextExamples:
        return _toy(split, size, self.config.seed + (split != "train"))

    def read_file(self, path: str, *, labelled: bool = True) -> TextExamples:
        """The examples of a table file with the configured columns; labels are checked
        against the label set (``--labels``, else the first file's sorted values)."""
        config = self.config
        if labelled and not self.regression and not self.label_names:
            self.label_names = label_set(path, config.label_column)
        return read_labelled(path, text=config.text_column, pair=config.pair_column,
                             label=config.label_column if labelled else None,
                             label_names=self.label_names, regression=self.regression)

    def num_labels(self) -> int:
        return 1 if self.regression else max(len(self.label_names), 2)

    def prepare(self, data: Mapping[str, TextExamples]) -> None:
        """The label set and the tokenizer (and checkpoint); checks that every split has the
        training split's layout (pairs or not, labels of one kind)."""
        train = data["train"]
        self.regression = train.regression
        self.label_names = list(train.label_names or self.label_names or [
            str(i) for i in range(int(train.labels.max()) + 1)])
        for split, examples in data.items():
            if (examples.pairs is None) != (train.pairs is None):
                has = "has no" if examples.pairs is None else "has"
                raise ConfigError(f"the {split} split {has} second texts, unlike the train "
                                  "split: give --pair-column for both or neither")
        self.load_checkpoint(train.texts + (train.pairs or []))
        self.log(f"{self.data_name}: " + ", ".join(
            f"{s} {len(v):,}" for s, v in data.items()) + " examples; "
            + ("regression" if self.regression else f"labels {self.label_names}")
            + (", sentence pairs" if train.pairs is not None else "")
            + f"; ranked by {self.eval_metric}")

    def loader(self, samples: Sequence[Mapping[str, Any]], *, train: bool) -> DataLoader:
        """``EncoderTask.loader``'s buckets, or with ``--pack`` (training only) packed rows:
        ``--batch-tokens // --max-length`` rows (times ``--accum-steps``) of ``--max-length``
        tokens, at most ``--max-per-row`` examples each (module docstring)."""
        config = self.config
        if not (config.pack and train):
            return super().loader(samples, train=train)
        if not samples:
            raise ConfigError("no example to batch (an empty split?)")
        model = self.build_model().config
        if model.architecture == "modernbert" and not model.first_token_head:
            raise ConfigError(f"--pack: {model.architecture} with classifier_pooling "
                              f"{model.classifier_pooling!r} averages every token of a row; "
                              "packing needs the first-token ('cls') pooling")
        rows = config.batch_tokens // config.max_length
        if rows < 1:
            raise ConfigError(f"--batch-tokens {config.batch_tokens} is below --max-length "
                              f"{config.max_length}: a packed batch would get no row")
        offset = model.pad_id + 1 if model.offset_positions else 0
        sampler = PackedSampler([len(s["input_ids"]) for s in samples], config.max_length,
                                config.max_per_row, rows * config.accum_steps,
                                shuffle=True, seed=config.seed)
        batchify = PackedBatchify(self.tokenizer.pad_id, config.max_per_row,
                                  with_token_types=self.tokenizer.with_token_types,
                                  first_position=offset,
                                  pad_position=model.pad_id if offset else 0)
        return DataLoader(samples, sampler, batchify)

    def encode(self, data: TextExamples) -> list[dict[str, Any]]:
        """One encoded example per text (pair), with its ``labels`` and ``index``."""
        encodings = self.tokenizer.encodings(data.texts, data.pairs, self.config.max_length)
        labels = data.labels if data.labels is not None else np.zeros(len(data), np.int32)
        return [{"input_ids": np.asarray(e.ids, np.int32),
                 "token_type_ids": np.asarray(e.type_ids, np.int32),
                 "labels": labels[i], "index": np.int32(i)}
                for i, e in enumerate(encodings)]

    # ------------------------------------------------------------------------------- model
    def make_loss(self, model: Any) -> LossFn:
        regression = self.regression

        def loss_fn(params: Params, batch: Mapping[str, Any], rng: jax.Array | None):
            rngs = None if rng is None else {"dropout": rng}
            logits = model.apply({"params": params}, **model_inputs(batch),
                                  deterministic=rng is None, rngs=rngs)["logits"]
            weights = batch["weights"]                       # [B] ([B, K] packed)
            tokens = jnp.sum(batch["attention_mask"] * (weights[:, None] if weights.ndim == 1
                                                        else 1))
            if regression:
                error = (logits[..., 0] - batch["labels"]) ** 2                 # like weights
                return jnp.sum(error * weights), (jnp.sum(weights),
                                                  {"input_tokens": tokens})
            loss_sum, weight_sum = cross_entropy(logits, batch["labels"], weights)
            hits = (jnp.argmax(logits, -1) == batch["labels"]).astype(jnp.float32)
            return loss_sum, (weight_sum, {"correct": jnp.sum(hits * weights),
                                           "input_tokens": tokens})

        return loss_fn

    # -------------------------------------------------------------------------- evaluation
    def logits(self, model: Any, params: Params, data: TextExamples) -> np.ndarray:
        """[N, num_labels] float32 logits of every example (the target with regression)."""
        out = np.zeros((len(data), self.num_labels()), np.float32)
        for batch, outputs in self.predictions(model, params,
                                               self.make_loader(data, train=False)):
            real = batch["weights"] > 0
            out[batch["index"][real]] = outputs["logits"][real]
        return out

    def predict(self, model: Any, params: Params, data: TextExamples) -> np.ndarray:
        """[N] predicted class ids (float targets with regression) of every example."""
        logits = self.logits(model, params, data)
        return logits[:, 0] if self.regression else logits.argmax(-1).astype(np.int32)

    def evaluate(self, model: Any, params: Params, data: TextExamples) -> dict[str, float]:
        if data.labels is None:
            raise ConfigError("evaluate needs labelled examples")
        return classification_scores(self.predict(model, params, data), data.labels,
                                     regression=self.regression, num_labels=self.num_labels())

    # ------------------------------------------------------------------------------ outputs
    def export_labels(self) -> Sequence[str] | None:
        """The label names, or what a catalogue dataset's label codes mean (SST-2's ``0``
        and ``1``: ``negative``, ``positive``) when the run read that dataset."""
        if self.regression:
            return None
        config = self.config
        if config.dataset != "toy" and not config.train_file:
            meaning = get_dataset_info(config.dataset).label_names
            if len(meaning) == len(self.label_names):
                return list(meaning)
        return self.label_names

    def read_inputs(self, path: str) -> TextExamples:
        """The texts (pairs) of ``--predict FILE`` (the configured columns; labels ignored)."""
        return self.read_file(path, labelled=False)

    def prepare_inputs(self, data: TextExamples) -> None:
        """The export's label names (``id2label``) and whether it is a regression head."""
        hf = json.loads((Path(self.config.pretrained) / "config.json").read_text("utf-8"))
        id2label = hf.get("id2label") or {}
        self.regression = hf.get("problem_type") == "regression" or int(
            hf.get("num_labels", len(id2label) or 2)) == 1
        self.label_names = [id2label.get(str(i), str(i)) for i in range(len(id2label))]
        super().prepare_inputs(data)

    predictions_file = "predictions.jsonl"

    def format_predictions(self, model: Any, params: Params,
                           data: TextExamples) -> tuple[str, int]:
        """JSON lines: per input its text(s), the predicted label (name; the value with
        regression), its ``probability`` and the ``probabilities`` of every label."""
        logits = self.logits(model, params, data)
        names = self.label_names + [str(i) for i in range(len(self.label_names),
                                                           logits.shape[1])]
        probabilities = np.asarray(jax.nn.softmax(logits, axis=-1)).tolist()
        lines = []
        for i, row in enumerate(logits):
            record: dict[str, Any] = {"text": data.texts[i]}
            if data.pairs is not None:
                record["pair"] = data.pairs[i]
            if self.regression:
                record["label"] = float(row[0])
            else:
                best = int(row.argmax())
                record["label"] = names[best]
                record["probability"] = probabilities[i][best]
                record["probabilities"] = dict(zip(names, probabilities[i]))
            lines.append(json.dumps(record, ensure_ascii=False) + "\n")
        return "".join(lines), len(lines)
