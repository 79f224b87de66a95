"""Labelled texts and text pairs from tables: TSV (GLUE's layouts), CSV and JSON Lines files with
named (or, without a header, numbered) columns. Jax-free.

``read_labelled(path, text=..., pair=..., label=...)`` returns ``TextExamples``; classification
labels become ids through ``label_names`` (the label set: an unknown value is an error naming
the file, line and the set), regression labels are floats. GLUE's TSV files are read without
quote handling (their texts hold unbalanced ``"``); ``.csv`` files use standard CSV quoting.
Every TSV/CSV row has the header's number of columns (the first row's without a header), and
no text is empty: a row that breaks either, or bytes that are not UTF-8, are refused naming
the file and line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from textkit.data.datasets import read_text
from textkit.errors import DataFileError

__all__ = ["TableError", "TextExamples", "label_set", "read_labelled", "read_rows"]


class TableError(DataFileError):
    """A table that lacks a column or holds a bad value (named: file, line, column)."""


class TextExamples(NamedTuple):
    """Texts, optional second texts ``pairs`` and ``labels``: int32 [N] class ids (named by
    ``label_names``), float32 [N] regression targets, or None (unlabelled inputs, e.g. for
    ``--predict``)."""

    texts: list[str]
    pairs: list[str] | None
    labels: np.ndarray | None
    label_names: tuple[str, ...] | None = None

    @property
    def regression(self) -> bool:
        """Whether the labels are float targets."""
        return self.labels is not None and self.labels.dtype.kind == "f"

    def __len__(self) -> int:
        return len(self.texts)

    def select(self, indices: Sequence[int] | np.ndarray) -> TextExamples:
        """The examples at ``indices``."""
        indices = np.asarray(indices, np.int64)
        return TextExamples([self.texts[i] for i in indices],
                            None if self.pairs is None else [self.pairs[i] for i in indices],
                            None if self.labels is None else self.labels[indices],
                            self.label_names)


Column = str | int


def read_rows(path: str | Path, *, header: bool = True) -> tuple[list[str] | None,
                                                                 list[tuple[int, Any]]]:
    """``(column names or None, [(line number, row)])`` of a ``.tsv`` / ``.txt`` (tab
    separated), ``.csv`` or ``.jsonl`` / ``.json`` (one object per line) file; a TSV/CSV row is a
    list of strings, a JSON Lines row a dict. A UTF-8 byte-order mark is dropped; a TSV/CSV
    row with another number of columns than the first is refused."""
    path = Path(path)
    try:
        text = read_text(path, error=TableError)
    except OSError as err:
        raise TableError(f"{path}: cannot be read ({err})") from err
    if path.suffix in (".jsonl", ".json"):
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append((number, json.loads(line)))
                except json.JSONDecodeError as err:
                    raise TableError(f"{path}:{number}: not a JSON object ({err})") from err
                if not isinstance(rows[-1][1], dict):
                    raise TableError(f"{path}:{number}: expected a JSON object per line")
        return None, rows
    if path.suffix == ".csv":
        reader = csv.reader(text.splitlines())
    else:
        reader = csv.reader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE)
    rows = [(number, row) for number, row in enumerate(reader, start=1) if row]
    for number, row in rows[1:]:
        if len(row) != len(rows[0][1]):
            raise TableError(f"{path}:{number}: {len(row)} columns, expected "
                             f"{len(rows[0][1])} as on line {rows[0][0]} (the "
                             f"{'header' if header else 'first row'})")
    if header and rows:
        return rows[0][1], rows[1:]
    return None, rows


def _getter(path: Path, names: list[str] | None, column: Column):
    """row -> value of ``column`` (a name, or an index for files without a header)."""
    if names is None and isinstance(column, str):
        return lambda number, row: _field(path, number, row, column)
    if isinstance(column, int) or (isinstance(column, str) and column.isdigit()
                                   and column not in (names or [])):
        index = int(column)
    elif column in names:
        index = names.index(column)
    else:
        raise TableError(f"{path}: no column {column!r}; the header has {names}")
    def get(number: int, row: list[str]) -> str:
        if index >= len(row):
            raise TableError(f"{path}:{number}: {len(row)} columns, column {column!r} (index "
                             f"{index}) is missing")
        return row[index]
    return get


def _field(path: Path, number: int, row: dict[str, Any], name: str) -> str:
    if name not in row:
        raise TableError(f"{path}:{number}: no field {name!r}; the object has {sorted(row)}")
    value = row[name]
    return value if isinstance(value, str) else json.dumps(value)


def _text(path: Path, number: int, column: Column, value: str) -> str:
    if not value.strip():
        raise TableError(f"{path}:{number}: the text in column {column!r} is empty")
    return value


def read_labelled(path: str | Path, *, text: Column, pair: Column | None = None,
                  label: Column | None = None, label_names: Sequence[str] | None = None,
                  regression: bool = False, header: bool = True) -> TextExamples:
    """The examples of a table file (module docstring).

    ``text`` / ``pair`` / ``label`` name their columns (or JSON fields; an int or digit string
    is a column index, for files without a header); ``label=None`` reads unlabelled texts.
    Classification labels must be among ``label_names`` (their index is the id); regression
    labels must parse as floats.
    """
    path = Path(path)
    names, rows = read_rows(path, header=header)
    if not rows:
        raise TableError(f"{path}: holds no example")
    get_text = _getter(path, names, text)
    get_pair = None if pair is None else _getter(path, names, pair)
    get_label = None if label is None else _getter(path, names, label)
    ids = {name: i for i, name in enumerate(label_names or [])}
    texts, pairs, labels = [], [], []
    for number, row in rows:
        texts.append(_text(path, number, text, get_text(number, row)))
        if get_pair is not None:
            pairs.append(_text(path, number, pair, get_pair(number, row)))
        if get_label is None:
            continue
        value = get_label(number, row).strip()
        if regression:
            try:
                labels.append(float(value))
            except ValueError:
                raise TableError(f"{path}:{number}: label {value!r} in column {label!r} is "
                                 "not a number (a regression target)") from None
        elif value not in ids:
            raise TableError(f"{path}:{number}: label {value!r} in column {label!r} is not "
                             f"in the label set {list(ids)}")
        else:
            labels.append(ids[value])
    array = None if get_label is None else np.asarray(
        labels, np.float32 if regression else np.int32)
    return TextExamples(texts, pairs if get_pair is not None else None, array,
                        None if regression else tuple(ids))


def label_set(path: str | Path, label: Column, *, header: bool = True) -> list[str]:
    """The sorted distinct values of the ``label`` column (a label set read from the training
    file when none is given)."""
    path = Path(path)
    names, rows = read_rows(path, header=header)
    get = _getter(path, names, label)
    return sorted({get(number, row).strip() for number, row in rows})
