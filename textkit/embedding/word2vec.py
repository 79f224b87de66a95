"""Train word vectors: skip-gram or CBOW with negative sampling, optionally with fastText's
character n-grams (``Word2VecConfig``: gensim's settings and defaults).

    corpus = build_corpus(read_sentences("text.txt"), min_count=5)
    model = train_word2vec(corpus, Word2VecConfig(objective="skipgram", subwords=True))
    emb = model.embedding()          # TokenEmbedding; with subwords unseen words get vectors

The epochs' segments, batches and noise words are made with numpy (``word2vec_batches``) and
updated in large fixed-shape batches by one jitted function (``word2vec_update``, imported
when training starts: importing ``textkit.embedding`` never imports jax). While the updates of
an epoch run, the next epoch's batches are prepared. Each epoch's random draws come from the
seed and the epoch number alone (numpy ``default_rng([seed, epoch])`` for subsampling and
windows, ``default_rng([seed, epoch, 1])`` for noise words), so a run resumed from the end of
an epoch (``Word2VecState``) continues as the uninterrupted run does.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textkit._io import atomic_path
from textkit.embedding.fasttext_bin import FastTextSubwords
from textkit.embedding.token_embedding import TokenEmbedding
from textkit.embedding.word2vec_batches import (
    Batches,
    EpochData,
    Shapes,
    build_batches,
    center_data,
    keep_probability,
    noise_table,
    noise_words,
    subword_rows,
)
from textkit.embedding.word2vec_config import Word2VecConfig
from textkit.embedding.word2vec_corpus import Corpus
from textkit.errors import DataFileError

__all__ = ["EpochReport", "Word2VecModel", "Word2VecState", "initial_state", "load_state",
           "save_state", "train_word2vec"]

_BATCHES_PER_CALL = 16
_MARGIN = 1.15  # batch room over the mean rows / pairs per center of epoch 0


@dataclass
class Word2VecModel:
    """Trained vectors.

    Attributes:
      config: the settings it was trained with.
      words: the V vocabulary words, most frequent first; counts: int64 [V].
      inputs: float32 [V, D] word rows, or [V + bucket, D] with subwords (n-gram rows after the
        words, as in a fastText model).
      outputs: float32 [V, D], the negative-sampling output rows.
    """

    config: Word2VecConfig
    words: list[str]
    counts: np.ndarray
    inputs: np.ndarray
    outputs: np.ndarray
    compile_s: float = 0.0  # compiling the update function

    @property
    def subwords(self) -> FastTextSubwords | None:
        """The n-gram rows and their hashing (None without subwords)."""
        if not self.config.subwords:
            return None
        c = self.config
        return FastTextSubwords(self.inputs[len(self.words):], c.min_n, c.max_n, c.bucket)

    def word_vectors(self) -> np.ndarray:
        """float32 [V, D]: each word's row, or with subwords the mean of its row and its
        n-gram rows (fastText's word vector)."""
        own = self.inputs[: len(self.words)]
        if self.subwords is None:
            return np.array(own)
        out = np.empty_like(own)
        for start in range(0, len(self.words), 8192):
            stop = min(start + 8192, len(self.words))
            out[start:stop] = self.subwords.vectors(self.words[start:stop], own[start:stop])
        return out

    def embedding(self) -> TokenEmbedding:
        """A ``TokenEmbedding`` of the words (unseen words: n-gram vectors with subwords)."""
        return TokenEmbedding(self.words, self.word_vectors(), subwords=self.subwords)


@dataclass
class Word2VecState:
    """What a run needs to continue after ``epochs_done`` epochs: the two matrices."""

    epochs_done: int
    inputs: np.ndarray
    outputs: np.ndarray


@dataclass(frozen=True)
class EpochReport:
    """One finished epoch: ``epoch`` (1-based), ``seconds``, ``words_per_s`` (corpus tokens
    over the epoch's wall time), ``loss`` (mean negative log-likelihood per scored term),
    ``alpha`` (the learning rate reached)."""

    epoch: int
    seconds: float
    words_per_s: float
    loss: float
    alpha: float


def initial_state(config: Word2VecConfig, vocab_size: int) -> Word2VecState:
    """Epoch 0: input rows uniform in +-0.5 / D (word2vec; +-1 / D for fastText's word and
    n-gram rows, as fastText), output rows zero; drawn from ``default_rng(seed)``."""
    (rows, dim), _ = initial_state_shapes(config, vocab_size)
    scale = (2.0 if config.subwords else 1.0) / dim
    inputs = np.random.default_rng(config.seed).random((rows, dim), dtype=np.float32)
    inputs -= 0.5
    inputs *= scale
    return Word2VecState(0, inputs, np.zeros((vocab_size, dim), dtype=np.float32))


def save_state(path: str | os.PathLike, state: Word2VecState) -> Path:
    """Write ``state`` to the ``.npz`` file ``path`` atomically."""
    path = Path(path)
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, epochs_done=np.int64(state.epochs_done), inputs=state.inputs,
                 outputs=state.outputs)
    return path


