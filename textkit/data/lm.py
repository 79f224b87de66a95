"""BPTT windows for language modelling: a token stream -> fixed-shape ``(batch, seq_len)`` batches.

The stream is cut into ``batch_size`` contiguous rows (row ``b`` holds tokens
``[b * row_len, (b + 1) * row_len)``); window ``i`` takes columns ``[i * seq_len, (i + 1) *
seq_len)`` of every row, so window ``i + 1`` continues each row where window ``i`` stopped and a
recurrent state can be carried across windows. Every window has the same shape, so a jitted
step compiles once.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["BPTTBatches", "bptt_batches"]


class BPTTBatches:
    """Iterable of BPTT windows over ``token_ids`` (int ``[N]``).

    Each window is a dict: ``inputs`` int32 ``[B, T]``, ``targets`` int32 ``[B, T]`` (inputs
    shifted by one) and ``mask`` float32 ``[B, T]`` (1 for real targets). ``last_batch``:
    ``"keep"`` pads the final short window with ``pad_id`` and masks it (shape unchanged);
    ``"discard"`` drops it. Tokens that do not fill a whole row are dropped.
    """

    def __init__(self, token_ids: np.ndarray, batch_size: int, seq_len: int,
                 last_batch: str = "keep", pad_id: int = 0):
        token_ids = np.asarray(token_ids)
        if token_ids.ndim != 1:
            raise ValueError(f"token_ids must be 1-D, got shape {token_ids.shape}")
        if batch_size < 1 or seq_len < 1:
            raise ValueError(f"batch_size and seq_len must be >= 1, got {batch_size}, {seq_len}")
        if last_batch not in ("keep", "discard"):
            raise ValueError(f"last_batch must be 'keep' or 'discard', got {last_batch!r}")
        if isinstance(pad_id, bool) or not isinstance(pad_id, int | np.integer):
            raise TypeError(f"pad_id must be an int (the id of <pad>), got {pad_id!r}")
        row_len = len(token_ids) // batch_size
        if row_len < 2:
            raise ValueError(f"{len(token_ids)} tokens are too few for batch_size {batch_size} "
                             "(each row needs at least 2 tokens)")
        # rows: int32 [B, row_len]; a row's inputs are [0, row_len - 1), its targets [1, row_len)
        self.rows = token_ids[: row_len * batch_size].astype(np.int32).reshape(batch_size, row_len)
        self.batch_size, self.seq_len = batch_size, seq_len
        self.last_batch, self.pad_id = last_batch, pad_id
        self.num_targets = row_len - 1  # predictable positions per row

    def __len__(self) -> int:
        full, rest = divmod(self.num_targets, self.seq_len)
        return full + (1 if rest and self.last_batch == "keep" else 0)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"window {index} out of range for {len(self)} windows")
        start = (index % len(self)) * self.seq_len
        width = min(self.seq_len, self.num_targets - start)
        shape = (self.batch_size, self.seq_len)
        inputs = np.full(shape, self.pad_id, np.int32)          # [B, T]
        targets = np.full(shape, self.pad_id, np.int32)         # [B, T]
        mask = np.zeros(shape, np.float32)                      # [B, T]
        inputs[:, :width] = self.rows[:, start:start + width]
        targets[:, :width] = self.rows[:, start + 1:start + 1 + width]
        mask[:, :width] = 1.0
        return {"inputs": inputs, "targets": targets, "mask": mask}


def bptt_batches(token_ids: np.ndarray, batch_size: int, seq_len: int,
                 last_batch: str = "keep", pad_id: int = 0) -> BPTTBatches:
    """BPTT windows over a token stream; see ``BPTTBatches``."""
    return BPTTBatches(token_ids, batch_size, seq_len, last_batch=last_batch, pad_id=pad_id)
