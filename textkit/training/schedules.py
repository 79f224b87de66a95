"""Learning-rate schedules: inverse square root (optax primitives) and the budget-aware
warm-up-stable-decay whose end can move while training runs (every recipe's schedule under
``--time-budget-min``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax


def inverse_sqrt_schedule(
    peak_lr: float, warmup_steps: int, init_lr: float = 0.0
) -> optax.Schedule:
    """Linear warm-up from ``init_lr`` to ``peak_lr``, then ``peak_lr * sqrt(warmup / step)``.

    The Transformer / fairseq ``inverse_sqrt`` schedule; ``step`` is the optimizer's update count
    (0-based), so the peak is reached at ``step == warmup_steps``.
    """
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be >= 1, got {warmup_steps}")
    warmup = optax.linear_schedule(init_lr, peak_lr, warmup_steps)

    def decay(steps_after_warmup):
        step = jnp.asarray(steps_after_warmup, jnp.float32) + warmup_steps
        return peak_lr * jnp.sqrt(warmup_steps / step)

    return optax.join_schedules([warmup, decay], [warmup_steps])


class BudgetScheduleState(NamedTuple):
    """State of ``scale_by_budget_schedule``: the update count, the step at which the rate
    reaches zero (float32, set by ``fit`` as the budget is converted into steps) and the rate
    of the last update (read by ``textkit.training.learning_rate_of``)."""

    count: jax.Array          # int32 []
    total_steps: jax.Array    # float32 []
    learning_rate: jax.Array  # float32 []


def budget_learning_rate(count: jax.Array, total_steps: jax.Array, peak_lr: float,
                         warmup_steps: int, decay_fraction: float, *,
                         warmup_fraction: float = 0.0, power: float = 1.0) -> jax.Array:
    """float32 []: warm-up-stable-decay. The rate rises linearly to ``peak_lr`` over ``W =
    warmup_steps + warmup_fraction * total_steps`` steps (none: the first step at the peak; at
    most half the run, so a run cut short, e.g. by a time budget, still reaches the peak),
    stays there, then falls to 0 at
    ``total_steps`` over its last ``decay_fraction`` (never starting before the warm-up ends:
    ``decay_fraction=1`` decays from the peak at ``W`` to 0), linearly, or as ``power`` of the
    remaining fraction. Every length follows ``total_steps``, which ``fit`` moves to where the
    run ends (a time budget included), so warm-up and decay both fit the run."""
    step = jnp.asarray(count, jnp.float32)
    total = jnp.maximum(jnp.asarray(total_steps, jnp.float32), 1.0)
    warmup = jnp.minimum(warmup_steps + warmup_fraction * total, 0.5 * total)
    warm = jnp.where(warmup > 0, jnp.minimum(1.0, step / jnp.maximum(warmup, 1e-6)), 1.0)
    length = jnp.maximum(jnp.minimum(decay_fraction * total, total - warmup), 1.0)
    decay = jnp.clip((total - step) / length, 0.0, 1.0) ** power
    return peak_lr * jnp.minimum(warm, decay)


def scale_by_budget_schedule(peak_lr: float, warmup_steps: int, total_steps: int,
                             decay_fraction: float = 0.2, *, warmup_fraction: float = 0.0,
                             power: float = 1.0) -> optax.GradientTransformation:
    """Multiply updates by ``-budget_learning_rate(...)`` (use it as the last link, after e.g.
    ``optax.scale_by_adam``): the one schedule of every recipe that runs under a time budget.
    ``total_steps`` is the initial estimate; the value in the state can be replaced between
    steps (``optax.tree_utils.tree_set(opt_state, total_steps=...)``, which ``fit`` does to
    end the decay exactly when a time budget runs out) without recompiling."""
    if not 0.0 < decay_fraction <= 1.0:
        raise ValueError(f"decay_fraction must be in (0, 1], got {decay_fraction}")
    if total_steps < 1 or warmup_steps < 0 or not 0.0 <= warmup_fraction < 1.0 or power <= 0:
        raise ValueError(f"need total_steps >= 1, warmup_steps >= 0, 0 <= warmup_fraction < 1 "
                         f"and power > 0, got {total_steps}, {warmup_steps}, {warmup_fraction}, "
                         f"{power}")

    def init_fn(params: Any) -> BudgetScheduleState:
        del params
        return BudgetScheduleState(jnp.zeros([], jnp.int32), jnp.float32(total_steps),
                                   jnp.zeros([], jnp.float32))

    def update_fn(updates: Any, state: BudgetScheduleState, params: Any = None):
        del params
        lr = budget_learning_rate(state.count, state.total_steps, peak_lr, warmup_steps,
                                  decay_fraction, warmup_fraction=warmup_fraction, power=power)
        updates = jax.tree_util.tree_map(lambda u: (-lr * u).astype(u.dtype), updates)
        return updates, BudgetScheduleState(state.count + 1, state.total_steps, lr)

    return optax.GradientTransformation(init_fn, update_fn)
