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


def _jit(fn: Callable, donate: bool, in_shardings: Any, out_shardings: Any) -> Callable:
    kwargs: dict[str, Any] = {}
    if donate:
        kwargs["donate_argnums"] = (0,)
    if in_shardings is not None:
        kwargs["in_shardings"] = in_shardings
    if out_shardings is not None:
        kwargs["out_shardings"] = out_shardings
    return jax.jit(fn, **kwargs)


def make_train_step(
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
    *,
    donate: bool = True,
    in_shardings: Any = None,
    out_shardings: Any = None,
) -> Callable[[TrainState, Mapping[str, Any]], tuple[TrainState, dict[str, jax.Array]]]:
    """Build ``train_step(state, batch) -> (new_state, metrics)``, compiled with ``jax.jit``.

    ``metrics``: ``loss`` (float32 per-token mean, unscaled), ``tokens`` (weight sum),
    ``grad_norm`` (global norm of the unscaled gradients; inf/NaN on an overflow step),
    ``loss_scale`` (the scale used for this step) and the entries of ``aux``.
    The state argument is donated when ``donate``; the shardings are passed to ``jax.jit``.
    """

    def train_step(state: TrainState, batch: Mapping[str, Any]):
        rng = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
        scale = loss_scale_of(state.opt_state)

        def scaled_mean_loss(params):
            loss_sum, (weight_sum, aux) = loss_fn(params, batch, rng)
            weight_sum = jax.lax.stop_gradient(jnp.asarray(weight_sum, jnp.float32))
            loss = loss_sum.astype(jnp.float32) / jnp.maximum(weight_sum, 1.0)
            return loss * scale, (loss, weight_sum, aux)

        grad_fn = jax.value_and_grad(scaled_mean_loss, has_aux=True)
        (_, (loss, weight_sum, aux)), grads = grad_fn(state.params)
        grad_norm = optax.tree.norm(
            jax.tree_util.tree_map(lambda g: g.astype(jnp.float32), grads)) / scale
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
        metrics = {"loss": loss, "tokens": weight_sum, "grad_norm": grad_norm,
                   "loss_scale": scale}
        return new_state, _merge_aux(metrics, aux)

    return _jit(train_step, donate, in_shardings, out_shardings)


def make_eval_step(
    loss_fn: LossFn, *, in_shardings: Any = None, out_shardings: Any = None
) -> Callable[[Any, Mapping[str, Any]], dict[str, jax.Array]]:
    """Build ``eval_step(params, batch) -> {"loss_sum", "tokens", **aux}`` (sums, to accumulate).

    ``loss_fn`` is called with ``rng=None``.
    """

    def eval_step(params: Any, batch: Mapping[str, Any]):
        loss_sum, (weight_sum, aux) = loss_fn(params, batch, None)
        metrics = {"loss_sum": loss_sum.astype(jnp.float32),
                   "tokens": jnp.asarray(weight_sum, jnp.float32)}
        return _merge_aux(metrics, aux)

    return _jit(eval_step, False, in_shardings, out_shardings)
