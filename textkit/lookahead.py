"""One item of look-ahead: start the work of item n + 1 before the consumer handles item n.

JAX dispatches device work asynchronously, so a loop that starts item n + 1 (a host->device
copy of a batch, a compiled program) before it reads item n back keeps the device busy while
the host prepares and collects. ``fit`` prefetches its batches this way, ``Translator`` and
``Generator`` dispatch their next batch this way. jax-free: it only orders calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

__all__ = ["one_ahead"]

Item = TypeVar("Item")
Started = TypeVar("Started")


def one_ahead(items: Iterable[Item], start: Callable[[Item], Started]
              ) -> Iterator[tuple[Item, Started]]:
    """``(item, start(item))`` for every item, in order; ``start`` of item n + 1 has run (and
    item n + 1 has been taken from ``items``) when pair n is yielded. ``start(item)`` runs
    right after ``items`` hands out ``item``, before the next one is taken. Closing the
    iterator closes ``items``' iterator (when it has ``close``)."""
    iterator = iter(items)
    pending: tuple[Item, Started] | None = None
    try:
        for item in iterator:
            started = (item, start(item))
            if pending is not None:
                yield pending
            pending = started
        if pending is not None:
            yield pending
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
