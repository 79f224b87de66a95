import gzip
import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from textkit.data.download import (
    ChecksumError,
    OfflineError,
    download,
    extract_archive,
    file_hash,
    textkit_home,
    verify_file,
)

PAYLOAD = b"hello textkit\n" * 1000


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "remote" / "blob.bin"
    src.parent.mkdir()
    src.write_bytes(PAYLOAD)
    return src


def test_textkit_home_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TEXTKIT_HOME", str(tmp_path / "cache"))
    assert textkit_home() == tmp_path / "cache"
    monkeypatch.delenv("TEXTKIT_HOME")
    assert textkit_home() == Path("~/.textkit").expanduser()


def test_download_file_url_verifies_sha256_and_sha1(source, tmp_path):
    dest = tmp_path / "cache" / "blob.bin"
    got = download(source.as_uri(), dest, sha256=hashlib.sha256(PAYLOAD).hexdigest(),
                   progress=False)
    assert got == dest and dest.read_bytes() == PAYLOAD
    assert file_hash(dest, "sha1") == hashlib.sha1(PAYLOAD).hexdigest()
    dest2 = tmp_path / "cache" / "blob2.bin"
    download(source.as_uri(), dest2, sha1=hashlib.sha1(PAYLOAD).hexdigest(), progress=False)
    assert dest2.read_bytes() == PAYLOAD
    assert sorted(p.name for p in dest.parent.iterdir()) == ["blob.bin", "blob2.bin"]


def test_download_checksum_mismatch_deletes_and_names_everything(source, tmp_path):
    dest = tmp_path / "cache" / "blob.bin"
    wrong = "0" * 64
    with pytest.raises(ChecksumError) as info:
        download(source.as_uri(), dest, sha256=wrong, progress=False)
    message = str(info.value)
    assert source.as_uri() in message
    assert wrong in message
    assert hashlib.sha256(PAYLOAD).hexdigest() in message
    assert list(dest.parent.iterdir()) == []  # neither the file nor a temp file is left


def test_download_keeps_valid_existing_file_and_never_touches_a_corrupt_one(source, tmp_path):
    dest = tmp_path / "blob.bin"
    sha = hashlib.sha256(PAYLOAD).hexdigest()
    dest.write_bytes(b"corrupt")
    assert not verify_file(dest, sha256=sha)
    with pytest.raises(ChecksumError, match="checksum mismatch") as info:
        download(source.as_uri(), dest, sha256=sha, progress=False)
    assert str(dest) in str(info.value) and sha in str(info.value)
    assert dest.read_bytes() == b"corrupt"  # a file that was there is never modified
    download(source.as_uri(), dest, sha256=sha, progress=False, overwrite=True)
    assert dest.read_bytes() == PAYLOAD
    source.unlink()  # a valid cached file needs no network
    assert download(source.as_uri(), dest, sha256=sha, progress=False) == dest


def test_download_unreachable_names_file_and_folder(tmp_path):
    dest = tmp_path / "cache" / "corpus.zip"
    url = (tmp_path / "nowhere" / "corpus.zip").as_uri()
    with pytest.raises(OfflineError) as info:
        download(url, dest, progress=False)
    message = str(info.value)
    assert "corpus.zip" in message and str(dest.parent) in message and url in message
    assert list(dest.parent.iterdir()) == []


def test_download_rejects_two_checksums(source, tmp_path):
    with pytest.raises(ValueError, match="at most one"):
        download(source.as_uri(), tmp_path / "x", sha256="a", sha1="b", progress=False)


def test_extract_zip_tar_gz(tmp_path):
    zpath = tmp_path / "a.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("corpus/train.txt", "a b\n")
        zf.writestr("corpus/test.txt", "c\n")
    out = extract_archive(zpath, tmp_path / "z")
    assert sorted(p.relative_to(tmp_path / "z").as_posix() for p in out) == [
        "corpus/test.txt", "corpus/train.txt"]
    assert (tmp_path / "z" / "corpus" / "train.txt").read_text() == "a b\n"
    only = extract_archive(zpath, tmp_path / "z1", members=["corpus/test.txt"])
    assert [p.name for p in only] == ["test.txt"]
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        extract_archive(zpath, tmp_path / "z2", members=["missing.txt"])

    flat = extract_archive(zpath, tmp_path / "f", members=["train.txt"], flatten=True)
    assert flat == [tmp_path / "f" / "train.txt"] and flat[0].read_text() == "a b\n"

    tpath = tmp_path / "b.tar.gz"
    with tarfile.open(tpath, "w:gz") as tf:
        data = b"x y z\n"
        info = tarfile.TarInfo("dir/valid.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    out = extract_archive(tpath, tmp_path / "t")
    assert out == [tmp_path / "t" / "dir" / "valid.txt"]
    assert out[0].read_bytes() == b"x y z\n"

    gpath = tmp_path / "c.txt.gz"
    gpath.write_bytes(gzip.compress(b"plain\n"))
    out = extract_archive(gpath, tmp_path / "g")
    assert out == [tmp_path / "g" / "c.txt"] and out[0].read_bytes() == b"plain\n"
    assert [p.name for p in (tmp_path / "g").iterdir()] == ["c.txt"]  # staging folder removed


def test_extract_refuses_path_traversal_and_unknown_type(tmp_path):
    zpath = tmp_path / "evil.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("../escape.txt", "x")
    with pytest.raises(ValueError, match="outside"):
        extract_archive(zpath, tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()
    with pytest.raises(ValueError, match="unknown archive type"):
        extract_archive(tmp_path / "file.rar", tmp_path / "out")


class _CutResponse(io.BytesIO):
    """A response that says ``length`` bytes and then fails (``error``) or ends short."""

    def __init__(self, body: bytes, length: int, error: Exception | None):
        super().__init__(body)
        self.headers = {"Content-Length": str(length)}
        self.error = error

    def read(self, size=-1):
        chunk = super().read(size)
        if not chunk and self.error is not None:
            raise self.error
        return chunk


@pytest.mark.parametrize("error", [ConnectionResetError(104, "Connection reset by peer"), None])
def test_an_interrupted_download_is_named_and_leaves_nothing(tmp_path, monkeypatch, error):
    """A connection cut mid-file, or a body shorter than its Content-Length (no checksum to
    catch it), is one OfflineError saying how much arrived; no partial file is kept."""
    import urllib.request

    monkeypatch.setattr(urllib.request, "urlopen",
                        lambda url, timeout: _CutResponse(b"x" * 1000, 5000, error))
    dest = tmp_path / "cache" / "corpus.zip"
    with pytest.raises(OfflineError, match="interrupted.*1,000.*run again") as info:
        download("https://example.org/corpus.zip", dest, progress=False)
    assert "corpus.zip" in str(info.value) and str(dest.parent) in str(info.value)
    assert list(dest.parent.iterdir()) == []
