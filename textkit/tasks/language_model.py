"""Language modelling as a task: corpora, BPTT steps that carry the recurrent state,
perplexity over a whole stream, the optimizer and its learning-rate decay.

The recurrent state of window ``i`` flows into window ``i + 1`` *through* the jitted step: the
steps take and return it as an explicit argument (``make_train_step(..., carry=True)``), so
``state, carry, metrics = train_step(state, batch, carry)``; models without a state (the
Transformer LM) carry ``None``. ``model.initial_state(batch_size)`` is the zero state.

Perplexity is ``exp(total NLL / token count)`` over every token of a stream:
``stream_windows`` prepends one end-of-sentence token as context so that the first token is a
target too, and uses one row with a masked last window, so no token is dropped.

The optimizer built by ``lm_optimizer`` holds its learning rate in its state
(``optax.inject_hyperparams``): ``textkit.training.optim.with_learning_rate`` changes it between
epochs (decay on a validation plateau, as in Zaremba et al. and AWD-LSTM) without recompiling.

``LanguageModelTask``'s methods (the ``Task`` API) call the building blocks here (``lm_preset``,
``lm_loss_fn``, ``lm_train_step``, ``lm_eval_step``, ``lm_optimizer``) with the run's settings.

Data parallel: ``train_step_shardings(mesh, state)`` splits the windows' rows and the recurrent
state (rows ``[B, H]``) over the mesh's ``data`` axis, and the state comes back split the same
way, so it never leaves its devices between steps; the metrics are replicated.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from textkit import parallel
from textkit.data import BPTTBatches, LanguageModelCorpus, get_dataset, get_dataset_info
from textkit.data.toy import write_toy_lm_corpus
from textkit.models import get_model, parse_overrides
from textkit.precision import Policy
from textkit.settings import flag
from textkit.tasks.base import LearningRate, LossFn, Params, Task, TaskConfig, register_task
from textkit.training import train_step as steps
from textkit.training.loop import FitConfig
from textkit.training.losses import cross_entropy
from textkit.training.metrics import perplexity
from textkit.training.optim import (
    clip_by_global_norm,
    learning_rate_of,
    with_learning_rate,
    with_loss_scaling,
)
from textkit.training.run_dir import RunDir
from textkit.training.schedules import scale_by_budget_schedule
from textkit.training.train_step import CompiledStep, TrainState
from textkit.vocab import Vocab

__all__ = [
    "build_vocab",
    "LanguageModelConfig",
    "LanguageModelTask",
    "lm_eval_step",
    "lm_loss_fn",
    "lm_optimizer",
    "lm_preset",
    "lm_train_step",
    "next_learning_rate",
    "process_rows",
    "sliding_windows",
    "stream_nll",
    "stream_perplexity",
    "stream_windows",
    "train_step_shardings",
    "unigram_perplexity",
]

# Added to the logits of tokens that can never be a target (e.g. <pad>): finite, so that a
# masked position whose target is such a token gives 0 * large instead of 0 * inf = NaN.
_EXCLUDED_LOGIT = -1e9


def build_vocab(train: LanguageModelCorpus) -> Vocab:
    """The training words plus ``<pad>`` (no ``<bos>``: LM streams only use ``<eos>``)."""
    return Vocab(train.tokens, bos_token=None)


def lm_preset(name: str, overrides: str | Iterable[str], vocab: Vocab,
              precision: str = "float32") -> nn.Module:
    """The registry preset ``name`` with ``overrides`` (``"dropout=0.5,..."`` strings, see
    ``textkit.models.parse_overrides``) for ``vocab`` and the precision policy."""
    return get_model(name, **parse_overrides(overrides), vocab_size=len(vocab),
                     pad_id=vocab.pad_id, policy=precision)


def lm_loss_fn(model: nn.Module, excluded_ids: Sequence[int] = ()) -> LossFn:
    """``loss_fn(params, batch, rng, carry) -> (nll_sum, (token_count, {}, new_carry))``.

    ``batch``: ``inputs`` / ``targets`` int32 ``[B, T]``, ``mask`` float32 ``[B, T]``;
    ``carry`` is the state entering the window (or None). ``rng`` None runs deterministically
    (no dropout). ``excluded_ids`` (e.g. ``<pad>``) get no probability mass, so the softmax is
    over the tokens a corpus can contain.
    """
    excluded = np.asarray(sorted(set(excluded_ids)), np.int32)

    def loss_fn(params: Params, batch: Mapping[str, Any], rng: jax.Array | None, carry: Any):
        rngs = None if rng is None else {"dropout": rng}
        logits, carry = model.apply({"params": params}, batch["inputs"], carry,
                                    deterministic=rng is None, rngs=rngs)    # [B, T, V]
        if excluded.size:
            # a constant [V] bias, not a scatter: XLA would constant-fold a [B, T, V] mask
            penalty = np.zeros(logits.shape[-1], np.float32)
            penalty[excluded] = _EXCLUDED_LOGIT
            logits = logits.astype(jnp.float32) + penalty
        nll_sum, count = cross_entropy(logits, batch["targets"], batch["mask"])
        return nll_sum, (count, {}, carry)

    return loss_fn


def lm_train_step(model: nn.Module, optimizer: optax.GradientTransformation, *,
                  excluded_ids: Sequence[int] = (), **step_kwargs: Any) -> CompiledStep:
    """``train_step(state, batch, carry) -> (state, carry, metrics)``: ``make_train_step`` of
    ``lm_loss_fn`` with the carry; ``step_kwargs`` (donate, shardings) go to it."""
    return steps.make_train_step(lm_loss_fn(model, excluded_ids), optimizer, carry=True,
                                 **step_kwargs)


def lm_eval_step(model: nn.Module, *, excluded_ids: Sequence[int] = (),
                 **step_kwargs: Any) -> CompiledStep:
    """``eval_step(params, batch, carry) -> (carry, {"loss_sum", "tokens"})``: float32 sums of
    the window's NLL and target count, deterministic (no dropout)."""
    return steps.make_eval_step(lm_loss_fn(model, excluded_ids), carry=True, **step_kwargs)


