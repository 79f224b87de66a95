"""Bad inputs at the data edges (issue 15): archives, checksums, caches, empty splits, GluonNLP
compatibility of vocab / batchify / samplers. Every case asserts the error type, that the
message names the file, member or sample, and that nothing was lost or touched."""

import hashlib
import io
import json
import stat
import tarfile
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from textkit.batchify import Dict, Pad, Stack
from textkit.batchify import NamedTuple as NamedTupleFn
from textkit.data import registry
from textkit.data.datasets import (
    LanguageModelCorpus,
    ParallelTextDataset,
    TextLineDataset,
    TSVDataset,
)
from textkit.data.download import (
    ChecksumError,
    OfflineError,
    UnsafeArchiveError,
    extract_archive,
    fetch,
)
from textkit.data.lm import BPTTBatches
from textkit.data.registry import DatasetInfo, Source, get_dataset, register_dataset
from textkit.data.samplers import FixedBucketSampler, bucket_boundaries
from textkit.data.tokenizers import SentencePieceTokenizer
from textkit.vocab import Vocab


@pytest.fixture(autouse=True)
def private_cache(monkeypatch, tmp_path):
    """Downloads go to a cache in the test's folder; test entries leave the registry after."""
    monkeypatch.setenv("TEXTKIT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder`` with its bytes and mtime."""
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------- archives
def _tar(path: Path, members: list[tarfile.TarInfo], data: bytes = b"payload") -> Path:
    with tarfile.open(path, "w") as tf:
        for info in members:
            if info.isfile():
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                tf.addfile(info)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize("flatten", [True, False])
def test_tar_member_with_absolute_name_moves_nothing_from_outside(tmp_path, flatten):
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("precious")
    archive = _tar(tmp_path / "evil.tar", [_member(str(victim))])
    before = _snapshot(tmp_path / "elsewhere")
    with pytest.raises(UnsafeArchiveError) as info:
        extract_archive(archive, tmp_path / "dest", flatten=flatten)
    message = str(info.value)
    assert str(archive) in message and str(victim) in message and "absolute" in message
    assert _snapshot(tmp_path / "elsewhere") == before  # not moved, not modified
    assert not (tmp_path / "dest").exists() or not any((tmp_path / "dest").rglob("*"))


@pytest.mark.parametrize("member,word", [
    (_member("../escape.txt"), "'..'"),
    (_member("a/../../escape.txt"), "'..'"),
    (_member("link", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
    (_member("hard", tarfile.LNKTYPE, "other.txt"), "hard link"),
    (_member("dev", tarfile.CHRTYPE), "device"),
    (_member("fifo", tarfile.FIFOTYPE), "FIFO"),
])
def test_tar_refuses_traversal_links_and_devices(tmp_path, member, word):
    archive = _tar(tmp_path / "bad.tar", [_member("ok.txt"), member])
    with pytest.raises(UnsafeArchiveError, match=word) as info:
        extract_archive(archive, tmp_path / "dest")
    assert str(archive) in str(info.value) and repr(member.name) in str(info.value)
    assert not (tmp_path / "escape.txt").exists()
    assert not any(p.is_file() for p in (tmp_path / "dest").rglob("*"))


def _zip(path: Path, name: str, mode: int | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("ok.txt", "fine")
        info = zipfile.ZipInfo(name)
        if mode is not None:
            info.external_attr = mode << 16
        zf.writestr(info, "x")
    return path


@pytest.mark.parametrize("name,mode,word", [
    ("/abs/escape.txt", None, "absolute"),
    ("C:\\escape.txt", None, "absolute"),
    ("../escape.txt", None, "'..'"),
    ("link", stat.S_IFLNK | 0o777, "symbolic link"),
    ("dev", stat.S_IFCHR | 0o600, "device"),
])
def test_zip_refuses_the_same(tmp_path, name, mode, word):
    archive = _zip(tmp_path / "bad.zip", name, mode)
    with pytest.raises(UnsafeArchiveError, match=word) as info:
        extract_archive(archive, tmp_path / "dest", flatten=True)
    assert str(archive) in str(info.value) and repr(name) in str(info.value)
    assert not (tmp_path / "escape.txt").exists()
    assert not any(p.is_file() for p in (tmp_path / "dest").rglob("*"))


def test_safe_archive_still_extracts_and_overwrites_only_inside(tmp_path):
    archive = _tar(tmp_path / "fine.tar", [_member("./dir/a.txt"), _member("b.txt")])
    out = extract_archive(archive, tmp_path / "dest")
    assert sorted(p.relative_to(tmp_path / "dest").as_posix() for p in out) == [
        "b.txt", "dir/a.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest", "fine.tar"]


# ---------------------------------------------------------------------------- checksums
def _entry(name: str, files: dict[str, bytes], urls: dict[str, list[str]]) -> None:
    """Register a one-segment corpus whose files are published with these bytes' sha256."""
    sources = tuple(Source(rel, tuple(urls[rel]), ("sha256", hashlib.sha256(data).hexdigest()))
                    for rel, data in files.items())
    register_dataset(DatasetInfo(
        name=name, folder=name, description="test", segments={"train": {"text": "a.txt"},
                                                              "test": {"text": "b.txt"}},
        sources=sources, build=lambda root, paths, **kw: TextLineDataset(paths["text"])),
        overwrite=True)


def test_user_file_with_wrong_checksum_is_never_modified(tmp_path):
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "a.txt").write_bytes(b"real\n")
    _entry("bad_sum", {"a.txt": b"real\n", "b.txt": b"b\n"},
           {"a.txt": [(remote / "a.txt").as_uri()], "b.txt": [(remote / "b.txt").as_uri()]})
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_bytes(b"my edited copy\n")
    before = _snapshot(root)
    with pytest.raises(ChecksumError) as info:
        get_dataset("bad_sum", "train", root=root, progress=False)
    message = str(info.value)
    assert "checksum mismatch" in message and str(root / "a.txt") in message
    assert hashlib.sha256(b"real\n").hexdigest() in message
    assert hashlib.sha256(b"my edited copy\n").hexdigest() in message
    assert "delete it" in message and "root" in message
    assert _snapshot(root) == before
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("*.txt"))


def test_offline_error_never_calls_an_existing_file_missing(tmp_path):
    _entry("offline_sum", {"a.txt": b"real\n", "b.txt": b"b\n"},
           {"a.txt": [(tmp_path / "nowhere").as_uri()], "b.txt": [(tmp_path / "no").as_uri()]})
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_bytes(b"edited\n")
    with pytest.raises(ChecksumError) as info:
        get_dataset("offline_sum", "train", root=root, progress=False)
    assert "Missing" not in str(info.value) and "checksum mismatch" in str(info.value)
    with pytest.raises(OfflineError, match="b.txt"):  # a truly missing file is named
        get_dataset("offline_sum", "test", root=root, progress=False)
    assert (root / "a.txt").read_bytes() == b"edited\n"


def test_downloads_go_to_the_cache_never_into_root(tmp_path):
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "b.txt").write_bytes(b"from the net\n")
    _entry("to_cache", {"a.txt": b"mine\n", "b.txt": b"from the net\n"},
           {"a.txt": [], "b.txt": [(remote / "b.txt").as_uri()]})
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_bytes(b"mine\n")
    before = _snapshot(root)
    assert list(get_dataset("to_cache", "train", root=root, progress=False)) == ["mine"]
    assert list(get_dataset("to_cache", "test", root=root, progress=False)) == ["from the net"]
    assert _snapshot(root) == before
    assert (tmp_path / "home" / "datasets" / "to_cache" / "b.txt").read_bytes() == (
        b"from the net\n")


def test_checksum_mismatch_on_one_mirror_tries_the_next(tmp_path):
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_bytes(b"right\n")
    bad.write_bytes(b"wrong\n")
    checksum = ("sha256", hashlib.sha256(b"right\n").hexdigest())
    target = tmp_path / "cache" / "f.txt"
    assert fetch([bad.as_uri(), good.as_uri()], target, checksum=checksum,
                 progress=False).read_bytes() == b"right\n"
    other = tmp_path / "cache" / "g.txt"
    with pytest.raises(ChecksumError) as info:
        fetch([bad.as_uri(), (tmp_path / "none").as_uri()], other, checksum=checksum,
              progress=False)
    assert bad.as_uri() in str(info.value) and not other.exists()


def test_zip_archive_in_user_root_is_extracted_into_the_cache(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    with zipfile.ZipFile(root / "c.zip", "w") as zf:
        zf.writestr("c/a.txt", "zipped\n")
    register_dataset(DatasetInfo(
        name="zipped", folder="zipped", description="test", segments={"train": {"t": "a.txt"}},
        sources=(Source("c.zip", ((tmp_path / "none").as_uri(),), None, members=("a.txt",)),),
        build=lambda root, paths, **kw: TextLineDataset(paths["t"])), overwrite=True)
    before = _snapshot(root)
    assert list(get_dataset("zipped", root=root, progress=False)) == ["zipped"]
    assert _snapshot(root) == before
    assert (tmp_path / "home" / "datasets" / "zipped" / "a.txt").is_file()


# ---------------------------------------------------------------------------- empty splits
def test_empty_split_is_named_at_load_time(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_bytes(b"\n  \n")
    register_dataset(DatasetInfo(
        name="empty_split", folder="empty_split", description="test",
        segments={"train": {"t": "a.txt"}},
        sources=(Source("a.txt", ((tmp_path / "none").as_uri(),), None),),
        build=lambda root, paths, **kw: TextLineDataset(paths["t"])), overwrite=True)
    with pytest.raises(ValueError, match="segment 'train'") as info:
        get_dataset("empty_split", "train", root=root, progress=False)
    assert str(root / "a.txt") in str(info.value)
    with pytest.raises(ValueError, match="no segment 'dev'.*available"):
        get_dataset("empty_split", "dev", root=root, progress=False)


@pytest.mark.parametrize("make", [
    lambda p: TextLineDataset(p),
    lambda p: ParallelTextDataset(p, p),
    lambda p: LanguageModelCorpus(p),
    lambda p: TSVDataset(p),
])
def test_dataset_readers_refuse_an_empty_file(tmp_path, make):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"\n\n")
    with pytest.raises(ValueError, match="no samples|no pair") as info:
        make(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == b"\n\n"


def test_empty_file_is_allowed_when_asked(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    assert len(TextLineDataset(path, allow_empty=True)) == 0
    assert len(LanguageModelCorpus(path, allow_empty=True)) == 0


def test_missing_split_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="gone.txt"):
        TextLineDataset(tmp_path / "gone.txt")


@pytest.mark.parametrize("text", [[], ["", "   ", "\t"]])
def test_sentencepiece_on_empty_text_is_a_clear_value_error(tmp_path, text):
    with pytest.raises(ValueError, match="empty") as info:
        SentencePieceTokenizer.train(text, tmp_path / "m", 20, verbose=False)
    assert "INTERNAL" not in str(info.value)
    empty = tmp_path / "train.txt"
    empty.write_bytes(b"\n\n")
    with pytest.raises(ValueError, match="no non-blank line") as info:
        SentencePieceTokenizer.train(empty, tmp_path / "m", 20, verbose=False)
    assert str(empty) in str(info.value)
    assert not (tmp_path / "m.model").exists()


# ---------------------------------------------------------------------------- GluonNLP
GLUON_VOCAB = {
    "idx_to_token": ["<unk>", "<pad>", "<bos>", "<eos>", "<mask>", "the", "a"],
    "token_to_idx": {"<unk>": 0, "<pad>": 1, "<bos>": 2, "<eos>": 3, "<mask>": 4, "the": 5,
                     "a": 6},
    "reserved_tokens": ["<pad>", "<bos>", "<eos>", "<mask>"],
    "unknown_token": "<unk>",
    "identifiers_to_tokens": {"padding_token": "<pad>", "bos_token": "<bos>",
                              "eos_token": "<eos>", "mask_token": "<mask>"},
}


@pytest.mark.parametrize("old_layout", [False, True])
def test_gluonnlp_vocab_json_keeps_special_roles(tmp_path, old_layout):
    state = json.loads(json.dumps(GLUON_VOCAB))
    if old_layout:  # GluonNLP < 0.8 wrote the roles as top-level keys
        state.update({"padding_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>"})
        del state["identifiers_to_tokens"]
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps(state))
    for vocab in (Vocab.load(path), Vocab.from_json(path.read_text()),
                  Vocab.from_gluonnlp_json(path.read_text())):
        assert (vocab.unk_id, vocab.pad_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
        assert vocab["never seen"] == 0 and vocab["the"] == 5
        assert vocab.idx_to_token == GLUON_VOCAB["idx_to_token"]
        assert "<mask>" in vocab.reserved_tokens or old_layout
        assert Vocab.from_json(vocab.to_json()) == vocab


def test_damaged_gluonnlp_vocab_is_refused(tmp_path):
    state = json.loads(json.dumps(GLUON_VOCAB))
    state["token_to_idx"]["the"] = 6
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps(state))
    with pytest.raises(ValueError, match="token_to_idx disagrees") as info:
        Vocab.load(path)
    assert str(path) in str(info.value)


def test_vocab_of_a_str_is_a_type_error():
    with pytest.raises(TypeError, match="split the text"):
        Vocab("some text")
    with pytest.raises(TypeError, match="idx_to_token"):
        Vocab.from_tokens("abc")


class Pair(NamedTuple):
    ids: list
    label: int


def test_batchify_namedtuple_and_dict_check_callables_at_construction():
    with pytest.raises(TypeError, match="field 'label'"):
        NamedTupleFn(Pair, [Pad(pad_val=0), 3])
    with pytest.raises(TypeError, match="field 'label'"):
        NamedTupleFn(Pair, {"ids": Pad(pad_val=0), "label": "stack"})
    with pytest.raises(TypeError, match="NamedTuple class"):
        NamedTupleFn(tuple, [Stack()])
    with pytest.raises(TypeError, match="field 'y'"):
        Dict({"x": Stack(), "y": None})
    out = NamedTupleFn(Pair, [Pad(pad_val=0), Stack()])([Pair([1, 2], 0), Pair([3], 1)])
    np.testing.assert_array_equal(out.ids, [[1, 2], [3, 0]])


@pytest.mark.parametrize("pad_id", [None, "0", 1.5])
def test_bptt_pad_id_is_checked_at_construction(pad_id):
    with pytest.raises(TypeError, match="pad_id"):
        BPTTBatches(np.arange(100), 2, 5, pad_id=pad_id)


@pytest.mark.parametrize("scheme,keys", [
    ("constant", [23, 31]), ("linear", [21, 31]), ("exp", [23, 31])])
def test_bucket_schemes_agree_with_gluonnlp(scheme, keys):
    # GluonNLP 0.10: ConstWidthBucket()(31, 16, 2) == [31, 23]; LinearWidthBucket gives
    # [21, 31] and ExpWidthBucket(1.1) [23, 31]; FixedBucketSampler sorts them.
    assert bucket_boundaries(16, 31, 2, scheme).tolist() == keys
    lengths = list(range(16, 32))
    for round_to in (None, 8):
        sampler = FixedBucketSampler(lengths, 8, num_buckets=2, bucket_scheme=scheme,
                                     round_to=round_to)
        assert sampler.bucket_keys.ravel().tolist() == keys
        counts = [sum(1 for n in lengths if n <= keys[0]), sum(1 for n in lengths
                                                               if n > keys[0])]
        assert sampler.bucket_counts.tolist() == counts
        assert len(sampler) == sum(-(-c // 8) for c in counts)
        for batch in sampler:
            assert all(lengths[i] <= batch.shape.lengths[0] for i in batch)


def test_bucket_schemes_longer_range():
    # constant: width (1 + 45 - 5) // 16 = 2, keys 45, 43, ..., 15
    assert bucket_boundaries(5, 45, 16, "constant").tolist() == list(range(15, 46, 2))
    # linear: alpha = 2 * (45 - 5 - 4) / 20 = 3.6; keys round(5 + 3.6 * (1, 3, 6, 10) + i + 1)
    assert bucket_boundaries(5, 45, 4, "linear").tolist() == [10, 18, 30, 45]
    # exp: first width 40 * 0.1 / (1.1**4 - 1); keys round(5 + w * (1.1**(i+1) - 1) / 0.1)
    assert bucket_boundaries(5, 45, 4, "exp").tolist() == [14, 23, 34, 45]
