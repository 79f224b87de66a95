"""Encoded corpora on disk: token ids memory-mapped, built once in parallel and cached.

A store is a folder with, per field (e.g. ``src`` and ``tgt``), one flat file of token ids
(``<field>.bin``, raw little-endian ``uint16`` when every vocabulary fits, else ``int32``) and
``lengths.npy`` (int32 ``[num_samples, num_fields]``), plus ``meta.json`` (format, key, dtype,
counts). Sample ``i``'s field ``f`` is ``ids_f[offsets_f[i]:offsets_f[i + 1]]``, offsets being
the cumulative lengths. The ids are raw binary (as fairseq's and Megatron's indexed datasets
are) rather than ``.npy`` because they are written as a stream whose total length is known only
at the end; ``np.memmap`` reads them without loading them, so a corpus of any size costs the
memory of its lengths (8 bytes per sample and field) plus the pages a batch touches.

``build_token_store`` streams the text (chunks of lines, never the whole corpus), encodes the
chunks in worker processes, writes into a staging folder and renames it into place, so a killed
build leaves no store behind (the next call starts again). A store is keyed by the caller's
``key`` (checksums of the tokenizer and source files, see ``file_digest``): a changed file gives
a new key and the store is rebuilt. Every line becomes a sample (an empty side has length 0), so
sample ``i`` is line ``i + 1`` of the source files; the caller selects what it trains on with
``TokenStore.select``. A store whose files are damaged or disagree (``meta.json`` not JSON or
lacking a key, ``lengths.npy`` unreadable or of another shape, a ``.bin`` file of the wrong size)
is a ``TokenStoreError`` naming the file; ``build_token_store`` then builds it again.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing
import os
import shutil
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from textkit._io import atomic_dir, write_json_atomic
from textkit.data.download import file_hash
from textkit.errors import DataFileError

__all__ = ["TokenStore", "TokenStoreError", "build_token_store", "file_digest", "remove_stale"]

FORMAT, VERSION = "textkit-token-store", 1
DTYPES = ("uint16", "int32")


class TokenStoreError(DataFileError):
    """A damaged token store (named: the file and what was expected)."""


def _damaged(path: Path, what: str) -> TokenStoreError:
    return TokenStoreError(f"{path}: {what}; the store is damaged: delete {path.parent}")


def _read_meta(path: Path) -> dict[str, Any]:
    """``meta.json`` of a store, checked: this format and version, ``fields``, ``dtype``."""
    try:
        meta = json.loads(path.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise _damaged(path, f"not valid JSON ({err})") from None
    if not isinstance(meta, dict):
        raise _damaged(path, f"a JSON {type(meta).__name__}, expected an object")
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise TokenStoreError(f"{path}: not a {FORMAT} version {VERSION} (format "
                              f"{meta.get('format')!r}, version {meta.get('version')!r})")
    fields = meta.get("fields")
    if not (isinstance(fields, list) and fields and all(isinstance(f, str) for f in fields)):
        raise _damaged(path, f"fields is {fields!r}, expected a list of field names")
    if meta.get("dtype") not in DTYPES:
        raise _damaged(path, f"dtype is {meta.get('dtype')!r}, expected one of {DTYPES}")
    return meta


def _read_lengths(path: Path, num_fields: int) -> np.ndarray:
    """int64 [num_samples, num_fields] ``lengths.npy``, checked."""
    try:
        lengths = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise _damaged(path, f"unreadable ({err})") from None
    if lengths.ndim != 2 or lengths.shape[1] != num_fields or lengths.dtype.kind not in "iu":
        raise _damaged(path, f"{lengths.dtype} {list(lengths.shape)}, expected integers "
                       f"[num_samples, {num_fields}]")
    if lengths.size and lengths.min() < 0:
        raise _damaged(path, "a negative length")
    return lengths.astype(np.int64)


def file_digest(paths: Iterable[str | os.PathLike], *extra: Any) -> str:
    """SHA-256 over the names and contents (``file_hash``) of ``paths`` and the ``repr`` of
    ``extra`` values."""
    digest = hashlib.sha256(f"{FORMAT}/{VERSION}".encode())
    for path in paths:
        digest.update(f"{Path(path).name}:{file_hash(path)}".encode())
    for value in extra:
        digest.update(repr(value).encode())
    return digest.hexdigest()


class TokenStore:
    """Memory-mapped encoded samples (see the module docstring); read-only.

    ``len(store)``, ``store[i]`` -> tuple of int32 arrays (one per field),
    ``store.__getitems__(indices)`` (what ``DataLoader`` calls), ``lengths`` int64
    ``[n, num_fields]``, ``fields``, ``num_tokens``, ``select(indices)`` -> a store of those
    samples (the same files).
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        meta_path = self.directory / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"{self.directory} is not a token store (no meta.json)")
        self.meta = _read_meta(meta_path)
        self.fields = tuple(self.meta["fields"])
        all_lengths = _read_lengths(self.directory / "lengths.npy", len(self.fields))
        dtype = np.dtype(self.meta["dtype"]).newbyteorder("<")
        self._ids, self._offsets = [], []
        for f, field in enumerate(self.fields):
            path = self.directory / f"{field}.bin"
            expected = int(all_lengths[:, f].sum())
            size = path.stat().st_size if path.is_file() else -1
            if size != expected * dtype.itemsize:
                raise _damaged(path, "missing" if size < 0 else f"{size} bytes, but "
                               f"lengths.npy needs {expected} {dtype} ids")
            # a plain ndarray view of the map: slicing an np.memmap subclass costs ~4x more
            self._ids.append(np.asarray(np.memmap(path, dtype=dtype, mode="r", shape=(expected,)))
                             if expected else np.zeros(0, dtype))
            self._offsets.append(np.concatenate([[0], np.cumsum(all_lengths[:, f])]))
        self._rows = np.arange(len(all_lengths))
        self._all_lengths = all_lengths

    @property
    def key(self) -> str:
        return self.meta["key"]

    @property
    def lengths(self) -> np.ndarray:
        """int64 ``[len(self), num_fields]`` tokens per sample and field."""
        return self._all_lengths[self._rows]

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return (f"TokenStore({self.directory}, {len(self)} samples, fields {self.fields}, "
                f"{self.num_tokens} tokens)")

    def select(self, indices: Sequence[int] | np.ndarray) -> TokenStore:
        """A view of samples ``indices`` (positions in this store), sharing the files."""
        view = object.__new__(TokenStore)
        view.__dict__.update(self.__dict__)
        view._rows = self._rows[np.asarray(indices, dtype=np.int64)]
        return view

    def line_of(self, index: int) -> int:
        """1-based line of the source files that sample ``index`` was encoded from."""
        return int(self._rows[index]) + 1

    def _sample(self, row: int) -> tuple[np.ndarray, ...]:
        return tuple(ids[offsets[row]:offsets[row + 1]].astype(np.int32)
                     for ids, offsets in zip(self._ids, self._offsets))

    def __getitem__(self, index: int) -> tuple[np.ndarray, ...]:
        return self._sample(int(self._rows[index]))

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[np.ndarray, ...]]:
        rows = self._rows[np.asarray(indices, np.int64)]
        fields = []
        for ids, offsets in zip(self._ids, self._offsets):   # bounds as Python ints, per batch
            bounds = zip(offsets[rows].tolist(), offsets[rows + 1].tolist())
            fields.append([ids[start:stop].astype(np.int32) for start, stop in bounds])
        return list(zip(*fields))