def train_step_shardings(mesh: jax.sharding.Mesh, state: TrainState) -> dict[str, Any]:
    """``in_shardings`` / ``out_shardings`` for ``train_step`` on ``mesh``: ``state`` keeps
    its placement, the batch and the carry are split over ``data`` on the way in, the carry
    stays split on the way out, and the metrics are replicated."""
    shardings = parallel.train_step_shardings(mesh, state)
    (state_in, batch_in), (state_out, replicated) = (shardings["in_shardings"],
                                                     shardings["out_shardings"])
    data = parallel.data_sharding(mesh)
    return {"in_shardings": (state_in, batch_in, data),
            "out_shardings": (state_out, data, replicated)}


def process_rows(tree: Any) -> Any:
    """This process's block of rows of a global host batch (or recurrent state):
    ``[p * b:(p + 1) * b]`` with ``b = rows / process count``."""
    def rows(x: Any) -> np.ndarray:
        x = np.asarray(x)
        size = parallel.per_process(x.shape[0], "--batch-size")
        return x[jax.process_index() * size:(jax.process_index() + 1) * size]
    return jax.tree_util.tree_map(rows, tree)


def stream_windows(token_ids: np.ndarray, seq_len: int, eos_id: int, pad_id: int) -> BPTTBatches:
    """Windows of batch size 1 whose targets are *every* token of ``token_ids`` (int ``[N]``).

    One ``eos_id`` is prepended as the context of the first token (a corpus starts where a
    sentence ends); the last window is padded with ``pad_id`` and masked, so the windows'
    mask sums to exactly N.
    """
    token_ids = np.asarray(token_ids)
    if token_ids.ndim != 1 or token_ids.size == 0:
        raise ValueError(f"token_ids must be a non-empty 1-D stream, got shape {token_ids.shape}")
    stream = np.concatenate([np.asarray([eos_id], token_ids.dtype), token_ids])
    return BPTTBatches(stream, batch_size=1, seq_len=seq_len, last_batch="keep", pad_id=pad_id)


