"""Encoder pretraining from raw text: masked LM (BERT, RoBERTa; optional NSP / SOP sentence
pairs) and ELECTRA's replaced-token detection (``pretraining_objectives``).

Data: ``--train-file`` (one or more files) and ``--valid-file`` are raw text whose documents
are lines, paragraphs or WikiText articles (``--documents``); each split is tokenized, packed
into ``--max-length`` sequences within documents (``--cross-documents`` lets them cross; with
``--pairs nsp|sop`` they are sentence pairs) and stored once in a memory-mapped ``TokenStore``
under ``<run>/pretraining/`` (``textkit.data.pretraining_corpus``). Batches are masked on the
host as the step takes them (``textkit.data.masking``: a new mask every epoch, 15 % with
80 / 10 / 10 by default, ELECTRA's 85 / 0 / 15, optional whole-word masking; keyed by (seed,
process, epoch, step), so a resumed run masks as the first one did; the model predicts at
``--max-predictions`` slots per sequence). ``--batch-size`` rows of
``--max-length`` tokens per micro-batch, all processes together; an update takes
``--accum-steps`` micro-batches.

Model and tokenizer: ``--pretrained DIR`` (a checkpoint: its tokenizer and architecture, its
weights with ``--init pretrained``, fresh ones with ``--init random``; a directory with
tokenizer files only gives the ``--model`` preset that tokenizer), or a ``--model`` preset with
a WordPiece vocabulary of ``--vocab-size`` trained on the training text (lowercased unless
``--cased``; kept in ``<run>/tokenizer``). The tokenizer needs a mask token. ELECTRA needs an
``electra`` architecture (e.g. ``--model electra_small_discriminator``).

Optimizer: AdamW or LAMB (``optax.scale_by_trust_ratio`` after Adam: layer-wise trust ratios
for large batches), betas 0.9 / 0.999, eps 1e-6, weight decay on matrices only, gradient
clipping, warm-up over ``--warmup`` of the steps then a decay to 0 at the run's end of power
``--decay-power`` (1: linear, else polynomial), warm-up and end moving with a time budget
(``training.schedules.scale_by_budget_schedule``, the schedule every recipe shares);
dynamic loss scaling under float16 policies.

``evaluate`` masks the held-out sequences with fixed keys and gives ``mlm_loss`` (mean NLL of
the masked tokens), ``mlm_accuracy`` (masked-token accuracy, MLPerf's measure; ELECTRA: its
generator's), ``rtd_accuracy`` (ELECTRA's discriminator over every real token; with ~13 % of the
tokens replaced it stays at ``1 - replaced_fraction`` until some score crosses 0, so it hides
early progress), ``rtd_loss`` (its mean sigmoid cross-entropy) beside ``rtd_constant_loss``
(that of the best constant answer, the entropy of ``replaced_fraction``: the discriminator
has learned something once ``rtd_loss`` is below it) and ``pair_accuracy`` (NSP / SOP).
``export`` writes the encoder with ``save_pretrained``
(``BertForMaskedLM``, ``RobertaForMaskedLM``, ...; ELECTRA: the discriminator as
``ElectraForPreTraining``, the generator as ``ElectraForMaskedLM`` in ``generator/``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from textkit import parallel
from textkit._io import write_text_atomic
from textkit.data import DataLoader, FixedBucketSampler, file_digest, toy_lm_corpus
from textkit.data.masking import MaskedLoader, Masker, MaskingConfig
from textkit.data.pretraining_corpus import (
    LAYOUTS,
    PAIRS,
    STATS,
    PackedCorpus,
    PackingConfig,
    PretrainingBatchify,
    SpecialIds,
    TextFiles,
    build_pretraining_corpus,
)
from textkit.data.token_store import remove_stale
from textkit.errors import ConfigError
from textkit.models import Encoder, get_model
from textkit.precision import Policy
from textkit.pretrained import EncoderTokenizer, load_pretrained, save_pretrained
from textkit.pretrained.encoders import encoder_config
from textkit.pretrained.files import read_config
from textkit.settings import flag
from textkit.tasks.base import LearningRate, LossFn, Params, Task, TaskConfig, register_task
from textkit.tasks.encoder_task import train_wordpiece
from textkit.tasks.pretraining_objectives import (
    PairHead,
    PretrainingModel,
    generator_config,
    generator_params,
    pretraining_loss,
)
from textkit.training.loop import FitConfig
from textkit.training.optim import clip_by_global_norm, learning_rate_of, with_loss_scaling
from textkit.training.schedules import scale_by_budget_schedule

__all__ = ["OBJECTIVES", "PretrainingConfig", "PretrainingTask", "special_ids"]

OBJECTIVES = ("mlm", "electra")
_MASK_TOKENS = ("[MASK]", "<mask>")


@dataclasses.dataclass(frozen=True)
class PretrainingConfig(TaskConfig):
    """An encoder pretraining run (``examples/pretrain/train.py``). Each field is the recipe
    flag of the same name."""

    tiny: ClassVar[Mapping[str, Any]] = {"max_length": 32, "batch_size": 4, "vocab_size": 200,
                                         "toy_documents": 40, "lr": 1e-3}
    runs_name: ClassVar[str] = "pretrain"

    objective: str = flag("mlm", "mlm: masked LM with the family's head; electra: replaced-"
                          "token detection with a smaller generator", group="training",
                          choices=OBJECTIVES)
    pretrained: str | None = flag(None, "a checkpoint directory: its tokenizer and "
                                  "architecture (or a directory with tokenizer files only, "
                                  "for the --model preset)", group="model")
    init: str = flag("pretrained", "with --pretrained: pretrained (continue from its weights) "
                     "or random (fresh weights)", group="model", choices=("pretrained", "random"))
    model: str = flag("bert_mini", "an encoder preset (textkit.models.list_models('encoder'))",
                      group="model")
    vocab_size: int = flag(8000, "WordPiece vocabulary trained on the training text for a "
                           "--model preset without --pretrained", group="model")
    cased: bool = flag(False, "keep letter case in that vocabulary (default: lowercased, "
                       "as bert-base-uncased)", group="model")
    generator_size: float = flag(0.25, "ELECTRA: the generator's hidden size, heads and "
                                 "feed-forward size as a fraction of the discriminator's",
                                 group="model")
    train_file: tuple[str, ...] | None = flag(None, "training text file(s): --train-file A B C",
                                              group="data")
    valid_file: str | None = flag(None, "held-out text (masked-token accuracy)", group="data")
    documents: str = flag("paragraphs", "what a document is: lines (one per line), paragraphs "
                          "(blank-line separated, a sentence per line) or wikitext (= Title = "
                          "headings)", group="data", choices=LAYOUTS)
    max_length: int = flag(128, "tokens per sequence, special tokens included", group="data")
    cross_documents: bool = flag(False, "pack sequences across document boundaries (a "
                                 "separator between documents)", group="data")
    pairs: str = flag("none", "sentence pairs with BERT's next-sentence (nsp) or ALBERT's "
                      "sentence-order (sop) objective", group="data", choices=PAIRS)
    mask_probability: float = flag(0.15, "share of the tokens (words) picked for prediction",
                                   group="data")
    mask_rate: float | None = flag(None, "share of the picked tokens replaced by the mask "
                                   "token (default: 0.8; ELECTRA 0.85)", group="data")
    random_rate: float | None = flag(None, "share of the picked tokens replaced by a random "
                                     "token (default: 0.1; ELECTRA 0)", group="data")
    whole_word_masking: bool = flag(False, "pick whole words (the tokenizer's word ids)",
                                    group="data")
    max_predictions: int | None = flag(None, "prediction slots per sequence (BERT's "
                                       "max_predictions_per_seq; default: 1.5 x the expected "
                                       "picks + 8, a multiple of 8)", group="data")
    toy_documents: int = flag(2000, "documents of the generated toy corpus's train split",
                              group="data")
    batch_size: int = flag(32, "sequences per micro-batch, all processes together",
                           group="training")
    accum_steps: int = flag(1, "micro-batches accumulated into one update", group="training")
    optimizer: str = flag("adamw", "adamw, or lamb for large batches", group="training",
                          choices=("adamw", "lamb"))
    lr: float = flag(5e-4, "peak learning rate", group="training")
    warmup: float = flag(0.06, "share of the steps warming up", group="training")
    decay_power: float = flag(1.0, "power of the decay to 0 after the warm-up (1: linear)",
                              group="training")
    weight_decay: float = flag(0.01, "weight decay of the matrices", group="training")
    clip_norm: float = flag(1.0, "gradient clipping by global norm (0: none)",
                            group="training")
    discriminator_weight: float = flag(50.0, "ELECTRA: weight of the discriminator's loss",
                                       group="training")
    export: bool = flag(True, "write the final model with save_pretrained to <run>/export",
                        group="output")
    fit: FitConfig = FitConfig(epochs=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.train_file, str):
            object.__setattr__(self, "train_file", (self.train_file,))
        if self.init == "random" and not self.pretrained:
            raise ConfigError("--init random takes the architecture of --pretrained DIR: give "
                              "--pretrained (a --model preset always starts from fresh weights)")
        if self.objective == "electra" and self.pairs != "none":
            raise ConfigError("--pairs trains a sentence-pair head beside the masked LM; "
                              "ELECTRA has none: use --objective mlm")
        if not 0.0 < self.generator_size <= 1.0:
            raise ConfigError(f"--generator-size {self.generator_size}: expected 0 < size <= 1")
        if self.batch_size < 1 or self.accum_steps < 1:
            raise ConfigError(f"need --batch-size >= 1 and --accum-steps >= 1; got "
                              f"{self.batch_size} and {self.accum_steps}")
        if not 0.0 <= self.warmup < 1.0 or self.decay_power <= 0:
            raise ConfigError(f"need 0 <= --warmup < 1 and --decay-power > 0; got "
                              f"{self.warmup} and {self.decay_power}")
        _ = self.masking, self.packing            # their own checks, at start-up

    def record(self) -> dict[str, Any]:
        """``TaskConfig.record`` with the training files absolute: one file as a string, more
        as a list."""
        record = TaskConfig.record(dataclasses.replace(self, train_file=None))
        files = [os.path.abspath(f) for f in self.train_file or ()]
        record["train_file"] = (files[0] if len(files) == 1 else files) if files else None
        return record

    @property
    def masking(self) -> MaskingConfig:
        """The masking settings (ELECTRA's 85 / 0 / 15 by default)."""
        electra = self.objective == "electra"
        return MaskingConfig(
            self.mask_probability,
            self.mask_rate if self.mask_rate is not None else (0.85 if electra else 0.8),
            self.random_rate if self.random_rate is not None else (0.0 if electra else 0.1),
            self.whole_word_masking, self.max_predictions)

    @property
    def packing(self) -> PackingConfig:
        """The packing settings."""
        return PackingConfig(self.max_length, self.pairs, self.cross_documents, self.seed)


def special_ids(tokenizer: EncoderTokenizer, source: str) -> SpecialIds:
    """The ids pretraining batches need from ``tokenizer`` (of ``source``, for errors): CLS and
    SEP from its single-text template, its pad and mask tokens, every special token."""
    inner = tokenizer.tokenizer
    template = inner.encode("", add_special_tokens=True).ids
    if len(template) != 2:
        raise ConfigError(f"{source}: the tokenizer's template adds the ids {template} around a "
                          f"text; pretraining expects a CLS and a SEP token")
    specials = {i for i, token in inner.get_added_tokens_decoder().items() if token.special}
    masks = [i for i in (tokenizer.token_to_id(t) for t in _MASK_TOKENS) if i is not None]
    if not masks:
        raise ConfigError(f"{source}: the tokenizer has no mask token (one of {_MASK_TOKENS}); "
                          f"masked-LM pretraining replaces tokens by it")
    cls, sep = template
    return SpecialIds(cls, sep, tokenizer.pad_id, masks[0],
                      tuple(sorted(specials | {cls, sep, tokenizer.pad_id, masks[0]})),
                      len(tokenizer))


class _Source(NamedTuple):
    """What ``prepare`` found: the exported encoder, its tokenizer and params (None: fresh),
    the generator's params (ELECTRA continuing from an export) and a line for the log."""

    encoder: Encoder
    tokenizer: EncoderTokenizer
    params: Params | None
    generator_params: Params | None
    description: str


def _main_first(build: Callable[[], Any]) -> Any:
    """``build()`` on process 0 first (it writes the cache), then on the others (they read
    it)."""
    if jax.process_count() == 1:
        return build()
    from jax.experimental import multihost_utils

    if jax.process_index() == 0:
        result = build()
    multihost_utils.sync_global_devices("textkit pretraining data built")
    return result if jax.process_index() == 0 else build()


@register_task
class PretrainingTask(Task):
    """Encoder pretraining from raw text (module docstring)."""

    name = "pretraining"
    model_family = "encoder"
    config_class = PretrainingConfig
    toy_splits = ("train", "valid")
    eval_metric = "mlm_accuracy"
    eval_mode = "max"
    config: PretrainingConfig

    def __init__(self, config: PretrainingConfig, run: Any, log: Any = None):
        super().__init__(config, run, log)
        self.source: _Source | None = None
        self.special: SpecialIds | None = None
        self.masker: Masker | None = None
        self._corpora: dict[str, PackedCorpus] = {}
        self._eval_fns: dict[int, Callable] = {}

    @property
    def tokenizer(self) -> EncoderTokenizer:
        """The prepared tokenizer."""
        return self.source.tokenizer

    @property
    def splits(self) -> tuple[str, ...]:
        if self.config.train_file:
            return ("train", "valid") if self.config.valid_file else ("train",)
        return super().splits

    # ------------------------------------------------------------------ data
    def read_split(self, split: str) -> TextFiles:
        """The split's text files (``--train-file`` / ``--valid-file``), or the generated toy
        corpus written into the run directory (documents of 1 to 6 sentences)."""
        c = self.config
        if c.train_file:
            paths = c.train_file if split == "train" else (c.valid_file,)
            for path in paths:
                if not Path(path).is_file():
                    raise ConfigError(f"--{split}-file {path}: no such file")
            return TextFiles(split, tuple(str(p) for p in paths), c.documents)
        path = self.run.root / "toy" / f"{split}.txt"
        if not path.is_file() and self.run.main_process:
            size = c.toy_documents if split == "train" else max(c.toy_documents // 10, 8)
            sentences = iter(toy_lm_corpus(split, size * 4, seed=c.seed))
            documents = ["\n".join(next(sentences) for _ in range(1 + i % 6))
                         for i in range(size)]
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, "\n\n".join(documents) + "\n")
        return TextFiles(split, (str(path),), "paragraphs")

    def prepare(self, data: Mapping[str, TextFiles]) -> None:
        """The tokenizer and the model's source (module docstring); checks the mask token and
        ``--max-length`` against the model's positions."""
        c = self.config
        self.source = self._load_source(data["train"])
        name = c.pretrained or f"the tokenizer trained for {c.model}"
        self.special = special_ids(self.tokenizer, name)
        encoder = self.source.encoder.config
        if len(self.tokenizer) > encoder.vocab_size:
            raise ConfigError(f"{name}: the tokenizer has {len(self.tokenizer)} ids but the "
                              f"model {encoder.vocab_size} embeddings")
        if c.max_length > encoder.max_positions:
            raise ConfigError(f"--max-length {c.max_length} is above the {encoder.max_positions}"
                              f" positions of {c.pretrained or c.model}")
        self.masker = Masker(c.masking, mask_id=self.special.mask,
                             vocab_size=len(self.tokenizer),
                             never_masked=self.special.never_masked)
        self.log(f"pretraining ({c.objective}): {encoder.architecture} from "
                 f"{self.source.description}")

    def _head(self) -> str:
        return "pretraining" if self.config.objective == "electra" else "masked_lm"

    def _load_source(self, train: TextFiles) -> _Source:
        c = self.config
        policy = Policy.parse(c.precision)
        if c.pretrained and c.init == "pretrained":
            loaded = load_pretrained(c.pretrained, policy=policy, head=self._head(),
                                     **c.overrides)
            generator = Path(c.pretrained) / "generator"
            own = None
            if c.objective == "electra" and (generator / "config.json").is_file():
                own = load_pretrained(generator, policy=policy, **c.overrides).params
            self._check_electra(loaded.model.config.architecture)
            return _Source(loaded.model, loaded.tokenizer, loaded.params, own, c.pretrained + (
                " and its generator" if own is not None else ""))
        if c.pretrained and (Path(c.pretrained) / "config.json").is_file():
            hf = read_config(Path(c.pretrained))
            self._check_electra(hf["model_type"])
            encoder = Encoder(encoder_config(hf, c.pretrained, policy=policy, head=self._head(),
                                             **c.overrides))
            tokenizer = EncoderTokenizer.from_directory(c.pretrained, hf["model_type"])
            return _Source(encoder, tokenizer, None, None, f"{c.pretrained} (random init)")
        architecture = get_model(c.model, **c.overrides).config.architecture
        self._check_electra(architecture)
        if c.pretrained:
            tokenizer = EncoderTokenizer.from_directory(c.pretrained, architecture)
            description = f"{c.model} (random init) with the tokenizer of {c.pretrained}"
        else:
            tokenizer = self._train_tokenizer(train, architecture)
            description = (f"{c.model} (random init) with a {len(tokenizer):,}-entry "
                           f"{'cased' if c.cased else 'lowercased'} WordPiece "
                           f"vocabulary trained on {self.data_name}")
        encoder = get_model(c.model, **{
            "head": self._head(), "vocab_size": len(tokenizer), "pad_id": tokenizer.pad_id,
            "policy": c.precision, "type_vocab_size": 2 if tokenizer.with_token_types else 0,
            **c.overrides})
        return _Source(encoder, tokenizer, None, None, description)

    def _check_electra(self, architecture: str) -> None:
        if self.config.objective == "electra" and architecture != "electra":
            raise ConfigError(f"--objective electra trains an electra discriminator; "
                              f"{self.config.pretrained or self.config.model} is "
                              f"{architecture} (try --model electra_small_discriminator)")

    def _train_tokenizer(self, train: TextFiles, architecture: str) -> EncoderTokenizer:
        """A WordPiece of ``--vocab-size`` trained on ``train``, kept in ``<run>/tokenizer``."""
        directory = self.run.root / "tokenizer"

        def build() -> EncoderTokenizer:
            if (directory / "tokenizer.json").is_file():
                return EncoderTokenizer.from_directory(directory, architecture)
            tokenizer = train_wordpiece(train.lines(), self.config.vocab_size, architecture,
                                        lowercase=not self.config.cased)
            if self.run.main_process:
                directory.mkdir(parents=True, exist_ok=True)
                tokenizer.save(directory, architecture)
            return tokenizer

        return _main_first(build)

    def corpus(self, data: TextFiles) -> PackedCorpus:
        """The packed sequences of a split, built once into ``<run>/pretraining/`` (keyed by
        the files, the tokenizer and the packing settings). A training split without one
        full sequence is refused."""
        c = self.config
        tokenizer_hash = hashlib.sha256(self.tokenizer.tokenizer.to_str().encode()).hexdigest()
        key = file_digest(data.paths, data.layout, tokenizer_hash, c.packing)
        if key in self._corpora:
            return self._corpora[key]
        parent = self.run.root / "pretraining"
        directory = parent / f"{data.name}-{key[:16]}"

        def build() -> PackedCorpus:
            corpus = build_pretraining_corpus(
                directory, data.documents, self.tokenizer.tokenizer, c.packing,
                vocab_size=len(self.tokenizer), key=key, desc=f"packing {data.name}")
            if self.run.main_process:
                remove_stale(parent, f"{data.name}-", directory)
            return corpus

        corpus = _main_first(build)
        counts = ", ".join(f"{corpus.stats[k]:,} {k.replace('_', ' ')}" for k in STATS)
        self.log(f"{data.name} ({', '.join(data.paths)}): {counts}")
        if not len(corpus) or (data.name == "train" and not corpus.stats["full_sequences"]):
            raise ConfigError(f"{', '.join(data.paths)} yields no full sequence of --max-length "
                              f"{c.max_length} tokens ({counts}): give more text, a shorter "
                              f"--max-length, other --documents, or --cross-documents")
        self._corpora[key] = corpus
        return corpus

    def make_loader(self, data: TextFiles, *, train: bool) -> MaskedLoader:
        """Masked batches of ``data``'s packed sequences: this process's rows of every
        (shuffled, resumable) training batch, or every held-out sequence in a fixed order."""
        c = self.config
        corpus = self.corpus(data)
        rows = parallel.per_process(c.batch_size, "--batch-size")
        if rows % jax.local_device_count():
            raise ConfigError(f"--batch-size {c.batch_size}: each process's {rows} rows must "
                              f"split evenly over its {jax.local_device_count()} devices")
        shards = (jax.process_count(), jax.process_index()) if train else (1, 0)
        sampler = FixedBucketSampler(
            np.full(len(corpus), c.max_length), rows * (c.accum_steps if train else 1),
            num_buckets=1, round_to=None, shuffle=train, seed=c.seed, last_batch="pad",
            num_shards=shards[0], shard_id=shards[1])
        batchify = PretrainingBatchify(self.special, c.max_length, pairs=c.pairs != "none",
                                       with_token_types=self.tokenizer.with_token_types)
        return MaskedLoader(DataLoader(corpus.store, sampler, batchify, num_workers=1),
                            self.masker, seed=c.seed, shard=shards[1])

    # ------------------------------------------------------------------ model
    def build_model(self) -> PretrainingModel:
        c = self.config
        encoder = self.source.encoder
        generator = (Encoder(generator_config(encoder.config, c.generator_size))
                     if c.objective == "electra" else None)
        pair_head = (PairHead(encoder.config.hidden_size, encoder.config.policy)
                     if c.pairs != "none" else None)
        return PretrainingModel(encoder, generator, pair_head)

    def init_params(self, model: PretrainingModel, rng: jax.Array) -> Params:
        """Fresh params, with the checkpoint's (``--init pretrained``) in place of them."""
        params = jax.jit(model.init)(rng)
        source = self.source
        if source.params is not None:
            params["encoder"] = jax.tree_util.tree_map(jnp.asarray, source.params)
        if source.generator_params is not None:
            params["generator"] = {k: jax.tree_util.tree_map(jnp.asarray, v) for k, v in
                                   source.generator_params.items() if k in params["generator"]}
        return params

    # ------------------------------------------------------------------ training
    def make_loss(self, model: PretrainingModel) -> LossFn:
        return pretraining_loss(model, discriminator_weight=self.config.discriminator_weight)

    def optimizer(self, total_steps: int) -> tuple[optax.GradientTransformation, LearningRate]:
        c = self.config
        parts = [clip_by_global_norm(c.clip_norm)] if c.clip_norm else []
        parts += [optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-6),
                  optax.add_decayed_weights(c.weight_decay, mask=lambda params: jax.tree.map(
                      lambda p: p.ndim >= 2, params))]
        if c.optimizer == "lamb":
            parts.append(optax.scale_by_trust_ratio())
        parts.append(scale_by_budget_schedule(c.lr, 0, max(total_steps, 1), decay_fraction=1.0,
                                              warmup_fraction=c.warmup, power=c.decay_power))
        return with_loss_scaling(optax.chain(*parts), c.precision), (
            lambda state: learning_rate_of(state.opt_state))

    @staticmethod
    def count_tokens(metrics: Mapping[str, Any]) -> Any:
        """Real input tokens of a step."""
        return metrics["input_tokens"]

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, model: PretrainingModel, params: Params,
                 data: TextFiles) -> dict[str, float]:
        """MLM loss and masked-token accuracy over ``data``'s sequences masked with fixed keys
        (and ``rtd_accuracy`` / ``pair_accuracy``, module docstring)."""
        if id(model) not in self._eval_fns:
            self._eval_fns[id(model)] = jax.jit(self.make_loss(model))
        totals: dict[str, float] = {}
        for batch in self.make_loader(data, train=False):
            _, (_, metrics) = self._eval_fns[id(model)](params, batch, None)
            for name, value in metrics.items():
                totals[name] = totals.get(name, 0.0) + float(value)
        masked = max(totals["masked"], 1.0)
        scores = {"mlm_loss": totals["mlm_nll"] / masked,
                  "mlm_accuracy": totals["mlm_correct"] / masked,
                  "masked_tokens": totals["masked"]}
        if "pairs" in totals:
            scores["pair_accuracy"] = totals["pair_correct"] / max(totals["pairs"], 1.0)
        if "rtd_tokens" in totals:
            tokens = max(totals["rtd_tokens"], 1.0)
            share = totals["replaced"] / tokens
            constant = -sum(q * math.log(q) for q in (share, 1.0 - share) if q > 0)
            scores.update(rtd_accuracy=totals["rtd_correct"] / tokens,
                          rtd_loss=totals["rtd_bce"] / tokens, rtd_constant_loss=constant,
                          replaced_fraction=share)
        return scores

    def export(self, model: PretrainingModel, params: Params, directory: str | Path) -> Path:
        """The encoder as a checkpoint directory transformers loads (``BertForMaskedLM``,
        ...; ELECTRA: ``ElectraForPreTraining``, its generator as ``ElectraForMaskedLM`` in
        ``generator/``)."""
        host = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32), params)
        path = save_pretrained(model.encoder, host["encoder"], self.tokenizer, directory)
        if model.generator is not None:
            save_pretrained(model.generator, generator_params(host), self.tokenizer,
                            path / "generator")
        return path
