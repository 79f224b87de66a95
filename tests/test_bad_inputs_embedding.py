"""Bad embedding files (issue 15): every malformed row, header, binary layout and cache gets an
error naming the file and the line/row; the input file is never changed."""

import json
import time

import numpy as np
import pytest

from textkit.embedding import EmbeddingFormatError, TokenEmbedding
from textkit.vocab import Vocab


def _write(tmp_path, data: bytes, name: str = "vectors.txt"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _refused(path, match: str, **kwargs) -> str:
    """Load ``path``, expect an EmbeddingFormatError naming it, check the file is unchanged."""
    before = path.read_bytes()
    with pytest.raises(EmbeddingFormatError, match=match) as info:
        TokenEmbedding.from_file(path, **kwargs)
    assert str(path) in str(info.value)
    assert path.read_bytes() == before
    return str(info.value)


GLOVE = b"the 0.1 0.2 0.3\nof 0.4 0.5 0.6\nand 0.7 0.8 0.9\n"


def test_glove_row_with_extra_values_is_refused_not_folded_into_the_token(tmp_path):
    path = _write(tmp_path, GLOVE + b"after 0.37711 -0.34471 1 2 3\n")
    message = _refused(path, r"line 4", format="glove")
    assert "after" in message and "expected 3" in message


def test_glove_row_with_missing_values_names_the_line(tmp_path):
    path = _write(tmp_path, GLOVE + b"short 0.1 0.2\n")
    _refused(path, r"line 4: expected a token and 3 values, found 3 fields", format="glove")


def test_token_with_spaces_is_still_accepted(tmp_path):
    path = _write(tmp_path, GLOVE + b". . . 1 2 3\n")
    emb = TokenEmbedding.from_file(path, format="glove")
    np.testing.assert_array_equal(emb[". . ."], [1, 2, 3])


@pytest.mark.parametrize("header,match", [
    (b"3 2\n", r"line 2: .*expected 2 \(the header's D\)"),
    (b"3 4\n", r"line 2: expected a token and 4 values \(the header's D\)"),
])
def test_header_dimension_that_disagrees_with_rows(tmp_path, header, match):
    path = _write(tmp_path, header + GLOVE, name="v.vec")
    _refused(path, match, format="word2vec_text")
    _refused(path, match)  # detected format


@pytest.mark.parametrize("value", [b"nan", b"inf", b"-inf", b"NaN"])
def test_non_finite_values_are_refused_unless_allowed(tmp_path, value):
    path = _write(tmp_path, GLOVE + b"bad 0.1 " + value + b" 0.3\n")
    _refused(path, r"line 4: value 2 of 3 is not finite", format="glove")
    emb = TokenEmbedding.from_file(path, format="glove", allow_nonfinite=True)
    assert not np.isfinite(emb["bad"][1])


@pytest.mark.parametrize("header", [b"", b"3 3\n"])
def test_utf8_bom_is_stripped(tmp_path, header):
    path = _write(tmp_path, b"\xef\xbb\xbf" + header + GLOVE)
    emb = TokenEmbedding.from_file(path)
    assert emb.idx_to_token == ["the", "of", "and"]
    np.testing.assert_allclose(emb["the"], [0.1, 0.2, 0.3], rtol=1e-6)


def _bin_row(word: bytes, values) -> bytes:
    return word + b" " + np.asarray(values, dtype="<f4").tobytes() + b"\n"


@pytest.mark.parametrize("header", [b"100000000000 300\n", b"2 100000000000\n", b"2 0\n"])
def test_word2vec_bin_impossible_header_is_refused_without_a_huge_allocation(tmp_path, header):
    path = _write(tmp_path, header + _bin_row(b"a", [1, 2]) * 2, name="v.bin")
    start = time.perf_counter()
    message = _refused(path, r"line 1: the header declares", format="word2vec_bin")
    assert time.perf_counter() - start < 5  # refused from the header, nothing read row by row
    assert "MemoryError" not in message


def test_word2vec_bin_non_finite_row_is_named(tmp_path):
    path = _write(tmp_path, b"2 2\n" + _bin_row(b"a", [1, 2]) + _bin_row(b"b", [np.nan, 2]),
                  name="v.bin")
    _refused(path, r"row 2", format="word2vec_bin")
    assert np.isnan(TokenEmbedding.from_file(path, format="word2vec_bin",
                                             allow_nonfinite=True)["b"][0])


@pytest.mark.parametrize("format", ["word2vec_bin", None, "glove", "fasttext_bin"])
def test_empty_file_names_the_path(tmp_path, format):
    path = _write(tmp_path, b"", name="empty.bin")
    with pytest.raises((EmbeddingFormatError, ValueError)) as info:
        TokenEmbedding.from_file(path, format=format)
    assert str(path) in str(info.value) and "mmap" not in str(info.value)


# ---------------------------------------------------------------------------- cache
@pytest.fixture
def cache(tmp_path):
    emb = TokenEmbedding(["a", "b", "c"], np.arange(6, dtype=np.float32).reshape(3, 2))
    return emb.save(tmp_path / "emb.cache")


@pytest.mark.parametrize("damage,name,match", [
    (lambda d: (d / "meta.json").write_text("{not json"), "meta.json", "not valid JSON"),
    (lambda d: (d / "meta.json").write_text('{"format_version": 1}'), "meta.json", "'count'"),
    (lambda d: (d / "vectors.npy").write_bytes((d / "vectors.npy").read_bytes()[:60]),
     "vectors.npy", "not a readable"),
    (lambda d: (d / "vectors.npy").unlink(), "vectors.npy", "missing"),
    (lambda d: (d / "tokens.txt").write_bytes(b"a\nb"), "emb.cache", "2 tokens"),
    (lambda d: (d / "tokens.txt").write_bytes(b"a\n\xff\nc"), "tokens.txt", "line 2"),
    (lambda d: np.save(d / "vectors.npy", np.zeros((3, 2), np.int64)), "vectors.npy", "int64"),
])
def test_damaged_cache_names_the_file(cache, damage, name, match):
    damage(cache)
    before = {p.name: p.read_bytes() for p in cache.iterdir()}
    with pytest.raises(EmbeddingFormatError, match=match) as info:
        TokenEmbedding.load(cache)
    assert name in str(info.value) and "delete" in str(info.value)
    # the damaged cache survives as it was, for the user to inspect or delete
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == before
    assert sorted(p.name for p in cache.parent.iterdir()) == ["emb.cache"]


def test_intact_cache_round_trips(cache):
    emb = TokenEmbedding.load(cache)
    np.testing.assert_array_equal(emb["c"], [4, 5])
    assert json.loads((cache / "meta.json").read_text())["count"] == 3


# ---------------------------------------------------------------------------- no rows
@pytest.mark.parametrize("unknown", [None, "zeros", "normal"])
def test_embedding_without_rows_handles_lookup_and_for_vocab(unknown):
    emb = TokenEmbedding([], np.zeros((0, 4), np.float32), unknown=unknown)
    assert emb["anything"].shape == (4,)
    assert emb.lookup(["a", "b"]).shape == (2, 4)
    matrix, found, missing = emb.for_vocab(Vocab(["x", "y"]))
    assert matrix.shape == (6, 4) and found == 0 and len(missing) == 6
    assert np.isfinite(matrix).all()
    assert emb.most_similar(np.ones(4, np.float32)) == []
