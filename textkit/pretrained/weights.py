"""Tensor layouts between transformers' torch checkpoints and textkit params, shared by the
checkpoint formats: each ``Transform`` is ``(to_textkit, to_transformers)``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["SAME", "Transform", "heads_bias", "linear", "out_proj", "stack_axis"]

Transform = tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]

SAME: Transform = (lambda x: x, lambda x: x)
"""The same array on both sides (biases, norms, embeddings)."""


def linear(heads: int | None = None) -> Transform:
    """torch Linear weight [out, in] <-> kernel [in, out] (out split into ``heads`` if given:
    [in, H, Dh])."""
    def to_textkit(w: np.ndarray) -> np.ndarray:
        kernel = w.T
        return kernel if heads is None else kernel.reshape(kernel.shape[0], heads, -1)

    return to_textkit, lambda k: k.reshape(k.shape[0], -1).T


def out_proj(heads: int) -> Transform:
    """Attention output weight [D, D_in] <-> kernel [H, Dh, D]."""
    return (lambda w: w.T.reshape(heads, -1, w.shape[0]),
            lambda k: k.reshape(-1, k.shape[-1]).T)


def heads_bias(heads: int) -> Transform:
    """Bias [H * Dh] <-> [H, Dh]."""
    return lambda b: b.reshape(heads, -1), lambda b: b.reshape(-1)


def stack_axis(path: tuple[str, ...]) -> int:
    """Axis of a q/k/v (or k/v) stack: 1 in a kernel [D, n, H, Dh], 0 in a bias [n, H, Dh]."""
    return 1 if path[-1] == "kernel" else 0
