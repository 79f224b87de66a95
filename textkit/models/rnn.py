"""LSTM building blocks: a scanned LSTM layer, a bidirectional layer, padded-row reversal.

Speed layout: the input-to-hidden projection of all time steps is one large matmul done before
the time loop (``[T,B,D] @ [D,4H] -> [T,B,4H]``); the ``jax.lax.scan`` body only does the small
``h @ W_hh`` and the gate non-linearities. Matmuls go through ``kernels.mixed_einsum`` (inputs in
the policy's compute dtype, float32 accumulation, compute-dtype backward); the cell and hidden
carry stay float32.

Padding: a boolean ``mask [B,T]`` (True at real tokens, right padding) freezes the carry at padded
steps and zeroes their outputs, so the final carry is the state after each row's last real token.
``reverse_padded`` reverses only the first ``length`` steps of each row, so a backward LSTM reads
each sequence from its own last real token, never from padding.

Gate layout in the fused ``[.., 4H]`` matrices is ``(input, forget, cell, output)``.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from textkit.models.kernels import mixed_einsum
from textkit.models.layers import dropout
from textkit.precision import Policy

LSTMState = tuple[jax.Array, jax.Array]
"""``(h, c)``, both float32 ``[B,H]``."""


def reverse_padded(x: jax.Array, lengths: jax.Array) -> jax.Array:
    """Reverse the first ``lengths[b]`` steps of each row of ``x [B,T,...]``; padding stays put.

    The permutation is its own inverse: applying it twice gives ``x`` back.
    """
    steps = jnp.arange(x.shape[1])[None, :]                        # [1,T]
    lengths = lengths[:, None]                                     # [B,1]
    index = jnp.where(steps < lengths, lengths - 1 - steps, steps)  # [B,T]
    index = index.reshape(index.shape + (1,) * (x.ndim - 2))
    return jnp.take_along_axis(x, index, axis=1)


def zero_state(batch_size: int, hidden_size: int) -> LSTMState:
    """A float32 all-zero ``(h, c)`` carry of shape ``[batch_size, hidden_size]`` each."""
    zeros = jnp.zeros((batch_size, hidden_size), jnp.float32)
    return zeros, zeros


def _lstm_bias_init(forget_bias: float):
    def init(key, shape, dtype=jnp.float32):
        del key
        hidden = shape[0] // 4
        return jnp.zeros(shape, dtype).at[hidden:2 * hidden].set(forget_bias)
    return init


# PyTorch-style U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the LSTM matrices.
_lstm_kernel_init = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


class LSTM(nn.Module):
    """One unidirectional LSTM layer scanned over time.

    ``weight_drop`` is DropConnect on the hidden-to-hidden matrix (one mask per call, shared by
    all time steps; AWD-LSTM), active only when ``deterministic`` is False (rng ``"dropout"``).
    """

    hidden_size: int
    policy: Policy = Policy()
    weight_drop: float = 0.0
    forget_bias: float = 1.0
    kernel_init: Any = None   # None: PyTorch-style U(-1/sqrt(fan_in), 1/sqrt(fan_in))

    @nn.compact
    def __call__(self, inputs: jax.Array, carry: LSTMState | None = None,
                 mask: jax.Array | None = None, *,
                 deterministic: bool = True) -> tuple[jax.Array, LSTMState]:
        """``inputs [B,T,D]``, ``carry`` float32 ``(h, c) [B,H]`` (zeros if None), ``mask`` bool
        ``[B,T]`` or None -> (outputs ``[B,T,H]`` in compute dtype, final carry)."""
        batch, _, in_size = inputs.shape
        hidden, pdt, cdt = self.hidden_size, self.policy.param_dtype, self.policy.compute_dtype
        kernel_init = self.kernel_init or _lstm_kernel_init
        w_ih = self.param("w_ih", kernel_init, (in_size, 4 * hidden), pdt)
        w_hh = self.param("w_hh", kernel_init, (hidden, 4 * hidden), pdt)
        bias = self.param("bias", _lstm_bias_init(self.forget_bias), (4 * hidden,), pdt)
        if self.weight_drop > 0.0 and not deterministic:
            w_hh = dropout(w_hh, self.weight_drop, self.make_rng("dropout"))

        # One matmul for the input projection of every step, time-major.
        gates_x = mixed_einsum("tbd,dg->tbg", jnp.swapaxes(inputs, 0, 1), w_ih, cdt)
        gates_x = gates_x + bias.astype(jnp.float32)
        w_hh = w_hh.astype(cdt)  # cast once, outside the loop
        if carry is None:
            carry = zero_state(batch, hidden)
        carry = tuple(x.astype(jnp.float32) for x in carry)
        step_mask = None if mask is None else jnp.swapaxes(mask, 0, 1)  # [T,B]

        def step(state, xs):
            h, c = state
            gx, m = xs
            gates = gx + mixed_einsum("bh,hg->bg", h, w_hh, cdt)
            i, f, g, o = jnp.split(gates, 4, axis=-1)
            c_new = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h_new = jax.nn.sigmoid(o) * jnp.tanh(c_new)
            out = h_new
            if m is not None:
                m = m[:, None]
                h_new, c_new = jnp.where(m, h_new, h), jnp.where(m, c_new, c)
                out = jnp.where(m, out, 0.0)
            return (h_new, c_new), out.astype(cdt)

        carry, outputs = jax.lax.scan(step, carry, (gates_x, step_mask))
        return jnp.swapaxes(outputs, 0, 1), carry


class BidirectionalLSTM(nn.Module):
    """Forward and backward LSTM over right-padded sequences, outputs concatenated.

    ``inputs [B,T,D]``, ``mask`` bool ``[B,T]`` -> ``[B,T,2H]`` in compute dtype, zero at padding.
    """

    hidden_size: int
    policy: Policy = Policy()
    kernel_init: Any = None

    @nn.compact
    def __call__(self, inputs: jax.Array, mask: jax.Array) -> jax.Array:
        lengths = mask.sum(axis=1).astype(jnp.int32)
        forward, _ = LSTM(self.hidden_size, self.policy, kernel_init=self.kernel_init,
                          name="forward")(inputs, mask=mask)
        backward, _ = LSTM(self.hidden_size, self.policy, kernel_init=self.kernel_init,
                           name="backward")(reverse_padded(inputs, lengths), mask=mask)
        return jnp.concatenate([forward, reverse_padded(backward, lengths)], axis=-1)