def sliding_windows(token_ids: np.ndarray, seq_len: int, stride: int, eos_id: int,
                    pad_id: int) -> list[dict[str, np.ndarray]]:
    """Overlapping windows of ``seq_len`` tokens, ``stride`` apart, that score every token of
    ``token_ids`` (int ``[N]``) exactly once, each with at least ``seq_len - stride`` tokens of
    context (the first window scores all of its targets, every later one its last ``stride``).
    Each window: ``inputs`` / ``targets`` int32 [1, seq_len], ``mask`` float32 [1, seq_len]
    (padded and masked past the end). For models without a carried state (evaluate every
    window from a fresh state: ``stream_nll(..., reset=True)``)."""
    if not 0 < stride <= seq_len:
        raise ValueError(f"need 0 < stride <= seq_len, got stride {stride}, seq_len {seq_len}")
    token_ids = np.asarray(token_ids)
    if token_ids.ndim != 1 or token_ids.size == 0:
        raise ValueError(f"token_ids must be a non-empty 1-D stream, got shape {token_ids.shape}")
    stream = np.concatenate([np.asarray([eos_id], np.int32), token_ids.astype(np.int32),
                             np.full(seq_len, pad_id, np.int32)])
    windows, start, scored = [], 0, 0    # targets [0, scored) are counted already
    while scored < token_ids.size:
        mask = np.zeros(seq_len, np.float32)
        mask[scored - start:min(seq_len, token_ids.size - start)] = 1.0
        windows.append({"inputs": stream[None, start:start + seq_len],
                        "targets": stream[None, start + 1:start + seq_len + 1],
                        "mask": mask[None]})
        scored = min(start + seq_len, token_ids.size)
        start += stride
    return windows


def stream_nll(
    eval_step: Callable[[Any, Mapping[str, Any], Any], tuple[Any, dict[str, Any]]],
    params: Params,
    windows: Iterable[Mapping[str, np.ndarray]],
    carry: Any,
    to_device: Callable[[Mapping[str, np.ndarray]], Any] = lambda batch: batch,
    reset: bool = False,
) -> tuple[float, float]:
    """``(total NLL, target count)`` over consecutive ``windows``, carrying the state from one
    window into the next (start from ``carry``, e.g. ``model.initial_state(1)``), or with
    ``reset`` starting every window from ``carry`` (overlapping ``sliding_windows``). The
    per-window float32 sums are added in float64 on the host."""
    sums = []
    start = carry
    for batch in windows:
        carry, metrics = eval_step(params, to_device(batch), start if reset else carry)
        sums.append((metrics["loss_sum"], metrics["tokens"]))
    if not sums:
        raise ValueError("no windows to evaluate")
    totals = np.asarray(jax.device_get(sums), np.float64).sum(axis=0)
    return float(totals[0]), float(totals[1])


def stream_perplexity(eval_step: Callable, model: nn.Module, params: Params, token_ids: np.ndarray,
                      windows: Iterable[Mapping[str, np.ndarray]],
                      reset: bool = False) -> dict[str, float]:
    """``{"ppl", "nll", "tokens"}`` of ``params`` over the stream ``token_ids`` cut into
    ``windows`` (``stream_windows``, or ``sliding_windows`` with ``reset``), on this process's
    first device (every process scores the whole stream itself, on its own copy of
    ``params``)."""
    device = jax.local_devices()[0]
    nll, count = stream_nll(eval_step, parallel.local_copy(params), windows,
                            model.initial_state(1), lambda batch: jax.device_put(batch, device),
                            reset=reset)
    if count != len(token_ids):
        raise RuntimeError(f"scored {count} tokens, expected {len(token_ids)}")
    return {"ppl": perplexity(nll, count), "nll": nll, "tokens": count}


def unigram_perplexity(train_ids: np.ndarray, eval_ids: np.ndarray, vocab_size: int) -> float:
    """Perplexity on ``eval_ids`` of the maximum-likelihood unigram model of ``train_ids``
    (no smoothing: ``inf`` if an evaluated token never occurs in training)."""
    counts = np.bincount(np.asarray(train_ids), minlength=vocab_size).astype(np.float64)
    with np.errstate(divide="ignore"):
        log_probs = np.log(counts / counts.sum())
    mean_nll = -log_probs[np.asarray(eval_ids)].mean()
    return math.exp(mean_nll) if mean_nll < 709.0 else math.inf


