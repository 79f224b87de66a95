"""``Vocab``: token <-> id mapping with special tokens. Never imports jax."""

from textkit.vocab.vocab import Vocab

__all__ = ["Vocab"]
