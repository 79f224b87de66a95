"""Translation as a task: ``TranslationTask`` (the ``textkit.tasks`` contract) and its
building blocks, for ``(source, target)`` text pairs:

* ``tokenizers``: SentencePiece models trained on the train split, cached in the run directory;
* ``encode_corpus`` / ``trainable``: the train split streamed from its files and encoded once,
  in parallel, into a memory-mapped ``TokenStore`` cached in the run directory
  (``encode_pairs`` does the same in memory, for small lists of pairs);
* ``Seq2SeqBatchify`` / ``seq2seq_loader``: ``(source ids, target ids)`` samples to the
  textkit batch dict through a token-budget ``FixedBucketSampler`` (fixed padded shapes);
* ``seq2seq_loss_fn``: ``loss_fn(params, batch, rng)`` for ``make_train_step`` /
  ``make_eval_step``;
* ``seq2seq_preset`` / ``init_seq2seq_params`` / ``init_from``: a registry preset for the
  vocabularies and its parameters, or a pretrained Marian checkpoint;
* ``seq2seq_optimizer``: ``(tx, learning_rate)``, Adam with warm-up and clipping (loss scaling
  by policy);
* ``bleu_scores`` / ``translate_and_score``: cased and lowercased sacreBLEU of a
  ``Translator``'s output;
* ``choose_final``: the best checkpoint, or the average of the last N if it validates better.

These are the building blocks ``TranslationTask``'s methods (the ``Task`` API: ``make_loader``,
``make_loss``, ``build_model``, ``init_params``, ``optimizer``) call with the run's settings;
they take plain arguments, for code that does without a task (the README's tour).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils

from textkit import parallel
from textkit.batchify import Seq2SeqBatchify
from textkit.batchify.tasks import IdPair
from textkit.data import (
    DataLoader,
    FixedBucketSampler,
    ParallelLines,
    SentencePieceTokenizer,
    TokenStore,
    build_token_store,
    dataset_files,
    file_digest,
    get_dataset,
    get_dataset_info,
    toy_translation,
)
from textkit.data.token_store import remove_stale
from textkit.decoding import Translator
from textkit.errors import ConfigError
from textkit.models import get_model, max_positions, parse_overrides
from textkit.precision import Policy
from textkit.pretrained import load_pretrained
from textkit.settings import flag
from textkit.tasks.base import LearningRate, LossFn, Params, Task, TaskConfig, register_task
from textkit.tasks.lora import LoraSettings
from textkit.training.checkpoint import CheckpointManager, average_checkpoints
from textkit.training.loop import FitConfig
from textkit.training.losses import cross_entropy
from textkit.training.metrics import corpus_bleu
from textkit.training.optim import (
    clip_by_global_norm,
    ema,
    ema_params_of,
    learning_rate_of,
    with_loss_scaling,
)
from textkit.training.run_dir import RunDir, find_run
from textkit.training.schedules import inverse_sqrt_schedule, scale_by_budget_schedule
from textkit.training.train_step import TrainStep

__all__ = [
    "Seq2SeqBatchify",
    "TranslationConfig",
    "TranslationTask",
    "bleu_scores",
    "choose_final",
    "encode_corpus",
    "encode_pairs",
    "init_from",
    "init_seq2seq_params",
    "load_trained",
    "seq2seq_loader",
    "seq2seq_loss_fn",
    "seq2seq_optimizer",
    "seq2seq_preset",
    "tokenizers",
    "translate_and_score",
    "trainable",
]

# SentencePiece trains on at most this many sentences, sampled (all of Multi30k or IWSLT; a
# sample of WMT, whose 9M sentences would hold several GB in the trainer)
SPM_SENTENCES = 2_000_000


def spm_path(run: RunDir, side: str, joint: bool) -> Path:
    """SentencePiece model path of ``side`` ("src" or "tgt") in ``run``."""
    return run.root / ("spm.model" if joint else f"spm.{side}.model")


def tokenizers(run: RunDir, joint: bool, train_pairs: Sequence[tuple[str, str]] | None = None,
               vocab_size: int = 8000, seed: int = 0,
               model_type: str = "unigram") -> tuple[Any, Any]:
    """(source, target) ``SentencePieceTokenizer``: loaded from ``run`` when cached, else
    trained on ``train_pairs`` (both sides together when ``joint``) and saved there.

    With several JAX processes only process 0 trains and saves; the others wait at a barrier
    (every process must call this) and load its files, so ``run.root`` must be on a file
    system they share.
    """
    def sentences(side: str) -> Any:
        """The training text of ``side``, streamed (pairs with an empty side left out)."""
        pairs = (pair for pair in train_pairs or () if pair[0] and pair[1])
        return (pair[0 if side == "src" else 1] for pair in pairs)

    def load_or_train() -> tuple[Any, Any]:
        loaded = {}
        for side in ("src", "tgt"):
            path = spm_path(run, side, joint)
            if path.is_file():
                loaded[side] = SentencePieceTokenizer.load(path)
                continue
            if train_pairs is None:
                raise FileNotFoundError(f"{path} does not exist and no training text was given")
            text = (itertools.chain(sentences("src"), sentences("tgt")) if joint
                    else sentences(side))
            loaded[side] = SentencePieceTokenizer.train(
                text, path, vocab_size=vocab_size, model_type=model_type, seed=seed,
                input_sentence_size=SPM_SENTENCES, hard_vocab_limit=False, verbose=False)
        return loaded["src"], loaded["tgt"]

    if jax.process_count() > 1:
        if jax.process_index() == 0:
            trained = load_or_train()
        multihost_utils.sync_global_devices("textkit sentencepiece trained")
        if jax.process_index() == 0:
            return trained
    return load_or_train()


# ------------------------------------------------------------------------------------ batches
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


def _store_key(source: Sequence[tuple[str, str]], tokenizers: Sequence[Any]) -> str:
    """Checksum of the source text (its files' bytes) and of the tokenizers' models."""
    models = [hashlib.sha256(pickle.dumps(tok)).hexdigest() for tok in tokenizers]
    if isinstance(source, ParallelLines):
        return file_digest([source.src_path, source.tgt_path], *models)
    text = hashlib.sha256("\n".join(f"{s}\t{t}" for s, t in source).encode()).hexdigest()
    return file_digest([], text, *models)


def encode_corpus(run: RunDir, source: Sequence[tuple[str, str]], src_tokenizer: Any,
                  tgt_tokenizer: Any, *, num_workers: int = 0,
                  name: str = "train") -> TokenStore:
    """Every pair of ``source`` encoded into ``run.root/store/<name>-<key>`` (a ``TokenStore``
    with fields ``src``, ``tgt``), built once in ``num_workers`` processes and reused while the
    source files and tokenizers are unchanged. With several JAX processes only process 0
    builds; the others wait and open it."""
    key = _store_key(source, (src_tokenizer, tgt_tokenizer))
    parent = run.root / "store"
    directory = parent / f"{name}-{key[:16]}"

    def build() -> TokenStore:
        store = build_token_store(directory, lambda: iter(source),
                                  (src_tokenizer, tgt_tokenizer), key=key,
                                  num_workers=num_workers, total=len(source),
                                  desc=f"encoding {name}")
        remove_stale(parent, f"{name}-", directory)
        return store

    if jax.process_count() > 1:
        if jax.process_index() == 0:
            build()
        multihost_utils.sync_global_devices("textkit token store built")
        return TokenStore(directory)
    return build()


def trainable(store: TokenStore, max_length: int | None = None) -> TokenStore:
    """The samples of ``store`` that ``encode_pairs`` keeps: both sides non-empty and (with
    ``max_length``) the source and the target with its eos at most ``max_length`` tokens."""
    lengths = store.lengths
    limit = max_length if max_length is not None else np.iinfo(np.int64).max
    keep = ((lengths[:, 0] > 0) & (lengths[:, 1] > 0) & (lengths[:, 0] <= limit)
            & (lengths[:, 1] + 1 <= limit))
    return store.select(np.flatnonzero(keep))


def seq2seq_loader(samples: Sequence[IdPair] | TokenStore, batch_tokens: int, *, pad_id: int,
                   bos_id: int, eos_id: int, num_buckets: int = 8, round_to: int = 8,
                   shuffle: bool = True, seed: int = 0, num_shards: int = 1, shard_id: int = 0,
                   batch_rows_multiple: int = 1, accum_steps: int = 1,
                   num_workers: int = 1) -> DataLoader:
    """Resumable loader of seq2seq batches with at most ``num_buckets`` padded shapes.

    Buckets are keyed on (source length, target length + 1), rounded up to ``round_to``; each
    bucket's row count is ``batch_tokens // max(padded source, padded target)``, rounded down to
    a multiple of ``batch_rows_multiple``. ``batch_tokens`` is this shard's budget. With
    ``accum_steps=N`` each batch holds N such micro-batches of one shape (``N * rows`` rows, for
    ``make_train_step(..., accum_steps=N)``; the budget and the rows multiple are N times larger).
    ``loader.batch_sampler`` is the ``FixedBucketSampler`` (``stats()``, ``bucket_shapes``).
    """
    if not samples:
        raise ValueError("no training samples (all pairs empty or longer than the limit?)")
    if isinstance(samples, TokenStore):
        lengths = samples.lengths + np.array([0, 1])
    else:
        lengths = np.array([(len(s), len(t) + 1) for s, t in samples], dtype=np.int64)
    if accum_steps < 1:
        raise ValueError(f"accum_steps must be >= 1, got {accum_steps}")
    sampler = FixedBucketSampler(lengths, batch_tokens * accum_steps, num_buckets=num_buckets,
                                 batch_size_unit="tokens", round_to=round_to, shuffle=shuffle,
                                 seed=seed, num_shards=num_shards, shard_id=shard_id,
                                 batch_rows_multiple=batch_rows_multiple * accum_steps,
                                 membership="padded")
    return DataLoader(samples, sampler, Seq2SeqBatchify(pad_id, bos_id, eos_id),
                      num_workers=num_workers)


# ------------------------------------------------------------------------------------ the loss
def seq2seq_loss_fn(model: nn.Module, label_smoothing: float = 0.0) -> LossFn:
    """``loss_fn(params, batch, rng) -> (loss_sum, (weight_sum, {"src_tokens"}))`` for the
    train step.

    Logits come from ``model.apply(params, src_tokens, tgt_input)`` (dropout on when ``rng`` is a
    key); targets are ``tgt_output``, weighted by ``tgt_lengths``. ``src_tokens`` (float32 [])
    counts the batch's source tokens, so that metrics give the whole (global) batch's token
    count, target tokens being the weight sum.
    """

    def loss_fn(params: Params, batch: Mapping[str, Any], rng: jax.Array | None):
        deterministic = rng is None
        logits = model.apply(
            {"params": params}, batch["src_tokens"], batch["tgt_input"],
            deterministic=deterministic, rngs=None if deterministic else {"dropout": rng})
        steps = jnp.arange(batch["tgt_output"].shape[1])                      # [T]
        weights = steps[None, :] < batch["tgt_lengths"][:, None]              # bool [B, T]
        loss_sum, weight_sum = cross_entropy(logits, batch["tgt_output"], weights,
                                             label_smoothing)
        src_tokens = jnp.sum(batch["src_lengths"]).astype(jnp.float32)
        return loss_sum, (weight_sum, {"src_tokens": src_tokens})

    return loss_fn


SCHEDULES = ("inverse_sqrt", "budget")


def seq2seq_optimizer(lr: float, warmup_steps: int, clip_norm: float,
                      policy: Policy | str = "float32", *, schedule: str = "inverse_sqrt",
                      total_steps: int = 1, decay_fraction: float = 0.2,
                      ema_decay: float | None = None,
                      ) -> tuple[optax.GradientTransformation, LearningRate]:
    """``(optimizer, learning_rate)``: global-norm clipping, then Adam (0.9, 0.98, 1e-9) at a
    rate peaking at ``lr`` after ``warmup_steps``, then (with ``ema_decay``) a parameter EMA;
    dynamic loss scaling when ``policy`` needs it. ``learning_rate(train_state)`` is the rate
    of the last step (for progress bars).

    ``schedule``: ``"inverse_sqrt"`` (decays as ``1/sqrt(step)``, never reaches 0) or
    ``"budget"`` (warm-up-stable-decay to 0 at ``total_steps``, which ``fit`` keeps equal to
    the end of the run: ``--max-steps``, the epochs, or the steps the time budget allows).
    """
    if schedule == "inverse_sqrt":
        rates = inverse_sqrt_schedule(lr, warmup_steps)
        core = optax.adam(rates, b1=0.9, b2=0.98, eps=1e-9)
        learning_rate = lambda state: float(rates(state.step - 1))
    elif schedule == "budget":
        core = optax.chain(optax.scale_by_adam(0.9, 0.98, 1e-9), scale_by_budget_schedule(
            lr, warmup_steps, total_steps, decay_fraction))
        learning_rate = lambda state: learning_rate_of(state.opt_state)
    else:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    links = [clip_by_global_norm(clip_norm), core]
    if ema_decay:
        links.append(ema(ema_decay))
    return with_loss_scaling(optax.chain(*links), policy), learning_rate


# ------------------------------------------------------------------------------------ the model
def seq2seq_preset(name: str, *, src_vocab_size: int, tgt_vocab_size: int, pad_id: int,
                   precision: str = "float32", shared_vocab: bool = False,
                   **overrides: Any) -> nn.Module:
    """The registry preset ``name`` for these vocabularies, padding id and precision policy.

    Without ``shared_vocab`` a preset's ``share_embeddings`` (one table for source and target)
    is turned off; with it, the preset's own value (Transformer presets: on; GNMT: off) or the
    override stands. ``overrides`` replace further config fields (e.g. ``dropout``).
    """
    fields = {f.name for f in dataclasses.fields(get_model(name).config)}
    wanted = {"src_vocab_size": src_vocab_size, "tgt_vocab_size": tgt_vocab_size,
              "pad_id": pad_id, "policy": Policy.parse(precision), **overrides}
    if "share_embeddings" in fields and not shared_vocab and "share_embeddings" not in overrides:
        wanted["share_embeddings"] = False
    unknown = sorted(set(wanted) - fields)
    if unknown:
        raise ValueError(f"model {name!r} has no config field(s) {unknown}; "
                         f"its fields are {sorted(fields)}")
    return get_model(name, **wanted)


def init_seq2seq_params(model: nn.Module, rng: jax.Array) -> Params:
    """``model.init`` on a [1, 8] dummy source and target; returns the params pytree."""
    dummy = jnp.full((1, 8), model.config.pad_id, jnp.int32)
    return model.init(rng, dummy, dummy)["params"]


class TrainedRun(NamedTuple):
    """A finished ``examples/nmt/train.py`` run: its model, the evaluated parameters
    (``final/``), both tokenizers, its config dict and where the parameters came from."""

    model: nn.Module
    params: Params
    src_tokenizer: Any
    tgt_tokenizer: Any
    config: dict[str, Any]
    source: str


def load_trained(save_dir: str | Path) -> TrainedRun:
    """The model and final parameters of the training run in ``save_dir`` (its run directory,
    or the runs folder whose ``latest`` link names it): the config and SentencePiece models it
    wrote, ``final/`` restored against the model's parameter structure."""
    run = RunDir(find_run(save_dir))
    config = run.read_config()
    src_tok, tgt_tok = tokenizers(run, config["joint_spm"])
    model = seq2seq_preset(
        config["model"], src_vocab_size=len(src_tok), tgt_vocab_size=len(tgt_tok),
        pad_id=src_tok.pad_id, precision=config["precision"], shared_vocab=config["joint_spm"],
        **parse_overrides(config["model_overrides"]))
    target = jax.eval_shape(lambda key: init_seq2seq_params(model, key),
                            jax.random.PRNGKey(0))
    params, extra = run.load_final(target)
    return TrainedRun(model, params, src_tok, tgt_tok, config,
                      f"{extra['source']} of {run.root}")


# ------------------------------------------------------------------------------------ BLEU
def bleu_scores(hypotheses: Sequence[str], references: Sequence[str], *,
                pretokenized: bool = False) -> dict[str, Any]:
    """Cased and lowercased corpus BLEU of detokenized text (``pretokenized``: tokenised on
    purpose, see ``corpus_bleu``), with sacreBLEU signatures.

    Returns ``{"bleu", "signature", "bleu_lowercase", "signature_lowercase"}``.
    """
    cased, signature = corpus_bleu(hypotheses, references, pretokenized=pretokenized)
    lower, signature_lower = corpus_bleu(hypotheses, references, lowercase=True,
                                         pretokenized=pretokenized)
    return {"bleu": cased, "signature": signature, "bleu_lowercase": lower,
            "signature_lowercase": signature_lower}


def translate_and_score(translator: Translator, params: Params,
                        pairs: Sequence[tuple[str, str]], *,
                        pretokenized: bool = False) -> dict[str, Any]:
    """``bleu_scores`` of ``translator.translate(params, sources)`` against the targets, plus
    the ``hypotheses``. Run on every process, each on its own copy of ``params``."""
    hypotheses = translator.translate(params, [s for s, _ in pairs])
    return {**bleu_scores(hypotheses, [t for _, t in pairs], pretokenized=pretokenized),
            "hypotheses": hypotheses}


def choose_final(manager: CheckpointManager, target: Any, average_last: int,
                 score: Callable[[Any], float], log: Callable[[str], None] = print,
                 ) -> tuple[str, Any, float]:
    """``(description, params, valid score)`` of the parameters to test: the best checkpoint
    by the manager's metric, or the average of the last ``average_last`` checkpoints when
    ``score(params)`` (validation) is at least as good. ``target`` is the saved state's
    structure. With a parameter EMA in the optimizer, the EMA parameters are used."""
    best_step = manager.best_step()
    state, extra = manager.restore("best", target)
    chosen = (f"best checkpoint (step {best_step})", ema_params_of(state),
              float(extra["metrics"][manager.best_metric]))
    steps = manager.all_steps()
    if average_last > 1 and len(steps) > 1:
        last_n = min(average_last, len(steps))
        averaged = average_checkpoints(manager, target, last_n=last_n, select=ema_params_of)
        valid = score(averaged)
        log(f"average of the last {last_n} checkpoints: valid {valid:.2f}")
        if valid >= chosen[2]:
            chosen = (f"average of the last {last_n} checkpoints", averaged, valid)
    return chosen




# ------------------------------------------------------------------------- pretrained models
def init_from(path: str, precision: str = "float32",
              overrides: str | Mapping[str, Any] = "", src_lang_code: str | None = None,
              tgt_lang_code: str | None = None, prefix: str | None = None) -> Any:
    """An encoder-decoder checkpoint directory (Marian / OPUS-MT, BART, M2M100) ready to
    fine-tune: a translation ``Pretrained`` (``textkit.pretrained.load_pretrained``) with the
    ``precision`` policy and config ``overrides`` (e.g. "dropout=0.1"); params as jax arrays.
    The tokenizers encode the languages ``src_lang_code`` / ``tgt_lang_code`` of a
    multilingual checkpoint (refused by name for a family without codes); ``prefix`` is put
    before every source (T5's task prefix; refused for a family without one); the source
    tokenizer appends EOS (as the model was trained), the target one does not (the loader adds
    it); decoding starts from the model's ``decoder_start_id`` (Marian, T5: pad)."""
    fields = parse_overrides(overrides) if isinstance(overrides, str) else dict(overrides)
    try:
        pretrained = load_pretrained(path, policy=Policy.parse(precision), **fields)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"--init-from: {err}") from None
    if pretrained.kind != "translation":
        raise ConfigError(f"--init-from {path}: a {pretrained.kind} checkpoint, not a "
                          f"translation model")
    try:
        source = pretrained.tokenizer.for_languages(src_lang_code, tgt_lang_code)
        target = pretrained.target_tokenizer.for_languages(src_lang_code, tgt_lang_code)
    except ValueError as err:
        raise ConfigError(f"--src-lang-code / --tgt-lang-code: {err}") from None
    if prefix:
        if not hasattr(source, "prefix"):
            raise ConfigError(f"--prefix: a {pretrained.model.config.architecture} checkpoint "
                              f"takes no text prefix (T5-family checkpoints take one)")
        source = source.configured(prefix=prefix)
    return pretrained.replace(params=jax.tree_util.tree_map(jnp.asarray, pretrained.params),
                              tokenizer=source, target_tokenizer=target.configured(
                                  add_eos=False))