# ---------------------------------------------------------------------------------- building
_WORKER_TOKENIZERS: Sequence[Any] = ()


def _init_worker(tokenizers: Sequence[Any]) -> None:
    global _WORKER_TOKENIZERS
    _WORKER_TOKENIZERS = tokenizers


def _encode_chunk(lines: list[tuple[str, ...]], tokenizers: Sequence[Any] | None = None,
                  dtype: str = "int32") -> tuple[list[np.ndarray], np.ndarray]:
    """Flat ids per field and int32 lengths ``[len(lines), num_fields]`` of one chunk."""
    tokenizers = tokenizers or _WORKER_TOKENIZERS
    flat, lengths = [], np.zeros((len(lines), len(tokenizers)), np.int32)
    for f, tokenizer in enumerate(tokenizers):
        encoded = tokenizer.encode([line[f] for line in lines])
        lengths[:, f] = [len(ids) for ids in encoded]
        flat.append(np.fromiter(itertools.chain.from_iterable(encoded), dtype=dtype,
                                count=int(lengths[:, f].sum())))
    return flat, lengths


def _chunks(samples: Iterable[tuple[str, ...]], size: int) -> Iterator[list[tuple[str, ...]]]:
    chunk: list[tuple[str, ...]] = []
    for sample in samples:
        chunk.append(sample)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _encoded_chunks(samples: Iterable[tuple[str, ...]], tokenizers: Sequence[Any], dtype: str,
                    num_workers: int, chunk_size: int) -> Iterator[tuple[list, np.ndarray]]:
    """Chunks encoded in order, at most ``2 * num_workers`` in flight (bounded memory)."""
    if num_workers == 0:
        for chunk in _chunks(samples, chunk_size):
            yield _encode_chunk(chunk, tokenizers, dtype)
        return
    context = multiprocessing.get_context("spawn")   # never fork a process running JAX threads
    with ProcessPoolExecutor(num_workers, mp_context=context, initializer=_init_worker,
                             initargs=(tokenizers,)) as pool:
        pending: deque[Future] = deque()
        for chunk in _chunks(samples, chunk_size):
            pending.append(pool.submit(_encode_chunk, chunk, None, dtype))
            if len(pending) >= 2 * num_workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def build_token_store(directory: str | os.PathLike,
                      samples: Callable[[], Iterable[tuple[str, ...]]],
                      tokenizers: Sequence[Any], *, key: str,
                      fields: Sequence[str] = ("src", "tgt"), num_workers: int = 0,
                      chunk_size: int = 4096, total: int | None = None,
                      desc: str = "encoding") -> TokenStore:
    """The store of ``samples()`` (tuples of texts, one per field, e.g. a line pair) encoded by
    ``tokenizers`` (one per field: ``encode(list[str]) -> list[list[int]]``, ``len()`` the
    vocabulary size, picklable when ``num_workers`` > 0) in ``directory``.

    An existing store with the same ``key`` is opened as is; otherwise the store is built (in
    ``num_workers`` spawned processes, 0: in this one), staged next to ``directory`` and renamed
    into place. ``samples`` is called only when building; ``total`` sizes the progress bar.
    """
    directory = Path(directory)
    if len(fields) != len(tokenizers):
        raise ValueError(f"{len(fields)} fields {tuple(fields)} but {len(tokenizers)} tokenizers")
    if (directory / "meta.json").is_file():
        try:
            store = TokenStore(directory)
        except TokenStoreError:
            store = None
        if store is not None and store.key == key:
            return store
    dtype = "uint16" if max(len(t) for t in tokenizers) <= np.iinfo(np.uint16).max + 1 \
        else "int32"
    directory.parent.mkdir(parents=True, exist_ok=True)
    with atomic_dir(directory) as staging:
        files = [open(staging / f"{field}.bin", "wb") for field in fields]
        lengths: list[np.ndarray] = []
        try:
            with tqdm(total=total, desc=desc, unit=" samples", unit_scale=True,
                      mininterval=1.0, leave=False) as bar:
                for flat, chunk_lengths in _encoded_chunks(samples(), tokenizers, dtype,
                                                           num_workers, chunk_size):
                    for file, ids in zip(files, flat):
                        file.write(ids.astype(np.dtype(dtype).newbyteorder("<")).tobytes())
                    lengths.append(chunk_lengths)
                    bar.update(len(chunk_lengths))
        finally:
            for file in files:
                file.close()
        all_lengths = (np.concatenate(lengths) if lengths
                       else np.zeros((0, len(fields)), np.int32))
        np.save(staging / "lengths.npy", all_lengths)
        write_json_atomic(staging / "meta.json", {
            "format": FORMAT, "version": VERSION, "key": key, "fields": list(fields),
            "dtype": dtype, "num_samples": len(all_lengths),
            "num_tokens": all_lengths.sum(axis=0).tolist()})
    return TokenStore(directory)


def remove_stale(parent: str | os.PathLike, prefix: str, keep: str | os.PathLike) -> None:
    """Delete the stores ``parent/<prefix>*`` other than ``keep`` (earlier keys) and staging
    folders that a killed build left (``parent/.<prefix>*``)."""
    for path in [*Path(parent).glob(f"{prefix}*"), *Path(parent).glob(f".{prefix}*")]:
        if path.is_dir() and path.resolve() != Path(keep).resolve():
            shutil.rmtree(path, ignore_errors=True)
