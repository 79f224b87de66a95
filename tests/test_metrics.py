"""corpus_bleu (through sacreBLEU, with its signature) and perplexity."""

import math
from collections import Counter
from pathlib import Path

import pytest
import sacrebleu

from textkit.training import corpus_bleu, perplexity

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _drop_every_sixth_word(line: str) -> str:
    return " ".join(word for i, word in enumerate(line.split()) if i % 6 != 5)


def test_bleu_equals_sacrebleu_on_real_references():
    path = DATA / "multi30k-en-de" / "test_2016_flickr.de"
    if not path.exists():
        pytest.skip(f"shared data not found: {path}")
    references = path.read_text(encoding="utf-8").splitlines()
    hypotheses = [_drop_every_sixth_word(line) for line in references]
    score, signature = corpus_bleu(hypotheses, references)
    expected = sacrebleu.corpus_bleu(hypotheses, [references])
    assert score == pytest.approx(expected.score, abs=1e-9)
    assert 50.0 < score < 80.0             # dropping words costs n-gram matches
    assert signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")


# A fixed reference set (lowercase words, no punctuation: 13a tokenization splits on spaces only)
FIXED_REFERENCES = [
    "two young men are playing football on a green field",
    "a woman in a red dress is walking down the street",
    "the little dog runs after a ball in the park",
    "an old man sits on a bench and reads a newspaper",
]
FIXED_HYPOTHESES = [
    "two young men play football on the green field",
    "a woman in a red dress walks down the street",
    "the small dog runs after the ball in a park",
    "an old man sits on a bench reading a newspaper today",
]

# counted by hand: 34/40 unigrams, 21/36 bigrams, 12/32 trigrams, 7/28 4-grams match; 40
# hypothesis words against 42 reference words
BLEU_OF_THE_FIXED_SET = 100 * math.exp(1 - 42 / 40) * (34 / 40 * 21 / 36 * 12 / 32 * 7 / 28) ** 0.25


def _bleu_by_hand(hypotheses: list[str], references: list[str]) -> float:
    """Papineni et al.'s corpus BLEU written out: clipped n-gram precisions (n = 1..4) summed
    over the corpus, their geometric mean, and the brevity penalty; every order has a match."""
    matches, totals, hyp_len, ref_len = [0] * 4, [0] * 4, 0, 0
    for hyp, ref in zip(hypotheses, references):
        h, r = hyp.split(), ref.split()
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, 5):
            h_grams = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            r_grams = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            matches[n - 1] += sum(min(c, r_grams[g]) for g, c in h_grams.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    assert all(matches)
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / 4
    brevity = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * brevity * math.exp(log_precision)


def test_bleu_on_a_fixed_reference_set_equals_the_formula():
    score, signature = corpus_bleu(FIXED_HYPOTHESES, FIXED_REFERENCES)
    assert score == pytest.approx(_bleu_by_hand(FIXED_HYPOTHESES, FIXED_REFERENCES), abs=1e-9)
    assert score == pytest.approx(BLEU_OF_THE_FIXED_SET, abs=1e-6)
    assert signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    # shorter hypotheses pay the brevity penalty exactly as the formula says
    short = [" ".join(h.split()[:6]) for h in FIXED_HYPOTHESES]
    assert corpus_bleu(short, FIXED_REFERENCES)[0] == pytest.approx(
        _bleu_by_hand(short, FIXED_REFERENCES), abs=1e-9)
    assert corpus_bleu(FIXED_REFERENCES, FIXED_REFERENCES)[0] == pytest.approx(100.0)


def test_multiple_references_per_hypothesis():
    hypotheses = ["the cat sat on the mat", "a dog barks loudly"]
    references = [["the cat sat on a mat", "a cat sat on the mat"],
                  ["the dog barks loudly", "a dog is barking"]]
    score, signature = corpus_bleu(hypotheses, references)
    streams = [[refs[0] for refs in references], [refs[1] for refs in references]]
    assert score == pytest.approx(sacrebleu.corpus_bleu(hypotheses, streams).score)
    assert signature.startswith("nrefs:2|")
    single, _ = corpus_bleu(hypotheses, [refs[0] for refs in references])
    assert score > single


def test_lowercase_and_tokenizer_options_reach_sacrebleu():
    hypotheses = ["The Cat sat on the mat."]
    references = ["the cat sat on the mat ."]
    cased, _ = corpus_bleu(hypotheses, references)
    lowered, signature = corpus_bleu(hypotheses, references, lowercase=True, tokenize="none")
    assert lowered > cased
    assert "case:lc" in signature and "tok:none" in signature
    assert lowered == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True, tokenize="none").score)


def test_bleu_input_errors_are_clear():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="same number"):
        corpus_bleu(["a", "b"], [["a", "b"], ["c"]])
    with pytest.raises(TypeError, match="hypothesis 1"):
        corpus_bleu(["a", 3], ["a", "b"])


def test_perplexity():
    assert perplexity(0.0, 10) == 1.0
    assert perplexity(10 * math.log(50.0), 10) == pytest.approx(50.0)
    assert perplexity(1e6, 1) == math.inf
    with pytest.raises(ValueError, match="token_count"):
        perplexity(1.0, 0)
