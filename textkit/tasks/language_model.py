"""Language modelling as a task: corpora, BPTT steps that carry the recurrent state,
perplexity over a whole stream, the optimizer and its learning-rate decay.

The recurrent state of window ``i`` flows into window ``i + 1`` *through* the jitted step: the
steps take and return it as an explicit argument (``make_train_step(..., carry=True)``), so
``state, carry, metrics = train_step(state, batch, carry)``; models without a state (the
Transformer LM) carry ``None``. ``model.initial_state(batch_size)`` is the zero state.

Perplexity is ``exp(total NLL / token count)`` over every token of a stream:
``stream_windows`` prepends one end-of-sentence token as context so that the first token is a
target too, and uses one row with a masked last window, so no token is dropped.

The optimizer built by ``optimizer`` holds its learning rate in its state
(``optax.inject_hyperparams``): ``textkit.training.optim.with_learning_rate`` changes it between
epochs (decay on a validation plateau, as in Zaremba et al. and AWD-LSTM) without recompiling.

Data parallel: ``train_step_shardings(mesh, state)`` splits the windows' rows and the recurrent
state (rows ``[B, H]``) over the mesh's ``data`` axis, and the state comes back split the same
way, so it never leaves its devices between steps; the metrics are replicated.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from textkit import parallel
from textkit.data import BPTTBatches, LanguageModelCorpus, get_dataset
from textkit.data.toy import write_toy_lm_corpus
from textkit.models import get_model, parse_overrides
from textkit.precision import Policy
from textkit.training import train_step as steps
from textkit.training.losses import cross_entropy
from textkit.training.metrics import perplexity
from textkit.training.optim import with_loss_scaling
from textkit.training.schedules import scale_by_budget_schedule
from textkit.training.train_step import CompiledStep, TrainState
from textkit.vocab import Vocab

__all__ = [
    "DATASETS",
    "build_model",
    "build_vocab",
    "evaluate",
    "init_params",
    "load_corpora",
    "make_loader",
    "make_eval_step",
    "make_loss",
    "make_train_step",
    "next_learning_rate",
    "optimizer",
    "process_rows",
    "sliding_windows",
    "stream_nll",
    "stream_windows",
    "train_step_shardings",
    "unigram_perplexity",
]

DATASETS = ("toy", "ptb", "wikitext2", "wikitext103")
# Added to the logits of tokens that can never be a target (e.g. <pad>): finite, so that a
# masked position whose target is such a token gives 0 * large instead of 0 * inf = NaN.
_EXCLUDED_LOGIT = -1e9


def load_corpora(dataset: str, data_dir: str | None = None, *, toy_sentences: int = 20000,
                 seed: int = 0, log: Callable[[str], None] = print,
                 ) -> dict[str, LanguageModelCorpus]:
    """``{"train", "valid", "test"}`` corpora; every line ends with ``<eos>``. ``toy`` writes a
    generated corpus to ``data_dir`` (default: a new temporary folder). An empty file is an
    error naming it (``LanguageModelCorpus``)."""
    if dataset == "toy":
        sizes = {"train": toy_sentences, "valid": max(toy_sentences // 10, 1),
                 "test": max(toy_sentences // 10, 1)}
        folder = Path(data_dir or tempfile.mkdtemp(prefix="textkit_toy_lm_"))
        paths = write_toy_lm_corpus(folder, seed=seed, sizes=sizes)
        log(f"toy corpus written to {folder} ({sizes})")
        return {segment: LanguageModelCorpus(path) for segment, path in paths.items()}
    return {segment: get_dataset(dataset, segment, root=data_dir,
                                 progress=parallel.is_main_process())
            for segment in ("train", "valid", "test")}


def build_vocab(train: LanguageModelCorpus) -> Vocab:
    """The training words plus ``<pad>`` (no ``<bos>``: LM streams only use ``<eos>``)."""
    return Vocab(train.tokens, bos_token=None)


def build_model(name: str, overrides: str | Iterable[str], vocab: Vocab,
                precision: str = "float32") -> Any:
    """The registry preset ``name`` with ``overrides`` (``"dropout=0.5,..."`` strings, see
    ``textkit.models.parse_overrides``) for ``vocab`` and the precision policy."""
    return get_model(name, **parse_overrides(overrides), vocab_size=len(vocab),
                     pad_id=vocab.pad_id, policy=precision)


def make_loss(model: Any, excluded_ids: Sequence[int] = ()) -> Callable[..., Any]:
    """``loss_fn(params, batch, rng, carry) -> (nll_sum, (token_count, {}, new_carry))``.

    ``batch``: ``inputs`` / ``targets`` int32 ``[B, T]``, ``mask`` float32 ``[B, T]``;
    ``carry`` is the state entering the window (or None). ``rng`` None runs deterministically
    (no dropout). ``excluded_ids`` (e.g. ``<pad>``) get no probability mass, so the softmax is
    over the tokens a corpus can contain.
    """
    excluded = np.asarray(sorted(set(excluded_ids)), np.int32)

    def loss_fn(params: Any, batch: Mapping[str, Any], rng: jax.Array | None, carry: Any):
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


def make_loader(token_ids: np.ndarray, batch_size: int, bptt: int, pad_id: int) -> BPTTBatches:
    """The training windows: ``batch_size`` rows of ``bptt`` tokens, the last one masked."""
    return BPTTBatches(token_ids, batch_size, bptt, last_batch="keep", pad_id=pad_id)


def init_params(model: Any, rng: jax.Array, fill_id: int) -> Any:
    """``model.init`` on a [1, 8] window of ``fill_id``; returns the params pytree."""
    return model.init(rng, jnp.full((1, 8), fill_id, jnp.int32))["params"]


def make_train_step(model: Any, optimizer: optax.GradientTransformation, *,
                    excluded_ids: Sequence[int] = (), **step_kwargs: Any) -> CompiledStep:
    """``train_step(state, batch, carry) -> (state, carry, metrics)``: ``make_train_step`` of
    ``make_loss`` with the carry; ``step_kwargs`` (donate, shardings) go to it."""
    return steps.make_train_step(make_loss(model, excluded_ids), optimizer, carry=True,
                                 **step_kwargs)


def make_eval_step(model: Any, *, excluded_ids: Sequence[int] = (),
                   **step_kwargs: Any) -> CompiledStep:
    """``eval_step(params, batch, carry) -> (carry, {"loss_sum", "tokens"})``: float32 sums of
    the window's NLL and target count, deterministic (no dropout)."""
    return steps.make_eval_step(make_loss(model, excluded_ids), carry=True, **step_kwargs)


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
    params: Any,
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


def evaluate(eval_step: Callable, model: Any, params: Any, token_ids: np.ndarray,
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


def optimizer(name: str, learning_rate: float, *, clip_norm: float | None = None,
              weight_decay: float = 0.0, policy: Policy | str = "float32",
              schedule: str = "held", warmup_steps: int = 0, total_steps: int = 1,
              decay_fraction: float = 0.2) -> optax.GradientTransformation:
    """Gradient clipping by global norm, then ``"sgd"`` or ``"adam"`` (AdamW when
    ``weight_decay`` > 0); dynamic loss scaling when ``policy`` needs it.

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
        inner = optax.chain(optax.clip_by_global_norm(clip_norm), inner)
    return with_loss_scaling(inner, policy)


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
