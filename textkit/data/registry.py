"""Named corpora: ``get_dataset(name, segment, root)``, ``list_datasets()``, ``register_dataset``.

The entries themselves (names, URLs, checksums, file layouts) are in ``catalogue.py``. Each entry
lists the files a segment needs (relative to its folder) and the sources they come
from: a canonical URL (plus mirrors) and the checksum its maintainers published. A file that
is missing is downloaded into ``root`` (default ``textkit_home()/datasets/<folder>``), verified
and, for archives, extracted. Files that are themselves canonical downloads are verified by
checksum when found locally; files extracted from an archive are accepted by presence. Without
network the error names the missing files and the folder to place them in.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from textkit.data.download import OfflineError, fetch, fetch_archive, textkit_home, verify_file

__all__ = ["DatasetInfo", "Source", "get_dataset", "get_dataset_info", "list_datasets",
           "register_dataset"]

_VALIDATION_ALIASES = ("val", "valid", "validation", "dev")


@dataclasses.dataclass(frozen=True)
class Source:
    """A downloadable file. With ``members`` it is an archive providing those files.

    ``checksum`` is ``(algorithm, hexdigest)`` as published, or None where none is published.
    ``flatten``: archive members are matched by base name and written directly into the
    folder; otherwise the whole archive is extracted with its paths.
    """

    filename: str
    urls: tuple[str, ...]
    checksum: tuple[str, str] | None
    members: tuple[str, ...] = ()
    flatten: bool = True

    @property
    def is_archive(self) -> bool:
        return bool(self.members)

    def provides(self, relpath: str) -> bool:
        return relpath in self.members if self.is_archive else relpath == self.filename

    def hash_kwargs(self) -> dict[str, str]:
        return {} if self.checksum is None else {self.checksum[0]: self.checksum[1]}


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """A registry entry.

    ``segments`` maps a segment name to ``{role: relative file path}`` (roles are language
    codes for parallel corpora). A key ``"<segment>:<src>-<tgt>"`` overrides it for one
    translation direction. ``build(root, files, **kwargs)`` makes the dataset from the paths.
    """

    name: str
    folder: str
    description: str
    segments: Mapping[str, Mapping[str, str]]
    sources: tuple[Source, ...]
    build: Callable[..., Any]

    def segment_name(self, segment: str) -> str:
        if segment in self.segments:
            return segment
        if segment in _VALIDATION_ALIASES:
            for alias in _VALIDATION_ALIASES:
                if alias in self.segments:
                    return alias
        names = sorted(s for s in self.segments if ":" not in s)
        raise ValueError(f"dataset {self.name!r} has no segment {segment!r}; "
                         f"available: {names}")

    def source_for(self, relpath: str) -> Source:
        for source in self.sources:
            if source.provides(relpath):
                return source
        raise LookupError(f"dataset {self.name!r}: no source provides {relpath}")


_REGISTRY: dict[str, DatasetInfo] = {}


def register_dataset(info: DatasetInfo, overwrite: bool = False) -> DatasetInfo:
    """Add an entry (``overwrite`` to replace one of the same name)."""
    if info.name in _REGISTRY and not overwrite:
        raise ValueError(f"dataset {info.name!r} is already registered")
    _REGISTRY[info.name] = info
    return info


def list_datasets() -> list[str]:
    """Names of all registered datasets."""
    return sorted(_REGISTRY)


def get_dataset_info(name: str) -> DatasetInfo:
    try:
        return _REGISTRY[name.lower()]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; available: {list_datasets()}") from None


def get_dataset(name: str, segment: str = "train", root: str | os.PathLike | None = None,
                progress: bool = True, **kwargs: Any) -> Any:
    """Load one segment of a named corpus, downloading and verifying it if needed.

    ``root`` is the folder holding the corpus files (default
    ``textkit_home()/datasets/<folder>``). Extra ``kwargs`` go to the entry's builder, e.g.
    ``src_lang``/``tgt_lang`` for translation corpora or ``eos``/``bos`` for LM corpora.
    """
    info = get_dataset_info(name)
    segment = info.segment_name(segment)
    root = Path(root) if root is not None else textkit_home() / "datasets" / info.folder
    files = dict(info.segments[segment])
    direction = f"{segment}:{kwargs.get('src_lang')}-{kwargs.get('tgt_lang')}"
    files.update(info.segments.get(direction, {}))
    ensure_files(info, root, list(files.values()), progress=progress)
    return info.build(root, {role: root / rel for role, rel in files.items()}, **kwargs)


def ensure_files(info: DatasetInfo, root: Path, relpaths: list[str],
                 progress: bool = True) -> None:
    """Make sure every file in ``relpaths`` exists under ``root`` (download/extract if not)."""
    pending: dict[Source, list[str]] = {}
    for rel in relpaths:
        source = info.source_for(rel)
        present = ((root / rel).exists() if source.is_archive
                   else verify_file(root / rel, **source.hash_kwargs()))
        if not present:
            pending.setdefault(source, []).append(rel)
    unreachable: list[OfflineError] = []
    for source, missing in pending.items():
        try:
            _fetch(source, root, progress)
        except OfflineError as err:
            names = missing + ([source.filename] if source.is_archive else [])
            hint = (f" (place either the extracted files or the archive {source.filename})"
                    if source.is_archive else "")
            unreachable.append(OfflineError(names, root, err.urls, err.reason + hint))
    if unreachable:
        raise OfflineError([f for err in unreachable for f in err.files], root,
                           [u for err in unreachable for u in err.urls],
                           reason="; ".join(err.reason for err in unreachable))


def _fetch(source: Source, root: Path, progress: bool) -> None:
    """Download ``source`` into ``root`` (mirrors in order) and extract it if an archive."""
    target = root / source.filename
    if not source.is_archive:
        fetch(source.urls, target, checksum=source.checksum, progress=progress)
    elif source.flatten:
        fetch_archive(source.urls, target, root, checksum=source.checksum, flatten=True,
                      members=[Path(m).name for m in source.members], progress=progress)
    else:
        fetch_archive(source.urls, target, root, checksum=source.checksum, progress=progress)
