import dataclasses
import hashlib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from textkit.data.datasets import (
    LanguageModelCorpus,
    ParallelTextDataset,
    TextLineDataset,
    TSVDataset,
)
from textkit.data.download import ChecksumError, OfflineError
from textkit.data.registry import (
    DatasetInfo,
    Source,
    get_dataset,
    get_dataset_info,
    list_datasets,
    register_dataset,
)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(autouse=True)
def private_cache(monkeypatch, tmp_path):
    """Downloads go to a cache inside the test's folder."""
    monkeypatch.setenv("TEXTKIT_HOME", str(tmp_path / "home"))


def shared(folder: str) -> Path:
    path = DATA / folder
    if not path.exists():
        pytest.skip(f"shared data folder {path} not found")
    return path


def test_text_line_dataset(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"\xef\xbb\xbf" + " first \r\n\n second\u2028half\nlast".encode())
    assert list(TextLineDataset(path)) == ["first", "second\u2028half", "last"]
    assert list(TextLineDataset(path, strip=False, skip_empty=False)) == [
        " first ", "", " second\u2028half", "last"]


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"ok\nstill ok\nbad \x97 byte\n")
    with pytest.raises(ValueError, match=r"bad.txt, line 3: invalid utf-8"):
        TextLineDataset(path)


def test_parallel_length_mismatch_names_both(tmp_path):
    src, tgt = tmp_path / "x.en", tmp_path / "x.de"
    src.write_text("a\nb\nc\n")
    tgt.write_text("A\nB\n")
    with pytest.raises(ValueError) as info:
        ParallelTextDataset(src, tgt)
    message = str(info.value)
    assert str(src) in message and str(tgt) in message and "3 lines" in message
    assert "2 lines" in message
    tgt.write_text("A\n\nC\n")
    assert list(ParallelTextDataset(src, tgt)) == [("a", "A"), ("c", "C")]
    assert len(ParallelTextDataset(src, tgt, skip_empty=False)) == 3


