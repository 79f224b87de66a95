"""Language-model glue: BPTT steps that carry the recurrent state, perplexity over a whole stream.

The recurrent state of window ``i`` must flow into window ``i + 1`` *through* the jitted step,
not around it. The generic ``make_train_step`` / ``make_eval_step`` take one batch and return
metrics, so the state rides along: ``lm_loss_fn`` reads the incoming state from
``batch["carry"]`` and returns the outgoing state (gradient stopped: truncated BPTT) in its aux
under ``"carry"``. ``make_lm_train_step`` / ``make_lm_eval_step`` wrap the generic steps so
callers write ``state, carry, metrics = train_step(state, batch, carry)``; models without a
state (the Transformer LM) carry ``None``.

Perplexity is ``exp(total NLL / token count)`` over every token of a stream:
``stream_windows`` prepends one end-of-sentence token as context so that the first token is a
target too, and uses one row with a masked last window, so no token is dropped.

The optimizer built by ``lm_optimizer`` holds its learning rate in its state
(``optax.inject_hyperparams``): ``with_learning_rate`` changes it between epochs (decay on a
validation plateau, as in Zaremba et al. and AWD-LSTM) without recompiling the step.

Data parallel: ``lm_train_step_shardings(mesh, state)`` gives ``make_lm_train_step`` its
shardings. The windows' rows and the recurrent state (rows ``[B, H]``) are split over the mesh's
``data`` axis, and the state comes back split the same way, so it never leaves its devices
between steps; only the scalar metrics are replicated.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from textkit import parallel
from textkit.data.lm import BPTTBatches
from textkit.training.losses import cross_entropy
from textkit.training.train_step import TrainState, make_eval_step, make_train_step

__all__ = [
    "CARRY",
    "ExcludeTokensStep",
    "initial_carry",
    "learning_rate_of",
    "lm_loss_fn",
    "lm_optimizer",
    "lm_train_step_shardings",
    "make_lm_eval_step",
    "make_lm_train_step",
    "next_learning_rate",
    "stream_nll",
    "stream_windows",
    "unigram_perplexity",
    "with_learning_rate",
]

CARRY = "carry"
# Added to the logits of tokens that can never be a target (e.g. <pad>): finite, so that a
# masked position whose target is such a token gives 0 * large instead of 0 * inf = NaN.
_EXCLUDED_LOGIT = -1e9


def initial_carry(model: Any, batch_size: int) -> Any:
    """The model's zero recurrent state for ``batch_size`` rows (per LSTM layer float32
    ``(h, c) [B, H]``), or None for a model without ``initial_state`` (Transformer LM)."""
    initial_state = getattr(model, "initial_state", None)
    return None if initial_state is None else initial_state(batch_size)


def lm_loss_fn(model: Any, excluded_ids: Sequence[int] = ()) -> Callable[..., Any]:
    """``loss_fn(params, batch, rng) -> (nll_sum, (token_count, {"carry": new_state}))``.

    ``batch``: ``inputs`` / ``targets`` int32 ``[B, T]``, ``mask`` float32 ``[B, T]`` and
    ``carry`` (the state entering the window, or None). ``rng`` None runs deterministically
    (no dropout). ``excluded_ids`` (e.g. ``<pad>``) get no probability mass, so the softmax is
    over the tokens a corpus can contain.
    """
    excluded = np.asarray(sorted(set(excluded_ids)), np.int32)

    def loss_fn(params: Any, batch: Mapping[str, Any], rng: jax.Array | None):
        rngs = None if rng is None else {"dropout": rng}
        logits, carry = model.apply({"params": params}, batch["inputs"], batch.get(CARRY),
                                    deterministic=rng is None, rngs=rngs)    # [B, T, V]
        if excluded.size:
            # a constant [V] bias, not a scatter: XLA would constant-fold a [B, T, V] mask
            penalty = np.zeros(logits.shape[-1], np.float32)
            penalty[excluded] = _EXCLUDED_LOGIT
            logits = logits.astype(jnp.float32) + penalty
        nll_sum, count = cross_entropy(logits, batch["targets"], batch["mask"])
        return nll_sum, (count, {CARRY: jax.lax.stop_gradient(carry)})

    return loss_fn


def make_lm_train_step(
    model: Any, optimizer: optax.GradientTransformation, *, excluded_ids: Sequence[int] = (),
    **step_kwargs: Any,
) -> Callable[[TrainState, Mapping[str, Any], Any], tuple[TrainState, Any, dict[str, Any]]]:
    """``train_step(state, batch, carry) -> (state, carry, metrics)``: one jitted program
    (``make_train_step``) with the recurrent state as input and output. ``metrics`` as
    ``make_train_step``'s (``loss`` is the window's mean NLL). ``step_kwargs`` go to
    ``make_train_step`` (donate, shardings)."""
    step = make_train_step(lm_loss_fn(model, excluded_ids), optimizer, **step_kwargs)

    def train_step(state: TrainState, batch: Mapping[str, Any], carry: Any):
        state, metrics = step(state, {**batch, CARRY: carry})
        carry = metrics.pop(CARRY)
        return state, carry, metrics

    return train_step


# the metrics of ``make_train_step`` (replicated scalars); the carry is added by the LM loss
_STEP_METRICS = ("loss", "tokens", "grad_norm", "loss_scale")


def lm_train_step_shardings(mesh: jax.sharding.Mesh, state: TrainState) -> dict[str, Any]:
    """``in_shardings`` / ``out_shardings`` for ``make_lm_train_step`` on ``mesh``: ``state``
    keeps its placement, the batch and the carry are split over ``data`` on the way in and the
    carry stays split on the way out; the scalar metrics are replicated."""
    shardings = parallel.train_step_shardings(mesh, state)
    state_out, replicated = shardings["out_shardings"]
    metrics = {name: replicated for name in _STEP_METRICS}
    metrics[CARRY] = parallel.data_sharding(mesh)
    return {"in_shardings": shardings["in_shardings"], "out_shardings": (state_out, metrics)}


def make_lm_eval_step(
    model: Any, *, excluded_ids: Sequence[int] = (), **step_kwargs: Any,
) -> Callable[[Any, Mapping[str, Any], Any], tuple[Any, dict[str, Any]]]:
    """``eval_step(params, batch, carry) -> (carry, {"loss_sum", "tokens"})``: float32 sums of
    the window's NLL and target count, deterministic (no dropout)."""
    step = make_eval_step(lm_loss_fn(model, excluded_ids), **step_kwargs)

    def eval_step(params: Any, batch: Mapping[str, Any], carry: Any):
        metrics = step(params, {**batch, CARRY: carry})
        carry = metrics.pop(CARRY)
        return carry, metrics

    return eval_step


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


