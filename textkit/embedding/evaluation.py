"""Intrinsic evaluation: word similarity (Spearman) and analogies (3CosAdd / 3CosMul).

Vocabulary semantics follow gensim's ``evaluate_word_pairs`` / ``evaluate_word_analogies`` so the
numbers are comparable: only the first ``restrict_vocab`` rows count as the vocabulary; with
``case_insensitive`` every word is upper-cased and a form maps to its first (most frequent) row; a
pair or question with a word outside that vocabulary is dropped and counted. An analogy
``a : b :: c : d`` is answered by the best-scoring vocabulary row whose (upper-cased, when case
insensitive) form is none of a, b, c; it is correct when that form equals d's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from textkit.embedding.token_embedding import TokenEmbedding

__all__ = [
    "AnalogyResult",
    "SimilarityResult",
    "evaluate_analogy",
    "evaluate_similarity",
    "read_analogy_questions",
    "read_similarity_pairs",
]

_COSMUL_EPSILON = 1e-3  # Levy & Goldberg (2014)


# ---------------------------------------------------------------------------- readers
def read_similarity_pairs(path: str | os.PathLike) -> tuple[list[tuple[str, str]], np.ndarray]:
    """WordSim-353 / SimLex-999 layout: ``#`` comment lines, then ``w1<TAB>w2<TAB>score``.

    Returns ``(pairs, scores)`` with scores float64 [P]. Fields may also be space-separated.
    """
    pairs, scores = [], []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t") if "\t" in line else line.split()
            if len(fields) < 3:
                raise ValueError(f"{path}: line {line_no}: expected 'word1 word2 score', got "
                                 f"{line.strip()!r}")
            try:
                scores.append(float(fields[2]))
            except ValueError:
                raise ValueError(f"{path}: line {line_no}: score {fields[2]!r} is not a "
                                 "number") from None
            pairs.append((fields[0].strip(), fields[1].strip()))
    return pairs, np.asarray(scores, dtype=np.float64)


def read_analogy_questions(path: str | os.PathLike) -> list[tuple[str, str, str, str, str]]:
    """Google analogy format: ``: section`` lines, then ``a b c d`` per line.

    Returns ``(section, a, b, c, d)`` tuples in file order.
    """
    questions, section = [], None
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            if line.startswith(":"):
                section = line[1:].strip()
                continue
            words = line.split()
            if section is None or len(words) != 4:
                problem = "question before any ': section' line" if section is None else (
                    f"expected 4 words, got {len(words)}")
                raise ValueError(f"{path}: line {line_no}: {problem}")
            questions.append((section, *words))
    return questions


# ---------------------------------------------------------------------------- vocabulary
def _vocabulary(emb: TokenEmbedding, restrict_vocab: int | None,
                case_insensitive: bool) -> tuple[dict[str, int], np.ndarray]:
    """``(form -> first row, row -> form id)`` over the first ``restrict_vocab`` rows.

    The form id of a row is the row of the first token with the same form, so rows that are
    case variants of one word share it.
    """
    tokens = emb.idx_to_token[:restrict_vocab]
    forms = [t.upper() for t in tokens] if case_insensitive else tokens
    first = dict(zip(reversed(forms), range(len(forms) - 1, -1, -1)))
    form_ids = np.fromiter(map(first.__getitem__, forms), dtype=np.int64, count=len(forms))
    return first, form_ids


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties sharing their average rank."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_x[1:] != sorted_x[:-1])))
    ends = np.append(starts[1:], x.shape[0])
    average = (starts + ends + 1) / 2.0  # mean of ranks start+1 .. end
    ranks = np.empty(x.shape[0], dtype=np.float64)
    ranks[order] = np.repeat(average, ends - starts)
    return ranks


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / denominator) if denominator > 0 else float("nan")


# ---------------------------------------------------------------------------- similarity
@dataclass(frozen=True)
class SimilarityResult:
    spearman: float  # Spearman's rho between gold scores and cosine similarities
    pearson: float
    pairs_used: int
    pairs_dropped: int  # a word outside the vocabulary

    @property
    def oov_ratio(self) -> float:
        return self.pairs_dropped / max(self.pairs_used + self.pairs_dropped, 1)


def evaluate_similarity(emb: TokenEmbedding, word_pairs: Sequence[tuple[str, str]],
                        gold_scores: Sequence[float], *, restrict_vocab: int | None = None,
                        case_insensitive: bool = False) -> SimilarityResult:
    """Spearman's rho between ``gold_scores`` [P] and the cosine similarity of each pair."""
    if len(word_pairs) != len(gold_scores):
        raise ValueError(f"{len(word_pairs)} pairs but {len(gold_scores)} gold scores")
    vocab, _ = _vocabulary(emb, restrict_vocab, case_insensitive)
    norm = str.upper if case_insensitive else str
    left, right, gold = [], [], []
    for (a, b), score in zip(word_pairs, gold_scores):
        ia, ib = vocab.get(norm(a)), vocab.get(norm(b))
        if ia is not None and ib is not None:
            left.append(ia)
            right.append(ib)
            gold.append(score)
    if len(gold) < 2:
        raise ValueError(f"only {len(gold)} of {len(word_pairs)} pairs are in the vocabulary")
    vectors = emb.idx_to_vec
    u = vectors[left] / np.linalg.norm(vectors[left], axis=1, keepdims=True)
    v = vectors[right] / np.linalg.norm(vectors[right], axis=1, keepdims=True)
    cosine = np.einsum("pd,pd->p", u, v).astype(np.float64)  # [P']
    gold = np.asarray(gold, dtype=np.float64)
    return SimilarityResult(
        spearman=_pearson(_ranks(gold), _ranks(cosine)), pearson=_pearson(gold, cosine),
        pairs_used=len(gold), pairs_dropped=len(word_pairs) - len(gold))


