"""Packing: several short examples in one row of ``max_length`` tokens, so that encoder
fine-tuning pads less and compiles one batch shape.

``pack_rows`` assigns examples to rows by best fit in decreasing length order (no example is
ever split; a row holds at most ``max_per_row`` examples and ``max_length`` tokens).
``PackedSampler`` yields ``PackedBatch``es of a fixed number of rows, each row's examples
contiguous in ``indices`` and named by ``row_of``; ``textkit.batchify.PackedBatchify`` turns
them into arrays. numpy only.

Shuffling: an epoch breaks ties between equal lengths at random before packing and shuffles
the rows, so the number of rows (and of steps) is the same every epoch (the packing depends
only on the multiset of lengths) while which examples share a row and which rows share a batch
change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from textkit.batchify.shape import BatchShape
from textkit.data.samplers import Batch, _ResumableSampler

__all__ = ["PackedBatch", "PackedSampler", "default_max_per_row", "pack_rows"]


def default_max_per_row(max_length: int) -> int:
    """Examples per row at most when none is named: a quarter of ``max_length`` (at least 1)."""
    return max(max_length // 4, 1)


def pack_rows(lengths: Sequence[int] | np.ndarray, max_length: int, max_per_row: int,
              order: np.ndarray | None = None) -> list[list[int]]:
    """Rows of example indices: best fit over ``order`` (default: by decreasing length, ties
    by index); each row's lengths sum to at most ``max_length``, with at most ``max_per_row``
    examples. An example longer than ``max_length`` is a ``ValueError``."""
    lengths = np.asarray(lengths, np.int64)
    if max_length < 1 or max_per_row < 1:
        raise ValueError(f"max_length={max_length} and max_per_row={max_per_row}: expected >= 1")
    if lengths.size and (lengths.max() > max_length or lengths.min() < 1):
        bad = int(np.flatnonzero((lengths > max_length) | (lengths < 1))[0])
        raise ValueError(f"example {bad} has {lengths[bad]} tokens; packing takes 1 to "
                         f"{max_length} (max_length)")
    if order is None:
        order = np.argsort(-lengths, kind="stable")
    rows: list[list[int]] = []
    space = np.zeros(len(lengths), np.int64)  # free tokens per row
    by_space: list[list[int]] = [[] for _ in range(max_length + 1)]  # open rows per free space
    for i in order.tolist():
        n = int(lengths[i])
        row = next((by_space[s].pop() for s in range(n, max_length + 1) if by_space[s]), None)
        if row is None:
            row = len(rows)
            rows.append([])
            space[row] = max_length
        rows[row].append(i)
        space[row] -= n
        if len(rows[row]) < max_per_row and space[row] > 0:
            by_space[space[row]].append(row)
    return rows


@dataclass(frozen=True, eq=False)
class PackedBatch(Batch):
    """A ``Batch`` of packed rows: ``indices`` int64 [n] row after row, ``row_of`` int64 [n]
    the row of each (rows beyond the last one named are dummy rows), ``shape`` the padded
    ``BatchShape(rows, (max_length,))``."""

    row_of: np.ndarray = None  # type: ignore[assignment]

    @property
    def num_dummy_rows(self) -> int:
        used = int(self.row_of.max()) + 1 if len(self.row_of) else 0
        return self.shape.rows - used


class _PackedPlan:
    def __init__(self, order: np.ndarray, row_starts: np.ndarray, rows: int, shape: BatchShape):
        self.order, self.row_starts, self.rows, self.shape = order, row_starts, rows, shape

    def __getitem__(self, step: int) -> PackedBatch:
        first = step * self.rows
        last = min(first + self.rows, len(self.row_starts) - 1)
        start, stop = self.row_starts[first], self.row_starts[last]
        counts = np.diff(self.row_starts[first:last + 1])
        return PackedBatch(np.array(self.order[start:stop], np.int64), self.shape,
                           row_of=np.repeat(np.arange(last - first), counts))


class PackedSampler(_ResumableSampler):
    """Batches of ``rows`` packed rows of ``max_length`` tokens (at most ``max_per_row``
    examples each) over examples of ``lengths``: one padded shape, ``BatchShape(rows,
    (max_length,))``; the last batch is completed with dummy rows. Resumable like the other
    samplers (``state_dict`` / ``load_state_dict``)."""

    def __init__(self, lengths: Sequence[int] | np.ndarray, max_length: int, max_per_row: int,
                 rows: int, *, shuffle: bool = False, seed: int = 0):
        super().__init__(seed)
        if rows < 1:
            raise ValueError(f"rows={rows}: expected >= 1")
        self._lengths = np.asarray(lengths, np.int64)
        self.max_length, self.max_per_row, self.rows = int(max_length), int(max_per_row), rows
        self._shuffle = shuffle
        self.num_rows = len(pack_rows(self._lengths, max_length, max_per_row))
        self.shape = BatchShape(rows, (self.max_length,))
        self.bucket_shapes = [self.shape]

    def __len__(self) -> int:
        return -(-self.num_rows // self.rows)

    def _plan(self, epoch: int) -> _PackedPlan:
        lengths = self._lengths
        order = None
        if self._shuffle:
            rng = np.random.default_rng([self._seed, epoch])
            ties = rng.permutation(len(lengths))
            order = ties[np.argsort(-lengths[ties], kind="stable")]
        packed = pack_rows(lengths, self.max_length, self.max_per_row, order)
        if self._shuffle:
            packed = [packed[r] for r in rng.permutation(len(packed))]
        row_starts = np.concatenate([[0], np.cumsum([len(r) for r in packed])])
        flat = np.fromiter((i for r in packed for i in r), np.int64, int(row_starts[-1]))
        return _PackedPlan(flat, row_starts, self.rows, self.shape)

    def shape_batches(self) -> list[PackedBatch]:
        """The first batch (the one shape), e.g. to compile the step before training."""
        return [self._plan(self._epoch)[0]] if len(self) else []

    def padding_fraction(self) -> float:
        """Padding cells / all cells of an epoch's batches (dummy rows included)."""
        cells = len(self) * self.rows * self.max_length
        return float(1.0 - self._lengths.sum() / cells) if cells else 0.0

    def stats(self) -> str:
        """Readable summary: examples, rows, batches, the shape and the padding."""
        return (f"{type(self).__name__}:\n"
                f"  sample_num={len(self._lengths)}, packed_rows={self.num_rows} "
                f"({len(self._lengths) / max(self.num_rows, 1):.2f} examples per row, at most "
                f"{self.max_per_row}), batch_num={len(self)}\n"
                f"  shape={tuple(self.shape.lengths)} x {self.rows} rows, num_shapes=1\n"
                f"  padding_fraction={self.padding_fraction():.4f}")
