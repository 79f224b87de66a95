"""fastText .bin: agreement with the .vec of the same model and with gensim's OOV vectors."""

import struct
from pathlib import Path

import numpy as np
import pytest

from textkit.embedding import EmbeddingFormatError, TokenEmbedding
from textkit.embedding.fasttext_bin import char_ngrams, fnv1a_int8

VECTORS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "embeddings" / "vectors"
needs_data = pytest.mark.skipif(not VECTORS.is_dir(), reason=f"shared data absent: {VECTORS}")
MODELS = ["lee_fasttext", "crime-and-punishment", "pang_lee_polarity_fasttext"]
OOV_WORDS = ["nonexistentword", "zzqx", "Raskolnikovian", "привет", "naïveté", "mañana", "日本語"]


def _fnv_reference(data: bytes) -> int:
    """FNV-1a as fastText's C++ computes it: each char is an int8, widened to uint32."""
    h = 2166136261
    for byte in data:
        h = (h ^ ((byte - 256) & 0xFFFFFFFF if byte >= 128 else byte)) * 16777619 & 0xFFFFFFFF
    return h


def test_fnv_hash_sign_extends_bytes():
    grams = [b"<th", b"the>", "<пр".encode(), "ñan".encode(), b"a", b"\xff\x80"]
    assert fnv1a_int8(grams).tolist() == [_fnv_reference(g) for g in grams]
    # without the int8 quirk a non-ASCII n-gram would hash differently
    plain = 2166136261
    for byte in "ñ".encode():
        plain = (plain ^ byte) * 16777619 & 0xFFFFFFFF
    assert fnv1a_int8(["ñ".encode()])[0] != plain


def test_char_ngrams_follow_fasttext():
    assert char_ngrams("ab", 1, 2) == [b"<a", b"a", b"ab", b"b", b"b>"]  # no lone "<" / ">"
    assert char_ngrams("aé", 3, 3) == [b"<a" + "é".encode(), "aé>".encode()]  # by characters
    assert char_ngrams("word", 3, 6)[:4] == [b"<wo", b"<wor", b"<word", b"<word>"]
    assert char_ngrams("x", 0, 0) == []


def _text_tolerance(vec_file_values: np.ndarray) -> np.ndarray:
    """Half a unit in the 5th significant digit (fastText writes .vec with 5) plus 1e-6."""
    magnitude = np.floor(np.log10(np.maximum(np.abs(vec_file_values), 1e-30)))
    return 0.5 * 10.0 ** (magnitude - 4) + 1e-6


@needs_data
@pytest.mark.parametrize("model", MODELS)
def test_bin_and_vec_of_one_model_agree(model):
    binary = TokenEmbedding.from_file(VECTORS / f"{model}.bin", encoding_errors="replace")
    text = TokenEmbedding.from_file(VECTORS / f"{model}.vec", encoding_errors="replace")
    assert binary.idx_to_token == text.idx_to_token
    error = np.abs(binary.idx_to_vec - text.idx_to_vec)
    assert (error <= _text_tolerance(text.idx_to_vec)).all(), float(error.max())


@needs_data
@pytest.mark.parametrize("model", ["lee_fasttext", "crime-and-punishment"])
def test_oov_and_in_vocab_vectors_equal_gensim(model):
    fasttext = pytest.importorskip("gensim.models.fasttext")
    path = VECTORS / f"{model}.bin"
    kv = fasttext.load_facebook_vectors(str(path))
    emb = TokenEmbedding.from_file(path)
    assert emb.subwords is not None and emb.subwords.minn == 3 and emb.subwords.maxn == 6
    for word in OOV_WORDS:
        assert word not in emb
        np.testing.assert_allclose(emb[word], kv[word], rtol=0, atol=1e-5, err_msg=word)
    batch = emb[OOV_WORDS]  # the batched path equals the single-word path
    np.testing.assert_allclose(batch, np.stack([emb[w] for w in OOV_WORDS]), atol=1e-7)
    # gensim gives "</s>" n-grams in both layouts; fastText's current layout does not
    words = [w for w in emb.idx_to_token[:200] if w != "</s>"]
    np.testing.assert_allclose(emb[words], np.stack([kv[w] for w in words]), atol=1e-5)


@needs_data
def test_supervised_model_without_subwords_gives_zeros_for_oov():
    emb = TokenEmbedding.from_file(VECTORS / "pang_lee_polarity_fasttext.bin",
                                   encoding_errors="replace")
    assert emb.subwords.maxn == 0 and len(emb) == 1694  # the 2 labels are not words
    np.testing.assert_array_equal(emb["nonexistentword"], np.zeros(100, np.float32))


@needs_data
def test_explicit_unknown_policy_overrides_subwords():
    emb = TokenEmbedding.from_file(VECTORS / "crime-and-punishment.bin", unknown="zeros")
    np.testing.assert_array_equal(emb["nonexistentword"], np.zeros(5, np.float32))


