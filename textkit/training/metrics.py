"""Evaluation metrics: corpus BLEU through sacreBLEU (with its signature) and perplexity."""

from __future__ import annotations

import math
from collections.abc import Sequence

import sacrebleu


def corpus_bleu(
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    lowercase: bool = False,
    tokenize: str = "13a",
    pretokenized: bool = False,
) -> tuple[float, str]:
    """Corpus BLEU of detokenized ``hypotheses`` and sacreBLEU's signature string.

    ``pretokenized``: the text is tokenised on purpose (e.g. the toy corpus); sacreBLEU then
    scores it the same way but does not warn that it looks tokenised (its ``force``).

    ``references`` is one reference per hypothesis (``list[str]``) or, for several references,
    one list per hypothesis (``references[i]`` are the references of ``hypotheses[i]``, the same
    number for every hypothesis).
    """
    hypotheses = list(hypotheses)
    references = list(references)
    if len(references) != len(hypotheses):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; "
            "expected one entry per hypothesis")
    for index, text in enumerate(hypotheses):
        if not isinstance(text, str):
            raise TypeError(f"hypothesis {index} is {type(text).__name__}, expected str")
    if all(isinstance(ref, str) for ref in references):
        streams = [references]
    else:
        counts = {len(refs) for refs in references if not isinstance(refs, str)}
        if any(isinstance(refs, str) for refs in references) or len(counts) != 1:
            raise ValueError(
                "references must be all strings or all lists with the same number of "
                f"references per hypothesis; got reference counts {sorted(counts)}")
        streams = [list(stream) for stream in zip(*references)]
    bleu = sacrebleu.BLEU(lowercase=lowercase, tokenize=tokenize, force=pretokenized)
    score = bleu.corpus_score(hypotheses, streams)
    return float(score.score), str(bleu.get_signature())


def perplexity(nll_sum: float, token_count: float) -> float:
    """``exp(nll_sum / token_count)``; ``inf`` when it overflows a float."""
    if token_count <= 0:
        raise ValueError(f"token_count must be > 0, got {token_count}")
    mean = float(nll_sum) / float(token_count)
    return math.exp(mean) if mean < 709.0 else math.inf