# ---------------------------------------------------------------------------- analogy
@dataclass(frozen=True)
class AnalogyResult:
    accuracy: float  # correct / answered
    correct: int
    answered: int
    skipped: int  # questions with a word outside the vocabulary
    sections: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (correct, n)

    def section_accuracy(self) -> dict[str, float]:
        return {name: c / n if n else float("nan") for name, (c, n) in self.sections.items()}


def evaluate_analogy(emb: TokenEmbedding, questions: Sequence[tuple[str, str, str, str, str]],
                     method: str = "3CosAdd", *, restrict_vocab: int | None = None,
                     case_insensitive: bool = False, batch_size: int = 512) -> AnalogyResult:
    """Accuracy on ``(section, a, b, c, d)`` questions ``a : b :: c : d``.

    ``3CosAdd`` takes argmax cos(x, b - a + c) over unit vectors; ``3CosMul`` takes argmax
    cos'(x, b) cos'(x, c) / (cos'(x, a) + 1e-3) with cos' = (cos + 1) / 2. Questions are scored
    ``batch_size`` at a time as one [R, batch] matrix product.
    """
    if method not in ("3CosAdd", "3CosMul"):
        raise ValueError(f"method must be '3CosAdd' or '3CosMul', got {method!r}")
    vocab, form_ids = _vocabulary(emb, restrict_vocab, case_insensitive)
    norm = str.upper if case_insensitive else str
    sections: dict[str, list[int]] = {}
    kept_sections, ids = [], []
    for section, *words in questions:
        counts = sections.setdefault(section, [0, 0])
        rows = [vocab.get(norm(w)) for w in words]
        if None in rows:
            continue
        counts[1] += 1
        kept_sections.append(section)
        ids.append(rows)
    skipped = len(questions) - len(ids)
    n_rows = form_ids.shape[0]
    vectors = np.asarray(emb.idx_to_vec[:n_rows])
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-30)
    ids_array = np.asarray(ids, dtype=np.int64).reshape(-1, 4)  # [Q, 4] rows of a, b, c, d
    correct = np.zeros(ids_array.shape[0], dtype=bool)
    for start in range(0, ids_array.shape[0], batch_size):
        a, b, c, d = ids_array[start : start + batch_size].T  # each [q]
        if method == "3CosAdd":
            scores = unit @ (unit[b] - unit[a] + unit[c]).T  # [R, q]
        else:
            cos_a, cos_b, cos_c = ((unit @ unit[x].T + 1.0) / 2.0 for x in (a, b, c))
            scores = cos_b * cos_c / (cos_a + _COSMUL_EPSILON)
        for x in (a, b, c):  # rows with the form of a, b or c cannot be the answer
            scores[form_ids[:, None] == form_ids[x][None, :]] = -np.inf
        predicted = scores.argmax(axis=0)  # [q]
        correct[start : start + batch_size] = form_ids[predicted] == form_ids[d]
    for section, ok in zip(kept_sections, correct.tolist()):
        sections[section][0] += ok
    n_correct, answered = int(correct.sum()), int(correct.shape[0])
    return AnalogyResult(
        accuracy=n_correct / answered if answered else float("nan"), correct=n_correct,
        answered=answered, skipped=skipped,
        sections={name: (c, n) for name, (c, n) in sections.items()})

