"""Loaders on the shared real vector files and on small hand-made awkward files."""

import gzip
import warnings
from pathlib import Path

import numpy as np
import pytest

from textkit.embedding import EmbeddingFormatError, TokenEmbedding, detect_format
from textkit.embedding.float_parser import FIELD_PAD, parse_fields
from textkit.embedding.text_format import read_text_vectors

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "embeddings"
VECTORS = DATA / "vectors"
needs_data = pytest.mark.skipif(not VECTORS.is_dir(), reason=f"shared data absent: {VECTORS}")

# file -> (format, count, dim), from the data's SOURCE.md
SHARED_FILES = {
    "glove.6B.100d.sample.txt": ("glove", 100, 100),
    "glove.6B.100d.sample.txt.gz": ("glove", 100, 100),
    "glove.6B.300d.sample.txt": ("glove", 100, 300),
    "glove.6B.300d.sample.txt.gz": ("glove", 100, 300),
    "glove.840B.300d.first100.txt": ("glove", 100, 300),
    "test_glove.txt": ("glove", 76, 50),
    "lee_fasttext.vec": ("word2vec_text", 1762, 10),
    "crime-and-punishment.vec": ("word2vec_text", 291, 5),
    "EN.1-10.cbow1_wind5_hs0_neg10_size300_smpl1e-05.txt": ("word2vec_text", 20, 300),
    "IT.1-10.cbow1_wind5_hs0_neg10_size300_smpl1e-05.txt": ("word2vec_text", 20, 300),
    "euclidean_vectors.bin": ("word2vec_bin", 2747, 10),
    "lee_fasttext.bin": ("fasttext_bin", 1762, 10),
    "crime-and-punishment.bin": ("fasttext_bin", 291, 5),
    "pang_lee_polarity_fasttext.bin": ("fasttext_bin", 1694, 100),
}


@needs_data
@pytest.mark.parametrize("name", sorted(SHARED_FILES))
def test_shared_file_loads_with_count_and_dim(name):
    expected_format, count, dim = SHARED_FILES[name]
    assert detect_format(VECTORS / name) == expected_format
    errors = "replace" if name.startswith("pang_lee") else "strict"  # raw cp1252 bytes inside
    emb = TokenEmbedding.from_file(VECTORS / name, encoding_errors=errors)
    assert len(emb) == count and emb.dim == dim
    assert emb.idx_to_vec.dtype == np.float32 and emb.idx_to_vec.shape == (count, dim)
    assert np.isfinite(emb.idx_to_vec).all()


@needs_data
def test_glove_values_and_gzip_equal_plain():
    emb = TokenEmbedding.from_file(VECTORS / "glove.6B.100d.sample.txt")
    np.testing.assert_array_equal(emb["the"][:3], np.float32([-0.038194, -0.24487, 0.72812]))
    gz = TokenEmbedding.from_file(VECTORS / "glove.6B.100d.sample.txt.gz")
    assert gz.idx_to_token == emb.idx_to_token
    np.testing.assert_array_equal(gz.idx_to_vec, emb.idx_to_vec)


@needs_data
@pytest.mark.parametrize("name", ["glove.840B.300d.first100.txt", "lee_fasttext.vec",
                                  "EN.1-10.cbow1_wind5_hs0_neg10_size300_smpl1e-05.txt",
                                  "test_glove.txt"])
def test_text_values_equal_python_float(name):
    """Every value equals float32(float(text)): the bulk parser is exact."""
    emb = TokenEmbedding.from_file(VECTORS / name)
    lines = (VECTORS / name).read_bytes().decode("utf-8").splitlines()
    if emb.dim + 1 != len(lines[0].split()):
        lines = lines[1:]
    expected = np.array([[float(x) for x in line.split()[-emb.dim:]] for line in lines],
                        dtype=np.float32)
    np.testing.assert_array_equal(emb.idx_to_vec, expected)
    assert emb.idx_to_token == [line.rsplit(maxsplit=emb.dim)[0] for line in lines]


@needs_data
def test_unicode_tokens():
    emb = TokenEmbedding.from_file(VECTORS / "test_glove.txt")
    for token in ("ö", "é", "हु", "ü", "हि", "या"):
        assert token in emb
    assert "и" in TokenEmbedding.from_file(VECTORS / "crime-and-punishment.vec")


