"""Masked, label-smoothed cross-entropy in float32.

Label smoothing follows T2T / fairseq / flax's WMT example: the target token gets probability
``1 - label_smoothing`` and the remaining mass is spread uniformly over the other ``V - 1``
tokens (the target is excluded from the uniform part). The loss is the cross-entropy against
that distribution; its minimum, ``smoothing_entropy(V, label_smoothing)``, is not 0, so
subtract ``smoothing_entropy * weight_sum`` from the sum if a loss of 0 at the optimum is wanted.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def cross_entropy(
    logits: jax.Array,
    targets: jax.Array,
    weights: jax.Array | None = None,
    label_smoothing: float = 0.0,
) -> tuple[jax.Array, jax.Array]:
    """Sum of per-token (smoothed) cross-entropy and the sum of weights.

    Args:
      logits: float [..., V], any float dtype; computed in float32 via ``logsumexp``.
      targets: int [...], token ids in ``[0, V)``.
      weights: float or bool [...], e.g. ``targets != pad_id``; None weights every token 1.
      label_smoothing: mass in [0, 1) moved from the target to the other V - 1 tokens.
    Returns:
      ``(loss_sum, weight_sum)``: float32 scalars; the mean loss is ``loss_sum / weight_sum``.
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits {logits.shape} must be targets {targets.shape} plus a vocabulary axis")
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
    vocab_size = logits.shape[-1]
    if label_smoothing > 0.0 and vocab_size < 2:
        raise ValueError("label smoothing needs a vocabulary of at least 2 tokens")
    if weights is None:
        weights = jnp.ones(targets.shape, jnp.float32)
    elif jnp.shape(weights) != targets.shape:
        raise ValueError(f"weights {weights.shape} must have the targets' shape {targets.shape}")
    weights = jnp.asarray(weights, jnp.float32)

    # nll = logsumexp(z) - z[target]: no [..., V] log-prob tensor is materialised, and the
    # backward pass is one softmax (cheaper than log_softmax + gather).
    logits = logits.astype(jnp.float32)                                     # [..., V]
    lse = jax.nn.logsumexp(logits, axis=-1)                                 # [...]
    target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]  # [...]
    nll = lse - target_logit                                                # [...]
    if label_smoothing > 0.0:
        # sum over the other V - 1 tokens of -log p = V * lse - sum(z) - nll
        others = vocab_size * lse - logits.sum(axis=-1) - nll               # [...]
        loss = (1.0 - label_smoothing) * nll + label_smoothing / (vocab_size - 1) * others
    else:
        loss = nll
    return (loss * weights).sum(), weights.sum()


def smoothing_entropy(vocab_size: int, label_smoothing: float) -> float:
    """Entropy of the smoothed target distribution: the smallest per-token loss possible."""
    if label_smoothing <= 0.0:
        return 0.0
    confidence = 1.0 - label_smoothing
    low = label_smoothing / (vocab_size - 1)
    return -(confidence * math.log(confidence) + (vocab_size - 1) * low * math.log(low))