def test_tsv_dataset(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("sentence\tlabel\nit 's good\t1\nbad\t0\n")
    rows = TSVDataset(path, num_discard_samples=1)
    assert list(rows) == [("it 's good", "1"), ("bad", "0")]
    assert list(TSVDataset(path, num_discard_samples=1, field_indices=[1])) == [("1",), ("0",)]
    path.write_text("a\tb\nc\n")
    with pytest.raises(ValueError, match=r"t.tsv, line 2: 1 fields, expected 2"):
        TSVDataset(path)


def test_lm_corpus(tmp_path):
    path = tmp_path / "lm.txt"
    path.write_text(" a b \n \n c\n")
    corpus = LanguageModelCorpus(path)
    assert list(corpus) == [["a", "b", "<eos>"], ["c", "<eos>"]]
    kept = LanguageModelCorpus(path, bos="<bos>", skip_empty=False)
    assert kept[1] == ["<bos>", "<eos>"] and kept.num_tokens == 9
    assert corpus.tokens == ["a", "b", "<eos>", "c", "<eos>"]


def test_registry_lists_required_datasets():
    names = set(list_datasets())
    assert {"multi30k", "iwslt2015", "wmt2014", "wikitext2", "wikitext103", "ptb", "mr",
            "sst2", "imdb"} <= names
    for name in names:
        info = get_dataset_info(name)
        for source in info.sources:
            assert source.urls and all(u.startswith("https://") for u in source.urls)
    with pytest.raises(ValueError, match="unknown dataset 'nope'"):
        get_dataset("nope")
    with pytest.raises(ValueError, match=r"no segment 'dev2'.*\['test', 'train', 'val'\]"):
        get_dataset("ptb", "dev2", root=DATA / "ptb")


def test_ptb_counts_from_shared_data():
    root = shared("ptb")
    counts = {seg: get_dataset("ptb", seg, root=root).num_tokens for seg in ("train", "val")}
    assert counts == {"train": 929589, "val": 73760}
    assert get_dataset("ptb", "valid", root=root).num_tokens == 73760  # alias
    assert get_dataset("ptb", "test", root=root).num_tokens == 82430


def test_wikitext2_official_counts():
    root = shared("wikitext-2")
    assert get_dataset("wikitext2", "val", root=root).num_tokens == 217646
    assert get_dataset("wikitext2", "test", root=root).num_tokens == 245569


def test_parallel_corpora_from_shared_data():
    m30k = get_dataset("multi30k", "train", root=shared("multi30k-en-de"))
    assert len(m30k) == 29000 and m30k[0][1].startswith("Zwei junge weiße Männer")
    de_en = get_dataset("multi30k", "test", root=shared("multi30k-en-de"), src_lang="de",
                        tgt_lang="en")
    assert len(de_en) == 1000 and de_en[0][1].startswith("A man")
    tok = get_dataset("multi30k_tok", "val", root=shared("multi30k-en-de"))
    assert len(tok) == 1014 and tok[0][0] == tok[0][0].lower()
    iwslt = get_dataset("iwslt2015", "test", root=shared("iwslt15-en-vi"))
    assert len(iwslt) == 1268
    with pytest.raises(ValueError, match="language 'fr'"):
        get_dataset("multi30k", "val", root=shared("multi30k-en-de"), tgt_lang="fr")


def test_mr_from_shared_data():
    mr = get_dataset("mr", "all", root=shared("mr-polarity"))
    assert len(mr) == 10662 and mr.labels.sum() == 5331
    assert mr.labels.dtype == np.int32 and mr.label_names == ("neg", "pos")


def test_missing_files_offline_error_names_files_and_folder(tmp_path):
    info = get_dataset_info("iwslt2015")
    offline = dataclasses.replace(info, name="iwslt_offline", sources=tuple(
        dataclasses.replace(s, urls=((tmp_path / "nowhere" / s.filename).as_uri(),))
        for s in info.sources))
    register_dataset(offline, overwrite=True)
    with pytest.raises(OfflineError) as err:
        get_dataset("iwslt_offline", "train", root=tmp_path / "iwslt", progress=False)
    message = str(err.value)
    assert "train.en" in message and "train.vi" in message
    assert str(tmp_path / "iwslt") in message


def test_simulated_download_verifies_checksum(tmp_path):
    ptb = shared("ptb")
    info = get_dataset_info("ptb")
    remote = {s.filename: (ptb / s.filename).as_uri() for s in info.sources}
    local = dataclasses.replace(info, name="ptb_file_url", sources=tuple(
        dataclasses.replace(s, urls=(remote[s.filename],)) for s in info.sources))
    register_dataset(local, overwrite=True)
    root = tmp_path / "home" / "datasets" / "ptb"
    assert get_dataset("ptb_file_url", "val", progress=False).num_tokens == 73760
    assert sorted(p.name for p in root.iterdir()) == ["ptb.valid.txt"]

    corrupt = tmp_path / "corrupt.txt"
    corrupt.write_bytes((ptb / "ptb.test.txt").read_bytes()[:-10])
    bad = dataclasses.replace(local, name="ptb_bad", sources=tuple(
        dataclasses.replace(s, urls=(corrupt.as_uri(),)) for s in local.sources))
    register_dataset(bad, overwrite=True)
    with pytest.raises(ChecksumError) as err:
        get_dataset("ptb_bad", "test", progress=False)
    assert "8b80168b89c18661a38ef683c0dc3721" in str(err.value)
    assert corrupt.as_uri() in str(err.value)
    assert sorted(p.name for p in root.iterdir()) == ["ptb.valid.txt"]  # nothing left


def test_simulated_archive_download_and_extraction(tmp_path):
    archive = tmp_path / "remote" / "corpus.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("corpus/train.txt", "a b\nc\n")
        zf.writestr("corpus/README", "ignored")
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    register_dataset(DatasetInfo(
        name="toy_archive", folder="toy", description="test",
        segments={"train": {"text": "train.txt"}},
        sources=(Source("corpus.zip", (archive.as_uri(),), ("sha256", sha),
                        members=("train.txt",)),),
        build=lambda root, files, **kw: LanguageModelCorpus(files["text"], **kw)),
        overwrite=True)
    root = tmp_path / "home" / "datasets" / "toy"
    corpus = get_dataset("toy_archive", progress=False)
    assert list(corpus) == [["a", "b", "<eos>"], ["c", "<eos>"]]
    assert sorted(p.name for p in root.iterdir()) == ["corpus.zip", "train.txt"]
    archive.unlink()  # cached: no second download
    (root / "train.txt").unlink()  # but re-extract from the cached, verified archive
    assert len(get_dataset("toy_archive", progress=False)) == 2


def test_default_root_uses_textkit_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTKIT_HOME", str(tmp_path))
    info = get_dataset_info("ptb")
    offline = dataclasses.replace(info, name="ptb_home", sources=tuple(
        dataclasses.replace(s, urls=((tmp_path / "none").as_uri(),)) for s in info.sources))
    register_dataset(offline, overwrite=True)
    with pytest.raises(OfflineError, match=str(tmp_path / "datasets" / "ptb")):
        get_dataset("ptb_home", "test", progress=False)


# ------------------------------------------- generated files in the catalogue's layouts
def _generated_lm_text(num_lines: int, seed: int) -> str:
    """PTB-style text: one sentence per line, blank lines in between (skipped by ``ptb``)."""
    rng = np.random.default_rng(seed)
    lines = [" ".join(f"w{i}" for i in rng.integers(0, 50, rng.integers(1, 12)))
             for _ in range(num_lines)]
    return "\n".join(line if i % 7 else "" for i, line in enumerate(lines)) + "\n"


@pytest.fixture
def generated_ptb(tmp_path):
    """``ptb``'s catalogue entry with its three files replaced by generated ones ("remote"
    file URLs with their own md5 checksums); returns the entry, the files and the cache."""
    remote = tmp_path / "remote"
    remote.mkdir()
    info = get_dataset_info("ptb")
    sources = []
    for seed, source in enumerate(info.sources):
        path = remote / source.filename
        path.write_text(_generated_lm_text(40 + 10 * seed, seed), encoding="utf-8")
        sources.append(dataclasses.replace(source, urls=(path.as_uri(),), checksum=(
            "md5", hashlib.md5(path.read_bytes()).hexdigest())))
    entry = dataclasses.replace(info, name="ptb_generated", sources=tuple(sources))
    register_dataset(entry, overwrite=True)
    return entry, remote, tmp_path / "home" / "datasets" / "ptb"


def _expected_tokens(path: Path) -> int:
    """Words plus one ``<eos>`` per non-blank line, counted without textkit."""
    lines = [line.split() for line in path.read_text(encoding="utf-8").splitlines()]
    return sum(len(words) + 1 for words in lines if words)


def test_generated_lm_corpus_counts_through_the_catalogue(generated_ptb):
    entry, remote, cache = generated_ptb
    for segment, part in (("train", "train"), ("val", "valid"), ("valid", "valid"),
                          ("test", "test")):
        corpus = get_dataset("ptb_generated", segment, progress=False)
        expected = _expected_tokens(remote / f"ptb.{part}.txt")
        assert corpus.num_tokens == len(corpus.tokens) == expected
        assert corpus.tokens.count("<eos>") == sum(
            1 for line in (remote / f"ptb.{part}.txt").read_text().splitlines() if line.strip())
    assert sorted(p.name for p in cache.iterdir()) == sorted(s.filename for s in entry.sources)


def test_checksum_error_inside_get_dataset_names_both_sums_and_leaves_nothing(generated_ptb):
    entry, remote, cache = generated_ptb
    assert get_dataset("ptb_generated", "val", progress=False).num_tokens > 0
    test_source = next(s for s in entry.sources if s.filename == "ptb.test.txt")
    corrupt = remote / "corrupt.txt"
    corrupt.write_bytes((remote / "ptb.test.txt").read_bytes()[:-10])
    bad = dataclasses.replace(entry, name="ptb_generated_bad", sources=tuple(
        dataclasses.replace(s, urls=(corrupt.as_uri(),)) for s in entry.sources))
    register_dataset(bad, overwrite=True)
    with pytest.raises(ChecksumError) as err:
        get_dataset("ptb_generated_bad", "test", progress=False)
    message = str(err.value)
    assert test_source.checksum[1] in message and corrupt.as_uri() in message
    assert hashlib.md5(corrupt.read_bytes()).hexdigest() in message
    assert sorted(p.name for p in cache.iterdir()) == ["ptb.valid.txt"]  # nothing left


def test_a_root_file_with_another_checksum_is_refused_and_left_unchanged(generated_ptb,
                                                                          tmp_path):
    root = tmp_path / "mine"
    root.mkdir()
    (root / "ptb.test.txt").write_text("not the published file\n")
    with pytest.raises(ChecksumError, match="ptb.test.txt"):
        get_dataset("ptb_generated", "test", root=root, progress=False)
    assert (root / "ptb.test.txt").read_text() == "not the published file\n"
    assert [p.name for p in root.iterdir()] == ["ptb.test.txt"]


def test_generated_polarity_files_count_sentences_and_labels(tmp_path):
    root = tmp_path / "mr"
    root.mkdir()
    (root / "rt-polarity.neg").write_text("".join(f"bad film {i}\n" for i in range(7)))
    # Latin-1 bytes, as in the original release
    (root / "rt-polarity.pos").write_bytes("".join(f"très bon {i}\n" for i in range(5))
                                           .encode("latin-1"))
    mr = get_dataset("mr", "all", root=root, progress=False)
    assert len(mr) == 12 and int(mr.labels.sum()) == 5 and mr.labels.dtype == np.int32
    assert mr.labels.tolist() == [0] * 7 + [1] * 5 and mr.label_names == ("neg", "pos")
    assert mr.texts[7] == "très bon 0" and mr[0] == ("bad film 0", 0)
