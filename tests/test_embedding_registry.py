"""Registry of pretrained sources, exercised with local file:// URLs only."""

import gzip
import hashlib
import zipfile

import numpy as np
import pytest

from textkit.data.download import ChecksumError, OfflineError
from textkit.embedding import (
    EmbeddingFormatError,
    PretrainedSource,
    create,
    get_source,
    list_sources,
    register_source,
    registry,
)

GLOVE_TEXT = b"the 0.5 -1.25 3\nof 1 2 3\nand -0.5 0 1e-2\n"


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch, tmp_path):
    """Sources a test registers disappear after it; downloads go to a private cache."""
    monkeypatch.setattr(registry, "_SOURCES", dict(registry._SOURCES))
    monkeypatch.setenv("TEXTKIT_HOME", str(tmp_path / "home"))


def test_known_sources_and_urls():
    names = list_sources()
    assert len(names["glove"]) == 10 and "glove.twitter.27B.25d" in names["glove"]
    assert "GoogleNews-vectors-negative300" in names["word2vec"]
    for name in ("crawl-300d-2M", "crawl-300d-2M-subword", "wiki-news-300d-1M",
                 "wiki-news-300d-1M-subword", "wiki.<lang>", "cc.<lang>.300.bin"):
        assert name in names["fasttext"]
    glove = get_source("glove", "glove.6B.100d")
    assert glove.url == "https://nlp.stanford.edu/data/glove.6B.zip"
    assert glove.member == "glove.6B.100d.txt" and glove.file_sha1 is not None
    assert get_source("glove", "glove.840B.300d").url.endswith("/glove.840B.300d.zip")
    de = get_source("fasttext", "wiki.de")
    assert de.url == "https://dl.fbaipublicfiles.com/fasttext/vectors-wiki/wiki.de.vec"
    assert de.url_sha1 is None  # no published digest: never invented
    cc = get_source("fasttext", "cc.fr.300.bin")
    assert cc.url.endswith("vectors-crawl/cc.fr.300.bin.gz") and cc.format == "fasttext_bin"
    assert get_source("fasttext", "wiki.en").file_sha1 == "c1e418f144ceb332b4328d27addf508731fa87df"
    with pytest.raises(KeyError, match="unknown glove source 'glove.7B'"):
        get_source("glove", "glove.7B")
    with pytest.raises(KeyError, match="unknown embedding kind"):
        list_sources("bert")


@pytest.fixture()
def zipped_glove(tmp_path):
    remote = tmp_path / "remote"
    remote.mkdir()
    archive = remote / "tiny.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("tiny/tiny.50d.txt", GLOVE_TEXT)
        zf.writestr("tiny/other.txt", b"x 1\n")
    return archive


def test_create_downloads_extracts_verifies_and_caches(tmp_path, zipped_glove):
    register_source(PretrainedSource(
        "glove", "tiny.50d", zipped_glove.as_uri(), "tiny.50d.txt", "glove",
        member="tiny.50d.txt", url_sha1=hashlib.sha1(zipped_glove.read_bytes()).hexdigest(),
        file_sha1=hashlib.sha1(GLOVE_TEXT).hexdigest()))
    root = tmp_path / "root"
    root.mkdir()
    emb = create("glove", "tiny.50d", root=root, progress=False)
    assert emb.idx_to_token == ["the", "of", "and"]
    np.testing.assert_array_equal(emb["the"], np.float32([0.5, -1.25, 3]))
    assert list(root.iterdir()) == []  # downloads go to the cache, never into a user's root
    home = tmp_path / "home" / "embeddings" / "glove"
    assert (home / "tiny.50d.txt").is_file() and not (home / "other.txt").exists()
    assert (home / "tiny.50d.cache" / "vectors.npy").is_file()
    zipped_glove.unlink()  # a second create needs neither the network nor the text
    (home / "tiny.50d.txt").unlink()
    again = create("glove", "tiny.50d", root=root)
    assert isinstance(again.idx_to_vec, np.memmap)
    np.testing.assert_array_equal(again.idx_to_vec, emb.idx_to_vec)


def test_a_damaged_registry_cache_is_refused_and_kept(tmp_path, zipped_glove):
    register_source(PretrainedSource(
        "glove", "tiny.50d", zipped_glove.as_uri(), "tiny.50d.txt", "glove",
        member="tiny.50d.txt", file_sha1=hashlib.sha1(GLOVE_TEXT).hexdigest()))
    create("glove", "tiny.50d", progress=False)
    home = tmp_path / "home" / "embeddings" / "glove"
    cache = home / "tiny.50d.cache"
    (cache / "vectors.npy").write_bytes((cache / "vectors.npy").read_bytes()[:60])
    before = {p.relative_to(home): p.read_bytes() for p in home.rglob("*") if p.is_file()}
    with pytest.raises(EmbeddingFormatError, match="vectors.npy") as info:
        create("glove", "tiny.50d", progress=False)
    assert "delete" in str(info.value)
    # neither rebuilt over nor removed: every file in the cache folder is as it was
    assert {p.relative_to(home): p.read_bytes() for p in home.rglob("*")
            if p.is_file()} == before
    fresh = create("glove", "tiny.50d", progress=False, cache=False)   # the text still loads
    np.testing.assert_array_equal(fresh["the"], np.float32([0.5, -1.25, 3]))


def test_create_reads_gzip_text_and_gunzips_binaries(tmp_path):
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "v.vec.gz").write_bytes(gzip.compress(b"3 3\n" + GLOVE_TEXT))
    register_source(PretrainedSource("fasttext", "tiny-gz", (remote / "v.vec.gz").as_uri(),
                                     "v.vec.gz", "word2vec_text"))
    assert len(create("fasttext", "tiny-gz", root=tmp_path / "a", cache=False)) == 3
    row = b"w " + np.float32([1, 2]).tobytes() + b"\n"
    (remote / "w.bin.gz").write_bytes(gzip.compress(b"1 2\n" + row))
    register_source(PretrainedSource("word2vec", "tiny-bin", (remote / "w.bin.gz").as_uri(),
                                     "w.bin", "word2vec_bin"))
    emb = create("word2vec", "tiny-bin", root=tmp_path / "b", cache=False)
    np.testing.assert_array_equal(emb["w"], [1, 2])


def test_bad_checksum_leaves_nothing(tmp_path, zipped_glove):
    register_source(PretrainedSource("glove", "tiny-bad", zipped_glove.as_uri(), "tiny.50d.txt",
                                     "glove", member="tiny.50d.txt", url_sha1="0" * 40))
    root = tmp_path / "root"
    with pytest.raises(ChecksumError):
        create("glove", "tiny-bad", root=root, progress=False)
    assert not any(p.is_file() for p in root.rglob("*"))
    assert not any(p.is_file() for p in (tmp_path / "home").rglob("*"))


def test_offline_error_names_file_and_folder(tmp_path):
    missing = tmp_path / "nowhere" / "gone.txt"
    register_source(PretrainedSource("glove", "gone", missing.as_uri(), "gone.txt", "glove"))
    with pytest.raises(OfflineError, match=r"gone.txt[\s\S]*Place them in the folder"):
        create("glove", "gone", root=tmp_path / "root", progress=False)
