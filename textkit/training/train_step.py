"""A generic, jit-compiled train step and evaluation step.

The user supplies ``loss_fn(params, batch, rng) -> (loss_sum, (weight_sum, aux))`` where
``loss_sum`` and ``weight_sum`` are float32 scalars (see ``textkit.training.cross_entropy``) and
``aux`` is a dict of extra scalar metrics (or None). ``rng`` is a PRNG key during training and
None during evaluation, which ``loss_fn`` should read as "run deterministically".

The train step minimises ``loss_sum / weight_sum`` (per-token mean), multiplied by
``loss_scale_of(opt_state)`` so that a ``dynamic_loss_scale`` / ``static_loss_scale`` wrapper in
the optimizer receives scaled gradients (without such a wrapper the scale is 1). Gradient
clipping, weight decay and schedules belong in the optimizer chain.

A state with a ``frozen`` part (LoRA's base model, ``create_train_state(..., frozen=...)``)
calls ``loss_fn((params, frozen), batch, rng)``: the gradient is taken with respect to
``params`` only, the optimizer sees ``params`` only (so the frozen leaves get no optimizer
state), and ``frozen`` leaves the step as it came, bit for bit (any dtype: an int8 base too).
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable, Mapping, Sequence
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
    ``frozen``: parameters the loss reads but training never changes (module docstring), or
    None.
    """

    step: jax.Array          # int32 []
    params: Any
    opt_state: optax.OptState
    rng: jax.Array           # uint32 key data, e.g. [2]
    frozen: Any = None


def create_train_state(
    params: Any, optimizer: optax.GradientTransformation, rng: jax.Array, *,
    frozen: Any = None
) -> TrainState:
    """Initial state: step 0, ``optimizer.init(params)``, the key data of ``rng`` and the
    ``frozen`` parameters (no optimizer state; None: every parameter trains)."""
    if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
        rng = jax.random.key_data(rng)
    return TrainState(
        step=jnp.zeros([], jnp.int32),
        params=params,
        opt_state=optimizer.init(params),
        rng=jnp.asarray(rng),
        frozen=frozen,
    )


def with_frozen(loss_fn: Callable, frozen: Any) -> Callable:
    """``loss_fn`` of the trained params alone: ``loss_fn((params, frozen), ...)`` when
    ``frozen`` is not None (a state's frozen part), else ``loss_fn`` itself."""
    if frozen is None:
        return loss_fn
    return lambda params, *args: loss_fn((params, frozen), *args)


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

    def __init__(self, fn: Callable, *, in_shardings: Any = None, out_shardings: Any = None):
        self.num_traces = 0
        kwargs: dict[str, Any] = {}
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

    def lower(self, *args: Any) -> jax.stages.Lowered:
        """Ahead-of-time lowering, as ``jax.jit(f).lower``: ``step.lower(state, batch).compile()``
        is the program for those shapes, compiled without running it."""
        return self._jitted.lower(*args)


class TrainStep:
    """``train_step(state, batch[, carry])`` as two ``jax.jit`` programs: the gradients, compiled
    once per batch shape, then the update, compiled once (it sees only params-shaped arrays), so
    a new bucket shape compiles the model's forward and backward but never the optimizer.
    ``num_traces`` counts the gradient programs (one per distinct input shape);
    ``batch_sharding`` is the batch's entry of ``in_shardings`` (None without them), where
    ``fit`` places a prefetched batch."""

    def __init__(self, gradients: Callable, update: Callable, *, carry: bool, donate: bool,
                 in_shardings: Any, out_shardings: Any):
        self._carry = carry
        self.batch_sharding = (in_shardings[1] if isinstance(in_shardings, tuple | list)
                               else in_shardings)     # one sharding applies to every input
        self._gradients = CompiledStep(gradients, in_shardings=in_shardings)
        update_outputs = None if out_shardings is None else (
            (_without_frozen(out_shardings[0]), out_shardings[-1]))   # (state, metrics)
        self._update = jax.jit(update, donate_argnums=(0,) if donate else (), **(
            {} if update_outputs is None else {"out_shardings": update_outputs}))

    @property
    def num_traces(self) -> int:
        return self._gradients.num_traces

    def __call__(self, state: TrainState, batch: Mapping[str, Any], *carry: Any) -> Any:
        return self._finish(self._update, state, self._gradients(state, batch, *carry))

    def _finish(self, update: Callable, state: TrainState, gradients: tuple) -> Any:
        grads, carry, loss_parts = gradients
        # the frozen part never enters the update: not donated, the same arrays after the step
        new_state, metrics = update(_without_frozen(state), grads, *loss_parts)
        new_state = new_state.replace(frozen=state.frozen)
        return (new_state, carry, metrics) if self._carry else (new_state, metrics)

    def precompile(self, state: TrainState, batches: Sequence[Mapping[str, Any]],
                   workers: int | None = None) -> None:
        """Compile the gradient program of every batch shape in ``batches`` now, ``workers``
        (default: the CPU count) at a time, instead of one by one as training first meets them.
        Runs each program once (nothing changes: the gradients are dropped); ``state`` is not
        donated. With several devices the programs (which hold collectives) compile and run one
        after the other."""
        workers = min(len(batches), workers or os.cpu_count() or 1)
        if jax.device_count() > 1:  # programs with collectives run one at a time, in order
            workers = 1
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for done in pool.map(lambda batch: self._gradients(state, batch), batches):
                jax.block_until_ready(done)

    def lower(self, state: TrainState, batch: Mapping[str, Any], *carry: Any) -> _LoweredStep:
        """Ahead-of-time lowering, as ``jax.jit(f).lower``: ``step.lower(state, batch).compile()``
        is the step for those shapes, compiled without running it."""
        gradients = self._gradients.lower(state, batch, *carry)
        grads, _, loss_parts = gradients.out_info
        update = self._update.lower(_without_frozen(state), grads, *loss_parts)
        return _LoweredStep(self, gradients, update)


