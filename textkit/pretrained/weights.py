"""The one weight walker between transformers' torch checkpoints and textkit params, shared by
every checkpoint format (Marian, the encoders, the decoder-only families).

A format lists its ``Entry``s: a textkit param path, the transformers tensor name(s) it comes
from (each a name or a list of alternative names) and a ``Transform`` ``(to_textkit,
to_transformers)`` applied per tensor. Several tensors make one leaf by stacking them on a new
axis (q/k/v of a fused [D, 3, H, Dh] kernel, ``stack_axis``) or, with ``parts``, by
concatenating them along that axis (grouped-query q/k/v of [D, H + 2 KVH, Dh]: parts (H, KVH,
KVH)). ``read_params`` walks the entries one way, ``write_tensors`` the other.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, NamedTuple

import numpy as np

from textkit.pretrained.errors import PretrainedError, VocabSizeMismatchError

__all__ = ["SAME", "Entry", "Transform", "at", "check_vocab_size", "expected_params",
           "heads_bias", "linear", "out_proj", "put", "read_params", "stack_axis", "to_textkit",
           "to_torch", "write_tensors"]

Transform = tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]


class Entry(NamedTuple):
    """One textkit leaf: its param ``path``, the transformers ``keys`` it is made of (each a
    name, or a list of alternative names: the first is written), the per-tensor
    ``transform`` and, for concatenated tensors, the size of each along ``stack_axis``."""

    path: tuple[str, ...]
    keys: list[Any]
    transform: Transform
    parts: tuple[int, ...] | None = None

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


def to_textkit(arrays: list[np.ndarray], transform: Transform, path: tuple[str, ...],
               parts: tuple[int, ...] | None = None) -> np.ndarray:
    """One textkit leaf from its torch tensors: the one converted, or several (q/k/v)
    converted and stacked on ``stack_axis(path)`` (concatenated there with ``parts``)."""
    if len(arrays) == 1:
        return transform[0](arrays[0])
    join = np.concatenate if parts else np.stack
    return join([transform[0](a) for a in arrays], axis=stack_axis(path))


def to_torch(value: Any, count: int, transform: Transform, path: tuple[str, ...],
             parts: tuple[int, ...] | None = None) -> list[np.ndarray]:
    """The ``count`` torch tensors (float32, contiguous) of one textkit leaf: the inverse of
    ``to_textkit``."""
    value = np.asarray(value, np.float32)
    axis = stack_axis(path)
    if count == 1:
        pieces = [value]
    elif parts:
        pieces = np.split(value, np.cumsum(parts)[:-1], axis=axis)
    else:
        pieces = [np.take(value, i, axis=axis) for i in range(count)]
    return [np.ascontiguousarray(transform[1](piece)) for piece in pieces]


Pick = Callable[[Any], "np.ndarray | None"]
"""``pick(key)``: the tensor of a key (a name or a list of alternatives); None when absent."""


def read_params(entries: list[Entry], pick: Pick, expected: Any, *, root: Any, says: str,
                vocab_paths: Collection[str] = (),
                fallback: Callable[[Entry, np.ndarray | None], Any] | None = None
                ) -> dict[str, Any]:
    """textkit params (numpy in ``expected``'s dtypes; ``expected``: a ``jax.eval_shape`` of
    the params) from transformers' tensors: each entry's tensors picked, converted, joined and
    shape-checked. A missing tensor is a ``PretrainedError`` naming ``root``, the tensor and
    what config.json ``says``; a shape that does not fit names both shapes (a
    ``VocabSizeMismatchError`` for the top-level params in ``vocab_paths``).
    ``fallback(entry, value or None)`` may supply a leaf instead (a new head's fresh weights)
    when a tensor is absent or its shape differs: it returns None to refuse."""
    params: dict[str, Any] = {}
    for entry in entries:
        want = at(expected, entry.path)
        arrays = [pick(key) for key in entry.keys]
        value = None
        if all(a is not None for a in arrays):
            value = to_textkit(arrays, entry.transform, entry.path, entry.parts)
            if tuple(value.shape) == tuple(want.shape):
                put(params, entry.path, np.ascontiguousarray(value, np.dtype(want.dtype)))
                continue
        replacement = fallback(entry, value) if fallback is not None else None
        if replacement is not None:
            put(params, entry.path, np.asarray(replacement))
            continue
        names = [k[0] if isinstance(k, list) else k for k in entry.keys]
        if value is None:
            key = entry.keys[[a is None for a in arrays].index(True)]
            raise PretrainedError(f"{root}: the weights have no "
                                  f"{' or '.join(key) if isinstance(key, list) else key} "
                                  f"({says}; a damaged file, or a checkpoint of another "
                                  f"architecture?)")
        kind = VocabSizeMismatchError if entry.path[0] in vocab_paths else PretrainedError
        raise kind(f"{root}: {' / '.join(names)} has shape {arrays[0].shape}, which gives "
                   f"{value.shape} for {'/'.join(entry.path)}; config.json implies "
                   f"{tuple(want.shape)}")
    return params


def write_tensors(entries: list[Entry], params: Any) -> dict[str, np.ndarray]:
    """transformers' tensors (float32 numpy, under the first name of each key) of textkit
    ``params``: the inverse of ``read_params``."""
    tensors: dict[str, np.ndarray] = {}
    for entry in entries:
        names = [k[0] if isinstance(k, list) else k for k in entry.keys]
        tensors.update(zip(names, to_torch(at(params, entry.path), len(names), entry.transform,
                                           entry.path, entry.parts)))
    return tensors


def expected_params(model: Any, *inputs: Any) -> Any:
    """The params' shapes and dtypes of a flax ``model`` applied to ``inputs`` (``jax.eval_shape``
    of its ``init``: nothing computed, nothing allocated)."""
    import jax

    return jax.eval_shape(lambda key: model.init(key, *inputs)["params"], jax.random.PRNGKey(0))


def check_vocab_size(where: Any, what: str, ids: int, size: int) -> None:
    """The one vocabulary-size check of every family: ``VocabSizeMismatchError`` naming
    ``where`` (a directory, or a description) when ``what`` (a tokenizer) has more ``ids``
    than the model's ``size`` embeddings."""
    if ids > size:
        raise VocabSizeMismatchError(f"{where}: {what} has {ids} ids but the model {size} "
                                     f"embeddings (vocab_size in config.json)")