# ------------------------------------------------------------------------------------ the task
@dataclasses.dataclass(frozen=True)
class TranslationConfig(TaskConfig):
    """A translation run (``examples/nmt/train.py``). Each field is the recipe flag of the same
    name (``clip_norm`` is ``--clip-norm``, ``precision`` is ``--precision``). ``src_lang``,
    ``tgt_lang``, ``spm_vocab_size`` and ``encode_workers`` left unset are resolved from the
    dataset when the config is made."""

    model: str = flag("transformer_tiny", "a translation preset (textkit.models.list_models"
                      "('translation'))", group="model")
    init_from: str | None = flag(
        None, "fine-tune an encoder-decoder checkpoint directory (Marian / OPUS-MT, BART, "
        "mBART-50, M2M100, NLLB, T5, mT5) "
        "with its own tokenizers (--model, --spm-* and --joint-spm are then unused)",
        group="model")
    src_lang_code: str | None = flag(
        None, "with --init-from a multilingual checkpoint: its source language code, in its "
        "family's spelling (M2M100 'en'); --src-lang names the data files", group="model")
    tgt_lang_code: str | None = flag(
        None, "with --init-from a multilingual checkpoint: its target language code (forced "
        "as the first output token); --tgt-lang names the data files", group="model")
    prefix: str | None = flag(
        None, "with --init-from a T5-family checkpoint: put before every source, e.g. "
        "'translate English to German: ' (translate.py --prefix takes it too)", group="model")
    src_lang: str | None = flag(None, "source language: the suffix of the data files (default: "
                                "the dataset's first); not a checkpoint's language code",
                                group="data")
    tgt_lang: str | None = flag(None, "target language: the suffix of the data files (default: "
                                "the dataset's second)", group="data")
    toy_sizes: tuple[int, ...] = flag((12000, 200, 500), "toy train,valid,test pairs",
                                      group="data")
    spm_vocab_size: int | None = flag(None, "SentencePiece vocabulary size (default: 1000 for "
                                      "toy, else 8000)", group="data")
    spm_model_type: str = flag("bpe", "SentencePiece model type", group="data",
                               choices=("bpe", "unigram"))
    joint_spm: bool = flag(True, "one SentencePiece model and shared embeddings for both "
                           "sides", group="data")
    encode_workers: int | None = flag(
        None, "processes encoding the train split into its token store (default: 0 for the "
        "toy corpus, else the CPU count, at most 8)", group="data")
    max_length: int = flag(128, "drop training pairs with a side longer than this (subword "
                           "tokens); longer sources are truncated when decoding", group="data")
    batch_tokens: int = flag(2048, "global token budget per batch (padded length x rows), all "
                             "processes", group="data")
    batch_rows_multiple: int | None = flag(
        None, "round every bucket's global rows down to a multiple of this; it must be a "
        "multiple of the device count (default: lcm(8, devices), so the global batch is the "
        "same on 1, 2, 4 or 8 devices)", group="data")
    num_buckets: int = flag(12, "length buckets: one padded shape and one compiled train "
                            "program each", group="data")
    valid_size: int = flag(0, "validate on the first N valid pairs (0: all)", group="data")
    lr: float = flag(3e-3, "peak learning rate", group="training")
    lr_schedule: str = flag("inverse_sqrt", "budget: warm-up, constant, then linear decay "
                            "reaching 0 exactly at the end of the run", group="training",
                            choices=("inverse_sqrt", "budget"))
    decay_fraction: float = flag(0.2, "budget schedule: the final fraction of the steps that "
                                 "decays", group="training")
    warmup_steps: int = flag(200, "learning-rate warm-up steps", group="training")
    clip_norm: float = flag(1.0, "clip gradients to this global norm", group="training")
    label_smoothing: float = flag(0.1, "label smoothing of the loss", group="training")
    accum_steps: int = flag(1, "gradient accumulation: micro-batches of --batch-tokens per "
                            "update, run in one compiled step", group="training")
    ema_decay: float | None = flag(None, "keep an EMA of the parameters and evaluate / test "
                                   "it (e.g. 0.999)", group="training")
    beam_size: int = flag(4, "beam size of validation and test decoding", group="evaluation")
    alpha: float = flag(0.6, "GNMT length-penalty exponent", group="evaluation")
    decode_batch_size: int = flag(64, "sentences per decoding batch", group="evaluation")
    average_last: int = flag(1, "average the last N checkpoints at the end if that validates "
                             "better (1: none)", group="evaluation")
    export: bool | None = flag(None, "write the evaluated parameters with save_pretrained to "
                               "<run>/export, a checkpoint directory transformers loads "
                               "(default: with --init-from; a model trained from scratch has "
                               "no Hugging Face layout)", group="output")
    lora: LoraSettings = LoraSettings()
    runs_name = "nmt"
    fit: FitConfig = FitConfig(epochs=8, eval_every=500)

    tiny: ClassVar[Mapping[str, Any]] = {
        "toy_sizes": (96, 4, 4), "spm_vocab_size": 120, "max_length": 32, "batch_tokens": 256,
        "num_buckets": 2, "warmup_steps": 1, "beam_size": 1, "decode_batch_size": 4}

    def __post_init__(self):
        super().__post_init__()
        info = None if self.dataset == "toy" else get_dataset_info(self.dataset)
        default_src, default_tgt = ("src", "tgt") if info is None else info.fields[:2]
        resolved = {
            "src_lang": self.src_lang or default_src, "tgt_lang": self.tgt_lang or default_tgt,
            "spm_vocab_size": self.spm_vocab_size or (1000 if info is None else 8000),
            "encode_workers": self.encode_workers if self.encode_workers is not None
            else 0 if info is None else min(os.cpu_count() or 1, 8)}
        for name, value in resolved.items():
            object.__setattr__(self, name, value)
        if len(self.toy_sizes) != 3:
            raise ConfigError(f"--toy-sizes takes train,valid,test sizes, got {self.toy_sizes}")
        if self.accum_steps < 1:
            raise ConfigError(f"--accum-steps must be >= 1, got {self.accum_steps}")
        if self.prefix and not self.init_from:
            raise ConfigError("--prefix needs --init-from a T5-family checkpoint (a model "
                              "trained from scratch reads no task prefix)")
        if self.export and not self.init_from:
            raise ConfigError("--export needs --init-from: a model trained from scratch has no "
                              "Hugging Face layout to export to")
        self.lora.check(exports=self.exports, base=self.init_from, base_flag="--init-from")

    @property
    def exports(self) -> bool:
        """Whether the run ends with an export (``--export``, by default with --init-from)."""
        return bool(self.init_from) if self.export is None else self.export