def _without_frozen(state: Any) -> Any:
    """``state`` (a ``TrainState``, or a pytree of its shardings) with no frozen part."""
    return state.replace(frozen=None) if isinstance(state, TrainState) else state


class _LoweredStep:
    """The two lowered programs of a ``TrainStep``: ``gradients`` (``(state, batch) -> (grads,
    carry, loss parts)``) and ``update`` (``(state, grads, *loss parts) -> (state,
    metrics)``); ``compile()`` gives the step callable."""

    def __init__(self, step: TrainStep, gradients: jax.stages.Lowered,
                 update: jax.stages.Lowered):
        self._step, self.gradients, self.update = step, gradients, update

    def compile(self) -> Callable:
        gradients, update = self.gradients.compile(), self.update.compile()

        def compiled(state: TrainState, batch: Mapping[str, Any], *carry: Any) -> Any:
            return self._step._finish(update, state, gradients(state, batch, *carry))

        return compiled


def _loss_parts(loss_fn: Callable, params: Any, batch: Mapping[str, Any], rng: Any,
                carry: Any, with_carry: bool) -> tuple[jax.Array, jax.Array, Any, Any]:
    """``(loss_sum, weight_sum, aux, new_carry)`` of either loss signature."""
    if with_carry:
        loss_sum, (weight_sum, aux, carry) = loss_fn(params, batch, rng, carry)
    else:
        loss_sum, (weight_sum, aux) = loss_fn(params, batch, rng)
    return loss_sum, jnp.asarray(weight_sum, jnp.float32), aux, carry


def _split_micro_batches(batch: Mapping[str, Any], accum_steps: int) -> Mapping[str, Any]:
    """Every leaf ``[N * B, ...]`` -> ``[N, B, ...]``; micro-batch ``i`` takes rows ``i, i + N,
    i + 2N, ...`` so that rows sharded over devices stay where they are."""

    def split(x: jax.Array) -> jax.Array:
        if x.ndim == 0 or x.shape[0] % accum_steps:
            raise ValueError(f"accum_steps={accum_steps} needs every batch array's leading "
                             f"dimension to be a multiple of it; got shape {x.shape}")
        rows = x.shape[0] // accum_steps
        return jnp.swapaxes(x.reshape(rows, accum_steps, *x.shape[1:]), 0, 1)

    return jax.tree_util.tree_map(split, batch)


def _gradients(loss_fn: Callable, with_carry: bool, params: Any, batch: Mapping[str, Any],
               rng: Any, scale: jax.Array, step_carry: Any) -> tuple:
    """``(grads of scale * mean loss, loss_sum, weight_sum, aux, new_carry)`` of one batch."""

    def scaled_mean_loss(params):
        loss_sum, weight_sum, aux, new_carry = _loss_parts(
            loss_fn, params, batch, rng, step_carry, with_carry)
        weight_sum = jax.lax.stop_gradient(weight_sum)
        loss = loss_sum.astype(jnp.float32) / jnp.maximum(weight_sum, 1.0)
        return loss * scale, (loss_sum.astype(jnp.float32), weight_sum, aux, new_carry)

    grad_fn = jax.value_and_grad(scaled_mean_loss, has_aux=True)
    (_, (loss_sum, weight_sum, aux, new_carry)), grads = grad_fn(params)
    return grads, loss_sum, weight_sum, aux, new_carry


