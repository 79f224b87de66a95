"""TokenEmbedding lookup, unknown policies, nearest neighbours, vocab matrix and the cache."""

from pathlib import Path

import numpy as np
import pytest

from textkit.embedding import TokenEmbedding
from textkit.vocab import Vocab

VECTORS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "embeddings" / "vectors"


@pytest.fixture()
def emb():
    vectors = np.float32([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0, 0, 1], [-1, 0, 0]])
    return TokenEmbedding(["a", "b", "c", "d", "e"], vectors)


def test_basic_access(emb):
    assert len(emb) == 5 and emb.dim == 3 and "c" in emb and "z" not in emb
    assert emb.token_to_idx["d"] == 3 and emb.idx_to_token[4] == "e"
    np.testing.assert_array_equal(emb["b"], np.float32([0.9, 0.1, 0]))
    batch = emb[["c", "zzz", "a"]]
    assert batch.shape == (3, 3) and batch.dtype == np.float32
    np.testing.assert_array_equal(batch, [[0, 1, 0], [0, 0, 0], [1, 0, 0]])
    batch[0] = 7  # lookups are copies
    assert emb["c"][0] == 0


def test_unknown_policies(emb):
    normal = TokenEmbedding(emb.idx_to_token, emb.idx_to_vec, unknown="normal", seed=3)
    x, y = normal["x"], normal["y"]
    assert x.shape == (3,) and not np.array_equal(x, y)
    np.testing.assert_array_equal(x, normal[["y", "x"]][1])  # same token, same vector
    other_seed = TokenEmbedding(emb.idx_to_token, emb.idx_to_vec, unknown="normal", seed=4)
    assert not np.array_equal(x, other_seed["x"])
    custom = TokenEmbedding(emb.idx_to_token, emb.idx_to_vec,
                            unknown=lambda t: np.full(3, len(t), np.float32))
    np.testing.assert_array_equal(custom[["hello", "a"]], [[5, 5, 5], [1, 0, 0]])
    with pytest.raises(ValueError, match="unknown must be"):
        TokenEmbedding(emb.idx_to_token, emb.idx_to_vec, unknown="ones")
    bad = TokenEmbedding(emb.idx_to_token, emb.idx_to_vec, unknown=lambda t: np.zeros(2))
    with pytest.raises(ValueError, match=r"shape \(2,\) for 'q', expected \(3,\)"):
        bad["q"]


def test_most_similar(emb):
    result = emb.most_similar("a", k=2)
    assert [t for t, _ in result] == ["b", "c"]
    assert result[0][1] == pytest.approx(0.9 / np.hypot(0.9, 0.1))
    assert [t for t, _ in emb.most_similar("a", k=2, exclude=["b"])] == ["c", "d"]
    assert [t for t, _ in emb.most_similar(np.float32([-1, 0, 0]), k=1)] == ["e"]
    assert len(emb.most_similar("a", k=100)) == 4


@pytest.mark.skipif(not VECTORS.is_dir(), reason=f"shared data absent: {VECTORS}")
def test_most_similar_matches_gensim():
    gensim_models = pytest.importorskip("gensim.models")
    path = VECTORS / "lee_fasttext.vec"
    emb = TokenEmbedding.from_file(path)
    kv = gensim_models.KeyedVectors.load_word2vec_format(str(path))
    for word in ("the", "police", "said"):
        ours = emb.most_similar(word, k=5)
        theirs = kv.most_similar(word, topn=5)
        assert [t for t, _ in ours] == [t for t, _ in theirs]
        np.testing.assert_allclose([s for _, s in ours], [s for _, s in theirs], atol=1e-5)


def test_for_vocab_with_real_vocab(emb):
    vocab = Vocab({"a": 3, "d": 2, "nope": 1})
    assert vocab.idx_to_token == ["<unk>", "<pad>", "<bos>", "<eos>", "a", "d", "nope"]
    matrix, found, missing = emb.for_vocab(vocab)
    assert matrix.shape == (7, 3) and matrix.dtype == np.float32
    assert found == 2 and missing == ["<unk>", "<pad>", "<bos>", "<eos>", "nope"]
    np.testing.assert_array_equal(matrix[4:6], emb[["a", "d"]])
    np.testing.assert_array_equal(matrix[[0, 1, 2, 3, 6]], 0)
    seeded, _, _ = emb.for_vocab(vocab, unknown="normal")
    assert (np.abs(seeded[[0, 1, 2, 3, 6]]).sum(axis=1) > 0).all()
    np.testing.assert_array_equal(seeded[4:6], matrix[4:6])


def test_for_vocab_accepts_any_object_with_idx_to_token(emb):
    class Tiny:
        idx_to_token = ["e", "x"]

        def __len__(self):
            return 2

    result = emb.for_vocab(Tiny())
    assert result.found == 1 and result.missing == ["x"]


def test_save_and_mmap_load(emb, tmp_path):
    path = emb.save(tmp_path / "cache")
    loaded = TokenEmbedding.load(path)
    assert loaded.idx_to_token == emb.idx_to_token
    assert isinstance(loaded.idx_to_vec, np.memmap) and not loaded.idx_to_vec.flags.writeable
    np.testing.assert_array_equal(loaded.idx_to_vec, emb.idx_to_vec)
    np.testing.assert_array_equal(loaded[["a", "zz"]], emb[["a", "zz"]])
    in_memory = TokenEmbedding.load(path, mmap=False)
    assert not isinstance(in_memory.idx_to_vec, np.memmap)
    # saving again replaces the folder atomically and leaves no temporary folders behind
    TokenEmbedding(["q"], np.ones((1, 2), np.float32)).save(path)
    assert TokenEmbedding.load(path).idx_to_token == ["q"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]


def test_load_rejects_a_damaged_cache(emb, tmp_path):
    path = emb.save(tmp_path / "cache")
    (path / "tokens.txt").write_text("a\nb")
    with pytest.raises(ValueError, match="the cache is damaged"):
        TokenEmbedding.load(path)
    with pytest.raises(FileNotFoundError, match="not an embedding cache"):
        TokenEmbedding.load(tmp_path)
