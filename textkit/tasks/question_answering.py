"""Extractive question answering with a pretrained encoder (SQuAD v1.1 / v2.0):
``examples/finetune/squad.py``.

Each question becomes one or more features: ``question + context`` windows of ``--max-length``
tokens (the question cut to ``--max-query-length`` tokens; consecutive windows share
``--doc-stride`` context tokens), with the character offsets of their context tokens. Training
targets are the token span of the first gold answer in each window (the first token, ``[CLS]`` /
``<s>``, when the answer is not inside it, and for unanswerable v2.0 questions). Prediction takes
the best span over a question's windows (``textkit.data.squad.best_answer``: ``--n-best`` starts
and ends, at most ``--max-answer-length`` tokens, no-answer against ``--null-threshold`` for
v2.0) and cuts it from the original context; ``evaluate`` scores the answers with the official
SQuAD exact match and F1 (percent).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from textkit.data.squad import Question, Window, best_answer, read_squad, squad_scores
from textkit.data.toy_spans import toy_questions
from textkit.errors import ConfigError
from textkit.settings import flag
from textkit.tasks.base import LossFn, Params, register_task
from textkit.tasks.encoder_task import EncoderTask, EncoderTaskConfig, model_inputs
from textkit.training.losses import cross_entropy
from textkit.training.run_dir import RunDir

__all__ = ["Feature", "QuestionAnsweringConfig", "QuestionAnsweringTask", "gold_span",
           "make_features"]


class Feature(NamedTuple):
    """One window of a question: ``question`` (its index), the encoding's ``input_ids`` /
    ``token_type_ids`` int32 [T], the ``window`` offsets and the gold span ``(start, end)``
    token positions (``(0, 0)``: no answer in this window)."""

    question: int
    input_ids: np.ndarray
    token_type_ids: np.ndarray
    window: Window
    span: tuple[int, int]


def gold_span(window: Window, answer_start: int, answer_end: int) -> tuple[int, int]:
    """Token positions ``(first, last)`` of the characters ``[answer_start, answer_end)`` in
    ``window``; ``(0, 0)`` when they are not all inside the window's context tokens."""
    context = np.flatnonzero(window.in_context)
    if not len(context):
        return 0, 0
    offsets = window.offsets
    if offsets[context[0], 0] > answer_start or offsets[context[-1], 1] < answer_end:
        return 0, 0
    first = context[offsets[context, 0] <= answer_start][-1]
    last = context[offsets[context, 1] >= answer_end][0]
    return int(first), int(last)


def make_features(questions: Sequence[Question], tokenizer: Any, *, max_length: int,
                  doc_stride: int, max_query_length: int) -> list[Feature]:
    """The windows of every question (module docstring), in question order."""
    texts = [q.question if len(e.ids) <= max_query_length
             else q.question[:e.offsets[max_query_length - 1][1]]
             for q, e in zip(questions, tokenizer.tokenizer.encode_batch(
                 [q.question for q in questions], add_special_tokens=False))]
    encodings = tokenizer.encodings(texts, [q.context for q in questions], max_length,
                                    truncation="only_second", stride=doc_stride)
    features = []
    for index, (question, encoding) in enumerate(zip(questions, encodings, strict=True)):
        answer = question.answers[0] if question.answers else None
        for window_encoding in [encoding, *encoding.overflowing]:
            sequence = np.array([-1 if s is None else s for s in window_encoding.sequence_ids])
            window = Window(np.asarray(window_encoding.offsets, np.int32).reshape(-1, 2),
                            sequence == 1)
            span = (0, 0) if answer is None else gold_span(
                window, answer.start, answer.start + len(answer.text))
            features.append(Feature(index, np.asarray(window_encoding.ids, np.int32),
                                    np.asarray(window_encoding.type_ids, np.int32), window,
                                    span))
    return features


@dataclasses.dataclass(frozen=True)
class QuestionAnsweringConfig(EncoderTaskConfig):
    """A SQuAD-style fine-tuning run (``examples/finetune/squad.py``); each field is the flag
    of the same name."""

    max_length: int = flag(384, "tokens per window (question + context)", group="data")
    doc_stride: int = flag(128, "context tokens shared by consecutive windows of a long "
                           "context", group="data")
    max_query_length: int = flag(64, "question tokens kept", group="data")
    n_best: int = flag(20, "best starts and ends searched per window", group="evaluation")
    max_answer_length: int = flag(30, "longest answer, in tokens", group="evaluation")
    null_threshold: float = flag(0.0, "SQuAD v2.0: answer nothing when the no-answer score "
                                 "beats the best span by more than this", group="evaluation")
    squad_v2: bool = flag(False, "questions may have no answer (SQuAD v2.0 rules; implied by "
                          "--dataset squad2.0 and by unanswerable questions in the data)",
                          group="evaluation")
    batch_tokens: int = flag(12288, "padded tokens per batch (the bucket's rows x length)",
                             group="data")
    runs_name: ClassVar[str] = "squad"
    tiny: ClassVar[Mapping[str, Any]] = {**EncoderTaskConfig.tiny, "max_length": 64,
                                         "doc_stride": 16, "batch_tokens": 512,
                                         "max_query_length": 16}

    def __post_init__(self):
        super().__post_init__()
        if not 0 <= self.doc_stride < self.max_length // 2:
            raise ConfigError(f"--doc-stride {self.doc_stride}: expected 0 <= doc_stride < "
                              f"--max-length / 2 ({self.max_length // 2})")
        if self.max_query_length + 8 > self.max_length:
            raise ConfigError(f"--max-query-length {self.max_query_length} leaves no room for "
                              f"the context in --max-length {self.max_length}")


