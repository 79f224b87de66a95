"""Batch samplers that fix the padded shape of every batch, shard it and resume it in O(1).

Why: XLA compiles one program per input shape. ``FixedBucketSampler`` groups samples into a few
length buckets; every batch of a bucket has the same padded shape (``BatchShape(rows, lengths)``),
so a whole epoch yields at most one shape per bucket. Partial batches keep their shape by adding
dummy rows (``last_batch="pad"``) or are dropped (``last_batch="drop"``).

Determinism and resume: the plan of an epoch is a pure function of ``(seed, epoch)``; permutations
come from ``np.random.default_rng([seed, epoch])``. ``state_dict()`` is ``{epoch, position, ...}``
and ``load_state_dict`` jumps straight to ``position`` without replaying anything (as in grain's
``IndexSampler``). A finished epoch advances the epoch counter by one; an interrupted iteration
continues where it stopped; ``set_epoch(e)`` restarts at the beginning of epoch ``e``.

Sharding (``num_shards=N``): all shards build the same global plan from the shared seed. A global
batch of bucket ``k`` holds up to ``N * batch_size_k`` samples; shard ``s`` takes every ``N``-th of
them starting at ``s``. So shards are disjoint, cover the epoch, take the same number of steps, and
at every step all of them emit the same bucket shape (an SPMD program never sees different shapes).
``batch_size`` is therefore the per-shard batch size. So that no shard gets a batch of dummy rows
only, buckets with fewer samples than shards are merged into a larger bucket, and a bucket whose
last global batch has fewer samples than shards shares its last two batches' samples evenly
(``last_batch="pad"``; with a per-shard batch size of 1 an all-dummy batch can remain).
"""

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from textkit.batchify.shape import BatchShape

BucketScheme = Literal["constant", "linear", "exp", "least_padding"]
_EXP_WIDTH_GROWTH = 1.1  # each bucket of the "exp" scheme is 10% wider than the previous one


@dataclass(frozen=True, eq=False)
class Batch:
    """One batch chosen by a sampler: which samples, and the padded shape they must take.

    indices: int64 [n] sample indices, n <= shape.rows; the remaining ``shape.rows - n`` rows are
             dummy rows (all padding, length 0).
    shape:   the padded shape, or None when the sampler leaves padding to the batch maximum.

    It behaves like GluonNLP's list of indices: ``len(batch)``, ``iter(batch)``, ``batch[i]``.
    """

    indices: np.ndarray
    shape: BatchShape | None

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices.tolist())

    def __getitem__(self, item):
        return self.indices[item]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return np.asarray(self.indices, dtype=dtype)

    @property
    def num_dummy_rows(self) -> int:
        """Rows of the padded batch that hold no sample."""
        return 0 if self.shape is None else self.shape.rows - len(self.indices)

    def __repr__(self) -> str:
        return f"Batch(indices={self.indices.tolist()}, shape={self.shape})"


def _round_up(values: np.ndarray, multiple: int | None) -> np.ndarray:
    if not multiple or multiple == 1:
        return values
    return -(-values // multiple) * multiple


def _as_length_matrix(lengths: Any, name: str) -> np.ndarray:
    """Per-sample lengths (ints or equal-size tuples) -> int64 [num_samples, num_fields]."""
    try:
        array = np.asarray(lengths, dtype=np.int64)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{name} must be a sequence of ints or of equal-size tuples of ints: {err}"
        ) from err
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(
            f"{name} must be a non-empty sequence of ints or of equal-size tuples of ints, "
            f"got an array of shape {array.shape}"
        )
    negative = np.flatnonzero((array < 0).any(axis=1))
    if negative.size:
        raise ValueError(
            f"{name}[{negative[0]}] = {array[negative[0]].tolist()} is negative; "
            "lengths must be >= 0"
        )
    return array


