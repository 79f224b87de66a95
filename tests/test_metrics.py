"""corpus_bleu (through sacreBLEU, with its signature) and perplexity."""

import math
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
