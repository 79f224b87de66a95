"""Batchify callables for the task batch layouts: seq2seq pairs and labelled sentences.

``Seq2SeqBatchify``: ``(source ids, target ids)`` -> ``src_tokens``, ``src_lengths``,
``tgt_input`` (bos + target), ``tgt_output`` (target + eos), ``tgt_lengths``.
``ClassificationBatchify``: ``(ids, label)`` -> ``tokens``, ``lengths``, ``labels``, ``weights``
(0 for the dummy rows that keep a bucket's batch size fixed).
``EncoderBatchify``: encoded examples (dicts) -> transformers-named encoder batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from textkit.batchify.pad import Pad
from textkit.batchify.shape import BatchShape
from textkit.batchify.stack import Stack

__all__ = ["ClassificationBatchify", "EncoderBatchify", "Seq2SeqBatchify"]

IdPair = tuple[Sequence[int], Sequence[int]]
Sample = tuple[np.ndarray, int]  # (token ids int32 [n], label)


def _as_list(ids: Sequence[int] | np.ndarray) -> list[int]:
    return ids.tolist() if isinstance(ids, np.ndarray) else list(ids)


class Seq2SeqBatchify:
    """``(src_ids, tgt_ids)`` samples -> the textkit seq2seq batch, padded to ``shape``.

    ``shape.lengths`` is ``(source length, target length)``; the target side holds
    ``tgt_input`` = bos + target and ``tgt_output`` = target + eos (``len(tgt_ids) + 1`` each).
    Returns ``src_tokens`` int32 [B, S], ``src_lengths`` int32 [B], ``tgt_input`` /
    ``tgt_output`` int32 [B, T], ``tgt_lengths`` int32 [B]; dummy rows are padding, length 0.
    """

    def __init__(self, pad_id: int, bos_id: int, eos_id: int):
        self.bos, self.eos = [int(bos_id)], [int(eos_id)]
        self.src = Pad(pad_val=pad_id, dtype=np.int32, ret_length=True, length_index=0)
        self.tgt = Pad(pad_val=pad_id, dtype=np.int32, ret_length=True, length_index=1)
        self.tgt_out = Pad(pad_val=pad_id, dtype=np.int32, length_index=1)

    def __call__(self, samples: Sequence[IdPair],
                 shape: BatchShape | None = None) -> dict[str, np.ndarray]:
        src = [_as_list(s) for s, _ in samples]
        tgt = [_as_list(t) for _, t in samples]
        src_tokens, src_lengths = self.src(src, shape)
        tgt_input, tgt_lengths = self.tgt([self.bos + t for t in tgt], shape)
        tgt_output = self.tgt_out([t + self.eos for t in tgt], shape)
        return {"src_tokens": src_tokens, "src_lengths": src_lengths, "tgt_input": tgt_input,
                "tgt_output": tgt_output, "tgt_lengths": tgt_lengths}


class ClassificationBatchify:
    """``(ids, label)`` samples -> ``{"tokens", "lengths", "labels", "weights"}`` (see module
    docstring); with a ``BatchShape`` the batch has exactly its rows and length."""

    def __init__(self, pad_id: int):
        self.pad_id = int(pad_id)
        self._pad = Pad(pad_val=self.pad_id, ret_length=True, dtype=np.int32)
        self._labels = Stack(np.int32)
        self._weights = Stack(np.float32)

    def __call__(self, samples: Sequence[Sample], shape: BatchShape | None = None
                 ) -> dict[str, np.ndarray]:
        tokens, lengths = self._pad([ids for ids, _ in samples], shape)
        return {"tokens": tokens, "lengths": lengths.astype(np.int32),
                "labels": self._labels([label for _, label in samples], shape),
                "weights": self._weights(np.ones(len(samples), np.float32), shape)}


class EncoderBatchify:
    """Encoded examples -> an encoder batch under transformers' names, padded to ``shape``.

    Each example is a dict: ``input_ids`` int [n], ``token_type_ids`` int [n] (optional), and
    any number of targets: a scalar (one per row, e.g. ``labels`` of a sentence,
    ``start_positions``) or an int array [n] aligned with the tokens (e.g. token ``labels``,
    padded with ``ignore``). Returns ``input_ids`` int32 [B, T] (padded with ``pad_id``),
    ``attention_mask`` int32 [B, T], ``token_type_ids`` int32 [B, T] when
    ``with_token_types``, each target ([B] with its own dtype, or int32 [B, T]), and ``weights``
    float32 [B] (0 at dummy rows, whose targets are 0 or ``ignore``).
    """

    def __init__(self, pad_id: int, *, with_token_types: bool, ignore: int = -100):
        self.pad_id, self.with_token_types, self.ignore = int(pad_id), with_token_types, ignore

    def __call__(self, samples: Sequence[dict], shape: BatchShape | None = None
                 ) -> dict[str, np.ndarray]:
        rows = len(samples) if shape is None else shape.rows
        width = (max(len(s["input_ids"]) for s in samples) if shape is None
                 else shape.lengths[0])
        batch = {"input_ids": np.full((rows, width), self.pad_id, np.int32),
                 "attention_mask": np.zeros((rows, width), np.int32)}
        if self.with_token_types:
            batch["token_type_ids"] = np.zeros((rows, width), np.int32)
        for name, value in samples[0].items():
            if name in ("input_ids", "token_type_ids"):
                continue
            if np.ndim(value):
                batch[name] = np.full((rows, width), self.ignore, np.int32)
            else:
                batch[name] = np.zeros(rows, np.asarray(value).dtype)
        for row, sample in enumerate(samples):
            n = len(sample["input_ids"])
            batch["input_ids"][row, :n] = sample["input_ids"]
            batch["attention_mask"][row, :n] = 1
            for name, value in sample.items():
                if name == "token_type_ids":
                    if self.with_token_types:
                        batch[name][row, :n] = value
                elif name != "input_ids":
                    if np.ndim(value):
                        batch[name][row, :n] = value
                    else:
                        batch[name][row] = value
        batch["weights"] = (np.arange(rows) < len(samples)).astype(np.float32)
        return batch
