"""Learning-rate schedules built from optax primitives."""

from __future__ import annotations

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
