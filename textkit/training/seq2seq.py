"""Sequence-to-sequence training glue: batches, loss, model building, BLEU, a save directory.

What the translation recipes (``examples/nmt``) share, so that the scripts stay thin:

* ``Seq2SeqBatchify`` / ``make_seq2seq_loader``: ``(source ids, target ids)`` samples to the
  textkit batch dict through a token-budget ``FixedBucketSampler`` (fixed padded shapes);
* ``make_seq2seq_loss``: ``loss_fn(params, batch, rng)`` for ``make_train_step`` /
  ``make_eval_step`` from a model's teacher-forced logits, counting its own traces;
* ``build_translation_model``: a registry preset with vocab sizes, padding id and policy;
* ``bleu_scores``: cased and lowercased sacreBLEU with signatures;
* ``TranslationDir``: the layout of a training run's directory (config, SentencePiece models,
  checkpoints, final parameters, summary) that ``translate.py`` reads back.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from textkit.batchify import BatchShape, Pad
from textkit.data import DataLoader, FixedBucketSampler, SentencePieceTokenizer
from textkit.models import get_model
from textkit.precision import Policy
from textkit.training.checkpoint import CheckpointManager
from textkit.training.files import write_json_atomic, write_text_atomic
from textkit.training.losses import cross_entropy
from textkit.training.metrics import corpus_bleu

__all__ = [
    "Seq2SeqBatchify",
    "TranslationDir",
    "bleu_scores",
    "build_translation_model",
    "encode_pairs",
    "init_params",
    "make_seq2seq_loader",
    "make_seq2seq_loss",
    "write_json_atomic",
    "write_text_atomic",
]

IdPair = tuple[Sequence[int], Sequence[int]]


# ------------------------------------------------------------------------------------ batches
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
        src_tokens, src_lengths = self.src([list(s) for s, _ in samples], shape)
        tgt_input, tgt_lengths = self.tgt([self.bos + list(t) for _, t in samples], shape)
        tgt_output = self.tgt_out([list(t) + self.eos for _, t in samples], shape)
        return {"src_tokens": src_tokens, "src_lengths": src_lengths, "tgt_input": tgt_input,
                "tgt_output": tgt_output, "tgt_lengths": tgt_lengths}


def encode_pairs(pairs: Sequence[tuple[str, str]], src_tokenizer: Any, tgt_tokenizer: Any,
                 max_length: int | None = None) -> list[tuple[list[int], list[int]]]:
    """Token ids of every ``(source, target)`` text pair (batched SentencePiece encoding).

    Pairs with an empty side, or (with ``max_length``) a side longer than ``max_length``
    tokens (the target counted with its eos), are dropped.
    """
    src_ids = src_tokenizer.encode([s for s, _ in pairs])
    tgt_ids = tgt_tokenizer.encode([t for _, t in pairs])
    limit = max_length if max_length is not None else float("inf")
    return [(s, t) for s, t in zip(src_ids, tgt_ids)
            if s and t and len(s) <= limit and len(t) + 1 <= limit]


def make_seq2seq_loader(samples: Sequence[IdPair], batch_tokens: int, *, pad_id: int,
                        bos_id: int, eos_id: int, num_buckets: int = 8, round_to: int = 8,
                        shuffle: bool = True, seed: int = 0, num_shards: int = 1,
                        shard_id: int = 0, batch_rows_multiple: int = 1,
                        num_workers: int = 1) -> DataLoader:
    """Resumable loader of seq2seq batches with at most ``num_buckets`` padded shapes.

    Buckets are keyed on (source length, target length + 1), rounded up to ``round_to``; each
    bucket's row count is ``batch_tokens // max(padded source, padded target)``, rounded down to
    a multiple of ``batch_rows_multiple``. ``batch_tokens`` is this shard's budget.
    ``loader.batch_sampler`` is the ``FixedBucketSampler`` (``stats()``, ``bucket_shapes``).
    """
    if not samples:
        raise ValueError("no training samples (all pairs empty or longer than the limit?)")
    lengths = np.array([(len(s), len(t) + 1) for s, t in samples], dtype=np.int64)
    sampler = FixedBucketSampler(lengths, batch_tokens, num_buckets=num_buckets,
                                 batch_size_unit="tokens", round_to=round_to, shuffle=shuffle,
                                 seed=seed, num_shards=num_shards, shard_id=shard_id,
                                 batch_rows_multiple=batch_rows_multiple)
    return DataLoader(samples, sampler, Seq2SeqBatchify(pad_id, bos_id, eos_id),
                      num_workers=num_workers)


# ------------------------------------------------------------------------------------ the loss
class _Seq2SeqLoss:
    """Label-smoothed token cross-entropy of a seq2seq model; ``num_traces`` counts traces."""

    def __init__(self, model: Any, label_smoothing: float):
        self.model, self.label_smoothing = model, float(label_smoothing)
        self.num_traces = 0

    def __call__(self, params: Any, batch: Mapping[str, Any], rng: jax.Array | None):
        self.num_traces += 1  # Python side effect: runs once per trace, not per step
        deterministic = rng is None
        logits = self.model.apply(
            {"params": params}, batch["src_tokens"], batch["tgt_input"],
            deterministic=deterministic, rngs=None if deterministic else {"dropout": rng})
        steps = jnp.arange(batch["tgt_output"].shape[1])                      # [T]
        weights = steps[None, :] < batch["tgt_lengths"][:, None]              # bool [B, T]
        loss_sum, weight_sum = cross_entropy(logits, batch["tgt_output"], weights,
                                             self.label_smoothing)
        src_tokens = jnp.sum(batch["src_lengths"]).astype(jnp.float32)
        return loss_sum, (weight_sum, {"src_tokens": src_tokens})


def make_seq2seq_loss(model: Any, label_smoothing: float = 0.0) -> _Seq2SeqLoss:
    """``loss_fn(params, batch, rng) -> (loss_sum, (weight_sum, {"src_tokens"}))`` for the
    train step.

    Logits come from ``model.apply(params, src_tokens, tgt_input)`` (dropout on when ``rng`` is a
    key); targets are ``tgt_output``, weighted by ``tgt_lengths``. ``src_tokens`` (float32 [])
    counts the batch's source tokens, so that metrics give the whole (global) batch's token
    count, target tokens being the weight sum. The returned callable's
    ``num_traces`` attribute counts how many programs traced it (one per batch shape).
    """
    return _Seq2SeqLoss(model, label_smoothing)


# ------------------------------------------------------------------------------------ the model
def build_translation_model(name: str, *, src_vocab_size: int, tgt_vocab_size: int,
                            pad_id: int, precision: str = "float32",
                            shared_vocab: bool = False, **overrides: Any) -> Any:
    """The registry preset ``name`` for these vocabularies, padding id and precision policy.

    ``shared_vocab`` turns on the preset's ``share_embeddings`` where it has one (one table for
    source and target). ``overrides`` replace further config fields (e.g. ``dropout``).
    """
    fields = {f.name for f in dataclasses.fields(get_model(name).config)}
    wanted = {"src_vocab_size": src_vocab_size, "tgt_vocab_size": tgt_vocab_size,
              "pad_id": pad_id, "policy": Policy.parse(precision), **overrides}
    if "share_embeddings" in fields and "share_embeddings" not in overrides:
        wanted["share_embeddings"] = bool(shared_vocab)
    unknown = sorted(set(wanted) - fields)
    if unknown:
        raise ValueError(f"model {name!r} has no config field(s) {unknown}; "
                         f"its fields are {sorted(fields)}")
    return get_model(name, **wanted)


def init_params(model: Any, rng: jax.Array) -> Any:
    """``model.init`` on a [1, 8] dummy source and target; returns the params pytree."""
    dummy = jnp.full((1, 8), model.config.pad_id, jnp.int32)
    return model.init(rng, dummy, dummy)["params"]


# ------------------------------------------------------------------------------------ BLEU
def bleu_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """Cased and lowercased corpus BLEU of detokenized text, with sacreBLEU signatures.

    Returns ``{"bleu", "signature", "bleu_lowercase", "signature_lowercase"}``.
    """
    cased, signature = corpus_bleu(hypotheses, references)
    lower, signature_lower = corpus_bleu(hypotheses, references, lowercase=True)
    return {"bleu": cased, "signature": signature, "bleu_lowercase": lower,
            "signature_lowercase": signature_lower}


# ------------------------------------------------------------------------------------ run dir
@dataclasses.dataclass(frozen=True)
class TranslationDir:
    """The files of one translation training run under ``root``.

    ``config.json`` (the recipe's arguments plus vocab sizes), SentencePiece models (``spm.model``
    for a joint vocabulary, else ``spm.src.model`` / ``spm.tgt.model``), ``checkpoints/`` (Orbax
    ``TrainState`` steps: latest N and best), ``final/`` (the parameters evaluated on test: an
    average of the last checkpoints or the best one), ``summary.json`` and ``test.hyp``.
    """

    root: Path

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))

    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    @property
    def summary_path(self) -> Path:
        return self.root / "summary.json"

    @property
    def test_hypotheses_path(self) -> Path:
        return self.root / "test.hyp"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def final(self) -> Path:
        return self.root / "final"

    def spm_path(self, side: str, joint: bool) -> Path:
        """SentencePiece model path of ``side`` ("src" or "tgt")."""
        return self.root / ("spm.model" if joint else f"spm.{side}.model")

    def tokenizers(self, joint: bool, train_pairs: Sequence[tuple[str, str]] | None = None,
                   vocab_size: int = 8000, seed: int = 0,
                   model_type: str = "unigram") -> tuple[Any, Any]:
        """(source, target) ``SentencePieceTokenizer``: loaded when cached, else trained on
        ``train_pairs`` (both sides together when ``joint``) and saved here.

        With several JAX processes only process 0 trains and saves; the others wait at a barrier
        (every process must call this) and load its files, so ``root`` must be on a file system
        they share.
        """
        if jax.process_count() > 1:
            if jax.process_index() == 0:
                tokenizers = self._load_or_train(joint, train_pairs, vocab_size, seed,
                                                 model_type)
            multihost_utils.sync_global_devices("textkit sentencepiece trained")
            if jax.process_index() == 0:
                return tokenizers
        return self._load_or_train(joint, train_pairs, vocab_size, seed, model_type)

    def _load_or_train(self, joint: bool, train_pairs: Sequence[tuple[str, str]] | None,
                       vocab_size: int, seed: int, model_type: str) -> tuple[Any, Any]:
        sides = {"src": [s for s, _ in train_pairs or ()], "tgt": [t for _, t in train_pairs or ()]}
        loaded = {}
        for side in ("src", "tgt"):
            path = self.spm_path(side, joint)
            if path.is_file():
                loaded[side] = SentencePieceTokenizer.load(path)
                continue
            if train_pairs is None:
                raise FileNotFoundError(f"{path} does not exist and no training text was given")
            text = sides["src"] + sides["tgt"] if joint else sides[side]
            loaded[side] = SentencePieceTokenizer.train(
                text, path, vocab_size=vocab_size, model_type=model_type, seed=seed,
                hard_vocab_limit=False, verbose=False)
        return loaded["src"], loaded["tgt"]

    def read_config(self) -> dict[str, Any]:
        if not self.config_path.is_file():
            raise FileNotFoundError(f"{self.config_path} does not exist: is {self.root} the "
                                    "--save-dir of a translation training run?")
        return json.loads(self.config_path.read_text(encoding="utf-8"))

    def save_final(self, step: int, params: Any, source: str) -> None:
        """Save the evaluated parameters to ``final/`` (one Orbax step, replaced each time)."""
        with CheckpointManager(self.final, max_to_keep=1) as manager:
            manager.save(step, params, extra={"source": source})
            manager.wait_until_finished()

    def load_final(self, target: Any) -> tuple[Any, dict[str, Any]]:
        """(params, extra) from ``final/``; ``target`` is a params pytree of the same structure."""
        if not self.final.is_dir():
            raise FileNotFoundError(f"{self.final} does not exist: the training run in "
                                    f"{self.root} did not finish")
        with CheckpointManager(self.final, max_to_keep=1) as manager:
            return manager.restore("latest", target)
