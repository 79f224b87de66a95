"""The batched negative-sampling updates of word-vector training: the one module of
``textkit.embedding`` that imports jax.

One call runs a ``lax.scan`` over a stack of fixed-shape batches (``word2vec_batches``). Per
batch, as word2vec does per pair but for all pairs of the batch at once (Hogwild-like: the
pairs of one batch see the matrices as they were before it): a segment's (center's) input
vector ``h`` is the weighted mean of its input rows; each positive pair scores its output word
(label 1); the segment's ``negative * draws`` noise words (label 0; drawn on the host,
``word2vec_batches.noise_words``) are shared by its pairs, each weighted ``1 / draws`` once
per pair whose positive word it is not (gensim skips a noise word equal to the positive word)
-- the same expected update as ``negative`` draws per pair, with ``draws`` sets per segment
instead of one per pair (skip-gram has about ``window + 1`` pairs per center); ``g = (label -
sigmoid(h . u)) * alpha``; each output row gets ``g * h`` and every input row of the segment
the full ``sum g * u`` (word2vec's and fastText's rule: the error is not divided among the
rows). The updates are scatter-adds into the donated matrices.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

__all__ = ["make_update"]

_IN_RANGE = "promise_in_bounds"


def _batch_update(matrices, batch, *, centers: int, draws: int):
    """One batch; ``matrices`` = (input float32 [R_in, D], output float32 [V, D]).

    A batch whose rows (pairs) axis has exactly ``centers`` entries holds one input row (one
    positive word) per center, at the center's own slot (``word2vec_batches``: skip-gram
    without subwords, CBOW): its segment sums are the identity and are skipped. Every index is
    in range by construction (word ids, n-gram rows, noise words; padding is row 0), so
    the gathers and scatters are compiled without bounds checks.
    """
    inputs, outputs = matrices
    in_rows, in_seg, in_weight, out_words, out_seg, out_weight, noise, alpha = batch
    row_aligned, pair_aligned = in_rows.shape[0] == centers, out_words.shape[0] == centers
    x = inputs.at[in_rows].get(mode=_IN_RANGE) * in_weight[:, None]       # [T, D]
    h = x if row_aligned else jax.ops.segment_sum(x, in_seg, num_segments=centers)  # [B, D]
    hp = h if pair_aligned else h[out_seg]                                # [P, D]
    u_pos = outputs.at[out_words].get(mode=_IN_RANGE)                     # [P, D]
    score_pos = jnp.sum(hp * u_pos, axis=1)                               # [P]
    g_pos = (1.0 - jax.nn.sigmoid(score_pos)) * alpha * out_weight        # [P]
    pair_noise = noise if pair_aligned else noise[out_seg]                # [P, K]
    differs = (pair_noise != out_words[:, None]) * out_weight[:, None]    # [P, K]
    noise_weight = (differs if pair_aligned else
                    jax.ops.segment_sum(differs, out_seg, num_segments=centers)) / draws  # [B, K]
    u_neg = outputs.at[noise].get(mode=_IN_RANGE)                         # [B, K, D]
    score_neg = jnp.einsum("bd,bkd->bk", h, u_neg)                       # [B, K]
    g_neg = -jax.nn.sigmoid(score_neg) * alpha * noise_weight            # [B, K]
    loss = -(jnp.sum(out_weight * jax.nn.log_sigmoid(score_pos))
             + jnp.sum(noise_weight * jax.nn.log_sigmoid(-score_neg)))
    pos_grad = g_pos[:, None] * u_pos                                     # [P, D]
    dh = ((pos_grad if pair_aligned else
           jax.ops.segment_sum(pos_grad, out_seg, num_segments=centers))
          + jnp.einsum("bk,bkd->bd", g_neg, u_neg))                      # [B, D]
    # one scatter for the positive and the noise rows: [P + B * K, D]
    out_index = jnp.concatenate([out_words, noise.reshape(-1)])
    out_delta = jnp.concatenate([g_pos[:, None] * hp,
                                 (g_neg[:, :, None] * h[:, None, :]).reshape(-1, h.shape[1])])
    outputs = outputs.at[out_index].add(out_delta, mode=_IN_RANGE)
    row_delta = dh if row_aligned else dh[in_seg]                         # [T, D]
    inputs = inputs.at[in_rows].add(row_delta * (in_weight > 0)[:, None], mode=_IN_RANGE)
    return (inputs, outputs), (loss, jnp.sum(out_weight) + jnp.sum(noise_weight))


def make_update(centers: int, draws: int = 1):
    """``update(inputs, outputs, batches) -> (inputs, outputs, loss, terms)``.

    ``batches`` is the tuple (in_rows int32 [n, T], in_seg int32 [n, T], in_weight float32
    [n, T], out_words int32 [n, P], out_seg int32 [n, P], out_weight float32 [n, P], noise
    int32 [n, B, K], alpha float32 [n]) of ``n`` batches of ``B = centers`` segments, each
    segment's ``K = negative * draws`` noise words weighted ``1 / draws``. ``inputs`` float32
    [R_in, D] and ``outputs`` float32 [V, D] are donated and updated in place; ``loss``
    (float32) sums the negative log-likelihood over the ``terms`` scored.
    """
    body = functools.partial(_batch_update, centers=centers, draws=draws)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def update(inputs, outputs, batches):
        (inputs, outputs), (loss, terms) = jax.lax.scan(body, (inputs, outputs), batches)
        return inputs, outputs, jnp.sum(loss), jnp.sum(terms)

    return update
