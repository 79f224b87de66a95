"""Word-vector training: subsampling, windows, noise table, n-gram rows and batches against
hand-worked cases; a tiny corpus whose planted neighbours come out; writers read back by
textkit and gensim; resume; bad input."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import subprocesses

import textkit.cli.word2vec as word2vec_cli
from textkit.embedding import (
    TokenEmbedding,
    Word2VecConfig,
    build_corpus,
    read_sentences,
    train_word2vec,
    write_word2vec_binary,
    write_word2vec_text,
)
from textkit.embedding.fasttext_bin import fnv1a_int8
from textkit.embedding.word2vec_batches import (
    Shapes,
    build_batches,
    center_data,
    keep_probability,
    noise_table,
    noise_words,
    subword_rows,
    window_contexts,
)
from textkit.errors import ConfigError, DataFileError, RunDirError

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "word_embeddings" / "train.py"


def planted_sentences(n=600, seed=0):
    """Sentences drawn from one of two topics each: animals or colours (plus filler)."""
    rng = np.random.default_rng(seed)
    topics = [["cat", "dog", "horse", "cow"], ["red", "blue", "green", "yellow"]]
    return [list(rng.choice(topics[i % 2], 6)) for i in range(n)]


# ---------------------------------------------------------------------------- numpy side
def test_keep_probability_is_word2vecs_formula():
    # t = 0.01 * 110 = 1.1: (sqrt(100 / 1.1) + 1) * 1.1 / 100 and (sqrt(10 / 1.1) + 1) * 0.11
    np.testing.assert_allclose(keep_probability(np.array([100, 10]), 0.01),
                               [0.1158807, 0.4416625], atol=1e-6)
    np.testing.assert_array_equal(keep_probability(np.array([1, 1000]), 1e-3)[0], 1.0)
    np.testing.assert_array_equal(keep_probability(np.array([5, 7]), 0.0), [1.0, 1.0])


def test_window_contexts_stay_in_the_sentence_and_the_reduced_window():
    sentences = np.array([0, 0, 0, 1, 1], np.int32)
    centers, contexts = window_contexts(sentences, np.array([1, 2, 1, 1, 1]), window=2)
    np.testing.assert_array_equal(centers, [0, 1, 1, 2, 3, 4])
    np.testing.assert_array_equal(contexts, [1, 0, 2, 1, 4, 3])


def test_noise_table_follows_unigram_to_the_075():
    table = noise_table(np.array([16, 1]), 0.75, size=90)  # weights 8 : 1
    assert table.dtype == np.int32 and table.shape == (90,)
    assert (table == 0).sum() == 80 and (table == 1).sum() == 10


def test_subword_rows_hash_the_ngrams_of_the_bracketed_word():
    assert 0xE40C292C == int(fnv1a_int8([b"a"])[0])  # the FNV-1a test vector of "a"
    offsets, rows = subword_rows(["x", "a"], 1, 1, bucket=1000)
    np.testing.assert_array_equal(offsets, [0, 2, 4])  # each: its own row, then "x" / "a"
    np.testing.assert_array_equal(rows[[0, 2]], [0, 1])
    assert rows[3] == 2 + 0xE40C292C % 1000
    offsets, rows = subword_rows(["bc"], 1, 2, bucket=1000)
    grams = [b"<b", b"b", b"bc", b"c", b"c>"]               # no lone "<" or ">"
    np.testing.assert_array_equal(offsets, [0, 1 + len(grams)])
    assert rows[0] == 0
    np.testing.assert_array_equal(rows[1:], 1 + fnv1a_int8(grams) % 1000)


def test_center_data_skipgram_and_cbow_by_hand():
    corpus = build_corpus([["a", "b", "a"], ["b", "a"]], min_count=1)  # a: 0, b: 1
    keep = np.ones(2)
    rows = dict(offsets=np.arange(3), rows=np.arange(2, dtype=np.int32))
    rng = np.random.default_rng(0)
    sg = center_data(corpus, rng, objective="skipgram", window=1, keep=keep, **rows)
    # window 1: every center sees its neighbours in its sentence
    np.testing.assert_array_equal(sg.in_rows, [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(sg.out_counts, [1, 2, 1, 1, 1])
    np.testing.assert_array_equal(sg.out_words, [1, 0, 0, 1, 0, 1])
    np.testing.assert_array_equal(sg.positions, [0, 1, 2, 3, 4])
    cbow = center_data(corpus, rng, objective="cbow", window=1, keep=keep, **rows)
    np.testing.assert_array_equal(cbow.in_counts, [1, 2, 1, 1, 1])
    np.testing.assert_array_equal(cbow.in_rows, [1, 0, 0, 1, 0, 1])
    np.testing.assert_array_equal(cbow.out_words, [0, 1, 0, 1, 0])


def test_batches_keep_their_shape_and_hold_every_segment_once():
    corpus = build_corpus(planted_sentences(40), min_count=1)
    data = center_data(corpus, np.random.default_rng(1), objective="cbow", window=3,
                       keep=np.ones(len(corpus.words)), offsets=np.arange(9),
                       rows=np.arange(8, dtype=np.int32))
    shapes = Shapes(centers=16, rows=40, pairs=20)
    batches = build_batches(data, shapes)
    assert batches.in_rows.shape == (len(batches), 40)
    assert batches.out_words.shape == (len(batches), 20)
    assert (batches.in_seg < 16).all() and (batches.out_seg < 16).all()
    assert (batches.in_weight > 0).sum() == data.in_rows.shape[0]
    assert batches.out_weight.sum() == data.out_words.shape[0]
    np.testing.assert_array_equal(batches.in_rows[batches.in_weight > 0], data.in_rows)
    # a segment's input weights are 1 / its row count: each segment's weights sum to 1
    for b in range(len(batches)):
        used = batches.in_weight[b] > 0
        sums = np.bincount(batches.in_seg[b][used], batches.in_weight[b][used])
        np.testing.assert_allclose(sums[sums > 0], 1.0, rtol=1e-6)


@pytest.mark.parametrize("objective", ["cbow", "skipgram"])
def test_one_row_or_pair_per_center_updates_as_the_segment_layout(objective):
    """CBOW's batches hold one positive word per center and skip-gram's (without subwords) one
    input row: with that axis exactly ``centers`` long the update skips its segment sums; the
    same batches padded one entry longer go through them and give the same matrices (the other
    axis is long enough never to cut a batch, so both layouts cut the same batches)."""
    from textkit.embedding.word2vec_update import make_update

    corpus = build_corpus(planted_sentences(40), min_count=1)
    vocab = len(corpus.words)
    data = center_data(corpus, np.random.default_rng(1), objective=objective, window=3,
                       keep=np.ones(vocab), offsets=np.arange(vocab + 1),
                       rows=np.arange(vocab, dtype=np.int32))
    aligned = (Shapes(16, 16, 200) if objective == "skipgram" else Shapes(16, 200, 16))
    padded = Shapes(16, aligned.rows + 1, aligned.pairs + 1)
    rng = np.random.default_rng(0)
    start = (rng.normal(size=(vocab, 8)).astype(np.float32),
             rng.normal(size=(vocab, 8)).astype(np.float32))
    table = noise_table(corpus.counts, 0.75, size=1000)
    found = []
    for shapes in (aligned, padded):
        b = build_batches(data, shapes)
        noise = noise_words(table, np.random.default_rng(2), (len(b), 16, 3))
        batches = (b.in_rows, b.in_seg, b.in_weight, b.out_words, b.out_seg, b.out_weight,
                   noise, np.full(len(b), 0.05, np.float32))
        update = make_update(shapes.centers)
        inputs, outputs, loss, terms = update(np.copy(start[0]), np.copy(start[1]), batches)
        found.append((np.asarray(inputs), np.asarray(outputs), float(loss), float(terms)))
    assert len(build_batches(data, aligned)) > 1
    for got, want in zip(found[0], found[1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(found[0][1], start[1])               # the batches did update


# ---------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def planted_model():
    corpus = build_corpus(planted_sentences(), min_count=1)
    config = Word2VecConfig(vector_size=16, window=3, min_count=1, epochs=3, sample=0,
                            batch_centers=64, seed=3)
    return train_word2vec(corpus, config)


def test_a_tiny_corpus_trains_to_its_planted_neighbours(planted_model):
    emb = planted_model.embedding()
    for group in (["cat", "dog", "horse", "cow"], ["red", "blue", "green", "yellow"]):
        for word in group:
            best = [w for w, _ in emb.most_similar(word, k=3)]
            assert set(best) <= set(group) - {word}, (word, best)


def test_training_is_reproducible_and_resumes_as_the_uninterrupted_run(planted_model):
    corpus = build_corpus(planted_sentences(), min_count=1)
    config = planted_model.config
    saved = []

    def stop_after_first(report, state):
        saved.append(state)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_word2vec(corpus, config, on_epoch=stop_after_first)
    assert saved[0].epochs_done == 1
    resumed = train_word2vec(corpus, config, state=saved[0])
    np.testing.assert_array_equal(resumed.inputs, planted_model.inputs)
    np.testing.assert_array_equal(resumed.outputs, planted_model.outputs)


@pytest.mark.slow
def test_subwords_give_unseen_words_vectors_and_survive_save_and_load(tmp_path):
    corpus = build_corpus(planted_sentences(200), min_count=1)
    config = Word2VecConfig(vector_size=8, window=2, min_count=1, epochs=1, subwords=True,
                            bucket=500, batch_centers=64)
    model = train_word2vec(corpus, config)
    assert model.inputs.shape == (len(corpus.words) + 500, 8)
    emb = model.embedding()
    unseen = emb["horses"]
    assert np.abs(unseen).sum() > 0
    np.testing.assert_allclose(unseen, model.subwords.vectors(["horses"])[0])
    emb.save(tmp_path / "emb")
    loaded = TokenEmbedding.load(tmp_path / "emb")
    np.testing.assert_allclose(loaded["horses"], unseen, rtol=1e-6)
    np.testing.assert_allclose(loaded["cat"], emb["cat"], rtol=1e-6)


# ---------------------------------------------------------------------------- files
def test_writers_round_trip_through_textkit_and_gensim(tmp_path, planted_model):
    emb = planted_model.embedding()
    text = write_word2vec_text(tmp_path / "v.txt", emb.idx_to_token, emb.idx_to_vec)
    binary = write_word2vec_binary(tmp_path / "v.bin", emb.idx_to_token, emb.idx_to_vec)
    for path in (text, binary):
        back = TokenEmbedding.from_file(path)
        assert back.idx_to_token == emb.idx_to_token
        np.testing.assert_array_equal(back.idx_to_vec, emb.idx_to_vec)
    code = ("import json, sys\nfrom gensim.models import KeyedVectors\n"
            "out = {}\nfor path, binary in ((sys.argv[1], False), (sys.argv[2], True)):\n"
            "    kv = KeyedVectors.load_word2vec_format(path, binary=binary)\n"
            "    out[str(binary)] = [kv.index_to_key, kv.vectors.tolist()]\n"
            "print(json.dumps(out))\n")
    result = subprocess.run([sys.executable, "-c", code, str(text), str(binary)], check=True,
                            capture_output=True, text=True, env=subprocesses.cpu_env(1))
    for words, vectors in json.loads(result.stdout).values():
        assert words == emb.idx_to_token
        np.testing.assert_array_equal(np.asarray(vectors, np.float32), emb.idx_to_vec)


def test_writers_refuse_tokens_with_whitespace(tmp_path):
    with pytest.raises(ValueError, match="whitespace"):
        write_word2vec_text(tmp_path / "v.txt", ["a b"], np.zeros((1, 2), np.float32))
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------------------- bad input
def test_an_empty_corpus_is_named(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("\n  \n")
    with pytest.raises(DataFileError, match="empty.txt.*no words"):
        build_corpus(read_sentences(path), 5, source=str(path))


def test_no_word_reaching_min_count_names_the_count(tmp_path):
    with pytest.raises(DataFileError, match=r"min_count=5.*'a', occurs 2"):
        build_corpus([["a", "b", "a"]], 5, source="f.txt")


def test_vector_size_zero_is_refused():
    with pytest.raises(ConfigError, match="vector_size.*0"):
        Word2VecConfig(vector_size=0)
    with pytest.raises(ConfigError, match="noise_draws.*0"):
        Word2VecConfig(noise_draws=0)
    assert (Word2VecConfig().draws, Word2VecConfig(objective="cbow").draws) == (2, 1)


def write_corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(" ".join(s) for s in planted_sentences(60)) + "\n")
    return path


@pytest.mark.slow
def test_recipe_resumes_an_interrupted_run_and_refuses_a_used_save_dir(tmp_path, monkeypatch):
    recipe = subprocesses.load_script(SCRIPT, "word_embeddings_train")
    corpus = write_corpus(tmp_path)
    flags = ["--train-file", str(corpus), "--vector-size", "8", "--window", "2",
             "--min-count", "1", "--epochs", "2", "--eval-dir", ""]
    recipe.main([*flags, "--save-dir", str(tmp_path / "whole")])
    with pytest.raises(RunDirError, match="already holds a run"):
        recipe.main([*flags, "--save-dir", str(tmp_path / "whole")])
    save_state = word2vec_cli.save_state

    def save_then_stop(path, state):
        save_state(path, state)
        raise KeyboardInterrupt

    monkeypatch.setattr(word2vec_cli, "save_state", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        recipe.main([*flags, "--save-dir", str(tmp_path / "cut")])
    monkeypatch.setattr(word2vec_cli, "save_state", save_state)
    summary = recipe.main([*flags, "--save-dir", str(tmp_path / "cut"), "--resume"])
    assert [e["epoch"] for e in summary["epoch_reports"]] == [2]
    assert ((tmp_path / "cut" / "vectors.txt").read_bytes()
            == (tmp_path / "whole" / "vectors.txt").read_bytes())
    assert "resuming after epoch 1" in (tmp_path / "cut" / "train.log").read_text()


def test_recipe_names_a_missing_train_file_and_vector_size_zero(tmp_path, capsys):
    recipe = subprocesses.load_script(SCRIPT, "word_embeddings_train")
    with pytest.raises(FileNotFoundError, match="--train-file .*nothere.txt"):
        recipe.main(["--train-file", str(tmp_path / "nothere.txt"), "--eval-dir", "",
                     "--save-dir", str(tmp_path / "run")])
    with pytest.raises(SystemExit):
        recipe.main(["--train-file", "x", "--vector-size", "0", "--save-dir", "y"])
    assert "vector_size (--vector-size) is 0" in capsys.readouterr().err