def load_state(path: str | os.PathLike, config: Word2VecConfig, vocab_size: int
               ) -> Word2VecState:
    """Read a state written by ``save_state`` for a run of ``config`` over ``vocab_size``
    words; a file that does not fit (other shapes, more epochs) is a ``DataFileError``."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            state = Word2VecState(int(data["epochs_done"]), data["inputs"], data["outputs"])
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise DataFileError(f"{path}: not a readable word2vec checkpoint ({err}); delete it "
                            "to start again") from None
    expected = initial_state_shapes(config, vocab_size)
    got = (state.inputs.shape, state.outputs.shape)
    if got != expected or not 0 <= state.epochs_done <= config.epochs:
        raise DataFileError(f"{path}: holds matrices {got} after {state.epochs_done} epochs, "
                            f"expected {expected} and at most {config.epochs} epochs (another "
                            "corpus or other settings?)")
    return state


def initial_state_shapes(config: Word2VecConfig, vocab_size: int
                         ) -> tuple[tuple[int, int], tuple[int, int]]:
    """The shapes of the input and output matrices of a run."""
    rows = vocab_size + (config.bucket if config.subwords else 0)
    return (rows, config.vector_size), (vocab_size, config.vector_size)


def _word_rows(corpus: Corpus, config: Word2VecConfig) -> tuple[np.ndarray, np.ndarray]:
    vocab = len(corpus.words)
    if config.subwords:
        return subword_rows(corpus.words, config.min_n, config.max_n, config.bucket)
    return np.arange(vocab + 1, dtype=np.int64), np.arange(vocab, dtype=np.int32)


def _shapes(data: EpochData, centers: int) -> Shapes:
    """Batch sizes from epoch 0's mean rows and pairs per center (with room), never smaller
    than the largest center; exactly ``centers`` where every center has one (skip-gram's input
    row without subwords, CBOW's positive word), which the update takes as aligned."""
    def room(counts: np.ndarray) -> int:
        if counts.size and counts.min() == counts.max() == 1:
            return centers
        return math.ceil(centers * float(counts.mean()) * _MARGIN) + int(counts.max())
    return Shapes(centers, room(data.in_counts), room(data.out_counts))


def _calls(batches: Batches, noise: np.ndarray, alphas: np.ndarray, per_call: int):
    """Stacks of ``per_call`` batches (the last one padded with empty batches)."""
    arrays = (batches.in_rows, batches.in_seg, batches.in_weight, batches.out_words,
              batches.out_seg, batches.out_weight, noise, alphas.astype(np.float32))
    for start in range(0, len(batches), per_call):
        stop = min(start + per_call, len(batches))
        pad = per_call - (stop - start)
        yield tuple(np.concatenate([a[start:stop], np.zeros((pad, *a.shape[1:]), a.dtype)])
                    if pad else a[start:stop] for a in arrays)


def train_word2vec(corpus: Corpus, config: Word2VecConfig, *,
                   state: Word2VecState | None = None,
                   on_epoch: Callable[[EpochReport, Word2VecState], None] | None = None,
                   ) -> Word2VecModel:
    """Train ``config.epochs`` epochs on ``corpus`` (continuing ``state`` when given).

    ``on_epoch(report, state)`` runs after each epoch with the matrices as numpy arrays (save a
    checkpoint there). Returns the trained model.
    """
    import jax  # noqa: PLC0415 (jax only once training starts)

    from textkit.embedding.word2vec_update import make_update  # noqa: PLC0415

    vocab = len(corpus.words)
    state = state or initial_state(config, vocab)
    offsets, rows = _word_rows(corpus, config)
    keep = keep_probability(corpus.counts, config.sample)

    def epoch_data(epoch: int) -> EpochData:
        return center_data(corpus, np.random.default_rng([config.seed, epoch]),
                           objective=config.objective, window=config.window, keep=keep,
                           offsets=offsets, rows=rows)

    table = noise_table(corpus.counts, config.ns_exponent)
    first = epoch_data(0)
    shapes = _shapes(first, config.batch_centers)
    noise_shape = (shapes.centers, config.negative * config.draws)

    def epoch_batches(epoch: int, data: EpochData | None = None) -> tuple[Batches, np.ndarray]:
        batches = build_batches(epoch_data(epoch) if data is None else data, shapes)
        rng = np.random.default_rng([config.seed, epoch, 1])
        return batches, noise_words(table, rng, (len(batches), *noise_shape))

    first_batches, first_noise = epoch_batches(0, first)
    per_call = max(1, min(_BATCHES_PER_CALL, len(first_batches)))
    update = make_update(shapes.centers, config.draws)
    inputs, outputs = jax.device_put(state.inputs), jax.device_put(state.outputs)
    compile_start = time.perf_counter()
    example = next(_calls(first_batches, first_noise, np.zeros(len(first_batches)), per_call))
    update = update.lower(inputs, outputs, example).compile()
    compile_s = time.perf_counter() - compile_start

    batches, noise = ((first_batches, first_noise) if state.epochs_done == 0
                      else epoch_batches(state.epochs_done))
    total_words = config.epochs * corpus.total_tokens
    # the next epoch's batches are made on a second thread while this epoch's updates run
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        for epoch in range(state.epochs_done, config.epochs):
            start = time.perf_counter()
            upcoming = pool.submit(epoch_batches, epoch + 1) if epoch + 1 < config.epochs else None
            done = epoch * corpus.total_tokens + batches.first_position
            alphas = config.alpha - (config.alpha - config.min_alpha) * done / total_words
            losses = []
            for call in _calls(batches, noise, alphas, per_call):
                inputs, outputs, loss, terms = update(inputs, outputs, call)
                losses.append((loss, terms))
            if upcoming is not None:
                batches, noise = upcoming.result()
            loss = sum(float(x) for x, _ in losses) / max(sum(float(t) for _, t in losses), 1.0)
            seconds = time.perf_counter() - start
            if not math.isfinite(loss):
                raise FloatingPointError(f"epoch {epoch + 1}: the loss is {loss}; lower --alpha "
                                         "or --batch-centers")
            report = EpochReport(epoch + 1, seconds, corpus.total_tokens / seconds, loss,
                                 float(alphas[-1]) if alphas.size else config.alpha)
            if on_epoch is not None:
                on_epoch(report, Word2VecState(epoch + 1, np.array(inputs), np.array(outputs)))
    return Word2VecModel(config, corpus.words, corpus.counts, np.asarray(inputs),
                         np.asarray(outputs), compile_s)
