"""Similarity and analogy evaluation: readers, hand-checked cases, and equality with gensim."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from textkit.embedding import (
    TokenEmbedding,
    evaluate_analogy,
    evaluate_similarity,
    read_analogy_questions,
    read_similarity_pairs,
)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "embeddings"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data absent: {DATA}")


@needs_data
def test_readers_on_shared_sets():
    pairs, scores = read_similarity_pairs(DATA / "eval" / "wordsim353.tsv")
    assert len(pairs) == 353 and pairs[0] == ("love", "sex") and scores[0] == 6.77
    pairs, scores = read_similarity_pairs(DATA / "eval" / "simlex999.txt")
    assert len(pairs) == 999 and scores.dtype == np.float64
    questions = read_analogy_questions(DATA / "eval" / "questions-words.txt")
    assert len(questions) == 19544
    assert questions[0] == ("capital-common-countries", "Athens", "Greece", "Baghdad", "Iraq")
    assert len({q[0] for q in questions}) == 14


def test_reader_errors_name_the_line(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text(": s\na b c d\na b c\n")
    with pytest.raises(ValueError, match=r"q.txt: line 3: expected 4 words, got 3"):
        read_analogy_questions(path)
    path.write_text("# c\nx\ty\tfive\n")
    with pytest.raises(ValueError, match=r"line 2: score 'five' is not a number"):
        read_similarity_pairs(path)


def test_spearman_and_analogy_by_hand():
    # man:king :: woman:queen exactly in this space
    tokens = ["man", "king", "woman", "queen", "apple"]
    vectors = np.float32([[1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1], [1, -1, 1]])
    emb = TokenEmbedding(tokens, vectors)
    result = evaluate_similarity(emb, [("man", "king"), ("man", "woman"), ("king", "queen"),
                                       ("man", "zebra")], [7.0, 1.0, 6.0, 5.0])
    assert result.pairs_used == 3 and result.pairs_dropped == 1
    assert result.spearman == pytest.approx(1.0)  # cosines 0.707, 0, 0.5 rank like 7, 1, 6
    questions = [("royal", "man", "king", "woman", "queen"),
                 ("royal", "woman", "queen", "man", "king"),
                 ("other", "man", "woman", "king", "zebra")]
    for method in ("3CosAdd", "3CosMul"):
        analogy = evaluate_analogy(emb, questions, method=method)
        assert (analogy.correct, analogy.answered, analogy.skipped) == (2, 2, 1)
        assert analogy.sections == {"royal": (2, 2), "other": (0, 0)}
    with pytest.raises(ValueError, match="method must be"):
        evaluate_analogy(emb, questions, method="cos")


# ------------------------------------------------- generated vectors and sets (no ../shared)
@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A word2vec-text file of 300 random 12-d vectors (some words capitalised), a similarity
    set of 60 scored pairs (some out of vocabulary, some in upper case) and 120 analogy
    questions in 3 sections, with a quarter of the answers planted as exact offsets."""
    folder = tmp_path_factory.mktemp("evaluation")
    rng = np.random.default_rng(0)
    words = [f"w{i}" if i % 7 else f"W{i}" for i in range(300)]
    vectors = rng.normal(size=(300, 12)).astype(np.float32)
    for q in range(30):                         # d = c + b - a for planted questions
        a, b, c, d = (4 * q, 4 * q + 1, 4 * q + 2, 4 * q + 3)
        vectors[d] = vectors[c] + vectors[b] - vectors[a]
    (folder / "vectors.vec").write_text("300 12\n" + "".join(
        w + " " + " ".join(f"{x:.6f}" for x in v) + "\n" for w, v in zip(words, vectors)))
    pairs = [(words[i].upper() if i % 5 == 0 else words[i], words[j] if j < 300 else f"oov{j}")
             for i, j in zip(rng.integers(0, 300, 60), rng.integers(0, 320, 60))]
    (folder / "pairs.tsv").write_text("# word1 word2 score\n" + "".join(
        f"{a}\t{b}\t{score:.2f}\n" for (a, b), score in zip(pairs, rng.uniform(0, 10, 60))))
    lines = []
    for section in range(3):
        lines.append(f": section{section}\n")
        for q in range(section * 10, section * 10 + 10):
            lines.append(" ".join(words[4 * q:4 * q + 4]) + "\n")          # planted
            lines.extend(" ".join(words[i] for i in rng.integers(0, 300, 4)) + "\n"
                         for _ in range(3))
    (folder / "questions.txt").write_text("".join(lines))
    return folder


def test_similarity_equals_gensim_on_generated_vectors(generated):
    gensim_models = pytest.importorskip("gensim.models")
    path, pairs_file = generated / "vectors.vec", generated / "pairs.tsv"
    kv = gensim_models.KeyedVectors.load_word2vec_format(str(path))
    pearson, spearman, oov_percent = kv.evaluate_word_pairs(str(pairs_file))
    pairs, scores = read_similarity_pairs(pairs_file)
    ours = evaluate_similarity(TokenEmbedding.from_file(path), pairs, scores,
                               restrict_vocab=300000, case_insensitive=True)
    assert ours.spearman == pytest.approx(spearman.statistic, abs=1e-6)
    assert ours.pearson == pytest.approx(pearson.statistic, abs=1e-5)
    assert 100 * ours.oov_ratio == pytest.approx(oov_percent) and 0 < oov_percent < 50
    assert ours.pairs_used + ours.pairs_dropped == 60


