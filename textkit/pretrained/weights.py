"""Tensor layouts between transformers' torch checkpoints and textkit params, shared by the
checkpoint formats: each ``Transform`` is ``(to_textkit, to_transformers)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["SAME", "Transform", "at", "heads_bias", "linear", "out_proj", "put", "stack_axis",
           "to_textkit", "to_torch"]

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


def at(tree: Any, path: tuple[str, ...]) -> Any:
    """The leaf of a nested dict at ``path``."""
    for part in path:
        tree = tree[part]
    return tree


def put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set the leaf at ``path`` of a nested dict, making the inner dicts."""
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    tree[path[-1]] = value


def to_textkit(arrays: list[np.ndarray], transform: Transform,
               path: tuple[str, ...]) -> np.ndarray:
    """One textkit leaf from its torch tensors: the one converted, or several (q/k/v)
    converted and stacked on ``stack_axis(path)``."""
    if len(arrays) == 1:
        return transform[0](arrays[0])
    return np.stack([transform[0](a) for a in arrays], axis=stack_axis(path))


def to_torch(value: Any, count: int, transform: Transform,
             path: tuple[str, ...]) -> list[np.ndarray]:
    """The ``count`` torch tensors (float32, contiguous) of one textkit leaf: the inverse of
    ``to_textkit``."""
    value = np.asarray(value, np.float32)
    parts = [value] if count == 1 else [np.take(value, i, axis=stack_axis(path))
                                        for i in range(count)]
    return [np.ascontiguousarray(transform[1](part)) for part in parts]
