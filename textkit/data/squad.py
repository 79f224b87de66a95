"""Extractive question answering data (SQuAD v1.1 / v2.0): reading, the official EM / F1, and
the span search that turns start / end scores into answer texts. Jax-free.

``read_squad(path)`` checks every answer against its context (``answer_start`` must point at
the answer text) and names the question id of the first that does not. ``squad_scores`` is the
official evaluation script's definition: answers and predictions normalised (lowercase,
punctuation removed, the articles a / an / the removed, whitespace collapsed); exact match and
token-overlap F1 are each the maximum over a question's gold answers, averaged over the
questions, in percent. For SQuAD v2.0 an unanswerable question's gold answer is the empty string
and an empty prediction says "no answer".

``best_answer`` searches the windows of one question (features made with the tokenizer's
character offsets) for the highest ``start + end`` score of a span inside the context, at most
``max_answer_length`` tokens long, among the ``n_best`` best starts and ends.
"""

from __future__ import annotations

import collections
import json
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from textkit.errors import TextkitError

__all__ = [
    "Answer", "Question", "SquadError", "Window", "best_answer", "exact_match", "f1_score",
    "normalize_answer", "read_squad", "squad_scores",
]


class SquadError(TextkitError, ValueError):
    """A SQuAD file that does not follow the format (named: file, question id)."""


class Answer(NamedTuple):
    """A gold answer: its ``text`` and the character offset ``start`` in the context."""

    text: str
    start: int


class Question(NamedTuple):
    """One question with its ``context`` paragraph and gold ``answers`` (empty for a v2.0
    question without an answer, ``impossible`` then True)."""

    id: str
    question: str
    context: str
    answers: tuple[Answer, ...]
    impossible: bool = False


def read_squad(path: str | Path, *, require_answers: bool = True) -> list[Question]:
    """Every question of a SQuAD v1.1 / v2.0 JSON file (``data`` -> ``paragraphs`` -> ``qas``),
    in file order. Raises ``SquadError`` naming the file and question id for a missing field, an
    answer whose ``answer_start`` does not point at its text, a duplicate id, or (with
    ``require_answers``) a question without answers that is not marked ``is_impossible``."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SquadError(f"{path}: not a readable SQuAD JSON file ({err})") from err
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise SquadError(f"{path}: expected a JSON object with a 'data' list (SQuAD layout)")
    questions: list[Question] = []
    seen: set[str] = set()
    for article in document["data"]:
        for paragraph in article.get("paragraphs", []):
            context = paragraph.get("context")
            if not isinstance(context, str):
                raise SquadError(f"{path}: a paragraph of {article.get('title')!r} has no "
                                 "'context' string")
            for qa in paragraph.get("qas", []):
                questions.append(_question(path, qa, context, require_answers))
                if questions[-1].id in seen:
                    raise SquadError(f"{path}: question id {questions[-1].id!r} occurs twice")
                seen.add(questions[-1].id)
    if not questions:
        raise SquadError(f"{path}: holds no question")
    return questions


def _question(path: Path, qa: Mapping[str, Any], context: str,
              require_answers: bool) -> Question:
    qid = qa.get("id")
    if not isinstance(qid, str) or not isinstance(qa.get("question"), str):
        raise SquadError(f"{path}: a question has no 'id' or 'question' string: {qa!r:.200}")
    impossible = bool(qa.get("is_impossible", False))
    answers = []
    for answer in qa.get("answers", []):
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or not isinstance(start, int):
            raise SquadError(f"{path}: question {qid}: an answer needs 'text' (string) and "
                             f"'answer_start' (int), got {answer!r:.200}")
        if context[start:start + len(text)] != text:
            raise SquadError(f"{path}: question {qid}: answer_start {start} does not match its "
                             f"text {text!r} (the context there reads "
                             f"{context[start:start + len(text)]!r})")
        answers.append(Answer(text, start))
    if not answers and not impossible and require_answers:
        raise SquadError(f"{path}: question {qid} has no answer and is not marked "
                         "is_impossible")
    return Question(qid, qa["question"], context, tuple(answers), impossible)


# ------------------------------------------------------------------------------- scoring
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, drop the articles a / an / the, collapse whitespace (the
    official script's order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised texts are equal."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str, *, version: str = "1.1") -> float:
    """Token-overlap F1 of the normalised texts. With ``version="2.0"`` an empty side scores
    1.0 when both are empty (v2.0's no-answer rule); v1.1 scores any empty side 0."""
    predicted, golden = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if version == "2.0" and (not predicted or not golden):
        return float(predicted == golden)
    common = collections.Counter(predicted) & collections.Counter(golden)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(golden)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: Mapping[str, str], questions: Sequence[Question], *,
                 version: str | None = None) -> dict[str, float]:
    """``{"exact_match", "f1"}`` in percent over ``questions`` (a question without a prediction
    scores 0), plus ``count`` and ``missing``; with v2.0 questions also ``has_answer_f1`` and
    ``no_answer_f1`` (their counts as ``has_answer_count`` / ``no_answer_count``).
    ``version`` ("1.1" or "2.0", the official script whose F1 rule applies) defaults to "2.0"
    when a question is unanswerable, else "1.1"."""
    if version is None:
        version = "2.0" if any(q.impossible for q in questions) else "1.1"
    if version not in ("1.1", "2.0"):
        raise ValueError(f"version must be '1.1' or '2.0', got {version!r}")
    totals: dict[bool, list[float]] = {True: [0.0, 0.0, 0], False: [0.0, 0.0, 0]}
    missing = 0
    for question in questions:
        golds = [a.text for a in question.answers] or [""]
        if question.id not in predictions:
            missing += 1
            em = f1 = 0.0
        else:
            prediction = predictions[question.id]
            em = max(exact_match(prediction, g) for g in golds)
            f1 = max(f1_score(prediction, g, version=version) for g in golds)
        bucket = totals[not question.impossible]
        bucket[0] += em
        bucket[1] += f1
        bucket[2] += 1
    count = totals[True][2] + totals[False][2]
    if count == 0:
        raise ValueError("squad_scores got no question")
    scores = {"exact_match": 100.0 * (totals[True][0] + totals[False][0]) / count,
              "f1": 100.0 * (totals[True][1] + totals[False][1]) / count,
              "count": float(count), "missing": float(missing)}
    if totals[False][2]:
        for name, has in (("has_answer", True), ("no_answer", False)):
            scores[f"{name}_f1"] = 100.0 * totals[has][1] / max(totals[has][2], 1)
            scores[f"{name}_count"] = float(totals[has][2])
    return scores


