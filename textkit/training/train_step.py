"""A generic, jit-compiled train step and evaluation step.

The user supplies ``loss_fn(params, batch, rng) -> (loss_sum, (weight_sum, aux))`` where
``loss_sum`` and ``weight_sum`` are float32 scalars (see ``textkit.training.cross_entropy``) and
``aux`` is a dict of extra scalar metrics (or None). ``rng`` is a PRNG key during training and
None during evaluation, which ``loss_fn`` should read as "run deterministically".

The train step minimises ``loss_sum / weight_sum`` (per-token mean), multiplied by
``loss_scale_of(opt_state)`` so that a ``dynamic_loss_scale`` / ``static_loss_scale`` wrapper in
the optimizer receives scaled gradients (without such a wrapper the scale is 1). Gradient
clipping, weight decay and schedules belong in the optimizer chain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from textkit.precision.loss_scale import loss_scale_of

LossFn = Callable[[Any, Mapping[str, Any], Any], tuple[jax.Array, tuple[jax.Array, Any]]]


@flax.struct.dataclass
class TrainState:
    """Everything a training step reads and writes; a pytree, checkpointed as a whole.

    ``rng`` is raw uint32 key data (checkpoint friendly) and never changes: each step derives
    its key with ``fold_in(rng, step)``, so a resumed run draws exactly the same keys.
    """

    step: jax.Array          # int32 []
    params: Any
    opt_state: optax.OptState
    rng: jax.Array           # uint32 key data, e.g. [2]


def create_train_state(
    params: Any, optimizer: optax.GradientTransformation, rng: jax.Array
) -> TrainState:
    """Initial state: step 0, ``optimizer.init(params)`` and the key data of ``rng``."""
    if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
        rng = jax.random.key_data(rng)
    return TrainState(
        step=jnp.zeros([], jnp.int32),
        params=params,
        opt_state=optimizer.init(params),
        rng=jnp.asarray(rng),
    )


def _merge_aux(metrics: dict[str, jax.Array], aux: Any) -> dict[str, Any]:
    if aux is None:
        return metrics
    if not isinstance(aux, Mapping):
        raise TypeError(f"loss_fn's aux must be a dict of metrics or None, got {type(aux)}")
    clash = set(aux) & set(metrics)
    if clash:
        raise ValueError(f"loss_fn's aux uses reserved metric names {sorted(clash)}")
    return {**metrics, **aux}


class CompiledStep:
    """A ``jax.jit``-compiled step that counts its traces: ``num_traces`` is the number of
    programs XLA compiled for it (one per distinct input shape)."""

    def __init__(self, fn: Callable, *, donate: bool, in_shardings: Any, out_shardings: Any):
        self.num_traces = 0
        kwargs: dict[str, Any] = {}
        if donate:
            kwargs["donate_argnums"] = (0,)
        if in_shardings is not None:
            kwargs["in_shardings"] = in_shardings
        if out_shardings is not None:
            kwargs["out_shardings"] = out_shardings

        def traced(*args: Any) -> Any:
            self.num_traces += 1  # Python side effect: runs once per trace, not per call
            return fn(*args)

        self._jitted = jax.jit(traced, **kwargs)

    def __call__(self, *args: Any) -> Any:
        return self._jitted(*args)


def _loss_parts(loss_fn: Callable, params: Any, batch: Mapping[str, Any], rng: Any,
                carry: Any, with_carry: bool) -> tuple[jax.Array, jax.Array, Any, Any]:
    """``(loss_sum, weight_sum, aux, new_carry)`` of either loss signature."""
    if with_carry:
        loss_sum, (weight_sum, aux, carry) = loss_fn(params, batch, rng, carry)
    else:
        loss_sum, (weight_sum, aux) = loss_fn(params, batch, rng)
    return loss_sum, jnp.asarray(weight_sum, jnp.float32), aux, carry


def make_train_step(
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    *,
    carry: bool = False,
    donate: bool = True,
    in_shardings: Any = None,
    out_shardings: Any = None,
) -> CompiledStep:
    """Build ``train_step(state, batch) -> (new_state, metrics)``, compiled with ``jax.jit``.

    With ``carry=True`` the step threads a recurrent state (truncated BPTT):
    ``train_step(state, batch, carry) -> (new_state, new_carry, metrics)`` and ``loss_fn`` is
    ``loss_fn(params, batch, rng, carry) -> (loss_sum, (weight_sum, aux, new_carry))``; the new
    carry leaves the step with its gradient stopped.

    ``metrics``: ``loss`` (float32 per-token mean, unscaled), ``tokens`` (weight sum),
    ``grad_norm`` (global norm of the unscaled gradients; inf/NaN on an overflow step),
    ``loss_scale`` (the scale used for this step) and the entries of ``aux``.
    The state argument is donated when ``donate``; the shardings are passed to ``jax.jit``.
    """

    def train_step(state: TrainState, batch: Mapping[str, Any], step_carry: Any = None):
        rng = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
        scale = loss_scale_of(state.opt_state)

        def scaled_mean_loss(params):
            loss_sum, weight_sum, aux, new_carry = _loss_parts(
                loss_fn, params, batch, rng, step_carry, carry)
            weight_sum = jax.lax.stop_gradient(weight_sum)
            loss = loss_sum.astype(jnp.float32) / jnp.maximum(weight_sum, 1.0)
            return loss * scale, (loss, weight_sum, aux, new_carry)

        grad_fn = jax.value_and_grad(scaled_mean_loss, has_aux=True)
        (_, (loss, weight_sum, aux, new_carry)), grads = grad_fn(state.params)
        grad_norm = optax.tree.norm(
            jax.tree_util.tree_map(lambda g: g.astype(jnp.float32), grads)) / scale
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
        metrics = _merge_aux({"loss": loss, "tokens": weight_sum, "grad_norm": grad_norm,
                              "loss_scale": scale}, aux)
        if carry:
            return new_state, jax.lax.stop_gradient(new_carry), metrics
        return new_state, metrics

    return CompiledStep(train_step, donate=donate, in_shardings=in_shardings,
                        out_shardings=out_shardings)


def make_eval_step(
    loss_fn: Callable, *, carry: bool = False, in_shardings: Any = None,
    out_shardings: Any = None,
) -> CompiledStep:
    """Build ``eval_step(params, batch) -> {"loss_sum", "tokens", **aux}`` (sums, to accumulate).

    ``loss_fn`` is called with ``rng=None``. With ``carry=True``:
    ``eval_step(params, batch, carry) -> (new_carry, metrics)`` (see ``make_train_step``).
    """

    def eval_step(params: Any, batch: Mapping[str, Any], step_carry: Any = None):
        loss_sum, weight_sum, aux, new_carry = _loss_parts(
            loss_fn, params, batch, None, step_carry, carry)
        metrics = _merge_aux({"loss_sum": loss_sum.astype(jnp.float32), "tokens": weight_sum},
                             aux)
        return (new_carry, metrics) if carry else metrics

    return CompiledStep(eval_step, donate=False, in_shardings=in_shardings,
                        out_shardings=out_shardings)