@needs_data
def test_wrong_header_count_warns_and_uses_rows():
    with pytest.warns(UserWarning, match=r"declares 2,519,370 vectors but 99 follow"):
        emb = TokenEmbedding.from_file(VECTORS / "fasttext.wiki.en.first99.vec")
    assert len(emb) == 99 and emb.dim == 300 and "</s>" in emb


@needs_data
def test_invalid_utf8_names_the_line_unless_replace():
    path = VECTORS / "pang_lee_polarity_fasttext.vec"
    bad_line = next(i for i, line in enumerate(path.read_bytes().split(b"\n"), 1)
                    if b"\x97" in line)
    with pytest.raises(EmbeddingFormatError, match=rf"line {bad_line}: token .* not valid UTF-8"):
        TokenEmbedding.from_file(path)
    emb = TokenEmbedding.from_file(path, encoding_errors="replace")
    assert len(emb) == 1694 and emb.dim == 100
    assert "\ufffd" in emb.idx_to_token[bad_line - 2]


@needs_data
def test_word2vec_binary_matches_gensim():
    gensim_models = pytest.importorskip("gensim.models")
    path = VECTORS / "euclidean_vectors.bin"
    emb = TokenEmbedding.from_file(path)
    kv = gensim_models.KeyedVectors.load_word2vec_format(str(path), binary=True)
    assert emb.idx_to_token == kv.index_to_key
    np.testing.assert_array_equal(emb.idx_to_vec, kv.vectors)


@pytest.mark.parametrize("binary", [True, False])
def test_generated_word2vec_files_written_by_gensim_load_equal(tmp_path, binary):
    """word2vec binary and text files that gensim writes (unicode tokens, 7 significant digits
    in text): detected, and read as gensim reads them; the GloVe layout (no header) too."""
    gensim_models = pytest.importorskip("gensim.models")
    rng = np.random.default_rng(0)
    tokens = [f"w{i}" for i in range(200)] + ["naïve", "привет", "日本語", "a.b", "</s>"]
    kv = gensim_models.KeyedVectors(vector_size=7)
    kv.add_vectors(tokens, rng.normal(size=(len(tokens), 7)).astype(np.float32))
    path = tmp_path / ("v.bin" if binary else "v.txt")
    kv.save_word2vec_format(str(path), binary=binary)
    emb = TokenEmbedding.from_file(path)
    assert detect_format(path) == ("word2vec_bin" if binary else "word2vec_text")
    loaded = gensim_models.KeyedVectors.load_word2vec_format(str(path), binary=binary)
    assert emb.idx_to_token == loaded.index_to_key == tokens
    np.testing.assert_array_equal(emb.idx_to_vec, loaded.vectors)
    if not binary:          # the same rows without the header line: GloVe's layout
        glove = tmp_path / "glove.txt"
        glove.write_bytes(b"\n".join(path.read_bytes().split(b"\n")[1:]))
        np.testing.assert_array_equal(TokenEmbedding.from_file(glove).idx_to_vec,
                                      loaded.vectors)


