"""``Word2VecConfig``: the settings of word-vector training, named and meant as gensim's.

``vector_size``, ``window``, ``min_count``, ``negative``, ``ns_exponent``, ``sample``,
``epochs``, ``alpha``, ``min_alpha`` (the rate decays linearly from ``alpha`` to ``min_alpha``
over all epochs' words), ``min_n``, ``max_n``, ``bucket`` (fastText's character n-grams of
``<word>``, hashed into ``bucket`` rows) and ``seed``; the defaults are gensim 4's. ``objective``
is ``"skipgram"`` (gensim ``sg=1``) or ``"cbow"`` (``sg=0``, mean of the context, gensim's
``cbow_mean=1``); ``subwords`` adds fastText's n-grams (gensim's ``FastText``).
``batch_centers`` and ``noise_draws`` are textkit's own: how many center words one batched
update takes, and how many sets of ``negative`` noise words a center draws for its pairs to
share (``word2vec_update``; more sets are closer to word2vec's draws per pair, and slower).
"""

from __future__ import annotations

import dataclasses

from textkit.errors import ConfigError
from textkit.settings import flag

__all__ = ["OBJECTIVES", "Word2VecConfig"]

OBJECTIVES = ("skipgram", "cbow")


@dataclasses.dataclass(frozen=True)
class Word2VecConfig:
    """Word2vec / fastText training settings (gensim's names; module docstring)."""

    objective: str = flag("skipgram", "skipgram (predict the context from the word) or cbow "
                          "(the word from the mean of its context)", group="model",
                          choices=OBJECTIVES)
    subwords: bool = flag(False, "fastText: add character n-grams (min_n..max_n) hashed into "
                          "bucket rows, so unseen words get vectors", group="model")
    vector_size: int = flag(100, "dimension of the word vectors", group="model")
    window: int = flag(5, "largest distance between the word and a context word (each "
                       "position draws its own window of 1..window)", group="model")
    min_count: int = flag(5, "ignore words seen fewer times", group="data")
    negative: int = flag(5, "noise words per positive pair", group="training")
    ns_exponent: float = flag(0.75, "noise distribution: unigram counts ** ns_exponent",
                              group="training")
    sample: float = flag(1e-3, "subsampling threshold of frequent words (0: off)",
                         group="training")
    epochs: int = flag(5, "passes over the corpus", group="training")
    alpha: float = flag(0.025, "initial learning rate", group="training")
    min_alpha: float = flag(0.0001, "learning rate at the end (linear decay)", group="training")
    min_n: int = flag(3, "shortest character n-gram (with --subwords)", group="model")
    max_n: int = flag(6, "longest character n-gram (with --subwords)", group="model")
    bucket: int = flag(2_000_000, "hash buckets of the n-grams (with --subwords)",
                       group="model")
    batch_centers: int = flag(1024, "center words per batched update", group="training")
    noise_draws: int | None = flag(None, "noise words drawn per center word: negative x this, "
                                   "shared by its pairs, each weighted 1 / this (default: 2 "
                                   "for skipgram, 1 for cbow)", group="training")
    seed: int = flag(1, "seed of the initial vectors, subsampling, windows and noise words",
                     group="training")

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective {self.objective!r}: expected one of {OBJECTIVES}")
        positive = ("vector_size", "window", "min_count", "negative", "epochs",
                    "batch_centers")
        for name in positive:
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"{name} (--{name.replace('_', '-')}) is "
                                  f"{getattr(self, name)!r}: expected an integer >= 1")
        if self.noise_draws is not None and (not isinstance(self.noise_draws, int)
                                             or self.noise_draws < 1):
            raise ConfigError(f"noise_draws (--noise-draws) is {self.noise_draws!r}: expected "
                              "an integer >= 1")
        if not 0 < self.alpha or not 0 <= self.min_alpha <= self.alpha:
            raise ConfigError(f"alpha {self.alpha} and min_alpha {self.min_alpha}: expected "
                              "0 <= min_alpha <= alpha and alpha > 0")
        if self.sample < 0:
            raise ConfigError(f"sample (--sample) is {self.sample}: expected >= 0")
        if self.subwords and not (1 <= self.min_n <= self.max_n and self.bucket >= 1):
            raise ConfigError(f"min_n {self.min_n}, max_n {self.max_n}, bucket {self.bucket}: "
                              "expected 1 <= min_n <= max_n and bucket >= 1 with --subwords")

    @property
    def draws(self) -> int:
        """``noise_draws``, or its default for the objective."""
        if self.noise_draws is not None:
            return self.noise_draws
        return 2 if self.objective == "skipgram" else 1
