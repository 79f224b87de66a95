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

from textkit.data.download import (
    OfflineError,
    check_existing,
    extract_archive,
    fetch,
    textkit_home,
)

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

    What a task reads: ``task`` is the task family (``"translation"``, ``"language_model"``,
    ``"classification"``: the names of ``textkit.tasks``), ``splits`` maps the task's splits
    (``train``, ``valid``, ``test``) to segments, and ``fields`` names what an example holds
    (translation: the default source and target language; classification: ``text``,
    ``label``; language modelling: ``text``).
    """

    name: str
    folder: str
    description: str
    segments: Mapping[str, Mapping[str, str]]
    sources: tuple[Source, ...]
    build: Callable[..., Any]
    task: str | None = None
    splits: Mapping[str, str] = dataclasses.field(default_factory=dict)
    fields: tuple[str, ...] = ()
    label_names: tuple[str, ...] = ()
    """What each label id means, where the files hold codes (GLUE SST-2's 0 and 1 are
    ``("negative", "positive")``): the names an export's ``id2label`` carries."""

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


def list_datasets(task: str | None = None) -> list[str]:
    """Names of the registered datasets (of the task family ``task`` when given)."""
    return sorted(name for name, info in _REGISTRY.items() if task in (None, info.task))


def get_dataset_info(name: str) -> DatasetInfo:
    try:
        return _REGISTRY[name.lower()]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; available: {list_datasets()}") from None


def get_dataset(name: str, segment: str = "train", root: str | os.PathLike | None = None,
                progress: bool = True, **kwargs: Any) -> Any:
    """Load one segment of a named corpus, downloading and verifying it if needed.

    ``root`` is a folder holding (some of) the corpus files; files not found there are taken
    from, or downloaded into, the cache ``textkit_home()/datasets/<folder>`` (the default
    ``root``). Nothing is ever written into a ``root`` you pass, and a file there whose checksum
    differs raises ``ChecksumError`` and is left unchanged. Each file of the segment must hold
    at least one non-blank line (``ValueError`` naming the file otherwise). Extra ``kwargs`` go
    to the entry's builder, e.g. ``src_lang``/``tgt_lang`` or ``eos``/``bos`` for LM corpora.
    """
    info = get_dataset_info(name)
    files = dataset_files(name, segment, root, progress=progress, **kwargs)
    root = Path(root) if root is not None else textkit_home() / "datasets" / info.folder
    return info.build(root, files, **kwargs)


def dataset_files(name: str, segment: str = "train", root: str | os.PathLike | None = None,
                  progress: bool = True, **kwargs: Any) -> dict[str, Path]:
    """The verified local files of one segment, ``{role: path}`` (e.g. ``{"en": ..., "de":
    ...}``), found, checked or downloaded as ``get_dataset`` does, without reading them (for
    streaming a corpus too large for memory)."""
    info = get_dataset_info(name)
    segment = info.segment_name(segment)
    cache = textkit_home() / "datasets" / info.folder
    root = Path(root) if root is not None else cache
    files = dict(info.segments[segment])
    direction = f"{segment}:{kwargs.get('src_lang')}-{kwargs.get('tgt_lang')}"
    files.update(info.segments.get(direction, {}))
    paths = ensure_files(info, root, list(files.values()), progress=progress, cache=cache)
    for rel in files.values():
        _check_not_empty(paths[rel], info.name, segment)
    return {role: paths[rel] for role, rel in files.items()}


def _check_not_empty(path: Path, name: str, segment: str) -> None:
    """A file (or a folder of files) of a segment must hold some non-blank text."""
    if path.is_dir():
        if not any(p.is_file() and p.stat().st_size for p in path.iterdir()):
            raise ValueError(f"dataset {name!r}, segment {segment!r}: the folder {path} holds "
                             "no non-empty file")
        return
    with open(path, "rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return
    raise ValueError(f"dataset {name!r}, segment {segment!r}: the file {path} is empty (no "
                     "non-blank line); replace it with the real file or choose another segment")


def _find(info: DatasetInfo, rel: str, folders: list[Path]) -> Path | None:
    """The first of ``folders/rel`` that exists (verified when it is itself a download)."""
    source = info.source_for(rel)
    for folder in folders:
        path = folder / rel
        if path.exists() and (source.is_archive or check_existing(path, source.checksum)):
            return path
    return None


def ensure_files(info: DatasetInfo, root: Path, relpaths: list[str], progress: bool = True,
                 cache: Path | None = None) -> dict[str, Path]:
    """Where each of ``relpaths`` is: under ``root`` if there, else under ``cache`` (downloaded
    and extracted there when missing). Returns ``{relpath: path}``.

    ``cache`` defaults to ``root``. A file found with a wrong checksum raises ``ChecksumError``
    and is left unchanged; files that cannot be fetched raise one ``OfflineError`` naming them.
    """
    cache = root if cache is None else cache
    folders = list(dict.fromkeys([root, cache]))
    found: dict[str, Path] = {}
    pending: dict[Source, list[str]] = {}
    for rel in relpaths:
        path = _find(info, rel, folders)
        if path is None:
            pending.setdefault(info.source_for(rel), []).append(rel)
        else:
            found[rel] = path
    unreachable: list[OfflineError] = []
    for source, missing in pending.items():
        try:
            _fetch(source, folders, cache, progress)
        except OfflineError as err:
            names = missing + ([source.filename] if source.is_archive else [])
            hint = (f" (place either the extracted files or the archive {source.filename})"
                    if source.is_archive else "")
            unreachable.append(OfflineError(names, root, err.urls, err.reason + hint))
            continue
        for rel in missing:
            if not (cache / rel).exists():
                raise FileNotFoundError(f"dataset {info.name!r}: {source.filename} gave no "
                                        f"{rel} in {cache}")
            found[rel] = cache / rel
    if unreachable:
        raise OfflineError([f for err in unreachable for f in err.files], root,
                           [u for err in unreachable for u in err.urls],
                           reason="; ".join(err.reason for err in unreachable))
    return found


def _fetch(source: Source, folders: list[Path], cache: Path, progress: bool) -> None:
    """Download ``source`` into ``cache`` (mirrors in order) and extract it there if an
    archive; an archive already in one of ``folders`` is verified and used as it is."""
    if not source.is_archive:
        fetch(source.urls, cache / source.filename, checksum=source.checksum, progress=progress)
        return
    archive = next((folder / source.filename for folder in folders
                    if check_existing(folder / source.filename, source.checksum)), None)
    if archive is None:
        archive = fetch(source.urls, cache / source.filename, checksum=source.checksum,
                        progress=progress)
    if source.flatten:
        extract_archive(archive, cache, flatten=True,
                        members=[Path(m).name for m in source.members])
    else:
        extract_archive(archive, cache)