def lm_optimizer(name: str, learning_rate: float, *, clip_norm: float | None = None,
                 weight_decay: float = 0.0, policy: Policy | str = "float32",
                 schedule: str = "held", warmup_steps: int = 0, total_steps: int = 1,
                 decay_fraction: float = 0.2,
                 ) -> tuple[optax.GradientTransformation, LearningRate]:
    """``(optimizer, learning_rate)``: gradient clipping by global norm, then ``"sgd"`` or
    ``"adam"`` (AdamW when ``weight_decay`` > 0); dynamic loss scaling when ``policy`` needs
    it. ``learning_rate(train_state)`` is the rate of the last step.

    ``schedule="held"``: the learning rate is held in the state, for the recipe to change
    between epochs (``textkit.training.optim.with_learning_rate``: plateau or per-epoch decay).
    ``"budget"``: linear warm-up over ``warmup_steps``, constant, then linear decay to 0 over
    the last ``decay_fraction`` of ``total_steps``, which ``fit`` keeps equal to the end of the
    run (the epochs, or the steps a time budget allows).
    """
    if name not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {name!r}")
    if schedule == "budget":
        links = [optax.scale_by_adam()] if name == "adam" else []
        if weight_decay:                       # decoupled after Adam (AdamW), L2 for SGD
            links.append(optax.add_decayed_weights(weight_decay))
        inner = optax.chain(*links, scale_by_budget_schedule(
            learning_rate, warmup_steps, total_steps, decay_fraction))
    elif schedule != "held":
        raise ValueError(f"schedule must be 'held' or 'budget', got {schedule!r}")
    elif name == "sgd":
        inner = optax.inject_hyperparams(optax.sgd)(learning_rate=learning_rate)
        if weight_decay:
            inner = optax.chain(optax.add_decayed_weights(weight_decay), inner)
    else:
        inner = optax.inject_hyperparams(optax.adamw)(learning_rate=learning_rate,
                                                      weight_decay=weight_decay)
    if clip_norm is not None:
        if clip_norm <= 0:
            raise ValueError(f"clip_norm must be > 0 or None, got {clip_norm}")
        inner = optax.chain(clip_by_global_norm(clip_norm), inner)
    return with_loss_scaling(inner, policy), lambda state: learning_rate_of(state.opt_state)


def next_learning_rate(learning_rate: float, *, epoch: int, improved: bool, factor: float,
                       decay_on: str = "plateau", decay_start: int = 1) -> float:
    """The learning rate for the epoch after ``epoch`` (1-based).

    ``decay_on="plateau"``: multiply by ``factor`` when the validation perplexity of ``epoch``
    did not improve on the best so far (AWD-LSTM's SGD divides by 4). ``"epoch"``: multiply by
    ``factor`` after every epoch from ``decay_start`` on (Zaremba et al.: 0.5 from epoch 4
    small, 0.8 from epoch 6 medium). Nothing changes before ``decay_start`` in either mode.
    """
    if not 0.0 < factor <= 1.0:
        raise ValueError(f"decay factor must be in (0, 1], got {factor}")
    if decay_on not in ("plateau", "epoch"):
        raise ValueError(f"decay_on must be 'plateau' or 'epoch', got {decay_on!r}")
    if epoch < decay_start:
        return learning_rate
    if decay_on == "epoch" or not improved:
        return learning_rate * factor
    return learning_rate


