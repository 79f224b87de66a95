"""Cached, checksummed downloads and archive extraction.

Files land in ``textkit_home()`` (``$TEXTKIT_HOME``, default ``~/.textkit``). A download streams
into a temporary file in the destination folder, is verified, and only then renamed into place,
so an interrupted or corrupt download never leaves a half-written file under the final name.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import os
import shutil
import stat
import tarfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import IO, Any

from tqdm.auto import tqdm

from textkit._io import atomic_path, scratch_dir
from textkit.errors import TextkitError

__all__ = [
    "ChecksumError",
    "OfflineError",
    "UnsafeArchiveError",
    "check_existing",
    "download",
    "extract_archive",
    "fetch",
    "fetch_archive",
    "file_hash",
    "textkit_home",
    "verify_file",
]

_CHUNK = 1 << 20
_HASHES = ("sha256", "sha1", "md5")


class ChecksumError(TextkitError, ValueError):
    """A file's checksum differs from the expected one; the message names the file (or url),
    both digests and what to do. A file that was already there is never modified or deleted."""


class UnsafeArchiveError(TextkitError, ValueError):
    """An archive member with an absolute name, a ``..`` part, or a link or device; the message
    names the archive and the member. Nothing is extracted."""


class OfflineError(TextkitError, OSError):
    """A needed file is absent and could not be downloaded; names the files and their folder."""

    def __init__(self, files: Sequence[str | os.PathLike], folder: str | os.PathLike,
                 urls: Sequence[str] = (), reason: str = ""):
        self.files = [Path(f).name for f in files]
        self.folder = Path(folder)
        self.urls = list(urls)
        self.reason = reason
        lines = [f"Missing file(s) {', '.join(self.files)} and the download failed"
                 + (f": {reason}" if reason else ".")]
        if self.urls:
            lines.append("Get them from: " + ", ".join(self.urls))
        lines.append(f"Place them in the folder {self.folder} "
                     "(or point root / TEXTKIT_HOME there).")
        super().__init__("\n".join(lines))


def textkit_home() -> Path:
    """The cache folder: ``$TEXTKIT_HOME`` if set, else ``~/.textkit``."""
    return Path(os.environ.get("TEXTKIT_HOME", "~/.textkit")).expanduser()


def file_hash(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of a file, read in 1 MiB chunks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _expected_hash(sha256: str | None, sha1: str | None, md5: str | None) -> tuple[str, str] | None:
    given = [(name, value) for name, value in zip(_HASHES, (sha256, sha1, md5)) if value]
    if len(given) > 1:
        raise ValueError(f"give at most one checksum, got {[name for name, _ in given]}")
    return (given[0][0], given[0][1].lower()) if given else None


def verify_file(path: str | os.PathLike, *, sha256: str | None = None, sha1: str | None = None,
                md5: str | None = None) -> bool:
    """True if ``path`` exists and matches the given checksum (any existing file if none given)."""
    path = Path(path)
    if not path.is_file():
        return False
    expected = _expected_hash(sha256, sha1, md5)
    return expected is None or file_hash(path, expected[0]) == expected[1]


def check_existing(path: str | os.PathLike, checksum: tuple[str, str] | None) -> bool:
    """True if ``path`` is a file matching ``checksum`` ((algorithm, hexdigest) or None),
    False if it is absent. A mismatch raises ``ChecksumError`` with both digests; the file is
    left exactly as it is."""
    path = Path(path)
    if not path.is_file():
        return False
    if checksum is None:
        return True
    algorithm, expected = checksum[0], checksum[1].lower()
    actual = file_hash(path, algorithm)
    if actual != expected:
        raise ChecksumError(
            f"{path}: checksum mismatch: expected {algorithm} {expected}, got {actual}. The "
            "file was left unchanged; delete it to download it again, or pass the root that "
            "holds the right file.")
    return True


def download(url: str, path: str | os.PathLike, *, sha256: str | None = None,
             sha1: str | None = None, md5: str | None = None, progress: bool = True,
             overwrite: bool = False) -> Path:
    """Download ``url`` (http(s)://, ftp:// or file://) to ``path`` and verify its checksum.

    An existing ``path`` that matches the checksum (or any existing file when no checksum is
    given) is kept; one that does not match raises ``ChecksumError`` and is left unchanged,
    unless ``overwrite``. A download that does not match raises ``ChecksumError`` naming the
    url and both digests (nothing is left behind); an unreadable url raises ``OfflineError``
    naming the file and folder.
    """
    path = Path(path)
    expected = _expected_hash(sha256, sha1, md5)
    if not overwrite and check_existing(path, expected):
        return path
    digest = hashlib.new(expected[0] if expected else "sha256")
    with atomic_path(path, suffix=".part") as tmp, open(tmp, "wb") as out:
        try:
            response = urllib.request.urlopen(url, timeout=60)
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise OfflineError([path], path.parent, [url], reason=str(err)) from err
        with response:
            total = response.headers.get("Content-Length")
            total = int(total) if total else None
            received = 0
            with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                      desc=f"download {path.name}", disable=not progress) as bar:
                try:
                    for chunk in iter(lambda: response.read(_CHUNK), b""):
                        out.write(chunk)
                        digest.update(chunk)
                        received += len(chunk)
                        bar.update(len(chunk))
                except (http.client.HTTPException, ConnectionError, TimeoutError) as err:
                    raise OfflineError([path], path.parent, [url], reason=(
                        f"interrupted after {received:,} bytes ({err!r}); nothing was kept, "
                        "run again to download it anew")) from err
            if total is not None and received != total:
                raise OfflineError([path], path.parent, [url], reason=(
                    f"interrupted: {received:,} of {total:,} bytes arrived; nothing was kept, "
                    "run again to download it anew"))
        if expected is not None and digest.hexdigest() != expected[1]:
            raise ChecksumError(
                f"checksum mismatch for {url}: expected {expected[0]} {expected[1]}, "
                f"got {digest.hexdigest()}; the downloaded file was deleted")
    return path


def fetch(urls: Sequence[str], path: str | os.PathLike, *,
          checksum: tuple[str, str] | None = None, progress: bool = True) -> Path:
    """``download`` from the first of ``urls`` (a canonical url, then mirrors) that answers
    with a matching file.

    ``checksum`` is ``(algorithm, hexdigest)`` or None. A ``path`` that is already there and
    matches is kept; one that does not match raises ``ChecksumError`` and is left unchanged.
    A mirror that is unreachable or gives a mismatching file is skipped. When none succeeds:
    ``ChecksumError`` if some mirror gave a mismatching file, else ``OfflineError`` naming
    ``path``, its folder and every url.
    """
    path = Path(path)
    if check_existing(path, checksum):
        return path
    hashes = {} if checksum is None else {checksum[0]: checksum[1]}
    errors: list[str] = []
    mismatched = False
    for url in urls:
        try:
            return download(url, path, progress=progress, **hashes)
        except OfflineError as err:
            errors.append(f"{url}: {err.reason}")
        except ChecksumError as err:
            mismatched = True
            errors.append(str(err))
    if mismatched:
        raise ChecksumError(f"no url gave a file matching the checksum for {path}: "
                            + "; ".join(errors))
    raise OfflineError([path], path.parent, urls, reason="; ".join(errors))


def fetch_archive(urls: Sequence[str], archive: str | os.PathLike, dest: str | os.PathLike, *,
                  checksum: tuple[str, str] | None = None, members: Iterable[str] | None = None,
                  flatten: bool = False, progress: bool = True) -> list[Path]:
    """``fetch`` the ``archive`` (kept when present and verified), then ``extract_archive`` it
    into ``dest``; returns the extracted paths."""
    fetch(urls, archive, checksum=checksum, progress=progress)
    return extract_archive(archive, dest, members=members, flatten=flatten)


def _archive_kind(archive: Path) -> str:
    name = archive.name.lower()
    if name.endswith(".zip"):
        return "zip"
    if name.endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")):
        return "tar"
    if name.endswith(".gz"):
        return "gz"
    raise ValueError(f"{archive}: unknown archive type "
                     "(expected .zip, .tar[.gz|.bz2|.xz], .tgz or .gz)")


def _member_path(archive: Path, name: str) -> PurePosixPath | None:
    """The member's path relative to the destination (None for ``.`` or ``""``).

    Absolute names (``/x``, ``C:\\x``, ``\\x``) and names with a ``..`` part raise
    ``UnsafeArchiveError`` naming the archive and the member.
    """
    posix = name.replace("\\", "/")
    if posix.startswith("/") or PureWindowsPath(name).drive:
        raise UnsafeArchiveError(f"{archive}: member {name!r} has an absolute name and would be "
                                 "extracted outside the destination; refusing the archive")
    parts = [part for part in posix.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(f"{archive}: member {name!r} contains '..' and would be "
                                 "extracted outside the destination; refusing the archive")
    return PurePosixPath(*parts) if parts else None


def _tar_members(archive: Path, tf: tarfile.TarFile) -> list[tuple[PurePosixPath, Any]]:
    """``(relative path, TarInfo)`` of the regular files; refuses links, devices and FIFOs."""
    files = []
    for member in tf.getmembers():
        rel = _member_path(archive, member.name)
        if member.issym() or member.islnk():
            kind = "a symbolic link" if member.issym() else "a hard link"
            raise UnsafeArchiveError(f"{archive}: member {member.name!r} is {kind} (to "
                                     f"{member.linkname!r}); refusing the archive")
        if member.isdev():
            raise UnsafeArchiveError(f"{archive}: member {member.name!r} is a device or FIFO; "
                                     "refusing the archive")
        if member.isfile() and rel is not None:
            files.append((rel, member))
    return files


def _zip_members(archive: Path, zf: zipfile.ZipFile) -> list[tuple[PurePosixPath, Any]]:
    """``(relative path, ZipInfo)`` of the regular files; refuses links and devices."""
    files = []
    for info in zf.infolist():
        rel = _member_path(archive, info.filename)
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            raise UnsafeArchiveError(f"{archive}: member {info.filename!r} is a symbolic link; "
                                     "refusing the archive")
        if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise UnsafeArchiveError(f"{archive}: member {info.filename!r} is a device or "
                                     "FIFO; refusing the archive")
        if not info.is_dir() and rel is not None:
            files.append((rel, info))
    return files


def _copy_into(staging: Path, rel: str, source: IO[bytes] | None) -> None:
    target = staging / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out:
        if source is not None:
            with source:
                shutil.copyfileobj(source, out, _CHUNK)


def extract_archive(archive: str | os.PathLike, dest: str | os.PathLike,
                    members: Iterable[str] | None = None, flatten: bool = False) -> list[Path]:
    """Extract a .zip, .tar(.gz/.bz2/.xz)/.tgz or single-file .gz archive into ``dest``.

    ``members`` limits extraction to those archive paths (with ``flatten``: to those base
    names, wherever they sit in the archive). ``flatten`` writes every file directly into
    ``dest``. Every member is checked first: an absolute name, a ``..`` part, a (sym or hard)
    link or a device raises ``UnsafeArchiveError`` naming the archive and the member, and
    nothing is extracted. Files are written into a temporary folder inside ``dest`` and then
    renamed into place, so a failure leaves no partial files and nothing outside ``dest`` is
    ever written, moved or deleted. Returns the extracted file paths.
    """
    archive, dest = Path(archive), Path(dest)
    kind = _archive_kind(archive)
    wanted = None if members is None else set(members)

    def output(rel: PurePosixPath) -> str:
        return rel.name if flatten else rel.as_posix()

    with contextlib.ExitStack() as stack:
        if kind == "gz":
            opened = stack.enter_context(gzip.open(archive, "rb"))
            files = [(PurePosixPath(archive.name[: -len(".gz")]), None)]
        elif kind == "zip":
            zf = stack.enter_context(zipfile.ZipFile(archive))
            files = _zip_members(archive, zf)
        else:
            tf = stack.enter_context(tarfile.open(archive))
            files = _tar_members(archive, tf)
        files = [(rel, info) for rel, info in files if wanted is None or output(rel) in wanted]
        outputs = [output(rel) for rel, _ in files]
        if flatten and len(set(outputs)) != len(outputs):
            raise ValueError(f"{archive}: several members share a file name, cannot flatten")
        if wanted is not None and (missing := wanted - set(outputs)):
            raise FileNotFoundError(f"{archive}: no member(s) {sorted(missing)}")
        with scratch_dir(dest, ".extract-") as staging:
            for (_, info), out_name in zip(files, outputs):
                source = (opened if kind == "gz" else zf.open(info) if kind == "zip"
                          else tf.extractfile(info))
                _copy_into(staging, out_name, source)
            return _move_into(dest, staging, list(dict.fromkeys(outputs)), archive)


def _move_into(dest: Path, staging: Path, names: list[str], archive: Path) -> list[Path]:
    """Rename ``staging/<name>`` to ``dest/<name>``, refusing any target outside ``dest``."""
    root = dest.resolve()
    extracted = []
    for name in names:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.parent.resolve().is_relative_to(root):
            raise UnsafeArchiveError(f"{archive}: member {name!r} would be extracted outside "
                                     f"{dest} (through a linked folder); refusing it")
        os.replace(staging / name, target)
        extracted.append(target)
    return extracted
