"""File-backed datasets: text lines, parallel text, LM corpora, TSV and labelled text.

Every dataset is an in-memory ``Sequence`` (``len`` and ``[i]``), read in one pass with numpy-free
string operations, except ``ParallelLines``, which streams. Bad input raises an error naming the
file and the 1-based line; a file that gives no samples (empty, or only blank lines) raises
``ValueError`` naming it unless ``allow_empty=True``, so an empty split is caught when it is
loaded, not at the first step.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from textkit.errors import DataFileError

__all__ = [
    "LanguageModelCorpus",
    "ParallelLines",
    "ParallelTextDataset",
    "TSVDataset",
    "TextClassificationDataset",
    "TextLineDataset",
    "count_lines",
    "read_lines",
    "read_text",
]


def read_text(path: str | os.PathLike, encoding: str = "utf-8",
              error: type[Exception] = DataFileError) -> str:
    """The text of a file, a byte-order mark dropped. Undecodable bytes raise ``error`` naming
    the file, the line and the byte of the first bad one."""
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1)
        raise error(f"{path}, line {line}: invalid {encoding} ({err.reason} at byte "
                    f"{column} of the line)") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_lines(path: str | os.PathLike, encoding: str = "utf-8") -> list[str]:
    """All lines of a file without their line ends (``\\n`` or ``\\r\\n``).

    Only ``\\n`` separates lines (unlike ``str.splitlines``, which also splits on characters
    such as U+2028 that occur inside real text). Undecodable bytes raise ``DataFileError``
    naming the file and line.
    """
    text = read_text(path, encoding)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if "\r" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return lines


def _check_samples(count: int, path: Path, allow_empty: bool, what: str = "lines") -> None:
    if count == 0 and not allow_empty:
        raise ValueError(f"{path}: no samples (the file holds no non-empty {what}); check the "
                         "path or the split, or pass allow_empty=True")


class _ListDataset(Sequence):
    _items: list

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index):
        return self._items[index]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} samples)"


class TextLineDataset(_ListDataset):
    """One sample per line of a text file: ``str``.

    ``strip`` removes surrounding whitespace; ``skip_empty`` drops lines empty after that. No
    samples at all is a ``ValueError`` naming the file unless ``allow_empty``.
    """

    def __init__(self, path: str | os.PathLike, encoding: str = "utf-8", strip: bool = True,
                 skip_empty: bool = True, allow_empty: bool = False):
        self.path = Path(path)
        lines = read_lines(self.path, encoding)
        if strip:
            lines = [line.strip() for line in lines]
        self._items = [line for line in lines if line] if skip_empty else lines
        _check_samples(sum(map(bool, self._items)), self.path, allow_empty)


class ParallelTextDataset(_ListDataset):
    """Line-aligned source/target files; samples are ``(src_line, tgt_line)``.

    Files with different line counts raise ``ValueError`` naming both paths and counts.
    ``skip_empty`` drops pairs where either side is empty (after ``strip``). A side without
    any non-empty line, or no pair left, is a ``ValueError`` naming the file(s) unless
    ``allow_empty``.
    """

    def __init__(self, src_path: str | os.PathLike, tgt_path: str | os.PathLike,
                 encoding: str = "utf-8", strip: bool = True, skip_empty: bool = True,
                 allow_empty: bool = False):
        self.src_path, self.tgt_path = Path(src_path), Path(tgt_path)
        src = TextLineDataset(src_path, encoding, strip=strip, skip_empty=False,
                              allow_empty=allow_empty)
        tgt = TextLineDataset(tgt_path, encoding, strip=strip, skip_empty=False,
                              allow_empty=allow_empty)
        if len(src) != len(tgt):
            raise ValueError(f"parallel files differ in length: {self.src_path} has {len(src)} "
                             f"lines, {self.tgt_path} has {len(tgt)} lines")
        pairs = zip(src._items, tgt._items)
        self._items = [(s, t) for s, t in pairs if s and t] if skip_empty else list(pairs)
        if not self._items and not allow_empty:
            raise ValueError(f"{self.src_path} and {self.tgt_path}: no pair of non-empty lines; "
                             "check the paths or the split, or pass allow_empty=True")

    @property
    def src(self) -> list[str]:
        return [s for s, _ in self._items]

    @property
    def tgt(self) -> list[str]:
        return [t for _, t in self._items]


def count_lines(path: str | os.PathLike) -> int:
    """Lines of a file as ``read_lines`` splits it (``\\n`` only; a last line without one
    counts), without decoding it."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