# ------------------------------------------------------------------------------------ the task
@dataclasses.dataclass(frozen=True)
class LanguageModelConfig(TaskConfig):
    """A language-modelling run (``examples/language_model/train.py``). Each field is the
    recipe flag of the same name (``clip_norm`` is ``--clip-norm``, ``precision`` is
    ``--precision``). ``eval_bptt`` left unset is ``bptt``."""

    model: str = flag("lstm_lm_tiny", "a language-model preset (textkit.models.list_models"
                      "('language_model'))", group="model")
    toy_sentences: int = flag(20000, "training sentences of the toy corpus (valid / test get "
                              "a tenth each)", group="data")
    batch_size: int = flag(20, "global rows of the training windows", group="data")
    bptt: int = flag(35, "training window length (tokens)", group="data")
    eval_bptt: int | None = flag(None, "evaluation window (batch size 1, state carried; "
                                 "default --bptt)", group="evaluation")
    eval_stride: int | None = flag(
        None, "sliding-window evaluation: windows of --eval-bptt tokens this many apart, each "
        "token scored once with >= eval-bptt - stride tokens of context and no carried state "
        "(for the Transformer LM)", group="evaluation")
    optimizer: str = flag("sgd", "optimizer", group="training", choices=("sgd", "adam"))
    lr: float = flag(20.0, "learning rate for the per-token mean loss (Adam: ~1e-3)",
                     group="training")
    lr_decay: float = flag(0.25, "learning-rate decay factor", group="training")
    decay_on: str = flag("plateau", "plateau: decay when valid ppl does not improve; epoch: "
                         "every epoch; budget: warm-up, constant, then linear decay reaching 0 "
                         "exactly at the end of the run", group="training",
                         choices=("plateau", "epoch", "budget"))
    decay_start: int = flag(1, "first epoch after which the learning rate may decay",
                            group="training")
    warmup_steps: int = flag(0, "budget schedule warm-up steps", group="training")
    decay_fraction: float = flag(0.2, "budget schedule: the final fraction of the steps that "
                                 "decays", group="training")
    weight_decay: float = flag(0.0, "weight decay (AdamW, or L2 for SGD)", group="training")
    clip_norm: float = flag(0.25, "clip gradients of the per-token mean loss to this global "
                            "norm (0: off)", group="training")
    runs_name = "lm"
    fit: FitConfig = FitConfig(epochs=5, eval_each_epoch=True)

    tiny: ClassVar[Mapping[str, Any]] = {"toy_sentences": 100, "batch_size": 4, "bptt": 8}

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "eval_bptt", self.eval_bptt or self.bptt)


