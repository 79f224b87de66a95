"""Dynamic masking for masked-LM pretraining, done on the host at batch time (numpy).

``Masker`` picks each maskable token with probability ``probability`` (a Bernoulli draw per
token, or per word with ``whole_word``: every token of a picked word is picked) and replaces a
picked token by the mask token with probability ``mask_rate``, by a random non-special token
with ``random_rate``, and keeps it otherwise (BERT's 80 / 10 / 10; ELECTRA masks 85 / 0 / 15).
Special tokens (``never_masked``: CLS, SEP, the pad token, ...) are never picked, so padding
and dummy rows never count. The 80 / 10 / 10 choice is made per token, also inside a whole
word (as BERT's and transformers' whole-word masking do).

The picked positions of each row go into ``max_predictions`` slots (BERT's
``max_predictions_per_seq``), so that the model predicts at those positions only (a fixed
shape, ~30 % of a row instead of all of it). By default (``max_predictions_for``) the slots
hold 1.5 times the expected picks plus 8, rounded up to a multiple of 8 (40 of 128 tokens at
15 %): more than 4 standard deviations above the mean. A row that picks more keeps a random
``max_predictions`` of its picks and leaves the others unmasked.

``MaskedLoader`` masks the batches of a resumable loader as the consumer takes them (the step
it feeds runs asynchronously on the device meanwhile): batch ``k`` of epoch ``e`` of shard
``s`` is masked with ``np.random.default_rng([seed, s, e, k])``, so every epoch gets new
masks, and a run resumed at (epoch, position) draws exactly the masks the first run drew.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from textkit.errors import ConfigError

__all__ = ["MaskedLoader", "Masker", "MaskingConfig", "max_predictions_for"]


def max_predictions_for(width: int, probability: float) -> int:
    """The default prediction slots of a row of ``width`` tokens (module docstring)."""
    return min(width, -(-(math.ceil(1.5 * probability * width) + 8) // 8) * 8)


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    """How tokens are masked: ``probability`` of picking a token (or word), and of the picked
    ones the share replaced by the mask token (``mask_rate``) and by a random token
    (``random_rate``); the rest are kept. ``max_predictions``: the prediction slots of a row
    (None: ``max_predictions_for`` its width)."""

    probability: float = 0.15
    mask_rate: float = 0.8
    random_rate: float = 0.1
    whole_word: bool = False
    max_predictions: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.probability < 1.0:
            raise ConfigError(f"--mask-probability {self.probability}: expected a probability "
                              f"strictly between 0 and 1")
        if self.mask_rate < 0 or self.random_rate < 0 or self.mask_rate + self.random_rate > 1:
            raise ConfigError(f"--mask-rate {self.mask_rate} and --random-rate "
                              f"{self.random_rate}: expected rates >= 0 that sum to at most 1")
        if self.max_predictions is not None and self.max_predictions < 1:
            raise ConfigError(f"--max-predictions {self.max_predictions}: expected >= 1")


class Masker:
    """Dynamic (whole-word) masking of token-id batches (module docstring).

    ``mask_id``: the mask token; ``vocab_size``: ids are below it; ``never_masked``: the ids
    never picked (the special tokens, padding included), which random replacements never
    draw either.
    """

    def __init__(self, config: MaskingConfig, *, mask_id: int, vocab_size: int,
                 never_masked: Sequence[int]):
        self.config = config
        self.mask_id = int(mask_id)
        self._never = np.zeros(vocab_size, bool)
        self._never[np.asarray(list(never_masked), np.int64)] = True
        self._replacements = np.flatnonzero(~self._never).astype(np.int32)
        if not len(self._replacements):
            raise ConfigError("every id of the vocabulary is a special token: nothing to mask")

    def slots(self, width: int) -> int:
        """Prediction slots of a row of ``width`` tokens."""
        c = self.config
        return min(width, c.max_predictions or max_predictions_for(width, c.probability))

    def mask(self, input_ids: np.ndarray, word_starts: np.ndarray | None,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(masked_ids int32[B, T], picked bool[B, T])`` of ``input_ids`` int[B, T], at
        most ``slots(T)`` picks a row; ``word_starts`` bool[B, T] marks the first token of
        every word (whole-word masking picks words by the draw at their first token; None:
        every token is a word)."""
        c = self.config
        rows, width = input_ids.shape
        draw = rng.random((rows, width))
        if c.whole_word and word_starts is not None:
            first = np.maximum.accumulate(np.where(word_starts, np.arange(width), 0), axis=1)
            draw = np.take_along_axis(draw, first, axis=1)     # a word shares its first draw
        picked = (draw < c.probability) & ~self._never[input_ids]
        limit = self.slots(width)
        for row in np.flatnonzero(picked.sum(1) > limit):      # rare: keep a random subset
            extra = np.flatnonzero(picked[row])
            picked[row, rng.choice(extra, len(extra) - limit, replace=False)] = False
        action = rng.random((rows, width))
        random_ids = self._replacements[rng.integers(len(self._replacements),
                                                     size=(rows, width))]
        masked = np.where(picked & (action < c.mask_rate), self.mask_id, input_ids)
        randomised = picked & (action >= c.mask_rate) & (action < c.mask_rate + c.random_rate)
        masked = np.where(randomised, random_ids, masked)
        return masked.astype(np.int32), picked

    def __call__(self, batch: Mapping[str, np.ndarray],
                 rng: np.random.Generator) -> dict[str, np.ndarray]:
        """The batch with ``input_ids`` masked, ``targets`` int32[B, T] (the original ids),
        ``mlm_positions`` int32[B, P] (the picked positions in order, then 0) and
        ``mlm_weights`` float32[B, P] (1 at the slots in use), P = ``slots(T)``;
        ``word_starts`` is dropped."""
        out = {k: v for k, v in batch.items() if k != "word_starts"}
        masked, picked = self.mask(batch["input_ids"], batch.get("word_starts"), rng)
        order = np.argsort(~picked, axis=1, kind="stable")[:, :self.slots(picked.shape[1])]
        used = np.take_along_axis(picked, order, axis=1)
        out.update(input_ids=masked, targets=np.asarray(batch["input_ids"], np.int32),
                   mlm_positions=np.where(used, order, 0).astype(np.int32),
                   mlm_weights=used.astype(np.float32))
        return out


class MaskedLoader:
    """``loader``'s batches masked by ``masker`` with a key of (seed, shard, epoch, step)
    (module docstring). ``loader`` is resumable (``state_dict`` gives ``epoch`` and
    ``position``); ``len``, ``state_dict``, ``load_state_dict`` and ``shape_batches`` are
    its own."""

    def __init__(self, loader: Any, masker: Masker, *, seed: int, shard: int = 0):
        self.loader, self.masker = loader, masker
        self.seed, self.shard = int(seed), int(shard)

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)

    def rng(self, epoch: int, step: int) -> np.random.Generator:
        """The generator that masks batch ``step`` of ``epoch``."""
        return np.random.default_rng([self.seed, self.shard, epoch, step])

    def shape_batches(self) -> list[dict[str, np.ndarray]]:
        """The loader's ``shape_batches`` masked (for compiling ahead)."""
        return [self.masker(b, self.rng(0, i)) for i, b in enumerate(self.loader.shape_batches())]

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        start = self.loader.state_dict()
        epoch, position = int(start["epoch"]), int(start["position"])
        batches = iter(self.loader)
        try:
            for step, batch in enumerate(batches, start=position):
                yield self.masker(batch, self.rng(epoch, step))
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()        # the loader rewinds its sampler to what was consumed
