"""Perplexity over a whole token stream: hand-built bigram model, unigram baseline, PTB figures."""

import math
from pathlib import Path

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.data import get_dataset
from textkit.tasks.language_model import (
    lm_eval_step,
    stream_nll,
    stream_windows,
    unigram_perplexity,
)
from textkit.training import perplexity
from textkit.vocab import Vocab

PTB = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ptb"

PAD, EOS = 1, 3
VOCAB_SIZE = 6


def bigram_table(seed: int = 0) -> np.ndarray:
    """Row ``p`` = P(next | previous token p), float64 [V, V]; every row sums to 1."""
    rng = np.random.default_rng(seed)
    table = rng.uniform(0.1, 1.0, (VOCAB_SIZE, VOCAB_SIZE))
    return table / table.sum(axis=1, keepdims=True)


class BigramLM(nn.Module):
    """A stateless LM with known probabilities: logits = log P(next | current token)."""

    table: tuple  # [V][V] probabilities, hashable

    def __call__(self, tokens, state=None, *, deterministic=True):
        logits = jnp.log(jnp.asarray(self.table, jnp.float32))[tokens]       # [B, T, V]
        return logits, state


def expected_nll(table: np.ndarray, ids: np.ndarray, excluded: tuple[int, ...]) -> float:
    """-sum log P(ids[i] | ids[i-1]) with ids[-1] := EOS, the excluded columns renormalised."""
    kept = table.copy()
    kept[:, list(excluded)] = 0.0
    kept /= kept.sum(axis=1, keepdims=True)
    previous = np.concatenate([[EOS], ids[:-1]])
    return float(-np.log(kept[previous, ids]).sum())


@pytest.mark.parametrize("num_tokens,seq_len", [(23, 4), (24, 4), (5, 16), (1, 3)])
def test_stream_perplexity_matches_hand_computation(num_tokens, seq_len):
    table = bigram_table()
    rng = np.random.default_rng(num_tokens)
    ids = rng.choice([0, 2, 3, 4, 5], size=num_tokens).astype(np.int32)   # never <pad>
    model = BigramLM(tuple(map(tuple, table.tolist())))
    eval_step = lm_eval_step(model, excluded_ids=(PAD,))
    windows = stream_windows(ids, seq_len, EOS, PAD)

    nll, count = stream_nll(eval_step, {}, windows, None)

    assert count == num_tokens                     # every token scored, none twice
    want = expected_nll(table, ids, excluded=(PAD,))
    assert nll == pytest.approx(want, rel=1e-5)
    assert perplexity(nll, count) == pytest.approx(math.exp(want / num_tokens), rel=1e-5)
    # without excluding <pad> the model keeps its mass there: a different (higher) perplexity
    nll_with_pad, _ = stream_nll(lm_eval_step(model), {}, windows, None)
    assert nll_with_pad == pytest.approx(expected_nll(table, ids, excluded=()), rel=1e-5)
    assert nll_with_pad > nll


def test_stream_windows_target_every_token_once():
    ids = np.arange(10, 47, dtype=np.int32)
    windows = stream_windows(ids, seq_len=8, eos_id=EOS, pad_id=PAD)
    targets = np.concatenate([w["targets"][w["mask"] > 0] for w in windows])
    np.testing.assert_array_equal(targets, ids)
    assert windows[0]["inputs"][0, 0] == EOS
    with pytest.raises(ValueError, match="non-empty 1-D"):
        stream_windows(np.zeros((0,), np.int32), 8, EOS, PAD)


def test_unigram_perplexity_hand_case():
    train = np.array([0, 0, 1, 2])                 # P = 1/2, 1/4, 1/4
    assert unigram_perplexity(train, np.array([0, 1]), 3) == pytest.approx(math.sqrt(8))
    assert unigram_perplexity(train, np.array([0, 0]), 4) == pytest.approx(2.0)
    assert unigram_perplexity(train, np.array([3]), 4) == math.inf   # never seen in training


@pytest.mark.skipif(not (PTB / "ptb.train.txt").exists(),
                    reason=f"Penn Treebank not found at {PTB} (see shared/data/README.md)")
def test_ptb_vocabulary_and_unigram_baseline():
    corpora = {s: get_dataset("ptb", s, root=PTB, progress=False)
               for s in ("train", "valid", "test")}
    vocab = Vocab(corpora["train"].tokens, bos_token=None)   # as the recipe builds it
    assert len(vocab) - 1 == 10000                 # the words, <unk> and <eos> included, + <pad>
    ids = {s: c.token_ids(vocab) for s, c in corpora.items()}
    assert [len(ids[s]) for s in ("train", "valid", "test")] == [929589, 73760, 82430]
    assert not any((v == vocab.pad_id).any() for v in ids.values())
    assert unigram_perplexity(ids["train"], ids["valid"], len(vocab)) == pytest.approx(687.0,
                                                                                     abs=0.05)
    assert unigram_perplexity(ids["train"], ids["test"], len(vocab)) == pytest.approx(639.3,
                                                                                    abs=0.05)
