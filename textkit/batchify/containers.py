"""Combinators that apply one batchify function per field: ``Tuple``, ``Dict``, ``NamedTuple``,
``List``. The first three pass a ``BatchShape`` down to their children."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from textkit.batchify.shape import BatchShape

__all__ = ["Dict", "List", "NamedTuple", "Tuple"]

BatchifyFn = Callable[..., Any]


def _apply(fn: BatchifyFn, column: list, shape: BatchShape | None):
    return fn(column) if shape is None else fn(column, shape)


def _check_width(samples: Sequence[Any], width: int, kind: str) -> None:
    for index, sample in enumerate(samples):
        if len(sample) != width:
            raise ValueError(f"sample {index} has {len(sample)} fields, but {kind} has {width} "
                             "batchify functions")


class Tuple:
    """Apply the i-th function to the i-th field of every sample; returns a tuple.

    ``Tuple(Pad(pad_val=1), Stack())`` or ``Tuple([Pad(pad_val=1), Stack()])``.
    """

    def __init__(self, fn: BatchifyFn | Sequence[BatchifyFn], *fns: BatchifyFn):
        self.fns = tuple(fn) if isinstance(fn, list | tuple) else (fn,) + fns
        if isinstance(fn, list | tuple) and fns:
            raise ValueError("give the functions either as one list or as separate arguments")
        for index, f in enumerate(self.fns):
            if not callable(f):
                raise TypeError(f"batchify function {index} is not callable: {f!r}")

    def __call__(self, samples: Sequence[Sequence[Any]], shape: BatchShape | None = None) -> tuple:
        _check_width(samples, len(self.fns), "the Tuple")
        return tuple(_apply(fn, [s[i] for s in samples], shape) for i, fn in enumerate(self.fns))


class Dict:
    """Apply ``fns[key]`` to field ``key`` of every (dict) sample; returns a dict.

    Fields without a function are dropped.
    """

    def __init__(self, fns: Mapping[str, BatchifyFn]):
        self.fns = dict(fns)
        for key, fn in self.fns.items():
            if not callable(fn):
                raise TypeError(f"batchify function for field {key!r} is not callable: {fn!r}")

    def __call__(self, samples: Sequence[Mapping[str, Any]],
                 shape: BatchShape | None = None) -> dict:
        for index, sample in enumerate(samples):
            missing = [key for key in self.fns if key not in sample]
            if missing:
                raise ValueError(f"sample {index} lacks the field(s) {missing}")
        return {key: _apply(fn, [s[key] for s in samples], shape) for key, fn in self.fns.items()}


class NamedTuple:
    """Batchify samples of a ``typing.NamedTuple`` type field by field; returns that type.

    ``fns`` maps field names to functions, or lists one function per field in order.
    """

    def __init__(self, container_type: type,
                 fns: Mapping[str, BatchifyFn] | Sequence[BatchifyFn]):
        fields = getattr(container_type, "_fields", None)
        if not isinstance(container_type, type) or fields is None:
            raise TypeError(f"container_type must be a NamedTuple class, got {container_type!r}")
        if isinstance(fns, Mapping):
            if set(fns) != set(fields):
                raise ValueError(f"functions are given for {sorted(fns)}, but "
                                 f"{container_type.__name__} has fields {list(fields)}")
            self.fns = tuple(fns[name] for name in fields)
        else:
            if len(fns) != len(fields):
                raise ValueError(f"{len(fns)} functions given for {len(fields)} fields of "
                                 f"{container_type.__name__}")
            self.fns = tuple(fns)
        for name, fn in zip(fields, self.fns):
            if not callable(fn):
                raise TypeError(f"batchify function for field {name!r} of "
                                f"{container_type.__name__} is not callable: {fn!r}")
        self.container_type = container_type

    def __call__(self, samples: Sequence[Any], shape: BatchShape | None = None):
        for index, sample in enumerate(samples):
            if not isinstance(sample, self.container_type):
                raise ValueError(f"sample {index} is a {type(sample).__name__}, "
                                 f"expected {self.container_type.__name__}")
        return self.container_type(*(_apply(fn, [s[i] for s in samples], shape)
                                     for i, fn in enumerate(self.fns)))


class List:
    """Return the samples unchanged, as a list (for fields that are not arrays). Ignores shape."""

    def __call__(self, samples: Sequence[Any], shape: BatchShape | None = None) -> list:
        return list(samples)