@register_task
class LanguageModelTask(Task):
    """Word-level language modelling with truncated BPTT: the vocabulary of the training
    words, windows that carry the recurrent state through the jitted step, perplexity over
    every token of a stream (``evaluate`` -> ``{"ppl", "nll", "tokens"}``)."""

    name = "language_model"
    config_class = LanguageModelConfig
    eval_metric = "ppl"
    eval_mode = "min"
    config: LanguageModelConfig

    def __init__(self, config: LanguageModelConfig, run: RunDir,
                 log: Callable[[str], None] | None = None):
        super().__init__(config, run, log)
        parallel.per_process(config.batch_size, "--batch-size")
        self.vocab: Vocab | None = None
        self.unigram_test_ppl: float | None = None
        self._eval_steps: dict[int, CompiledStep] = {}
        self._ids: dict[int, np.ndarray] = {}

    def read_split(self, split: str) -> LanguageModelCorpus:
        config = self.config
        if config.dataset == "toy":
            sizes = {"train": config.toy_sentences, "valid": max(config.toy_sentences // 10, 1),
                     "test": max(config.toy_sentences // 10, 1)}
            # generated into the run's folder (or --data-dir), never a temporary folder left
            folder = Path(config.data_dir) if config.data_dir else self.run.root / "toy_data"
            path = write_toy_lm_corpus(folder, seed=config.seed, sizes=sizes)[split]
            return LanguageModelCorpus(path)
        segment = get_dataset_info(config.dataset).splits[split]
        return get_dataset(config.dataset, segment, root=config.data_dir,
                           progress=parallel.is_main_process())

    def prepare(self, data: Mapping[str, LanguageModelCorpus]) -> None:
        """The vocabulary of the training words (saved as ``vocab.json``); logs the token
        counts and the unigram baseline's test perplexity."""
        self.vocab = build_vocab(data["train"])
        ids = {split: self.token_ids(corpus) for split, corpus in data.items()}
        message = (f"vocabulary: {len(self.vocab) - 1:,} words (incl. <unk>, <eos>) + <pad>; "
                   "tokens " + ", ".join(f"{s} {len(v):,}" for s, v in ids.items()))
        if "test" in ids:
            unigram = unigram_perplexity(ids["train"], ids["test"], len(self.vocab))
            self.unigram_test_ppl = unigram
            message += f"; unigram baseline (ML on train): test perplexity {unigram:.1f}"
        self.log(message)
        if self.run.main_process:
            self.vocab.save(self.run.root / "vocab.json")

    def token_ids(self, corpus: LanguageModelCorpus) -> np.ndarray:
        """The corpus as one stream of vocabulary ids (computed once per corpus)."""
        if id(corpus) not in self._ids:
            self._ids[id(corpus)] = corpus.token_ids(self.vocab)
        return self._ids[id(corpus)]

    def make_loader(self, data: LanguageModelCorpus, *, train: bool) -> BPTTBatches:
        """Training windows: ``batch_size`` rows of ``bptt`` tokens (evaluation streams its
        own windows, see ``evaluate``)."""
        return BPTTBatches(self.token_ids(data), self.config.batch_size, self.config.bptt,
                           last_batch="keep", pad_id=self.vocab.pad_id)

    def build_model(self) -> nn.Module:
        config = self.config
        return lm_preset(config.model, config.model_overrides, self.vocab, config.precision)

    def init_params(self, model: nn.Module, rng: jax.Array) -> Params:
        """``model.init`` on a [1, 8] window of ``<eos>``."""
        return model.init(rng, jnp.full((1, 8), self.vocab.eos_id, jnp.int32))["params"]

    def make_loss(self, model: nn.Module) -> LossFn:
        return lm_loss_fn(model, (self.vocab.pad_id,))

    def make_train_step(self, model: nn.Module, tx: optax.GradientTransformation,
                        **step_options: Any) -> CompiledStep:
        """``train_step(state, batch, carry) -> (state, carry, metrics)``."""
        return lm_train_step(model, tx, excluded_ids=(self.vocab.pad_id,), **step_options)

    def initial_carry(self, model: nn.Module) -> Callable[[], Any]:
        return lambda: model.initial_state(self.config.batch_size)

    def optimizer(self, total_steps: int) -> tuple[optax.GradientTransformation, LearningRate]:
        config = self.config
        return lm_optimizer(config.optimizer, config.lr, clip_norm=config.clip_norm or None,
                            weight_decay=config.weight_decay, policy=config.precision,
                            schedule="budget" if config.decay_on == "budget" else "held",
                            warmup_steps=config.warmup_steps, total_steps=total_steps,
                            decay_fraction=config.decay_fraction)

    def decay_learning_rate(self, state: TrainState, record: dict[str, Any],
                            history: list[dict[str, Any]]) -> TrainState:
        """``fit``'s ``on_epoch_end`` for the held schedules: the next epoch's learning rate
        from the validation perplexity (``next_learning_rate``), recorded as ``lr`` /
        ``next_lr``."""
        config = self.config
        lr = learning_rate_of(state.opt_state)
        best = min((h["valid_ppl"] for h in history), default=float("inf"))
        new_lr = next_learning_rate(lr, epoch=record["epoch"], factor=config.lr_decay,
                                    improved=record["valid_ppl"] < best,
                                    decay_on=config.decay_on, decay_start=config.decay_start)
        record.update(lr=lr, next_lr=new_lr)
        return state.replace(opt_state=with_learning_rate(state.opt_state, new_lr))

    def evaluate(self, model: nn.Module, params: Params,
                 data: LanguageModelCorpus) -> dict[str, float]:
        """Perplexity over every token of ``data`` (``stream_windows``, or ``sliding_windows``
        with ``eval_stride``), on this process's first device."""
        config, vocab = self.config, self.vocab
        if id(model) not in self._eval_steps:
            self._eval_steps[id(model)] = lm_eval_step(model, excluded_ids=(vocab.pad_id,))
        ids = self.token_ids(data)
        if config.eval_stride:
            windows = sliding_windows(ids, config.eval_bptt, config.eval_stride, vocab.eos_id,
                                      vocab.pad_id)
        else:
            windows = stream_windows(ids, config.eval_bptt, vocab.eos_id, vocab.pad_id)
        return stream_perplexity(self._eval_steps[id(model)], model, params, ids, windows,
                                 reset=bool(config.eval_stride))
