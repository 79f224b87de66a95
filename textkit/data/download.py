"""Cached, checksummed downloads and archive extraction.

Files land in ``textkit_home()`` (``$TEXTKIT_HOME``, default ``~/.textkit``). A download streams
into a temporary file in the destination folder, is verified, and only then renamed into place,
so an interrupted or corrupt download never leaves a half-written file under the final name.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tarfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from tqdm.auto import tqdm

from textkit._io import atomic_path, scratch_dir

__all__ = [
    "ChecksumError",
    "OfflineError",
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


class ChecksumError(ValueError):
    """A file's checksum differs from the expected one (the bad file was deleted)."""


class OfflineError(OSError):
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


def download(url: str, path: str | os.PathLike, *, sha256: str | None = None,
             sha1: str | None = None, md5: str | None = None, progress: bool = True,
             overwrite: bool = False) -> Path:
    """Download ``url`` (http(s)://, ftp:// or file://) to ``path`` and verify its checksum.

    An existing ``path`` that matches the checksum (or any existing file when no checksum is
    given) is kept unless ``overwrite``. Raises ``ChecksumError`` naming the url, the expected and
    the actual digest when the download does not match (nothing is left behind), and
    ``OfflineError`` naming the file and folder when the url cannot be read.
    """
    path = Path(path)
    expected = _expected_hash(sha256, sha1, md5)
    if not overwrite and verify_file(path, sha256=sha256, sha1=sha1, md5=md5):
        return path
    digest = hashlib.new(expected[0] if expected else "sha256")
    with atomic_path(path, suffix=".part") as tmp, open(tmp, "wb") as out:
        try:
            response = urllib.request.urlopen(url, timeout=60)
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise OfflineError([path], path.parent, [url], reason=str(err)) from err
        with response:
            total = response.headers.get("Content-Length")
            with tqdm(total=int(total) if total else None, unit="B", unit_scale=True,
                      unit_divisor=1024, desc=f"download {path.name}",
                      disable=not progress) as bar:
                for chunk in iter(lambda: response.read(_CHUNK), b""):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
        if expected is not None and digest.hexdigest() != expected[1]:
            raise ChecksumError(
                f"checksum mismatch for {url}: expected {expected[0]} {expected[1]}, "
                f"got {digest.hexdigest()}; the downloaded file was deleted")
    return path


def fetch(urls: Sequence[str], path: str | os.PathLike, *,
          checksum: tuple[str, str] | None = None, progress: bool = True) -> Path:
    """``download`` from the first of ``urls`` (a canonical url, then mirrors) that answers.

    ``checksum`` is ``(algorithm, hexdigest)`` or None. A ``path`` that is already there and
    matches is kept. Raises ``OfflineError`` naming ``path``, its folder and every url when
    none answers, ``ChecksumError`` when a download does not match.
    """
    path = Path(path)
    hashes = {} if checksum is None else {checksum[0]: checksum[1]}
    errors = []
    for url in urls:
        try:
            return download(url, path, progress=progress, **hashes)
        except OfflineError as err:
            errors.append(err.reason)
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


def extract_archive(archive: str | os.PathLike, dest: str | os.PathLike,
                    members: Iterable[str] | None = None, flatten: bool = False) -> list[Path]:
    """Extract a .zip, .tar(.gz/.bz2/.xz)/.tgz or single-file .gz archive into ``dest``.

    ``members`` limits extraction to those archive paths (with ``flatten``: to those base
    names, wherever they sit in the archive). ``flatten`` writes every file directly into
    ``dest``. Files are first extracted into a temporary folder inside ``dest`` and then renamed
    into place, so a failure leaves no partial files. Paths that would escape ``dest`` are
    refused. Returns the extracted file paths.
    """
    archive, dest = Path(archive), Path(dest)
    kind = _archive_kind(archive)
    dest.mkdir(parents=True, exist_ok=True)
    wanted = None if members is None else set(members)

    def selected(name: str) -> bool:
        return wanted is None or (PurePosixPath(name).name if flatten else name) in wanted

    with scratch_dir(dest, ".extract-") as staging:
        if kind == "gz":
            names = [archive.name[: -len(".gz")]]
            with gzip.open(archive, "rb") as src, open(staging / names[0], "wb") as out:
                shutil.copyfileobj(src, out, _CHUNK)
        elif kind == "zip":
            with zipfile.ZipFile(archive) as zf:
                names = [n for n in zf.namelist() if not n.endswith("/") and selected(n)]
                for name in names:
                    _check_inside(staging, name, archive)
                    zf.extract(name, staging)
        else:
            with tarfile.open(archive) as tf:
                infos = [m for m in tf.getmembers() if m.isfile() and selected(m.name)]
                tf.extractall(staging, members=infos, filter="data")
                names = [m.name for m in infos]
        outputs = [PurePosixPath(n).name if flatten else n for n in names]
        if len(set(outputs)) != len(outputs):
            raise ValueError(f"{archive}: several members share a file name, cannot flatten")
        if wanted is not None and (missing := wanted - set(outputs)):
            raise FileNotFoundError(f"{archive}: no member(s) {sorted(missing)}")
        extracted = []
        for name, output in zip(names, outputs):
            target = dest / output
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / name, target)
            extracted.append(target)
        return extracted


def _check_inside(root: Path, name: str, archive: Path) -> None:
    if not (root / name).resolve().is_relative_to(root.resolve()):
        raise ValueError(f"{archive}: member {name!r} would be extracted outside {root}")