Pairs = Sequence[tuple[str, str]]


@register_task
class TranslationTask(Task):
    """Translation of ``(source, target)`` text pairs: SentencePiece tokenizers trained on the
    train split (or a pretrained checkpoint's), the train split encoded once into a token
    store, token-budget buckets, label-smoothed cross-entropy, Adam with warm-up, sacreBLEU of
    beam-search output (``evaluate`` -> ``{"bleu", "bleu_lowercase"}``)."""

    name = "translation"
    config_class = TranslationConfig
    eval_metric = "bleu"
    config: TranslationConfig

    def __init__(self, config: TranslationConfig, run: RunDir,
                 log: Callable[[str], None] | None = None):
        super().__init__(config, run, log)
        self.pretrained: Any = None
        self.src_tokenizer: Any = None
        self.tgt_tokenizer: Any = None
        self._translators: dict[int, Translator] = {}
        if config.init_from is None:
            self.check_max_length()

    def check_max_length(self) -> None:
        """Refuse a ``--max-length`` above the positions of the preset with its overrides, at
        start-up (before any data is read)."""
        config = self.config
        limit = max_positions(get_model(config.model, **{
            "src_vocab_size": 8, "tgt_vocab_size": 8, "pad_id": 0, **config.overrides}))
        if limit is not None and config.max_length > limit:
            raise ConfigError(
                f"--max-length {config.max_length} is above the {limit} positions the model "
                f"accepts (its max_len): pass --max-length {limit} or less, or a model with "
                "more positions (--model-overrides max_len=...)")

    def read_split(self, split: str) -> Pairs:
        """The split's ``(source, target)`` pairs; the train split of a named corpus is
        streamed from its files (``ParallelLines``, every line), the others are read whole."""
        config = self.config
        index = self.toy_splits.index(split)
        if config.dataset == "toy":
            pairs = toy_translation(split, num_sentences=int(config.toy_sizes[index]),
                                    seed=config.seed)
            files = "the generated toy corpus (--toy-sizes)"
        else:
            segment = get_dataset_info(config.dataset).splits[split]
            langs = {"src_lang": config.src_lang, "tgt_lang": config.tgt_lang}
            if split == "train":
                files = dataset_files(config.dataset, segment, config.data_dir, **langs)
                missing = [lang for lang in langs.values() if lang not in files]
                if missing:
                    raise ConfigError(f"{config.dataset}: language(s) {missing} not available; "
                                      f"choose from {sorted(files)}")
                return ParallelLines(files[config.src_lang], files[config.tgt_lang])
            data = get_dataset(config.dataset, segment, root=config.data_dir, **langs)
            pairs = list(data)
            files = " and ".join(str(getattr(data, a)) for a in ("src_path", "tgt_path")
                                 if hasattr(data, a)) or f"{config.data_dir}"
        if not pairs:
            raise ConfigError(f"the {config.dataset} {split} split is empty: {files} hold no "
                              "sentence pair with two non-empty sides")
        if split == "valid" and config.valid_size:
            pairs = pairs[:config.valid_size]
        return pairs

    def prepare(self, data: Mapping[str, Any]) -> None:
        """The tokenizers: a pretrained checkpoint's (``--init-from``), or SentencePiece
        trained on the train split and cached in the run directory."""
        config = self.config
        if config.dataset == "toy":
            self.log("the toy corpus is tokenised by design (spaces around punctuation): "
                     "sacreBLEU scores it as it is, without its detokenisation warning")
        if config.init_from:
            self.pretrained = init_from(config.init_from, config.precision,
                                        config.model_overrides, config.src_lang_code,
                                        config.tgt_lang_code, config.prefix)
            self.src_tokenizer = self.pretrained.tokenizer
            self.tgt_tokenizer = self.pretrained.target_tokenizer
            return
        self.src_tokenizer, self.tgt_tokenizer = tokenizers(
            self.run, config.joint_spm, data.get("train"), config.spm_vocab_size,
            seed=config.seed, model_type=config.spm_model_type)

    def make_loader(self, data: Pairs, *, train: bool) -> DataLoader:
        """Token-budget batches of this process's shard: the train split is encoded once
        into the run directory's token store; pairs with a side over ``max_length`` are
        dropped."""
        config, tgt = self.config, self.tgt_tokenizer
        if train:
            samples = trainable(encode_corpus(self.run, data, self.src_tokenizer, tgt,
                                              num_workers=config.encode_workers),
                                config.max_length)
        else:
            samples = encode_pairs(data, self.src_tokenizer, tgt, config.max_length)
        return seq2seq_loader(
            samples, parallel.per_process(config.batch_tokens, "--batch-tokens"),
            pad_id=tgt.pad_id, bos_id=tgt.bos_id, eos_id=tgt.eos_id,
            num_buckets=config.num_buckets, seed=config.seed, shuffle=train,
            num_shards=jax.process_count(), shard_id=jax.process_index(),
            accum_steps=config.accum_steps if train else 1,
            batch_rows_multiple=self.rows_per_process())

    def rows_per_process(self) -> int:
        """This process's share of ``--batch-rows-multiple`` (default ``lcm(8, devices)``):
        global rows ``round_down(budget // length, M)`` equal the processes' rows
        ``round_down((budget / P) // length, M / P)`` concatenated, so the global batch does
        not depend on the number of processes."""
        devices = jax.device_count()
        multiple = self.config.batch_rows_multiple or math.lcm(8, devices)
        if multiple % devices:
            raise ConfigError(f"--batch-rows-multiple {multiple} must be a multiple of the "
                              f"{devices} devices (so that every device gets equal rows)")
        return multiple // jax.process_count()

    def build_model(self) -> nn.Module:
        if self.pretrained is not None:
            return self.pretrained.model
        config, src = self.config, self.src_tokenizer
        return seq2seq_preset(config.model, src_vocab_size=len(src),
                              tgt_vocab_size=len(self.tgt_tokenizer), pad_id=src.pad_id,
                              precision=config.precision, shared_vocab=config.joint_spm,
                              **config.overrides)

    def init_params(self, model: nn.Module, rng: jax.Array) -> Params:
        if self.pretrained is not None:
            return self.pretrained.params
        return init_seq2seq_params(model, rng)

    def make_loss(self, model: nn.Module) -> LossFn:
        return seq2seq_loss_fn(model, self.config.label_smoothing)

    def make_train_step(self, model: nn.Module, tx: optax.GradientTransformation,
                        **step_options: Any) -> TrainStep:
        return super().make_train_step(model, tx, accum_steps=self.config.accum_steps,
                                       **step_options)

    def optimizer(self, total_steps: int) -> tuple[optax.GradientTransformation, LearningRate]:
        config = self.config
        return seq2seq_optimizer(config.lr, config.warmup_steps, config.clip_norm,
                                 config.precision, schedule=config.lr_schedule,
                                 total_steps=total_steps, decay_fraction=config.decay_fraction,
                                 ema_decay=config.ema_decay)

    @staticmethod
    def count_tokens(metrics: Mapping[str, Any]) -> Any:
        """Source + target tokens of a train step's batch (its metrics), for throughput."""
        return metrics["tokens"] + metrics["src_tokens"]

    def translator(self, model: nn.Module) -> Translator:
        """The beam-search ``Translator`` of ``model`` (one per model, so compiled shapes are
        reused); sources longer than ``max_length`` are truncated."""
        if id(model) not in self._translators:
            config = self.config
            self._translators[id(model)] = Translator(
                model, self.src_tokenizer, self.tgt_tokenizer, beam_size=config.beam_size,
                alpha=config.alpha, batch_size=config.decode_batch_size,
                max_source_length=config.max_length,
                forced_bos=getattr(self.tgt_tokenizer, "forced_bos_id", None))
        return self._translators[id(model)]

    def score(self, model: nn.Module, params: Params, data: Pairs) -> dict[str, Any]:
        """``translate_and_score``: BLEU with signatures and the hypotheses. Every process
        decodes everything itself, on its own copy of ``params``."""
        return translate_and_score(self.translator(model), parallel.local_copy(params), data,
                                   pretokenized=self.config.dataset == "toy")

    def evaluate(self, model: nn.Module, params: Params, data: Pairs) -> dict[str, float]:
        scores = self.score(model, params, data)
        return {"bleu": scores["bleu"], "bleu_lowercase": scores["bleu_lowercase"]}

    def export(self, model: nn.Module, params: Params, directory: str | Path) -> Path:
        """The fine-tuned ``--init-from`` checkpoint (``params``, its tokenizers and
        generation settings) as a directory of its family that transformers loads; written
        atomically, so a resumed run writes it again whole."""
        from textkit.pretrained import save_pretrained

        if self.pretrained is None:
            raise ConfigError("--export needs --init-from (a model trained from scratch has no "
                              "Hugging Face layout)")
        return save_pretrained(model, jax.tree_util.tree_map(np.asarray, params),
                               (self.src_tokenizer, self.tgt_tokenizer), directory,
                               generation=self.pretrained.generation)
