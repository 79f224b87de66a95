"""Optax-chain helpers shared by every task: learning-rate access, loss scaling, constraints.

* ``learning_rate_of`` / ``with_learning_rate`` read and replace a learning rate held in the
  optimizer state (``optax.inject_hyperparams``) through ``optax.tree_utils``, so a rate can
  change between epochs without recompiling the step that takes the state;
* ``with_loss_scaling(optimizer, policy)``: the one place that decides whether a precision
  policy needs dynamic loss scaling;
* ``freeze(tx, trainable)``: ``tx`` on the trainable leaves only, zero updates and no state for
  the others (frozen embedding tables);
* ``clip_by_global_norm(max_norm)``: optax's clipping as one multiply by a scalar, which
  XLA fuses into the optimizer's moment updates (optax's select writes a clipped copy of every
  gradient first, one more pass over all parameters);
* ``max_norm(limit)``: Kim's (2014) l2 constraint on the output layer as the last link;
* ``ema(decay)``: an exponential moving average of the parameters kept in the optimizer state
  (so it lives in the train state and its checkpoints); ``ema_params_of`` reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from textkit.precision import Policy, dynamic_loss_scale

__all__ = ["EmaState", "clip_by_global_norm", "ema", "ema_params_of", "freeze",
           "learning_rate_of", "max_norm", "with_learning_rate", "with_loss_scaling"]


def learning_rate_of(opt_state: optax.OptState) -> float:
    """The ``learning_rate`` injected into ``opt_state`` (``optax.inject_hyperparams``)."""
    value = optax.tree_utils.tree_get(opt_state, "learning_rate", filtering=_is_value)
    if value is None:
        raise ValueError("the optimizer state holds no learning_rate: build the optimizer with "
                         "optax.inject_hyperparams (e.g. "
                         "textkit.tasks.language_model.lm_optimizer)")
    return float(value)


def with_learning_rate(opt_state: optax.OptState, learning_rate: float) -> optax.OptState:
    """``opt_state`` with its injected learning rate set to ``learning_rate`` (same dtype and
    shape, so a jitted step taking this state does not recompile)."""
    old = optax.tree_utils.tree_get(opt_state, "learning_rate", filtering=_is_value)
    if old is None:
        raise ValueError("the optimizer state holds no learning_rate to replace")
    new = jnp.asarray(learning_rate, dtype=jnp.asarray(old).dtype)
    return optax.tree_utils.tree_set(opt_state, _is_value, learning_rate=new)


def _is_value(path: Any, value: Any) -> bool:
    """A number or array (not the state of a schedule stored under the same name)."""
    return isinstance(value, jax.Array | float | int) or hasattr(value, "dtype")


def with_loss_scaling(optimizer: optax.GradientTransformation,
                      policy: Policy | str) -> optax.GradientTransformation:
    """``optimizer`` wrapped in ``dynamic_loss_scale`` when ``policy`` computes in float16."""
    if Policy.parse(policy).needs_loss_scaling:
        return dynamic_loss_scale(optimizer)
    return optimizer


def freeze(tx: optax.GradientTransformation,
           trainable: Callable[[Any], Any]) -> optax.GradientTransformation:
    """``tx`` on the leaves where ``trainable(params)`` (a pytree of bools like ``params``) is
    True; the others get zero updates and no optimizer state."""

    def labels(params: Any) -> Any:
        return jax.tree.map(lambda keep: "train" if keep else "frozen", trainable(params))

    return optax.multi_transform({"train": tx, "frozen": optax.set_to_zero()}, labels)


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformation:
    """Scale all updates by ``min(1, max_norm / global_norm(updates))``: optax's
    ``clip_by_global_norm`` (equal within float rounding; a non-finite norm gives non-finite
    updates, as there), written as a scalar multiply so that XLA fuses it into the next link's
    elementwise pass instead of writing a clipped copy of every gradient."""
    if max_norm <= 0:
        raise ValueError(f"clip_by_global_norm needs max_norm > 0, got {max_norm}")

    def update_fn(updates: Any, state: optax.EmptyState, params: Any = None):
        del params
        norm = optax.global_norm(updates)
        scale = jnp.minimum(1.0, max_norm / norm)          # inf (then 1) for a zero norm
        return jax.tree_util.tree_map(lambda u: u * scale.astype(u.dtype), updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def max_norm(limit: float, layer: str = "output") -> optax.GradientTransformation:
    """Kim's l2 constraint as the last link of an optax chain: after ``optax.apply_updates``
    every column of ``params[layer]["kernel"]`` [features, classes] (one output unit's weight
    vector) has l2 norm at most ``limit``; longer ones are rescaled to ``limit``. Every other
    leaf's update passes through unchanged."""
    if limit <= 0:
        raise ValueError(f"max-norm limit must be > 0, got {limit}")

    def project(updates: Any, params: Any) -> Any:
        if params is None:
            raise ValueError("max_norm needs params: call tx.update(grads, state, params)")

        def constrain(path, update, param):
            names = [getattr(k, "key", None) for k in path]
            if names[-2:] != [layer, "kernel"]:
                return update
            stepped = param.astype(jnp.float32) + update.astype(jnp.float32)   # [F, C]
            norms = jnp.linalg.norm(stepped, axis=0, keepdims=True)            # [1, C]
            scale = jnp.minimum(1.0, limit / jnp.maximum(norms, 1e-12))
            return (stepped * scale - param.astype(jnp.float32)).astype(update.dtype)

        return jax.tree_util.tree_map_with_path(constrain, updates, params)

    return optax.stateless(project)


class EmaState(NamedTuple):
    """State of ``ema``: the update count and the averaged parameters (float32)."""

    count: jax.Array   # int32 []
    ema: Any


def ema(decay: float) -> optax.GradientTransformation:
    """The last link of a chain: updates pass through unchanged, and the state keeps
    ``ema = d * ema + (1 - d) * (params + updates)`` with ``d = min(decay, (1 + t) / (10 + t))``
    (a short average early on, ``decay`` later)."""
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"EMA decay must be in [0, 1), got {decay}")

    def init_fn(params: Any) -> EmaState:
        # a copy, never the params' own buffers (a donating step would donate them twice)
        return EmaState(jnp.zeros([], jnp.int32), jax.tree_util.tree_map(
            lambda p: jnp.array(p, dtype=jnp.float32, copy=True), params))

    def update_fn(updates: Any, state: EmaState, params: Any = None):
        if params is None:
            raise ValueError("ema needs params: call tx.update(grads, state, params)")
        step = state.count.astype(jnp.float32)
        d = jnp.minimum(decay, (1.0 + step) / (10.0 + step))
        new = jax.tree_util.tree_map(
            lambda avg, p, u: d * avg + (1.0 - d) * (p.astype(jnp.float32)
                                                     + u.astype(jnp.float32)),
            state.ema, params, updates)
        return updates, EmaState(state.count + 1, new)

    return optax.GradientTransformation(init_fn, update_fn)


def ema_params_of(state: Any) -> Any:
    """The EMA of ``state.params`` kept by ``ema`` in ``state.opt_state``, cast to the params'
    dtypes; ``state.params`` when the optimizer keeps no EMA."""
    found = optax.tree_utils.tree_get(state.opt_state, "ema")
    if found is None:
        return state.params
    return jax.tree_util.tree_map(lambda avg, p: avg.astype(p.dtype), found, state.params)