@register_task
class QuestionAnsweringTask(EncoderTask):
    """Extractive question answering with an encoder (module docstring)."""

    name = "question_answering"
    head = "question_answering"
    config_class = QuestionAnsweringConfig
    toy_splits = ("train", "valid")
    eval_metric = "f1"
    config: QuestionAnsweringConfig

    def __init__(self, config: QuestionAnsweringConfig, run: RunDir,
                 log: Callable[[str], None] | None = None):
        super().__init__(config, run, log)
        self.with_impossible = config.squad_v2 or config.dataset == "squad2.0"
        self._features: dict[int, tuple[Any, list[Feature]]] = {}

    # -------------------------------------------------------------------------------- data
    def read_file(self, path: str) -> list[Question]:
        return read_squad(path)

    def toy(self, split: str, size: int) -> list[Question]:
        return toy_questions(split, size, self.config.seed)

    def prepare(self, data: Mapping[str, list[Question]]) -> None:
        """The tokenizer (and checkpoint); whether unanswerable questions occur (v2.0)."""
        self.with_impossible = self.with_impossible or any(
            q.impossible for questions in data.values() for q in questions)
        train = data["train"]
        self.load_checkpoint([q.question for q in train]
                             + list(dict.fromkeys(q.context for q in train)))
        self.log(f"{self.data_name}: " + ", ".join(
            f"{s} {len(v):,}" for s, v in data.items()) + " questions"
            + (" (with unanswerable ones: SQuAD v2.0 rules)" if self.with_impossible else ""))

    def features(self, questions: list[Question]) -> list[Feature]:
        """The windows of ``questions``, made once per split object."""
        key = id(questions)
        if key not in self._features or self._features[key][0] is not questions:
            config = self.config
            self._features[key] = (questions, make_features(
                questions, self.tokenizer, max_length=config.max_length,
                doc_stride=config.doc_stride, max_query_length=config.max_query_length))
        return self._features[key][1]

    def encode(self, data: list[Question]) -> list[dict[str, Any]]:
        return [{"input_ids": f.input_ids, "token_type_ids": f.token_type_ids,
                 "start_positions": np.int32(f.span[0]), "end_positions": np.int32(f.span[1]),
                 "index": np.int32(i)} for i, f in enumerate(self.features(data))]

    # ------------------------------------------------------------------------------- model
    def make_loss(self, model: Any) -> LossFn:
        def loss_fn(params: Params, batch: Mapping[str, Any], rng: jax.Array | None):
            rngs = None if rng is None else {"dropout": rng}
            out = model.apply({"params": params}, **model_inputs(batch),
                               deterministic=rng is None, rngs=rngs)
            valid = batch["attention_mask"] > 0                                   # [B, T]
            weights = batch["weights"]                                            # [B]
            start_sum, count = cross_entropy(jnp.where(valid, out["start_logits"], -1e9),
                                             batch["start_positions"], weights)
            end_sum, _ = cross_entropy(jnp.where(valid, out["end_logits"], -1e9),
                                       batch["end_positions"], weights)
            tokens = jnp.sum(batch["attention_mask"] * weights[:, None])
            return (start_sum + end_sum) / 2, (count, {"input_tokens": tokens})

        return loss_fn

    # -------------------------------------------------------------------------- evaluation
    def answers(self, model: Any, params: Params, questions: list[Question]) -> dict[str, str]:
        """``{question id: answer text}`` (``""``: no answer, SQuAD v2.0)."""
        features = self.features(questions)
        starts: list[np.ndarray | None] = [None] * len(features)
        ends: list[np.ndarray | None] = [None] * len(features)
        for batch, outputs in self.predictions(model, params,
                                               self.make_loader(questions, train=False)):
            for row in np.flatnonzero(batch["weights"] > 0):
                index, n = int(batch["index"][row]), len(features[batch["index"][row]].input_ids)
                starts[index] = outputs["start_logits"][row, :n]
                ends[index] = outputs["end_logits"][row, :n]
        by_question: dict[int, list[int]] = {}
        for i, feature in enumerate(features):
            by_question.setdefault(feature.question, []).append(i)
        config = self.config
        answers = {}
        for q, question in enumerate(questions):
            rows = by_question[q]
            answers[question.id] = best_answer(
                question.context, [features[i].window for i in rows], [starts[i] for i in rows],
                [ends[i] for i in rows], n_best=config.n_best,
                max_answer_length=config.max_answer_length,
                null_threshold=config.null_threshold if self.with_impossible else None)[0]
        return answers

    def evaluate(self, model: Any, params: Params, data: list[Question]) -> dict[str, float]:
        """Official SQuAD ``exact_match`` and ``f1`` (percent) of the predicted answers."""
        return squad_scores(self.answers(model, params, data), data)

    # ------------------------------------------------------------------------------ outputs
    def write_outputs(self, run: RunDir, model: Any, params: Params,
                      data: Mapping[str, Any]) -> None:
        """``<run>/predictions.json``: the evaluated split's answers, ``{question id: text}``
        (the official scorer's input)."""
        run.write_text(self.predictions_file,
                       _answers_json(self.answers(model, params, data["valid"])))

    def read_inputs(self, path: str) -> list[Question]:
        """The questions of a SQuAD-layout JSON file (answers optional)."""
        return read_squad(path, require_answers=False)

    predictions_file = "predictions.json"

    def format_predictions(self, model: Any, params: Params,
                           data: list[Question]) -> tuple[str, int]:
        """``{question id: answer text}`` (the official scorer's input)."""
        answers = self.answers(model, params, data)
        return _answers_json(answers), len(answers)


def _answers_json(answers: Mapping[str, str]) -> str:
    return json.dumps(answers, ensure_ascii=False, indent=1) + "\n"