# ---------------------------------------------------------------------------- hand-made files
def _write(tmp_path, text: bytes, name="v.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text)
    return path


def test_tokens_with_spaces_under_a_header(tmp_path):
    path = _write(tmp_path, b"3 2\nnew york 1.5 -2\na 0.25 0.5\nb  c\t 1e-3 .5\n")
    tokens, vectors = read_text_vectors(path)
    assert tokens == ["new york", "a", "b  c"]
    np.testing.assert_array_equal(vectors, np.float32([[1.5, -2], [0.25, 0.5], [1e-3, 0.5]]))


def test_crlf_trailing_spaces_blank_lines_and_no_final_newline(tmp_path):
    path = _write(tmp_path, b"x 1 2 \r\n\r\ny 3 4\r\n\nz 5 6")
    tokens, vectors = read_text_vectors(path)
    assert tokens == ["x", "y", "z"]
    np.testing.assert_array_equal(vectors, np.float32([[1, 2], [3, 4], [5, 6]]))


def test_wrong_value_count_names_the_line(tmp_path):
    path = _write(tmp_path, b"a 1 2 3\nb 1 2 3\nc 1 2\n")
    with pytest.raises(EmbeddingFormatError, match=r"v.txt: line 3: expected a token and 3 "
                                                   r"values, found 3 fields"):
        TokenEmbedding.from_file(path)


def test_unparsable_float_names_line_and_value(tmp_path):
    path = _write(tmp_path, b"2 3\na 1 2 3\nb 1 2x 3\n")
    with pytest.raises(EmbeddingFormatError, match=r"line 3: value 2 of 3 is not a number: b'2x'"):
        TokenEmbedding.from_file(path)


def test_header_misread_as_glove_gets_a_hint(tmp_path):
    path = _write(tmp_path, b"2 3\na 1 2 3\nb 1 2 3\n")
    with pytest.raises(EmbeddingFormatError, match="use format='word2vec_text'"):
        TokenEmbedding.from_file(path, format="glove")


def test_duplicates_keep_first_with_warning(tmp_path):
    path = _write(tmp_path, b"a 1 1\nb 2 2\na 3 3\nb 4 4\nc 5 5\n")
    with pytest.warns(UserWarning, match="2 duplicate token rows dropped"):
        emb = TokenEmbedding.from_file(path)
    assert emb.idx_to_token == ["a", "b", "c"]
    np.testing.assert_array_equal(emb.idx_to_vec[:, 0], [1, 2, 5])


def test_many_blocks_and_gzip(tmp_path):
    """Block boundaries fall mid-line; results equal one-block parsing and the .gz copy."""
    rng = np.random.default_rng(0)
    values = rng.normal(size=(500, 7)).astype(np.float32)
    text = "".join(f"w{i} " + " ".join(f"{x:.6f}" for x in row) + "\n"
                   for i, row in enumerate(values)).encode()
    path = _write(tmp_path, text)
    gz = tmp_path / "v.txt.gz"
    gz.write_bytes(gzip.compress(text))
    whole = read_text_vectors(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        small_blocks = read_text_vectors(path, block_bytes=333)
        from_gz = read_text_vectors(gz, block_bytes=1000)
    expected = np.array([[float(f"{x:.6f}") for x in row] for row in values], dtype=np.float32)
    for tokens, vectors in (whole, small_blocks, from_gz):
        assert tokens == [f"w{i}" for i in range(500)]
        np.testing.assert_array_equal(vectors, expected)


def test_truncated_word2vec_binary(tmp_path):
    row = b"wwww " + np.arange(3, dtype="<f4").tobytes() + b"\n"
    path = _write(tmp_path, b"3 3\n" + row * 2 + row[:7], name="v.bin")
    with pytest.raises(EmbeddingFormatError, match=r"row 3 .*file ends"):
        TokenEmbedding.from_file(path, format="word2vec_bin")


# ---------------------------------------------------------------------------- float parser
def _parse(texts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    data = b" ".join(texts) + b"\n"
    buffer = np.full(FIELD_PAD + len(data) + 8, 0x20, dtype=np.uint8)
    buffer[FIELD_PAD : FIELD_PAD + len(data)] = np.frombuffer(data, np.uint8)
    is_space = buffer <= 0x20
    edges = np.flatnonzero(is_space[1:] != is_space[:-1]) + 1
    return parse_fields(buffer, edges[0::2], edges[1::2])


def test_float_parser_matches_python_float_on_edge_cases():
    texts = [b"0", b"-0", b"5.", b".5", b"-.5", b"+3.25", b"12345678", b"-1234567.",
             b"123456789012345", b"1234567890123456", b"0.000000000000001", b"99999999.9999999",
             b"1e-5", b"-2.5E+3", b"nan", b"-inf", b"0.123456789012345678", b"007.50"]
    values, invalid = _parse(texts)
    assert invalid.size == 0
    expected = np.array([float(t) for t in texts], dtype=np.float32)
    np.testing.assert_array_equal(values, expected)


def test_float_parser_random_decimals_are_exact():
    rng = np.random.default_rng(1)
    numbers = rng.normal(scale=10.0 ** rng.integers(-4, 6, 3000), size=3000)
    texts = [f"{x:.{d}f}".encode() for x, d in zip(numbers, rng.integers(0, 12, 3000))]
    values, invalid = _parse(texts)
    assert invalid.size == 0
    np.testing.assert_array_equal(values, np.array([float(t) for t in texts], dtype=np.float32))


def test_float_parser_reports_invalid_fields():
    values, invalid = _parse([b"1", b"abc", b"-", b"1.2.3", b"2", b"0.1-", b"1x"])
    assert invalid.tolist() == [1, 2, 3, 5, 6]
    assert values[0] == 1 and values[4] == 2