def stream_nll(
    eval_step: Callable[[Any, Mapping[str, Any], Any], tuple[Any, dict[str, Any]]],
    params: Any,
    windows: Iterable[Mapping[str, np.ndarray]],
    carry: Any,
    to_device: Callable[[Mapping[str, np.ndarray]], Any] = lambda batch: batch,
) -> tuple[float, float]:
    """``(total NLL, target count)`` over consecutive ``windows``, carrying the state from one
    window into the next (start from ``carry``, e.g. ``initial_carry``). The per-window float32
    sums are added in float64 on the host. Divide, or pass to ``perplexity``."""
    sums = []
    for batch in windows:
        carry, metrics = eval_step(params, to_device(batch), carry)
        sums.append((metrics["loss_sum"], metrics["tokens"]))
    if not sums:
        raise ValueError("no windows to evaluate")
    totals = np.asarray(jax.device_get(sums), np.float64).sum(axis=0)
    return float(totals[0]), float(totals[1])


def unigram_perplexity(train_ids: np.ndarray, eval_ids: np.ndarray, vocab_size: int) -> float:
    """Perplexity on ``eval_ids`` of the maximum-likelihood unigram model of ``train_ids``
    (no smoothing: ``inf`` if an evaluated token never occurs in training)."""
    counts = np.bincount(np.asarray(train_ids), minlength=vocab_size).astype(np.float64)
    with np.errstate(divide="ignore"):
        log_probs = np.log(counts / counts.sum())
    mean_nll = -log_probs[np.asarray(eval_ids)].mean()
    return math.exp(mean_nll) if mean_nll < 709.0 else math.inf