def _scheme_keys(min_length: int, max_length: int, num_buckets: int,
                 scheme: BucketScheme) -> list[int]:
    """GluonNLP 0.10's bucket keys, in its order: ConstWidthBucket (from ``max_length`` down in
    steps of ``(1 + max - min) // n``), LinearWidthBucket (width ``alpha * i + 1``),
    ExpWidthBucket (each width ``1.1x`` the previous). Computed with GluonNLP's float
    operations and Python's ``round``, so the keys agree exactly."""
    n, low, high = num_buckets, min_length, max_length
    if scheme == "constant":
        width = max((1 + high - low) // n, 1)
        return [max(high - i * width, low) for i in range(n)]
    if scheme == "linear":
        alpha = 2 * float(high - low - n) / (n * (n + 1))
        keys = [int(round(low + alpha * (((i + 1) * (i + 2)) / 2) + i + 1)) for i in range(n)]
    elif scheme == "exp":
        step = _EXP_WIDTH_GROWTH
        first = (high - low) * (step - 1) / (math.pow(step, n) - 1)
        keys = [int(round(low + first * (math.pow(step, i + 1) - 1) / (step - 1)))
                for i in range(n)]
    elif scheme == "least_padding":
        raise ValueError("bucket_scheme 'least_padding' chooses keys from the lengths "
                         "themselves: call least_padding_keys(lengths, num_buckets, round_to)")
    else:
        raise ValueError("bucket_scheme must be 'constant', 'linear', 'exp' or 'least_padding', "
                         f"got {scheme!r}")
    keys[-1] = max(keys[-1], high)
    return keys


def least_padding_keys(lengths: Sequence[int] | np.ndarray, num_buckets: int,
                       round_to: int | None = None) -> list[int]:
    """Bucket keys of ``lengths`` (int [N]) that minimise the padded length summed over the
    samples, each sample padded to the first key that holds it rounded up to ``round_to``.

    An exact dynamic program over the candidate keys: the multiples of ``round_to`` from the
    shortest length up to the longest, and the longest length. Returns at most ``num_buckets``
    increasing keys, the last one the longest length; of equally good sets, the one with the
    fewest buckets (the fewest compiled shapes).
    """
    lengths = np.sort(np.asarray(lengths, np.int64).ravel())
    if lengths.size == 0 or num_buckets < 1:
        raise ValueError(f"need lengths and num_buckets >= 1, got {lengths.size} lengths and "
                         f"num_buckets={num_buckets}")
    step = max(int(round_to or 1), 1)
    low, high = int(lengths[0]), int(lengths[-1])
    keys = np.arange(-(-max(low, 1) // step) * step, high, step, dtype=np.int64)
    keys = np.append(keys, high)                                          # [C] candidates
    held = np.searchsorted(lengths, keys, side="right").astype(np.float64)  # [C] samples <= key
    padded = _round_up(keys, step).astype(np.float64)                     # [C]
    before = np.triu(np.ones((len(keys), len(keys)), bool), 1)            # [C(i), C(j)] i < j
    # cost[j]: least total padded length of the samples <= keys[j], keys[j] the last key
    cost = held * padded
    costs, previous = [cost], [np.full(len(keys), -1)]
    for _ in range(num_buckets - 1):
        total = np.where(before, cost[:, None] + (held[None, :] - held[:, None]) * padded, np.inf)
        previous.append(total.argmin(axis=0))
        cost = total[previous[-1], np.arange(len(keys))]
        costs.append(cost)
    buckets = int(np.argmin([c[-1] for c in costs]))                      # first of the ties
    chosen, j = [], len(keys) - 1
    for b in range(buckets, -1, -1):
        chosen.append(int(keys[j]))
        j = int(previous[b][j])
    return chosen[::-1]


def bucket_boundaries(
    min_length: int, max_length: int, num_buckets: int, scheme: BucketScheme = "constant"
) -> np.ndarray:
    """Bucket keys (inclusive upper length bounds) for lengths in ``[min_length, max_length]``.

    The keys of GluonNLP's ``ConstWidthBucket`` / ``LinearWidthBucket`` / ``ExpWidthBucket``
    (``"constant"`` / ``"linear"`` / ``"exp"``), sorted and deduplicated as its
    ``FixedBucketSampler`` does. Returns int64 [<= num_buckets], increasing; the last key is
    ``max_length`` or more (keys past the first that covers ``max_length`` would hold no sample
    and are dropped, as GluonNLP drops empty buckets). Example: lengths 16..31 in 2 constant
    buckets give ``[23, 31]``.
    """
    if num_buckets < 1:
        raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")
    keys = sorted(set(_scheme_keys(int(min_length), int(max_length), int(num_buckets), scheme)))
    covering = next(i for i, key in enumerate(keys) if key >= max_length)
    return np.array(keys[: covering + 1], dtype=np.int64)  # later keys would stay empty


class _ResumableSampler:
    """Epoch and position bookkeeping shared by the samplers.

    A subclass implements ``__len__`` (steps per epoch) and ``_plan(epoch)``, which returns an
    object whose ``[step]`` gives the item of that step.
    """

    def __init__(self, seed: int):
        self._seed = int(seed)
        self._epoch = 0
        self._position = 0

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def position(self) -> int:
        """Number of steps of the current epoch already yielded."""
        return self._position

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first step at the next iteration."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._epoch, self._position = int(epoch), 0

    def state_dict(self) -> dict[str, int]:
        """Small resumable state: ``{epoch, position, seed, num_steps}``."""
        return {
            "epoch": self._epoch,
            "position": self._position,
            "seed": self._seed,
            "num_steps": len(self),
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume at ``state['position']`` of ``state['epoch']``; the plan must be the same."""
        for key in ("epoch", "position", "seed", "num_steps"):
            if key not in state:
                raise KeyError(f"sampler state is missing {key!r}; got keys {sorted(state)}")
        if state["seed"] != self._seed or state["num_steps"] != len(self):
            raise ValueError(
                f"sampler state was saved for seed={state['seed']} with {state['num_steps']} "
                f"steps per epoch, but this sampler has seed={self._seed} and {len(self)} steps; "
                "resume with the same data, batch size, buckets and shards"
            )
        if not 0 <= state["position"] <= len(self):
            raise ValueError(f"position {state['position']} is outside [0, {len(self)}]")
        self._epoch, self._position = int(state["epoch"]), int(state["position"])

    def _plan(self, epoch: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        epoch, start = self._epoch, self._position
        plan = self._plan(epoch)
        for step in range(start, len(self)):
            item = plan[step]
            self._position = step + 1
            yield item
        self._epoch, self._position = epoch + 1, 0


class _BatchPlan:
    """The batches of one epoch as index ranges into one ordered index array.

    order:  int64 [kept_samples] sample indices, grouped batch after batch
    starts, stops: int64 [num_batches] range of each (global) batch in ``order``
    shapes: BatchShape per batch (``None`` entries when unshaped)
    """

    def __init__(self, order, starts, stops, shapes, step_to_batch, num_shards=1, shard_id=0):
        self.order, self.starts, self.stops, self.shapes = order, starts, stops, shapes
        self.step_to_batch = step_to_batch
        self.num_shards, self.shard_id = num_shards, shard_id

    def __getitem__(self, step: int) -> Batch:
        batch = self.step_to_batch[step]
        indices = self.order[self.starts[batch] : self.stops[batch]]
        if self.num_shards > 1:
            indices = indices[self.shard_id :: self.num_shards]
        return Batch(np.array(indices, dtype=np.int64), self.shapes[batch])


class FixedBucketSampler(_ResumableSampler):
    """Bucket samples by length so every batch of a bucket has one fixed padded shape.

    Args:
      lengths: per sample an int, or a tuple such as ``(src_len, tgt_len)`` (one entry per length
        field; buckets are keyed on every field).
      batch_size: sentences per (per-shard) batch, or tokens per batch with
        ``batch_size_unit="tokens"`` (each bucket then gets ``batch_size // max(padded key)``
        rows, so its padded shape stays fixed).
      num_buckets: number of buckets generated by ``bucket_scheme`` (ignored with bucket_keys).
      bucket_keys: explicit upper bounds, ints or tuples, non-decreasing in every field.
        A sample goes to the first bucket whose key fits it in every field (GluonNLP's keys and
        membership, the default ``membership="key"``; with ``membership="padded"`` a sample
        joins the first bucket whose padded shape fits it, which wastes less padding when
        ``round_to`` > 1); the batch is padded to the key rounded up to ``round_to``. Buckets left
        without samples are dropped (as in GluonNLP), as are keys whose rounded length equals
        the next key's (the larger key is kept).
      ratio: sentence mode only; shorter buckets get up to ``ratio * longest/own`` times more
        rows (GluonNLP's rule), never fewer than ``batch_size``.
      shuffle: shuffle within buckets and the batch order, from ``(seed, epoch)``.
      seed: the seed of that shuffle.
      bucket_scheme: "constant", "linear" or "exp" bucket widths (GluonNLP's), or
        "least_padding": the keys of ``least_padding_keys`` (per field), those that pad the
        given lengths least.
      round_to: padded lengths (``bucket_shapes``) are the bucket keys rounded up to a multiple
        of this (None or 1: no rounding).
      last_batch: "pad" keeps partial batches with dummy rows; "drop" drops them.
      num_shards: how many processes share every global batch (see module docstring).
      shard_id: this process's share of it, in ``[0, num_shards)``.
      batch_rows_multiple: round every bucket's (per-shard) rows down to a multiple of this, e.g.
        the number of devices a shard's rows are split over (a bucket left with no rows is an
        error).

    A sample goes to the first bucket whose key fits it in every field.
    """

    def __init__(
        self,
        lengths: Sequence[int] | Sequence[Sequence[int]] | np.ndarray,
        batch_size: int,
        num_buckets: int = 10,
        bucket_keys: Sequence[int] | Sequence[Sequence[int]] | None = None,
        ratio: float = 0.0,
        shuffle: bool = False,
        seed: int = 0,
        bucket_scheme: BucketScheme = "constant",
        batch_size_unit: Literal["sentences", "tokens"] = "sentences",
        round_to: int | None = 8,
        last_batch: Literal["pad", "drop"] = "pad",
        num_shards: int = 1,
        shard_id: int = 0,
        batch_rows_multiple: int = 1,
        membership: Literal["key", "padded"] = "key",
    ):
        super().__init__(seed)
        self._lengths = _as_length_matrix(lengths, "lengths")
        if membership not in ("key", "padded"):
            raise ValueError(f"membership must be 'key' or 'padded', got {membership!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if batch_size_unit not in ("sentences", "tokens"):
            raise ValueError(
                f"batch_size_unit must be 'sentences' or 'tokens', got {batch_size_unit!r}"
            )
        if last_batch not in ("pad", "drop"):
            raise ValueError(f"last_batch must be 'pad' or 'drop', got {last_batch!r}")
        if num_shards < 1 or not 0 <= shard_id < num_shards:
            raise ValueError(f"need 0 <= shard_id < num_shards, got {shard_id} and {num_shards}")
        if batch_rows_multiple < 1:
            raise ValueError(f"batch_rows_multiple must be >= 1, got {batch_rows_multiple}")
        if ratio < 0 or (ratio and batch_size_unit == "tokens"):
            raise ValueError("ratio must be >= 0 and is only used with batch_size_unit='sentences'")
        self._shuffle, self._last_batch = bool(shuffle), last_batch
        self._num_shards, self._shard_id = int(num_shards), int(shard_id)
        self._batch_size, self._batch_size_unit = int(batch_size), batch_size_unit
        self._rows_multiple = int(batch_rows_multiple)

        keys = self._keys(bucket_keys, num_buckets, bucket_scheme, round_to)
        padded = _round_up(keys, round_to)
        keep = np.ones(len(keys), dtype=bool)
        keep[:-1] = (padded[1:] != padded[:-1]).any(axis=1)  # one bucket per padded shape
        keys, padded = keys[keep], padded[keep]
        fits = keys if membership == "key" else padded
        used = np.unique(self._assign(self._lengths, fits))  # drop empty buckets
        self.bucket_keys, self._padded = keys[used], padded[used]
        self._bucket_of = self._assign(self._lengths, fits[used])
        if self._num_shards > 1 and last_batch == "pad":
            self._merge_tiny_buckets()
        self.bucket_counts = np.bincount(self._bucket_of, minlength=len(self.bucket_keys))
        self.bucket_batch_sizes = self._batch_sizes(ratio)
        self.bucket_shapes = [
            BatchShape(int(rows), tuple(int(v) for v in key))
            for rows, key in zip(self.bucket_batch_sizes, self._padded)
        ]
        global_sizes = self.bucket_batch_sizes * self._num_shards
        rounding = np.ceil if last_batch == "pad" else np.floor
        self._bucket_num_batches = rounding(self.bucket_counts / global_sizes).astype(np.int64)
        self._sorted_by_bucket = np.argsort(self._bucket_of, kind="stable")

    def _keys(self, bucket_keys, num_buckets, scheme, round_to) -> np.ndarray:
        """int64 [num_buckets, num_fields] bucket keys (inclusive upper bounds), non-decreasing
        in every field."""
        num_fields = self._lengths.shape[1]
        if bucket_keys is None:
            if num_buckets < 1:
                raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")
            per_field = [least_padding_keys(col, num_buckets, round_to)
                         if scheme == "least_padding" else
                         _scheme_keys(int(col.min()), int(col.max()), num_buckets, scheme)
                         for col in self._lengths.T]
            if len({len(keys) for keys in per_field}) > 1:   # fields padded apart: pad them
                size = max(len(keys) for keys in per_field)
                per_field = [keys + [keys[-1]] * (size - len(keys)) for keys in per_field]
            keys = np.array(sorted(set(zip(*per_field))), dtype=np.int64).reshape(-1, num_fields)
            return np.maximum.accumulate(keys, axis=0)  # per-field monotone for assignment
        keys = np.asarray(bucket_keys, dtype=np.int64)
        keys = keys[:, None] if keys.ndim == 1 else keys
        if keys.ndim != 2 or keys.shape[1] != num_fields or keys.shape[0] == 0:
            raise ValueError(
                f"bucket_keys must be a non-empty list of keys with {num_fields} field(s) "
                f"like the lengths, got shape {keys.shape}"
            )
        if (np.diff(keys, axis=0) < 0).any():
            raise ValueError(
                f"bucket_keys must be non-decreasing in every field, got {keys.tolist()}"
            )
        return keys

    @staticmethod
    def _assign(lengths: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Bucket id per sample: the first key that fits in every field (keys non-decreasing)."""
        per_field = [
            np.searchsorted(keys[:, f], lengths[:, f], side="left") for f in range(keys.shape[1])
        ]
        bucket = np.maximum.reduce(per_field)
        too_long = np.flatnonzero(bucket >= len(keys))
        if too_long.size:
            i = too_long[0]
            raise ValueError(
                f"sample {i} has length {lengths[i].tolist()}, longer than the largest bucket "
                f"key {keys[-1].tolist()} ({too_long.size} samples do not fit)"
            )
        return bucket

    def _merge_tiny_buckets(self) -> None:
        """Move buckets with fewer samples than shards into a larger bucket (they still fit).

        Otherwise some shard would get a batch made only of dummy rows.
        """
        counts = np.bincount(self._bucket_of, minlength=len(self.bucket_keys))
        for k in range(len(counts) - 1):
            if 0 < counts[k] < self._num_shards:
                self._bucket_of[self._bucket_of == k] = k + 1
                counts[k + 1] += counts[k]
                counts[k] = 0
        last = len(counts) - 1
        while 0 < counts[last] < self._num_shards and counts[:last].any():
            k = int(np.flatnonzero(counts[:last])[-1])  # the next smaller non-empty bucket
            self._bucket_of[self._bucket_of == k] = last
            counts[last] += counts[k]
            counts[k] = 0

    def _batch_sizes(self, ratio: float) -> np.ndarray:
        """Rows per (per-shard) batch of each bucket, int64 [num_buckets]."""
        longest = self._padded.max(axis=1)
        if self._batch_size_unit == "tokens":
            sizes = self._batch_size // longest
        else:  # GluonNLP: max(int(max_j sum(K_j) / sum(K_i) * ratio * B), B)
            sums = self.bucket_keys.sum(axis=1).astype(np.float64)
            scaled = np.floor(sums.max() / sums * ratio * self._batch_size).astype(np.int64)
            sizes = np.maximum(scaled, self._batch_size)
        if (sizes < self._rows_multiple).any():
            k = int(np.argmax(sizes < self._rows_multiple))
            unit = "token budget" if self._batch_size_unit == "tokens" else "batch size"
            raise ValueError(
                f"{unit} {self._batch_size} gives bucket {k} (padded length {int(longest[k])}) "
                f"{int(sizes[k])} rows, fewer than batch_rows_multiple={self._rows_multiple}"
            )
        return sizes // self._rows_multiple * self._rows_multiple

    def __len__(self) -> int:
        return int(self._bucket_num_batches.sum())

    def _plan(self, epoch: int) -> _BatchPlan:
        rng = np.random.default_rng([self._seed, epoch]) if self._shuffle else None
        if rng is None:
            order = self._sorted_by_bucket
        else:
            permuted = rng.permutation(len(self._bucket_of))
            order = permuted[np.argsort(self._bucket_of[permuted], kind="stable")]
        num_batches = self._bucket_num_batches
        global_sizes = self.bucket_batch_sizes * self._num_shards
        bucket_start = np.concatenate([[0], np.cumsum(self.bucket_counts)[:-1]])
        batch_bucket = np.repeat(np.arange(len(num_batches)), num_batches)
        first_batch = np.concatenate([[0], np.cumsum(num_batches)[:-1]])
        within = np.arange(len(batch_bucket)) - first_batch[batch_bucket]
        starts = bucket_start[batch_bucket] + within * global_sizes[batch_bucket]
        stops = np.minimum(
            starts + global_sizes[batch_bucket],
            bucket_start[batch_bucket] + self.bucket_counts[batch_bucket],
        )
        if self._num_shards > 1:
            # A bucket's last global batch with fewer samples than shards would leave some shard
            # only dummy rows: split the last two batches' samples evenly instead.
            remainder = self.bucket_counts - (num_batches - 1) * global_sizes
            uneven = np.flatnonzero((num_batches >= 2) & (remainder < self._num_shards))
            last = first_batch[uneven] + num_batches[uneven] - 1
            split = starts[last - 1] + (global_sizes[uneven] + remainder[uneven] + 1) // 2
            stops[last - 1], starts[last] = split, split
        step_to_batch = rng.permutation(len(starts)) if rng is not None else np.arange(len(starts))
        shapes = [self.bucket_shapes[b] for b in batch_bucket]
        return _BatchPlan(
            order, starts, stops, shapes, step_to_batch, self._num_shards, self._shard_id
        )

    def shape_batches(self) -> list[Batch]:
        """One batch of every padded shape an epoch yields (its bucket's first samples), e.g.
        to compile a step for every shape before training."""
        firsts = np.concatenate([[0], np.cumsum(self.bucket_counts)[:-1]])
        return [Batch(self._sorted_by_bucket[first:first + min(shape.rows, int(count))], shape)
                for first, count, shape, batches in zip(
                    firsts, self.bucket_counts, self.bucket_shapes, self._bucket_num_batches)
                if batches]

    def padding_fraction(self) -> float:
        """Padding cells / all padded cells over an epoch of all shards (dummy rows included)."""
        plan = self._plan(self._epoch)
        lengths_sum = self._lengths.sum(axis=1)
        kept = np.zeros(len(lengths_sum), dtype=bool)
        for start, stop in zip(plan.starts, plan.stops):  # one slice per batch, not per sample
            kept[plan.order[start:stop]] = True
        global_rows = self.bucket_batch_sizes * self._num_shards
        cells = (self._bucket_num_batches * global_rows * self._padded.sum(axis=1)).sum()
        return float(1.0 - lengths_sum[kept].sum() / cells) if cells else 0.0

    def stats(self) -> str:
        """Readable summary: sample/batch counts, keys, samples and batch size per bucket."""
        keys = [tuple(k) if len(k) > 1 else k[0] for k in self.bucket_keys.tolist()]
        dropped = int(self.bucket_counts.sum()) - int(
            np.minimum(
                self.bucket_counts,
                self._bucket_num_batches * self.bucket_batch_sizes * self._num_shards,
            ).sum()
        )
        unit = "tokens" if self._batch_size_unit == "tokens" else "sentences"
        return (
            f"{type(self).__name__}:\n"
            f"  sample_num={len(self._bucket_of)}, batch_num={len(self)}, "
            f"num_shards={self._num_shards}, shard_id={self._shard_id}\n"
            f"  key={keys}\n"
            f"  padded={[tuple(k) if len(k) > 1 else k[0] for k in self._padded.tolist()]}\n"
            f"  cnt={self.bucket_counts.tolist()}\n"
            f"  batch_size={self.bucket_batch_sizes.tolist()} "
            f"(per shard; requested {self._batch_size} {unit})\n"
            f"  num_shapes={int((self._bucket_num_batches > 0).sum())}, "
            f"last_batch={self._last_batch}, dropped_samples={dropped}\n"
            f"  padding_fraction={self.padding_fraction():.4f}"
        )


class SortedBucketSampler(_ResumableSampler):
    """GluonNLP's sorted bucketing: sort chunks of ``batch_size * mult`` samples, then batch.

    Samples are (optionally) shuffled, cut into chunks of ``batch_size * mult``, each chunk sorted
    by ``sort_keys`` descending, and cut into batches; the batch order is shuffled too. Each batch's
    shape is its per-field maximum rounded up to ``round_to`` with ``batch_size`` rows, so the
    number of distinct shapes is bounded by the length range / ``round_to``, not by a bucket count
    (use ``FixedBucketSampler`` when that matters).

    sort_keys: per sample an int length or a tuple of lengths (sorted lexicographically).
    """

    def __init__(
        self,
        sort_keys: Sequence[int] | Sequence[Sequence[int]] | np.ndarray,
        batch_size: int,
        mult: int = 100,
        shuffle: bool = False,
        seed: int = 0,
        round_to: int | None = 8,
        last_batch: Literal["pad", "drop"] = "pad",
    ):
        super().__init__(seed)
        self._keys = _as_length_matrix(sort_keys, "sort_keys")
        if batch_size < 1 or mult < 1:
            raise ValueError(f"batch_size and mult must be >= 1, got {batch_size} and {mult}")
        if last_batch not in ("pad", "drop"):
            raise ValueError(f"last_batch must be 'pad' or 'drop', got {last_batch!r}")
        self._batch_size, self._mult = int(batch_size), int(mult)
        self._shuffle, self._round_to, self._last_batch = bool(shuffle), round_to, last_batch
        num_samples = len(self._keys)
        self._num_batches = (
            -(-num_samples // batch_size) if last_batch == "pad" else num_samples // batch_size
        )

    def __len__(self) -> int:
        return self._num_batches

    def _plan(self, epoch: int) -> _BatchPlan:
        rng = np.random.default_rng([self._seed, epoch]) if self._shuffle else None
        num_samples = len(self._keys)
        visit = rng.permutation(num_samples) if rng is not None else np.arange(num_samples)
        chunk = np.arange(num_samples) // (self._batch_size * self._mult)
        keys = self._keys[visit]
        # lexsort: last key is primary -> chunk, then fields in order, all descending except chunk
        order = visit[np.lexsort([-keys[:, f] for f in reversed(range(keys.shape[1]))] + [chunk])]
        starts = np.arange(self._num_batches, dtype=np.int64) * self._batch_size
        stops = np.minimum(starts + self._batch_size, num_samples)
        if self._num_batches:
            maxima = np.maximum.reduceat(self._keys[order[: stops[-1]]], starts, axis=0)
        else:
            maxima = np.zeros((0, self._keys.shape[1]), dtype=np.int64)
        padded = _round_up(maxima, self._round_to)
        shapes = [BatchShape(self._batch_size, tuple(row)) for row in padded.tolist()]
        step_to_batch = (
            rng.permutation(self._num_batches) if rng is not None else np.arange(self._num_batches)
        )
        return _BatchPlan(order, starts, stops, shapes, step_to_batch)


class _IndexPlan:
    def __init__(self, indices: np.ndarray):
        self.indices = indices

    def __getitem__(self, step: int) -> int:
        return int(self.indices[step])


class SplitSampler(_ResumableSampler):
    """Sample indices of one contiguous part of ``range(length)`` split into ``num_parts``.

    Part sizes differ by at most one. Yields ints (a sampler, not a batch sampler), in order or
    shuffled per ``(seed, epoch)``.
    """

    def __init__(
        self,
        length: int,
        num_parts: int = 1,
        part_index: int = 0,
        shuffle: bool = False,
        seed: int = 0,
    ):
        super().__init__(seed)
        if num_parts < 1 or not 0 <= part_index < num_parts:
            raise ValueError(f"need 0 <= part_index < num_parts, got {part_index} and {num_parts}")
        if length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        self._start = part_index * length // num_parts
        self._stop = (part_index + 1) * length // num_parts
        self._shuffle = bool(shuffle)

    def __len__(self) -> int:
        return self._stop - self._start

    def _plan(self, epoch: int) -> _IndexPlan:
        indices = np.arange(self._start, self._stop, dtype=np.int64)
        if self._shuffle:
            indices = np.random.default_rng([self._seed, epoch]).permutation(indices)
        return _IndexPlan(indices)