def _accumulated_gradients(loss_fn: Callable, accum_steps: int, params: Any,
                           batch: Mapping[str, Any], rng: Any, scale: jax.Array) -> tuple:
    """``_gradients`` of the whole batch from ``accum_steps`` micro-steps in a ``lax.scan``."""
    micro = _split_micro_batches(batch, accum_steps)

    def micro_step(index, micro_batch):
        grads, loss_sum, weight_sum, aux, _ = _gradients(
            loss_fn, False, params, micro_batch, jax.random.fold_in(rng, index), scale, None)
        # each mean-loss gradient weighted by its tokens: the sum over micro-batches divided by
        # all tokens is the gradient of the whole batch's mean loss
        grads = jax.tree_util.tree_map(lambda g: g.astype(jnp.float32) * weight_sum, grads)
        return grads, loss_sum, weight_sum, aux

    def add_micro_step(total, inputs):
        return jax.tree_util.tree_map(jnp.add, total, micro_step(*inputs)), None

    first = jax.tree_util.tree_map(lambda x: x[0], micro)
    zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype),
                                   jax.eval_shape(micro_step, 0, first))
    (grads, loss_sum, weight_sum, aux), _ = jax.lax.scan(
        add_micro_step, zeros, (jnp.arange(accum_steps), micro))
    grads = jax.tree_util.tree_map(
        lambda g, p: (g / jnp.maximum(weight_sum, 1.0)).astype(p.dtype), grads, params)
    return grads, loss_sum, weight_sum, aux, None


def make_train_step(
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    *,
    carry: bool = False,
    accum_steps: int = 1,
    donate: bool = True,
    in_shardings: Any = None,
    out_shardings: Any = None,
) -> TrainStep:
    """Build ``train_step(state, batch) -> (new_state, metrics)``, compiled with ``jax.jit``.

    With ``carry=True`` the step threads a recurrent state (truncated BPTT):
    ``train_step(state, batch, carry) -> (new_state, new_carry, metrics)`` and ``loss_fn`` is
    ``loss_fn(params, batch, rng, carry) -> (loss_sum, (weight_sum, aux, new_carry))``; the new
    carry leaves the step with its gradient stopped.

    With ``accum_steps=N`` > 1 (gradient accumulation) each batch array's leading dimension
    ``N * B`` is cut into N micro-batches of B rows (rows ``i, i+N, ...`` form micro-batch
    ``i``) that run one after the other in a ``lax.scan`` inside the one compiled program; their
    gradients add up, weighted by their share of the tokens, into one update equal to that of
    the whole batch (dropout keys differ per micro-batch). A non-finite gradient in any micro-step
    makes the sum non-finite, so a dynamic loss scale skips the whole update. ``aux`` entries
    must be per-batch sums (they are added up). Not with ``carry``.

    ``metrics``: ``loss`` (float32 per-token mean, unscaled), ``tokens`` (weight sum),
    ``grad_norm`` (global norm of the unscaled gradients; inf/NaN on an overflow step),
    ``loss_scale`` (the scale used for this step) and the entries of ``aux``.
    The step is two programs (``TrainStep``): the gradients, one per batch shape, and the
    update, one in all. The state is donated to the update when ``donate``; ``in_shardings``
    go to the gradient program, ``out_shardings`` (state, then metrics; any carry's is
    inferred) to the update.
    """
    if accum_steps < 1:
        raise ValueError(f"accum_steps must be >= 1, got {accum_steps}")
    if carry and accum_steps > 1:
        raise ValueError("gradient accumulation (accum_steps > 1) does not thread a recurrent "
                         "carry; use a larger batch or shorter BPTT windows")

    def gradients(state: TrainState, batch: Mapping[str, Any], step_carry: Any = None):
        rng = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
        scale = loss_scale_of(state.opt_state)
        loss = with_frozen(loss_fn, state.frozen)
        if accum_steps > 1:
            grads, loss_sum, weight_sum, aux, new_carry = _accumulated_gradients(
                loss, accum_steps, state.params, batch, rng, scale)
        else:
            grads, loss_sum, weight_sum, aux, new_carry = _gradients(
                loss, carry, state.params, batch, rng, scale, step_carry)
        if carry:
            new_carry = jax.lax.stop_gradient(new_carry)
        return grads, new_carry, (loss_sum, weight_sum, aux)

    def update(state: TrainState, grads: Any, loss_sum: jax.Array, weight_sum: jax.Array,
               aux: Any):
        scale = loss_scale_of(state.opt_state)
        loss = loss_sum / jnp.maximum(weight_sum, 1.0)
        grad_norm = optax.tree.norm(
            jax.tree_util.tree_map(lambda g: g.astype(jnp.float32), grads)) / scale
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
        return new_state, _merge_aux({"loss": loss, "tokens": weight_sum,
                                      "grad_norm": grad_norm, "loss_scale": scale}, aux)

    return TrainStep(gradients, update, carry=carry, donate=donate, in_shardings=in_shardings,
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

    return CompiledStep(eval_step, in_shardings=in_shardings,
                        out_shardings=out_shardings)