@needs_data
def test_cache_keeps_subwords(tmp_path):
    emb = TokenEmbedding.from_file(VECTORS / "lee_fasttext.bin")
    emb.save(tmp_path / "lee.cache")
    loaded = TokenEmbedding.load(tmp_path / "lee.cache")
    np.testing.assert_array_equal(loaded.idx_to_vec, emb.idx_to_vec)
    np.testing.assert_array_equal(loaded[OOV_WORDS], emb[OOV_WORDS])
    assert loaded["</s>"].tolist() == emb["</s>"].tolist()


# ------------------------------------------------- a tiny model gensim trains (no ../shared)
GENERATED_WORDS = [f"word{i}" for i in range(50)] + ["naïve", "mañanas", "пока", "Straße"]


def _train_tiny_fasttext(path: Path, max_n: int = 5):
    """A fastText model of 54 words, 8 dimensions and 500 buckets, saved by gensim in
    Facebook's binary layout; returns gensim's model (the reference)."""
    models = pytest.importorskip("gensim.models")
    fasttext = pytest.importorskip("gensim.models.fasttext")
    rng = np.random.default_rng(0)
    sentences = [[GENERATED_WORDS[i] for i in rng.integers(0, len(GENERATED_WORDS), 10)]
                 for _ in range(300)]
    model = models.FastText(vector_size=8, window=3, min_count=1, min_n=3, max_n=max_n,
                            bucket=500, epochs=2, seed=1, workers=1)
    model.build_vocab(corpus_iterable=sentences)
    model.train(corpus_iterable=sentences, total_examples=len(sentences), epochs=2)
    fasttext.save_facebook_model(model, str(path))
    return model


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    path = tmp_path_factory.mktemp("fasttext") / "tiny.bin"
    return path, _train_tiny_fasttext(path)


def test_generated_bin_loads_words_and_subword_settings(tiny_bin):
    path, model = tiny_bin
    emb = TokenEmbedding.from_file(path)            # format detected from the magic number
    assert sorted(emb.idx_to_token) == sorted(GENERATED_WORDS)
    assert emb.idx_to_token == list(model.wv.index_to_key)
    assert emb.idx_to_vec.shape == (54, 8) and emb.idx_to_vec.dtype == np.float32
    sub = emb.subwords
    assert (sub.minn, sub.maxn, sub.bucket) == (3, 5, 500)
    assert sub.ngram_vectors.shape == (500, 8)


def test_generated_bin_in_vocab_and_oov_vectors_equal_gensim(tiny_bin):
    path, model = tiny_bin
    emb = TokenEmbedding.from_file(path)
    fasttext = pytest.importorskip("gensim.models.fasttext")
    kv = fasttext.load_facebook_vectors(str(path))
    np.testing.assert_allclose(emb[GENERATED_WORDS], np.stack([model.wv[w] for w in
                                                               GENERATED_WORDS]), atol=1e-6)
    for word in OOV_WORDS:
        assert word not in emb
        vector = emb[word]
        assert np.abs(vector).max() > 0, word      # built from n-grams, not a zero row
        np.testing.assert_allclose(vector, kv[word], rtol=0, atol=1e-6, err_msg=word)
        np.testing.assert_allclose(vector, model.wv[word], rtol=0, atol=1e-6, err_msg=word)
    np.testing.assert_allclose(emb[OOV_WORDS], np.stack([emb[w] for w in OOV_WORDS]),
                               atol=1e-7)


def test_generated_bin_oov_is_the_mean_of_its_ngram_rows(tiny_bin):
    """Independent of gensim: the hashed rows of ``<word>``'s 3- to 5-grams, averaged."""
    path, _ = tiny_bin
    emb = TokenEmbedding.from_file(path)
    word = "Raskolnikovian"
    grams = [("<" + word + ">")[i:i + n].encode() for n in range(3, 6)
             for i in range(len(word) + 3 - n)]
    rows = [_fnv_reference(g) % 500 for g in grams]
    expected = emb.subwords.ngram_vectors[rows].mean(axis=0)
    np.testing.assert_allclose(emb[word], expected, atol=1e-6)


def test_generated_bin_cache_and_unknown_policy(tiny_bin, tmp_path):
    path, _ = tiny_bin
    emb = TokenEmbedding.from_file(path)
    loaded = TokenEmbedding.load(emb.save(tmp_path / "tiny.cache"))
    np.testing.assert_array_equal(loaded.idx_to_vec, emb.idx_to_vec)
    np.testing.assert_array_equal(loaded[OOV_WORDS], emb[OOV_WORDS])
    zeros = TokenEmbedding.from_file(path, unknown="zeros")
    np.testing.assert_array_equal(zeros["nonexistentword"], np.zeros(8, np.float32))


def test_truncated_model_is_an_error(tmp_path):
    path = tmp_path / "m.bin"
    path.write_bytes(struct.pack("<2i", 793712314, 12) + struct.pack("<12i", *range(1, 13)))
    with pytest.raises(EmbeddingFormatError, match=r"m.bin: byte 56: file ends inside the "
                                                   "training args"):
        TokenEmbedding.from_file(path, format="fasttext_bin")