class ParallelLines:
    """Line-aligned source/target files streamed pair by pair: ``(src_line, tgt_line)`` for
    every line (stripped; empty sides kept, so pair ``i`` is line ``i + 1``), for corpora too
    large to hold in memory (``ParallelTextDataset`` reads everything).

    ``len()`` is the line count; files with different counts raise ``ValueError`` naming both
    paths and counts at construction, undecodable bytes ``ValueError`` naming the file and line
    when reached.
    """

    def __init__(self, src_path: str | os.PathLike, tgt_path: str | os.PathLike,
                 encoding: str = "utf-8"):
        self.src_path, self.tgt_path, self.encoding = Path(src_path), Path(tgt_path), encoding
        counts = [count_lines(p) for p in (self.src_path, self.tgt_path)]
        if counts[0] != counts[1]:
            raise ValueError(f"parallel files differ in length: {self.src_path} has {counts[0]} "
                             f"lines, {self.tgt_path} has {counts[1]} lines")
        self._len = counts[0]

    def __len__(self) -> int:
        return self._len

    def _lines(self, path: Path) -> Iterator[str]:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode(self.encoding)
                except UnicodeDecodeError as err:
                    raise ValueError(f"{path}, line {number}: invalid {self.encoding} "
                                     f"({err.reason} at byte {err.start} of the line)") from None
                if number == 1 and line.startswith("\ufeff"):
                    line = line[1:]
                yield line.strip()

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return zip(self._lines(self.src_path), self._lines(self.tgt_path))


class LanguageModelCorpus(_ListDataset):
    """A corpus for language modelling: samples are token lists, one per line.

    Each line is tokenized (default: whitespace), wrapped in ``bos``/``eos`` when given (``eos``
    defaults to ``"<eos>"``), and ``skip_empty`` drops blank lines (WikiText's official counts
    keep them: one ``<eos>`` per line). ``tokens`` is the flattened stream; ``token_ids(vocab)``
    numericalizes it to one int32 array ``[N]``. A file without any token is a ``ValueError``
    naming it unless ``allow_empty``.
    """

    def __init__(self, path: str | os.PathLike | Sequence[str | os.PathLike],
                 encoding: str = "utf-8", tokenizer: Callable[[str], list[str]] = str.split,
                 bos: str | None = None, eos: str | None = "<eos>", skip_empty: bool = True,
                 allow_empty: bool = False):
        paths = [path] if isinstance(path, str | os.PathLike) else list(path)
        self.paths = [Path(p) for p in paths]
        head, tail = [bos] if bos else [], [eos] if eos else []
        self._items = []
        for p in self.paths:
            found = 0
            for line in read_lines(p, encoding):
                tokens = tokenizer(line)
                found += len(tokens)
                if tokens or not skip_empty:
                    self._items.append(head + tokens + tail)
            _check_samples(found, p, allow_empty, "line with a token")

    @property
    def tokens(self) -> list[str]:
        """All tokens in order, specials included."""
        return [token for sentence in self._items for token in sentence]

    @property
    def num_tokens(self) -> int:
        return sum(map(len, self._items))

    def token_ids(self, vocab: Any) -> np.ndarray:
        """The flattened stream as int32 ``[num_tokens]`` ids of ``vocab``."""
        from itertools import chain

        return vocab.to_ids(chain.from_iterable(self._items), self.num_tokens)


class TSVDataset(_ListDataset):
    """Rows of a tab (or ``field_separator``) separated file: tuples of ``str``.

    ``num_discard_samples`` skips header lines; ``field_indices`` picks and orders columns.
    A row with a different number of fields than the first raises ``ValueError`` naming the
    file and line. No quoting is interpreted (GLUE-style TSV). No rows is a ``ValueError``
    naming the file unless ``allow_empty``.
    """

    def __init__(self, path: str | os.PathLike, encoding: str = "utf-8",
                 field_separator: str = "\t", num_discard_samples: int = 0,
                 field_indices: Sequence[int] | None = None, skip_empty: bool = True,
                 allow_empty: bool = False):
        self.path = Path(path)
        lines = read_lines(self.path, encoding)
        rows, width = [], None
        for number, line in enumerate(lines[num_discard_samples:], num_discard_samples + 1):
            if skip_empty and not line.strip():
                continue
            fields = line.split(field_separator)
            width = len(fields) if width is None else width
            if len(fields) != width:
                raise ValueError(f"{self.path}, line {number}: {len(fields)} fields, "
                                 f"expected {width}")
            if field_indices is not None:
                try:
                    fields = [fields[i] for i in field_indices]
                except IndexError:
                    raise ValueError(f"{self.path}, line {number}: field_indices "
                                     f"{list(field_indices)} out of range for {width} "
                                     "fields") from None
            rows.append(tuple(fields))
        _check_samples(len(rows), self.path, allow_empty, "rows after the header")
        self._items = rows


class TextClassificationDataset(_ListDataset):
    """``(text, label)`` samples with an int label; ``texts`` and ``labels`` views."""

    def __init__(self, texts: Sequence[str], labels: Sequence[int],
                 label_names: Sequence[str] = ()):
        if len(texts) != len(labels):
            raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
        self._items = list(zip(texts, (int(label) for label in labels)))
        self.label_names = tuple(label_names)

    @property
    def texts(self) -> list[str]:
        return [text for text, _ in self._items]

    @property
    def labels(self) -> np.ndarray:
        return np.fromiter((label for _, label in self._items), np.int32, len(self._items))
