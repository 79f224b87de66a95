"""Loss scaling as optax ``GradientTransformation`` wrappers.

float16 gradients underflow unless the loss is multiplied by a large factor before
differentiation. The train step multiplies the loss by ``loss_scale_of(opt_state)``; the
wrapper below receives the scaled gradients, divides them by the same scale and hands them to
the wrapped (inner) optimizer::

    optimizer = dynamic_loss_scale(optax.chain(clip_by_global_norm(1.0), optax.adam(lr)))

``dynamic_loss_scale`` skips a step whose gradients hold any inf/NaN: the updates are zero, the
inner optimizer state is left exactly as it was, and the scale is multiplied by
``backoff_factor`` (never below ``min_scale``). After ``growth_interval`` finite steps in a row
the scale is multiplied by ``growth_factor`` (clamped to the largest finite float32). The scale
and the good-step counter are float32 scalars, so the state survives ``jax.jit`` and an Orbax
checkpoint round trip like any other optimizer state.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

_FLOAT32_MAX = float(jnp.finfo(jnp.float32).max)


class DynamicLossScaleState(NamedTuple):
    """State of ``dynamic_loss_scale``: float32 scalars plus the inner optimizer's state."""

    scale: jax.Array        # float32 []
    good_steps: jax.Array   # float32 [], finite steps since the last change of scale
    inner_state: optax.OptState


class StaticLossScaleState(NamedTuple):
    """State of ``static_loss_scale``: the fixed float32 scale plus the inner state."""

    scale: jax.Array        # float32 []
    inner_state: optax.OptState


def _unscale(grads: Any, scale: jax.Array) -> Any:
    """Divide every gradient by ``scale`` in float32 and cast back to the gradient's dtype."""
    return jax.tree_util.tree_map(
        lambda g: (g.astype(jnp.float32) / scale).astype(g.dtype), grads)


def all_finite(tree: Any) -> jax.Array:
    """bool[]: True when every element of every leaf of ``tree`` is finite."""
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        return jnp.asarray(True)
    return jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in leaves]).all()


def dynamic_loss_scale(
    inner: optax.GradientTransformation,
    initial_scale: float = 2.0**15,
    growth_interval: int = 2000,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    min_scale: float = 1.0,
) -> optax.GradientTransformationExtraArgs:
    """Wrap ``inner`` so it receives unscaled gradients and skips non-finite steps.

    Args:
      inner: the optimizer (usually an ``optax.chain``) that sees the unscaled gradients.
      initial_scale: the first loss scale.
      growth_interval: finite steps in a row after which the scale grows.
      growth_factor: factor (> 1) applied on growth.
      backoff_factor: factor (in (0, 1)) applied after a non-finite step.
      min_scale: the scale never backs off below this value.
    Returns:
      A transformation whose state is a ``DynamicLossScaleState``.
    """
    if growth_interval < 1:
        raise ValueError(f"growth_interval must be >= 1, got {growth_interval}")
    if not growth_factor > 1.0:
        raise ValueError(f"growth_factor must be > 1, got {growth_factor}")
    if not 0.0 < backoff_factor < 1.0:
        raise ValueError(f"backoff_factor must be in (0, 1), got {backoff_factor}")
    if not 0.0 < min_scale <= initial_scale:
        raise ValueError(
            f"need 0 < min_scale <= initial_scale, got min_scale={min_scale}, "
            f"initial_scale={initial_scale}")
    inner = optax.with_extra_args_support(inner)

    def init_fn(params: Any) -> DynamicLossScaleState:
        return DynamicLossScaleState(
            scale=jnp.asarray(initial_scale, jnp.float32),
            good_steps=jnp.zeros([], jnp.float32),
            inner_state=inner.init(params),
        )

    def update_fn(updates, state, params=None, **extra_args):
        scale = state.scale.astype(jnp.float32)
        grads = _unscale(updates, scale)
        finite = all_finite(grads)

        # Both branches computed and one selected (no lax.cond): a conditional on a device
        # value can cost XLA:GPU a host round trip per step; the skipped update is zeros.
        updates, inner_state = inner.update(grads, state.inner_state, params, **extra_args)
        keep = lambda new, old: jnp.where(finite, new, old)  # noqa: E731
        new_updates = jax.tree_util.tree_map(lambda u: keep(u, jnp.zeros_like(u)), updates)
        new_inner_state = jax.tree_util.tree_map(keep, inner_state, state.inner_state)

        good_steps = state.good_steps.astype(jnp.float32) + 1.0
        grow = good_steps >= growth_interval
        grown = jnp.minimum(scale * growth_factor, _FLOAT32_MAX)
        finite_scale = jnp.where(grow, grown, scale)
        finite_good = jnp.where(grow, 0.0, good_steps)
        backed_off = jnp.maximum(scale * backoff_factor, min_scale)
        new_state = DynamicLossScaleState(
            scale=jnp.where(finite, finite_scale, backed_off).astype(jnp.float32),
            good_steps=jnp.where(finite, finite_good, 0.0).astype(jnp.float32),
            inner_state=new_inner_state,
        )
        return new_updates, new_state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def static_loss_scale(
    inner: optax.GradientTransformation, scale: float
) -> optax.GradientTransformationExtraArgs:
    """Wrap ``inner`` so it receives gradients divided by a fixed ``scale``.

    Non-finite gradients are passed on unchanged (after unscaling); combine with
    ``optax.apply_if_finite`` if steps should be skipped.
    """
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    inner = optax.with_extra_args_support(inner)

    def init_fn(params: Any) -> StaticLossScaleState:
        return StaticLossScaleState(jnp.asarray(scale, jnp.float32), inner.init(params))

    def update_fn(updates, state, params=None, **extra_args):
        grads = _unscale(updates, state.scale.astype(jnp.float32))
        new_updates, new_inner_state = inner.update(
            grads, state.inner_state, params, **extra_args)
        return new_updates, StaticLossScaleState(state.scale, new_inner_state)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def _is_loss_scale(path: tuple[Any, ...], value: Any) -> bool:
    return getattr(path[-1], "tuple_name", None) in ("DynamicLossScaleState",
                                                      "StaticLossScaleState")


def loss_scale_of(opt_state: optax.OptState) -> jax.Array:
    """float32 []: the loss scale held anywhere in ``opt_state``; 1.0 when there is none.

    Finds the ``scale`` of a ``DynamicLossScaleState`` or ``StaticLossScaleState`` in a
    (possibly chained or nested) optimizer state with ``optax.tree_utils``. Raises
    ``ValueError`` if more than one is found.
    """
    found = optax.tree_utils.tree_get_all_with_path(opt_state, "scale",
                                                    filtering=_is_loss_scale)
    if not found:
        return jnp.ones([], jnp.float32)
    if len(found) > 1:
        raise ValueError(
            f"optimizer state holds {len(found)} loss-scale states; expected at most one")
    return jnp.asarray(found[0][1], jnp.float32)
