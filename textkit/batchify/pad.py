"""``Pad``: stack variable-length samples into one padded numpy array."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from textkit.batchify.shape import BatchShape

__all__ = ["Pad"]


def _round_up(value: int, multiple: int | None) -> int:
    if not multiple:
        return value
    return -(-value // multiple) * multiple


class Pad:
    """Pad samples along ``axis`` and stack them into an array of shape ``[B, ..., L, ...]``.

    Args:
      axis: the axis of each sample that varies in length (the output axis is ``axis + 1``).
      pad_val: fill value for padding and for dummy rows (e.g. ``vocab.pad_id``).
      ret_length: also return the original lengths, int32 ``[B]`` (0 for dummy rows).
      dtype: output dtype; ``None`` keeps numpy's inferred dtype. Giving it (e.g. ``np.int32``)
        also enables the fastest path for lists of Python ints.
      round_to: without a ``shape``, pad to the batch maximum rounded up to this multiple.
      length_index: which entry of ``BatchShape.lengths`` this field pads to.

    Called as ``pad(samples, shape=None)``. With a ``BatchShape`` the output has exactly
    ``shape.rows`` rows (extra rows are all ``pad_val``) and length ``shape.lengths[length_index]``;
    a sample longer than that raises ``ValueError``. Samples whose other axes disagree raise
    ``ValueError`` naming the sample index.
    """

    def __init__(self, axis: int = 0, *, pad_val: Any, ret_length: bool = False,
                 dtype: Any = None, round_to: int | None = None, length_index: int = 0):
        if round_to is not None and round_to < 1:
            raise ValueError(f"round_to must be a positive int, got {round_to}")
        self.axis = axis
        self.pad_val = pad_val
        self.ret_length = ret_length
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.round_to = round_to
        self.length_index = length_index

    def __repr__(self) -> str:
        return (f"Pad(axis={self.axis}, pad_val={self.pad_val!r}, ret_length={self.ret_length}, "
                f"dtype={self.dtype}, round_to={self.round_to}, "
                f"length_index={self.length_index})")

    def __call__(self, samples: Sequence[Any], shape: BatchShape | None = None):
        if len(samples) == 0:
            raise ValueError("Pad got an empty batch")
        rows = len(samples) if shape is None else shape.rows
        if len(samples) > rows:
            raise ValueError(f"batch has {len(samples)} samples but the shape allows {rows} rows")
        if self.axis == 0 and not isinstance(samples[0], np.ndarray):
            result = self._pad_flat_1d(samples, rows, shape)
            if result is not None:
                return result
        return self._pad_arrays([np.asarray(s) for s in samples], rows, shape)

    def _target_length(self, max_length: int, lengths, shape: BatchShape | None) -> int:
        if shape is None:
            return _round_up(max_length, self.round_to)
        target = shape.lengths[self.length_index]
        if max_length > target:
            index = int(np.argmax(np.asarray(lengths) > target))
            raise ValueError(f"sample {index} has length {lengths[index]} on axis {self.axis}, "
                             f"longer than the target length {target} "
                             f"(shape.lengths={tuple(shape.lengths)}, "
                             f"length_index={self.length_index})")
        return target

    def _finish(self, out: np.ndarray, lengths: np.ndarray, rows: int):
        if not self.ret_length:
            return out
        all_lengths = np.zeros(rows, np.int32)
        all_lengths[: len(lengths)] = lengths
        return out, all_lengths

    def _pad_flat_1d(self, samples, rows: int, shape: BatchShape | None):
        """Lists of scalars: one flat conversion and one masked assignment, or None to fall back."""
        try:
            lengths = np.fromiter(map(len, samples), np.int64, count=len(samples))
            total = int(lengths.sum())
            chained = itertools.chain.from_iterable(samples)
            if self.dtype is not None:
                flat = np.fromiter(chained, self.dtype, count=total)
            else:
                flat = np.asarray(list(chained))
        except (TypeError, ValueError):
            return None
        if flat.ndim != 1 or flat.shape[0] != total or flat.dtype == object:
            return None
        length = self._target_length(int(lengths.max()), lengths, shape)
        out = np.full((rows, length), self.pad_val, dtype=self.dtype or flat.dtype)
        out[: len(samples)][np.arange(length) < lengths[:, None]] = flat
        return self._finish(out, lengths, rows)

    def _pad_arrays(self, arrays: list[np.ndarray], rows: int, shape: BatchShape | None):
        first = arrays[0]
        if first.ndim == 0:
            raise ValueError("sample 0 is a scalar; Pad needs arrays with at least one axis")
        if not -first.ndim <= self.axis < first.ndim:
            raise ValueError(f"axis {self.axis} is out of range for sample 0 "
                             f"of shape {first.shape}")
        axis = self.axis % first.ndim
        other = first.shape[:axis] + first.shape[axis + 1:]
        for index, array in enumerate(arrays):
            if array.ndim != first.ndim or array.shape[:axis] + array.shape[axis + 1:] != other:
                raise ValueError(f"sample {index} has shape {array.shape}, but the shape of "
                                 f"sample 0 is {first.shape}: only axis {axis} may differ")
        lengths = np.fromiter((a.shape[axis] for a in arrays), np.int64, count=len(arrays))
        length = self._target_length(int(lengths.max()), lengths, shape)
        dtype = self.dtype or np.result_type(*arrays)
        out_shape = (rows,) + first.shape[:axis] + (length,) + first.shape[axis + 1:]
        out = np.full(out_shape, self.pad_val, dtype=dtype)
        prefix = (slice(None),) * axis
        for index, array in enumerate(arrays):
            out[(index,) + prefix + (slice(0, array.shape[axis]),)] = array
        return self._finish(out, lengths, rows)
