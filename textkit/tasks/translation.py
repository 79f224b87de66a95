"""Translation as a task: data, tokenizers, batches, loss, model, optimizer, evaluation.

The pieces every task exposes (``textkit.tasks``), for ``(source, target)`` text pairs:

* ``load_pairs`` (the named corpora and the built-in toy data) and ``tokenizers`` (SentencePiece
  models trained on the train split, cached in the run directory);
* ``train_source`` / ``encode_corpus`` / ``trainable``: the train split streamed from its files
  and encoded once, in parallel, into a memory-mapped ``TokenStore`` cached in the run directory
  (``encode_pairs`` does the same in memory, for small lists of pairs);
* ``Seq2SeqBatchify`` / ``make_loader``: ``(source ids, target ids)`` samples to the textkit
  batch dict through a token-budget ``FixedBucketSampler`` (fixed padded shapes);
* ``make_loss``: ``loss_fn(params, batch, rng)`` for ``make_train_step`` / ``make_eval_step``;
* ``build_model`` / ``init_params``: a registry preset for the vocabularies and its parameters;
* ``optimizer``: Adam with inverse-square-root warm-up and clipping (loss scaling by policy);
* ``bleu_scores`` / ``evaluate``: cased and lowercased sacreBLEU of a ``Translator``'s output;
* ``choose_final``: the best checkpoint, or the average of the last N if it validates better.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import pickle
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils

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
    toy_translation,
)
from textkit.data.token_store import remove_stale
from textkit.models import get_model, max_positions, parse_overrides
from textkit.precision import Policy
from textkit.training.checkpoint import CheckpointManager, average_checkpoints
from textkit.training.losses import cross_entropy
from textkit.training.metrics import corpus_bleu
from textkit.training.optim import ema, ema_params_of, learning_rate_of, with_loss_scaling
from textkit.training.run_dir import RunDir
from textkit.training.schedules import inverse_sqrt_schedule, scale_by_budget_schedule

__all__ = [
    "DATASETS",
    "Seq2SeqBatchify",
    "bleu_scores",
    "build_model",
    "check_max_length",
    "choose_final",
    "count_tokens",
    "encode_corpus",
    "encode_pairs",
    "evaluate",
    "init_params",
    "load_pairs",
    "make_loader",
    "make_loss",
    "optimizer",
    "tokenizers",
    "train_source",
    "trainable",
]

# name -> (default source/target language, train / valid / test segment)
DATASETS = {
    "toy": (("src", "tgt"), ("train", "valid", "test")),
    "multi30k": (("en", "de"), ("train", "val", "test")),
    "iwslt2015": (("en", "vi"), ("train", "val", "test")),
    "wmt2014": (("en", "de"), ("train", "newstest2013", "newstest2014")),
}


def load_pairs(dataset: str, split: int, *, data_dir: str | None = None,
               src_lang: str | None = None, tgt_lang: str | None = None,
               toy_sizes: Sequence[int] = (12000, 200, 500),
               seed: int = 0) -> list[tuple[str, str]]:
    """(source, target) text pairs of ``split`` 0 (train), 1 (valid) or 2 (test)."""
    (default_src, default_tgt), segments = DATASETS[dataset]
    if dataset == "toy":
        pairs = toy_translation(segments[split], num_sentences=int(toy_sizes[split]), seed=seed)
        files = "the generated toy corpus (--toy-sizes)"
    else:
        data = get_dataset(dataset, segments[split], root=data_dir,
                           src_lang=src_lang or default_src, tgt_lang=tgt_lang or default_tgt)
        pairs = list(data)
        files = " and ".join(str(getattr(data, a)) for a in ("src_path", "tgt_path")
                             if hasattr(data, a)) or f"{data_dir}"
    if not pairs:
        raise ValueError(f"the {dataset} {segments[split]} split is empty: {files} hold no "
                         "sentence pair with two non-empty sides")
    return pairs


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


def train_source(dataset: str, *, data_dir: str | None = None, src_lang: str | None = None,
                 tgt_lang: str | None = None, toy_sizes: Sequence[int] = (12000, 200, 500),
                 seed: int = 0) -> Sequence[tuple[str, str]]:
    """The train split's ``(source, target)`` text: ``ParallelLines`` streaming the corpus
    files (every line, empty sides included), or the generated toy pairs in memory."""
    if dataset == "toy":
        return load_pairs("toy", 0, toy_sizes=toy_sizes, seed=seed)
    (default_src, default_tgt), segments = DATASETS[dataset]
    src_lang, tgt_lang = src_lang or default_src, tgt_lang or default_tgt
    files = dataset_files(dataset, segments[0], data_dir, src_lang=src_lang, tgt_lang=tgt_lang)
    for lang in (src_lang, tgt_lang):
        if lang not in files:
            raise ValueError(f"{dataset}: language {lang!r} not available; choose from "
                             f"{sorted(files)}")
    return ParallelLines(files[src_lang], files[tgt_lang])


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


def make_loader(samples: Sequence[IdPair] | TokenStore, batch_tokens: int, *, pad_id: int,
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
def make_loss(model: Any, label_smoothing: float = 0.0) -> Callable[..., Any]:
    """``loss_fn(params, batch, rng) -> (loss_sum, (weight_sum, {"src_tokens"}))`` for the
    train step.

    Logits come from ``model.apply(params, src_tokens, tgt_input)`` (dropout on when ``rng`` is a
    key); targets are ``tgt_output``, weighted by ``tgt_lengths``. ``src_tokens`` (float32 [])
    counts the batch's source tokens, so that metrics give the whole (global) batch's token
    count, target tokens being the weight sum.
    """

    def loss_fn(params: Any, batch: Mapping[str, Any], rng: jax.Array | None):
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


def count_tokens(metrics: Mapping[str, Any]) -> Any:
    """Source + target tokens of a train step's batch (its metrics), for throughput."""
    return metrics["tokens"] + metrics["src_tokens"]


