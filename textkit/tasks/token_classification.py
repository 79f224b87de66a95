"""Token classification (NER) with a pretrained encoder: ``examples/finetune/ner.py``.

Sentences come as words with tags (CoNLL columns: a catalogue entry such as ``wnut17`` or
``conll2003``, or ``--train-file``). The words are encoded pre-tokenised (truncated to
``--max-length`` tokens); each word's tag id goes to its first sub-word and the other sub-words
and special tokens are ignored by the loss (``textkit.data.conll.align_labels``). A prediction
is the argmax at each word's first sub-word (words cut off by truncation get ``O``);
``evaluate`` counts entities as conlleval and seqeval's default mode do (precision, recall,
F1 in [0, 1]).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from textkit.data.conll import (
    IGNORE_LABEL,
    TaggedSentence,
    align_labels,
    entity_scores,
    read_conll,
    word_labels,
)
from textkit.data.toy_spans import toy_entities
from textkit.errors import ConfigError
from textkit.settings import flag
from textkit.tasks.base import LossFn, Params, register_task
from textkit.tasks.encoder_task import EncoderTask, EncoderTaskConfig, model_inputs
from textkit.training.losses import cross_entropy
from textkit.training.run_dir import RunDir

__all__ = ["TokenClassificationConfig", "TokenClassificationTask"]


@dataclasses.dataclass(frozen=True)
class TokenClassificationConfig(EncoderTaskConfig):
    """A NER fine-tuning run (``examples/finetune/ner.py``); each field is the flag of the same
    name."""

    tag_column: int = flag(-1, "column of the tag in CoNLL files (the last by default)",
                           group="data")
    toy_examples: int = flag(2000, "training sentences of the generated toy data (valid and "
                             "test get an eighth)", group="data")
    runs_name: ClassVar[str] = "ner"


@register_task
class TokenClassificationTask(EncoderTask):
    """Token classification with an encoder (module docstring)."""

    name = "token_classification"
    head = "token_classification"
    config_class = TokenClassificationConfig
    toy_splits = ("train", "valid", "test")
    eval_metric = "f1"
    config: TokenClassificationConfig

    def __init__(self, config: TokenClassificationConfig, run: RunDir,
                 log: Callable[[str], None] | None = None):
        super().__init__(config, run, log)
        self.tags: list[str] = []
        self._words: tuple[Any, list[Any]] = (None, [])

    # -------------------------------------------------------------------------------- data
    def read_file(self, path: str) -> list[TaggedSentence]:
        return read_conll(path, self.config.tag_column)

    def toy(self, split: str, size: int) -> list[TaggedSentence]:
        return toy_entities(split, size, self.config.seed)

    def num_labels(self) -> int:
        return len(self.tags)

    def prepare(self, data: Mapping[str, list[TaggedSentence]]) -> None:
        """The tag set (``O`` first, then the training tags sorted; a tag of another split
        that training lacks is an error naming it) and the tokenizer (and checkpoint)."""
        train_tags = {t for s in data["train"] for t in s.tags}
        self.tags = ["O"] + sorted(train_tags - {"O"})
        for split, sentences in data.items():
            unknown = {t for s in sentences for t in s.tags} - set(self.tags)
            if unknown:
                raise ConfigError(f"the {split} split has tags the training split lacks: "
                                  f"{sorted(unknown)} (tag set {self.tags})")
        self.load_checkpoint(" ".join(s.tokens) for s in data["train"])
        self.log(f"{self.data_name}: " + ", ".join(
            f"{s} {len(v):,}" for s, v in data.items()) + f" sentences; tags {self.tags}")

    def word_encodings(self, data: list[TaggedSentence]) -> list[Any]:
        """The tokenizer's encodings of the sentences' words (``word_ids`` map tokens back),
        made once per split object."""
        if self._words[0] is not data:
            self._words = (data, self.tokenizer.encodings(
                [s.tokens for s in data], max_length=self.config.max_length,
                is_pretokenized=True))
        return self._words[1]

    def encode(self, data: list[TaggedSentence]) -> list[dict[str, Any]]:
        ids = {t: i for i, t in enumerate(self.tags)}
        encodings = self.word_encodings(data)
        return [{"input_ids": np.asarray(e.ids, np.int32),
                 "token_type_ids": np.asarray(e.type_ids, np.int32),
                 "labels": align_labels(e.word_ids, [ids.get(t, 0) for t in s.tags]),
                 "index": np.int32(i)}
                for i, (s, e) in enumerate(zip(data, encodings, strict=True))]

    # ------------------------------------------------------------------------------- model
    def make_loss(self, model: Any) -> LossFn:
        def loss_fn(params: Params, batch: Mapping[str, Any], rng: jax.Array | None):
            rngs = None if rng is None else {"dropout": rng}
            logits = model.apply({"params": params}, **model_inputs(batch),
                                  deterministic=rng is None, rngs=rngs)["logits"]  # [B, T, C]
            labels = batch["labels"]                                        # [B, T]
            weights = (labels != IGNORE_LABEL) * batch["weights"][:, None]  # [B, T]
            loss_sum, count = cross_entropy(logits, jnp.maximum(labels, 0), weights)
            hits = (jnp.argmax(logits, -1) == labels) * weights
            tokens = jnp.sum(batch["attention_mask"] * batch["weights"][:, None])
            return loss_sum, (count, {"correct": jnp.sum(hits), "input_tokens": tokens})

        return loss_fn

    # -------------------------------------------------------------------------- evaluation
    def word_probabilities(self, model: Any, params: Params,
                           data: list[TaggedSentence]) -> list[np.ndarray]:
        """Per sentence [words, tags] float32 tag probabilities at each word's first sub-word
        (uniform for words cut off by ``--max-length``)."""
        encodings = self.word_encodings(data)
        out: list[np.ndarray] = [np.zeros((0, len(self.tags)), np.float32) for _ in data]
        for batch, outputs in self.predictions(model, params,
                                               self.make_loader(data, train=False)):
            for row in np.flatnonzero(batch["weights"] > 0):
                i = int(batch["index"][row])
                n = len(encodings[i].ids)
                logits = word_labels(encodings[i].word_ids, outputs["logits"][row, :n],
                                     len(data[i].tokens))
                out[i] = np.asarray(jax.nn.softmax(logits, axis=-1))
        return out

    def predict(self, model: Any, params: Params,
                data: list[TaggedSentence]) -> list[list[str]]:
        """The predicted tag of every word of every sentence."""
        return [[self.tags[k] for k in p.argmax(-1).tolist()]
                for p in self.word_probabilities(model, params, data)]

    def evaluate(self, model: Any, params: Params,
                 data: list[TaggedSentence]) -> dict[str, float]:
        """Entity precision / recall / F1 and token accuracy of the predicted tags."""
        predicted = self.predict(model, params, data)
        scores = entity_scores([s.tags for s in data], predicted)
        tokens = sum(len(s.tags) for s in data)
        scores["token_accuracy"] = sum(p == g for s, ps in zip(data, predicted)
                                       for p, g in zip(ps, s.tags)) / max(tokens, 1)
        return scores

    # ------------------------------------------------------------------------------ outputs
    def export_labels(self) -> Sequence[str] | None:
        return self.tags

    def read_inputs(self, path: str) -> list[TaggedSentence]:
        """Sentences to tag: CoNLL columns (a tag column is optional), one word per line."""
        sentences, words = [], []
        for line in [*Path(path).read_text(encoding="utf-8").splitlines(), ""]:
            columns = line.split()
            if columns and columns[0] != "-DOCSTART-":
                words.append(columns[0])
            elif words:
                sentences.append(TaggedSentence(words, ["O"] * len(words)))
                words = []
        if not sentences:
            raise ConfigError(f"{path}: holds no sentence (one word per line, a blank line "
                              "between sentences)")
        return sentences

    def prepare_inputs(self, data: list[TaggedSentence]) -> None:
        """The export's tag set (``id2label``)."""
        import json

        hf = json.loads((Path(self.config.pretrained) / "config.json").read_text("utf-8"))
        id2label = hf.get("id2label") or {}
        self.tags = [id2label.get(str(i), f"LABEL_{i}") for i in range(len(id2label))]
        super().prepare_inputs(data)

    predictions_file = "predictions.conll"

    def format_predictions(self, model: Any, params: Params,
                           data: list[TaggedSentence]) -> tuple[str, int]:
        """CoNLL columns: each word, its tag's probability and the predicted tag (last, as
        CoNLL readers expect), a blank line between sentences."""
        lines = []
        for sentence, probabilities in zip(data, self.word_probabilities(model, params, data)):
            best = probabilities.argmax(-1)
            lines += [f"{word}\t{probabilities[j, k]:.4f}\t{self.tags[k]}\n"
                      for j, (word, k) in enumerate(zip(sentence.tokens, best.tolist()))]
            lines.append("\n")
        return "".join(lines), len(data)