def lm_optimizer(name: str, learning_rate: float, *, clip_norm: float | None = None,
                 weight_decay: float = 0.0) -> optax.GradientTransformation:
    """Gradient clipping by global norm, then ``"sgd"`` or ``"adam"`` (AdamW when
    ``weight_decay`` > 0) with the learning rate held in the state (see
    ``with_learning_rate``)."""
    if name == "sgd":
        if weight_decay:
            inner = optax.chain(optax.add_decayed_weights(weight_decay),
                                optax.inject_hyperparams(optax.sgd)(learning_rate=learning_rate))
        else:
            inner = optax.inject_hyperparams(optax.sgd)(learning_rate=learning_rate)
    elif name == "adam":
        inner = optax.inject_hyperparams(optax.adamw)(learning_rate=learning_rate,
                                                      weight_decay=weight_decay)
    else:
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {name!r}")
    if clip_norm is None:
        return inner
    if clip_norm <= 0:
        raise ValueError(f"clip_norm must be > 0 or None, got {clip_norm}")
    return optax.chain(optax.clip_by_global_norm(clip_norm), inner)


def _is_injected(node: Any) -> bool:
    return isinstance(node, optax.InjectStatefulHyperparamsState)


def _injected_states(opt_state: optax.OptState) -> list[Any]:
    leaves = jax.tree_util.tree_leaves(opt_state, is_leaf=_is_injected)
    found = [leaf for leaf in leaves if _is_injected(leaf)]
    if not found:
        raise ValueError("the optimizer state holds no optax.inject_hyperparams state with a "
                         "learning_rate; build the optimizer with lm_optimizer")
    return found


def learning_rate_of(opt_state: optax.OptState) -> float:
    """The injected learning rate (the first one found in ``opt_state``)."""
    return float(_injected_states(opt_state)[0].hyperparams["learning_rate"])


def with_learning_rate(opt_state: optax.OptState, learning_rate: float) -> optax.OptState:
    """``opt_state`` with every injected learning rate set to ``learning_rate`` (same dtype and
    shape, so a jitted step taking this state does not recompile)."""
    _injected_states(opt_state)

    def replace(node: Any) -> Any:
        if not _is_injected(node):
            return node
        old = node.hyperparams["learning_rate"]
        new = jnp.asarray(learning_rate, dtype=jnp.asarray(old).dtype)
        return node._replace(hyperparams={**node.hyperparams, "learning_rate": new})

    return jax.tree_util.tree_map(replace, opt_state, is_leaf=_is_injected)


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


@dataclasses.dataclass(frozen=True)
class ExcludeTokensStep:
    """A decoding ``step_fn`` whose log-probs give no mass to ``excluded_ids`` (renormalised),
    matching ``lm_loss_fn(..., excluded_ids)``; hashable, so usable as a static jit argument."""

    step_fn: Callable[[Any, Any, jax.Array], tuple[jax.Array, Any]]
    excluded_ids: tuple[int, ...]

    def __call__(self, params: Any, cache: Any, tokens: jax.Array) -> tuple[jax.Array, Any]:
        log_probs, cache = self.step_fn(params, cache, tokens)                  # [N, V]
        penalty = np.zeros(log_probs.shape[-1], np.float32)
        penalty[list(self.excluded_ids)] = -np.inf
        log_probs = log_probs.astype(jnp.float32) + penalty
        return jax.nn.log_softmax(log_probs, axis=-1), cache
