"""``Stack``: stack equal-shaped samples into one numpy array."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from textkit.batchify.shape import BatchShape

__all__ = ["Stack"]


class Stack:
    """Stack samples of equal shape into ``[B, *sample_shape]``.

    Called as ``stack(samples, shape=None)``; with a ``BatchShape`` the output has ``shape.rows``
    rows, the extra (dummy) rows filled with zeros. Samples of different shapes raise
    ``ValueError`` naming the first sample that differs from sample 0.
    """

    def __init__(self, dtype: Any = None):
        self.dtype = None if dtype is None else np.dtype(dtype)

    def __repr__(self) -> str:
        return f"Stack(dtype={self.dtype})"

    def __call__(self, samples: Sequence[Any], shape: BatchShape | None = None) -> np.ndarray:
        if len(samples) == 0:
            raise ValueError("Stack got an empty batch")
        try:
            out = np.asarray(samples, dtype=self.dtype)
            ragged = out.dtype == object and self.dtype != object
        except ValueError:
            ragged = True
        if ragged or out.shape[1:] != np.shape(samples[0]):
            arrays = [np.asarray(s) for s in samples]
            for index, array in enumerate(arrays):
                if array.shape != arrays[0].shape:
                    raise ValueError(f"sample {index} has shape {array.shape}, but sample 0 has "
                                     f"shape {arrays[0].shape}; Stack needs equal shapes")
            out = np.stack(arrays).astype(self.dtype or arrays[0].dtype, copy=False)
        if shape is None or shape.rows == len(samples):
            return out
        if len(samples) > shape.rows:
            raise ValueError(f"batch has {len(samples)} samples but the shape allows "
                             f"{shape.rows} rows")
        padded = np.zeros((shape.rows,) + out.shape[1:], dtype=out.dtype)
        padded[: len(samples)] = out
        return padded
