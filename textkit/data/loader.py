"""DataLoader: turn a batch sampler's batches into numpy batches, prefetched by worker threads.

Threads suffice: batchify is numpy work, and the training step (jax) releases the GIL while it
runs, so loading the next batches overlaps with compute. Batches come out in sampler order.
"""

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np


class DataLoader:
    """Load ``dataset`` batch by batch as ``batch_sampler`` orders it.

    Args:
      dataset: anything with ``__getitem__`` (and optionally ``__getitems__(indices)`` to fetch a
        whole batch at once).
      batch_sampler: iterable of batches; a batch is a ``textkit.data.Batch`` (indices and padded
        shape) or any sequence of indices.
      batchify_fn: ``fn(samples)`` or, when the batch carries a shape, ``fn(samples, shape)``
        (``fn(samples, shape, row_of)`` for a ``PackedBatch``);
        returns the numpy batch. Defaults to returning the list of samples.
      num_workers: worker threads; 0 loads in the consuming thread.
      prefetch: batches loaded ahead of the consumer (default ``2 * num_workers``).

    A worker's exception is re-raised in the consumer as the original exception (its traceback
    still shows the worker frames) with a note naming the step and the sample indices. Stopping
    early (``break``, ``close()``) cancels what is queued and joins the workers.
    If the sampler is resumable, ``state_dict()`` counts only the batches handed to the consumer,
    not the prefetched ones.
    """

    def __init__(
        self,
        dataset: Any,
        batch_sampler: Iterable,
        batchify_fn: Callable | None = None,
        num_workers: int = 0,
        prefetch: int | None = None,
    ):
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self._prefetch = 2 * num_workers if prefetch is None else int(prefetch)
        if num_workers and self._prefetch < 1:
            raise ValueError(f"prefetch must be >= 1 with worker threads, got {prefetch}")
        self.dataset, self.batch_sampler = dataset, batch_sampler
        self.batchify_fn = batchify_fn if batchify_fn is not None else (lambda samples: samples)
        self.num_workers = int(num_workers)
        self._resume_state: dict | None = None

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def _load(self, batch) -> Any:
        indices = batch.indices if hasattr(batch, "indices") else batch
        if hasattr(self.dataset, "__getitems__"):
            samples = self.dataset.__getitems__(np.asarray(indices).tolist())
        else:
            samples = [self.dataset[i] for i in np.asarray(indices).tolist()]
        shape = getattr(batch, "shape", None)
        row_of = getattr(batch, "row_of", None)
        if row_of is not None:                 # packed rows (textkit.data.packing)
            return self.batchify_fn(samples, shape, row_of)
        return self.batchify_fn(samples) if shape is None else self.batchify_fn(samples, shape)

    def shape_batches(self) -> list[Any]:
        """One loaded batch of every padded shape the sampler yields (its ``shape_batches()``;
        empty when it has none), e.g. to compile a step for each before training."""
        batches = getattr(self.batch_sampler, "shape_batches", lambda: [])()
        return [self._load(batch) for batch in batches]

    def state_dict(self) -> dict:
        """The sampler's state after the last batch the consumer received."""
        if self._resume_state is not None:
            return dict(self._resume_state)
        return self.batch_sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._resume_state = None
        self.batch_sampler.load_state_dict(state)

    def __iter__(self) -> Iterator[Any]:
        resumable = hasattr(self.batch_sampler, "state_dict")
        start = self.batch_sampler.state_dict() if resumable else None
        consumed = 0
        finished = False
        loaded = self._iter_loaded()
        try:
            for consumed, batch in enumerate(loaded, start=1):
                if start is not None:
                    self._resume_state = {**start, "position": start["position"] + consumed}
                yield batch
            finished = True
        finally:
            loaded.close()  # joins the worker threads now, not at garbage collection
            self._resume_state = None
            if resumable and not finished:
                # the sampler ran ahead by the prefetched batches: rewind it to what was consumed
                self.batch_sampler.load_state_dict(
                    {**start, "position": start["position"] + consumed}
                )

    def _iter_loaded(self) -> Iterator[Any]:
        if self.num_workers == 0:
            for step, batch in enumerate(self.batch_sampler):
                yield self._result(step, batch, None)
            return
        pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix="textkit-loader")
        pending: deque[tuple[int, Any, Future]] = deque()
        batches = enumerate(self.batch_sampler)
        try:
            for step, batch in batches:
                pending.append((step, batch, pool.submit(self._load, batch)))
                if len(pending) >= self._prefetch:
                    yield self._result(*pending.popleft())
            while pending:
                yield self._result(*pending.popleft())
        finally:
            for _, _, future in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)

    def _result(self, step: int, batch, future: Future | None) -> Any:
        try:
            return self._load(batch) if future is None else future.result()
        except Exception as err:
            indices = np.asarray(getattr(batch, "indices", batch)).tolist()
            err.add_note(f"raised by DataLoader loading step {step}, sample indices {indices}")
            raise
