"""``PackedBatchify``: encoded examples packed several to a row (``textkit.data.packing``) ->
an encoder batch with per-example segments, positions and first-token slots. numpy only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from textkit.batchify.shape import BatchShape

__all__ = ["PackedBatchify"]


class PackedBatchify:
    """Packed rows of encoded examples -> an encoder batch of ``shape``.

    Each example is a dict as ``EncoderBatchify`` takes it (``input_ids`` int [n], optional
    ``token_type_ids`` int [n]) whose targets are scalars (one per example, e.g. ``labels``,
    ``index``). ``row_of`` int [n_examples] is the row of each example, in order; a row holds at
    most ``max_per_row`` examples. Returns, with B = ``shape.rows``, T = ``shape.lengths[0]``,
    K = ``max_per_row``:

    * ``input_ids`` int32 [B, T] (``pad_id`` at padding), ``attention_mask`` int32 [B, T]
      (1 at real tokens), ``token_type_ids`` int32 [B, T] when ``with_token_types``;
    * ``segment_ids`` int32 [B, T]: 1..K, the slot of the token's example in its row, 0 at padding;
    * ``position_ids`` int32 [B, T]: ``first_position, first_position + 1, ...`` restarting at
      each example (RoBERTa: ``pad_id + 1``), ``pad_position`` at padding;
    * ``example_starts`` int32 [B, K]: the column of each example's first token (0 in unused
      slots);
    * each target [B, K] with its own dtype (0 in unused slots), ``weights`` float32 [B, K]
      (1 at the slots holding an example).
    """

    def __init__(self, pad_id: int, max_per_row: int, *, with_token_types: bool,
                 first_position: int = 0, pad_position: int = 0):
        self.pad_id, self.max_per_row = int(pad_id), int(max_per_row)
        self.with_token_types = with_token_types
        self.first_position, self.pad_position = int(first_position), int(pad_position)

    def __call__(self, samples: Sequence[dict], shape: BatchShape,
                 row_of: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
        rows, width, k = shape.rows, shape.lengths[0], self.max_per_row
        batch = {"input_ids": np.full((rows, width), self.pad_id, np.int32),
                 "attention_mask": np.zeros((rows, width), np.int32),
                 "segment_ids": np.zeros((rows, width), np.int32),
                 "position_ids": np.full((rows, width), self.pad_position, np.int32),
                 "example_starts": np.zeros((rows, k), np.int32)}
        if self.with_token_types:
            batch["token_type_ids"] = np.zeros((rows, width), np.int32)
        targets = [n for n in samples[0] if n not in ("input_ids", "token_type_ids")] \
            if samples else []
        for name in targets:
            if np.ndim(samples[0][name]):
                raise ValueError(f"PackedBatchify takes one {name!r} per example (a scalar); "
                                 f"got an array: token-level targets cannot be packed")
            batch[name] = np.zeros((rows, k), np.asarray(samples[0][name]).dtype)
        batch["weights"] = np.zeros((rows, k), np.float32)
        used = np.zeros(rows, np.int64)    # tokens filled per row
        slots = np.zeros(rows, np.int64)   # examples per row
        for sample, row in zip(samples, np.asarray(row_of).tolist()):
            n, start, slot = len(sample["input_ids"]), int(used[row]), int(slots[row])
            if slot >= k or start + n > width:
                raise ValueError(f"row {row} overflows: example {slot + 1} of at most {k}, "
                                 f"tokens {start}..{start + n} of {width}")
            cols = slice(start, start + n)
            batch["input_ids"][row, cols] = sample["input_ids"]
            batch["attention_mask"][row, cols] = 1
            batch["segment_ids"][row, cols] = slot + 1
            batch["position_ids"][row, cols] = self.first_position + np.arange(n)
            batch["example_starts"][row, slot] = start
            if self.with_token_types and "token_type_ids" in sample:
                batch["token_type_ids"][row, cols] = sample["token_type_ids"]
            for name in targets:
                batch[name][row, slot] = sample[name]
            batch["weights"][row, slot] = 1.0
            used[row], slots[row] = start + n, slot + 1
        return batch