# --------------------------------------------------------------------------- span search
class Window(NamedTuple):
    """One feature window of a question: ``offsets`` int [T, 2] character spans in the context
    of the window's tokens, ``in_context`` bool [T] (True at context tokens)."""

    offsets: np.ndarray
    in_context: np.ndarray


def best_answer(context: str, windows: Iterable[Window], start_logits: Iterable[np.ndarray],
                end_logits: Iterable[np.ndarray], *, n_best: int = 20,
                max_answer_length: int = 30,
                null_threshold: float | None = None) -> tuple[str, float]:
    """The best answer text of one question and its score (``start + end`` logits).

    Each window's logits are float [T]; a span ``(s, e)`` counts when both ends are context
    tokens, ``s <= e < s + max_answer_length`` and each is among the window's ``n_best`` best.
    ``null_threshold`` (SQuAD v2.0): the answer is ``""`` when the smallest no-answer score
    (position 0, the first token, over the windows) exceeds the best span's score by more than
    the threshold.
    """
    best_text, best_score, null_score = "", -np.inf, np.inf
    for window, start, end in zip(windows, start_logits, end_logits, strict=True):
        start, end = np.asarray(start, np.float32), np.asarray(end, np.float32)
        null_score = min(null_score, float(start[0] + end[0]))
        starts = [int(i) for i in np.argsort(-start)[:n_best] if window.in_context[i]]
        ends = [int(i) for i in np.argsort(-end)[:n_best] if window.in_context[i]]
        for s in starts:
            for e in ends:
                if not s <= e < s + max_answer_length:
                    continue
                score = float(start[s] + end[e])
                if score > best_score:
                    best_score = score
                    best_text = context[window.offsets[s, 0]:window.offsets[e, 1]]
    if null_threshold is not None and null_score - best_score > null_threshold:
        return "", null_score
    return best_text, best_score