SCHEDULES = ("inverse_sqrt", "budget")


def optimizer(lr: float, warmup_steps: int, clip_norm: float,
              policy: Policy | str = "float32", *, schedule: str = "inverse_sqrt",
              total_steps: int = 1, decay_fraction: float = 0.2,
              ema_decay: float | None = None,
              ) -> tuple[optax.GradientTransformation, Callable[[Any], float]]:
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
    links = [optax.clip_by_global_norm(clip_norm), core]
    if ema_decay:
        links.append(ema(ema_decay))
    return with_loss_scaling(optax.chain(*links), policy), learning_rate


# ------------------------------------------------------------------------------------ the model
def build_model(name: str, *, src_vocab_size: int, tgt_vocab_size: int, pad_id: int,
                precision: str = "float32", shared_vocab: bool = False,
                **overrides: Any) -> Any:
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


def check_max_length(name: str, overrides: Mapping[str, Any], max_length: int) -> None:
    """Refuse (``SystemExit``) a ``--max-length`` above the positions the preset ``name`` with
    ``overrides`` accepts, at start-up (before any data is read): such pairs would otherwise
    fail at their first batch."""
    limit = max_positions(get_model(name, **{"src_vocab_size": 8, "tgt_vocab_size": 8,
                                             "pad_id": 0, **overrides}))
    if limit is not None and max_length > limit:
        raise SystemExit(f"--max-length {max_length} is above the {limit} positions the model "
                         f"accepts (its max_len): pass --max-length {limit} or less, or a "
                         f"model with more positions (--model-overrides max_len=...)")


def init_params(model: Any, rng: jax.Array) -> Any:
    """``model.init`` on a [1, 8] dummy source and target; returns the params pytree."""
    dummy = jnp.full((1, 8), model.config.pad_id, jnp.int32)
    return model.init(rng, dummy, dummy)["params"]


class TrainedRun(NamedTuple):
    """A finished ``examples/nmt/train.py`` run: its model, the evaluated parameters
    (``final/``), both tokenizers, its config dict and where the parameters came from."""

    model: Any
    params: Any
    src_tokenizer: Any
    tgt_tokenizer: Any
    config: dict[str, Any]
    source: str


def load_trained(save_dir: str | Path) -> TrainedRun:
    """The model and final parameters of the training run in ``save_dir`` (its ``--save-dir``):
    the config and SentencePiece models it wrote, ``final/`` restored against the model's
    parameter structure."""
    run = RunDir(save_dir)
    config = run.read_config()
    src_tok, tgt_tok = tokenizers(run, config["joint_spm"])
    model = build_model(
        config["model"], src_vocab_size=len(src_tok), tgt_vocab_size=len(tgt_tok),
        pad_id=src_tok.pad_id, precision=config["precision"], shared_vocab=config["joint_spm"],
        **parse_overrides(config["model_overrides"]))
    target = jax.eval_shape(lambda key: init_params(model, key), jax.random.PRNGKey(0))
    params, extra = run.load_final(target)
    return TrainedRun(model, params, src_tok, tgt_tok, config,
                      f"{extra['source']} of {run.root}")


# ------------------------------------------------------------------------------------ BLEU
def bleu_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """Cased and lowercased corpus BLEU of detokenized text, with sacreBLEU signatures.

    Returns ``{"bleu", "signature", "bleu_lowercase", "signature_lowercase"}``.
    """
    cased, signature = corpus_bleu(hypotheses, references)
    lower, signature_lower = corpus_bleu(hypotheses, references, lowercase=True)
    return {"bleu": cased, "signature": signature, "bleu_lowercase": lower,
            "signature_lowercase": signature_lower}


def evaluate(translator: Any, params: Any, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """``bleu_scores`` of ``translator.translate(params, sources)`` against the targets, plus
    the ``hypotheses``. Run on every process, each on its own copy of ``params``."""
    hypotheses = translator.translate(params, [s for s, _ in pairs])
    return {**bleu_scores(hypotheses, [t for _, t in pairs]), "hypotheses": hypotheses}


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
              overrides: str | Mapping[str, Any] = "") -> Any:
    """A Marian / OPUS-MT checkpoint directory ready to fine-tune: ``Pretrained(model,
    params, src_tokenizer, tgt_tokenizer)`` (``textkit.models.load_pretrained``) with the
    ``precision`` policy and config ``overrides`` (e.g. "dropout=0.1"); params as jax arrays.
    The source tokenizer appends EOS (as the model was trained), the target one does not (the
    loader adds it); decoding starts from the model's ``decoder_start_id`` (Marian: pad)."""
    from textkit.models import load_pretrained, parse_overrides

    fields = parse_overrides(overrides) if isinstance(overrides, str) else dict(overrides)
    try:
        pretrained = load_pretrained(path, policy=Policy.parse(precision), **fields)
    except (ValueError, TypeError) as err:
        raise SystemExit(f"--init-from: {err}") from None
    pretrained.tgt_tokenizer.add_eos = False
    return pretrained._replace(params=jax.tree_util.tree_map(jnp.asarray, pretrained.params))