@pytest.mark.parametrize("restrict", [300000, 100])
def test_analogy_equals_gensim_on_generated_vectors(generated, restrict):
    gensim_models = pytest.importorskip("gensim.models")
    path, questions_file = generated / "vectors.vec", generated / "questions.txt"
    kv = gensim_models.KeyedVectors.load_word2vec_format(str(path))
    score, sections = kv.evaluate_word_analogies(str(questions_file), restrict_vocab=restrict)
    ours = evaluate_analogy(TokenEmbedding.from_file(path),
                            read_analogy_questions(questions_file), restrict_vocab=restrict,
                            case_insensitive=True)
    total = sections[-1]
    assert ours.correct == len(total["correct"]) > 0
    assert ours.answered == len(total["correct"]) + len(total["incorrect"])
    assert ours.accuracy == pytest.approx(score)
    assert ours.sections == {s["section"]: (len(s["correct"]), len(s["correct"]) +
                                            len(s["incorrect"])) for s in sections[:-1]}


def test_example_script_on_generated_files(generated):
    script = Path(__file__).resolve().parents[1] / "examples" / "word_embeddings" / "evaluate.py"
    out = subprocess.run(
        [sys.executable, str(script), "--embedding-path", str(generated / "vectors.vec"),
         "--similarity", str(generated / "pairs.tsv"),
         "--analogy", str(generated / "questions.txt")],
        check=True, capture_output=True, text=True).stdout
    assert "loaded vectors.vec: 300 x 12" in out
    emb = TokenEmbedding.from_file(generated / "vectors.vec")
    analogy = evaluate_analogy(emb, read_analogy_questions(generated / "questions.txt"),
                               case_insensitive=True)
    assert analogy.correct == 30          # the planted questions, 120 answered
    assert re.search(rf"questions.txt\s+acc 3CosAdd\s+{analogy.accuracy:.4f}\s+"
                     rf"{analogy.answered}\s+{analogy.skipped}\n", out), out
    pairs, scores = read_similarity_pairs(generated / "pairs.tsv")
    similarity = evaluate_similarity(emb, pairs, scores, case_insensitive=True)
    assert re.search(rf"pairs.tsv\s+spearman\s+{similarity.spearman:.4f}\s+"
                     rf"{similarity.pairs_used}\s+{similarity.pairs_dropped}\n", out), out


@needs_data
@pytest.mark.parametrize("vectors", ["lee_fasttext.vec", "pang_lee_polarity_fasttext.vec"])
@pytest.mark.parametrize("pairs_file", ["wordsim353.tsv", "simlex999.txt"])
def test_similarity_equals_gensim(vectors, pairs_file):
    gensim_models = pytest.importorskip("gensim.models")
    path = DATA / "vectors" / vectors
    kv = gensim_models.KeyedVectors.load_word2vec_format(str(path), unicode_errors="replace")
    emb = TokenEmbedding.from_file(path, encoding_errors="replace")
    pairs, scores = read_similarity_pairs(DATA / "eval" / pairs_file)
    pearson, spearman, oov_percent = kv.evaluate_word_pairs(str(DATA / "eval" / pairs_file))
    ours = evaluate_similarity(emb, pairs, scores, restrict_vocab=300000, case_insensitive=True)
    assert ours.spearman == pytest.approx(spearman.statistic, abs=1e-6)
    assert ours.pearson == pytest.approx(pearson.statistic, abs=1e-5)
    assert 100 * ours.oov_ratio == pytest.approx(oov_percent)
    assert ours.pairs_used >= 10  # enough pairs for the comparison to mean something


@needs_data
@pytest.mark.parametrize("vectors,restrict", [("lee_fasttext.vec", 300000),
                                              ("lee_fasttext.vec", 500),
                                              ("pang_lee_polarity_fasttext.vec", 300000)])
def test_analogy_equals_gensim(vectors, restrict):
    gensim_models = pytest.importorskip("gensim.models")
    path = DATA / "vectors" / vectors
    kv = gensim_models.KeyedVectors.load_word2vec_format(str(path), unicode_errors="replace")
    emb = TokenEmbedding.from_file(path, encoding_errors="replace")
    questions_file = DATA / "eval" / "questions-words.txt"
    score, sections = kv.evaluate_word_analogies(str(questions_file), restrict_vocab=restrict)
    ours = evaluate_analogy(emb, read_analogy_questions(questions_file),
                            restrict_vocab=restrict, case_insensitive=True)
    total = sections[-1]
    assert ours.correct == len(total["correct"])
    assert ours.answered == len(total["correct"]) + len(total["incorrect"])
    assert ours.answered > 0 and ours.accuracy == pytest.approx(score)
    theirs = {s["section"]: (len(s["correct"]), len(s["correct"]) + len(s["incorrect"]))
              for s in sections[:-1]}
    assert ours.sections == theirs


@needs_data
def test_example_script_prints_a_table():
    script = Path(__file__).resolve().parents[1] / "examples" / "word_embeddings" / "evaluate.py"
    out = subprocess.run(
        [sys.executable, str(script),
         "--embedding-path", str(DATA / "vectors" / "lee_fasttext.bin"),
         "--similarity", str(DATA / "eval" / "wordsim353.tsv"),
         "--analogy", str(DATA / "eval" / "questions-words.txt")],
        check=True, capture_output=True, text=True).stdout
    assert "loaded lee_fasttext.bin: 1,762 x 10" in out
    assert re.search(r"wordsim353.tsv\s+spearman\s+-?\d\.\d{4}\s+45\s+308", out)
    assert re.search(r"questions-words.txt\s+acc 3CosAdd\s+0\.0306\s+98\s+19446", out)
