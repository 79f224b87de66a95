"""Translator: bucketed fixed-shape batches, input order, detokenization, compile count."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.data.tokenizers import SentencePieceTokenizer
from textkit.decoding import Seq2SeqModel, beam_search, greedy_search, model_step_fn
from textkit.decoding.contract import segment_lengths
from textkit.decoding.translator import OneSegmentStep, Translator, encode_and_search
from textkit.models import Transformer, get_model

SENTENCES = [
    "the red friend runs .",
    "if our happy doctor thought that the red friend will run , we fall .",
    "a cat .",
    "my teacher reads the old book every morning before the long walk to the river .",
    "we sing .",
    "the children of the small town played in the green garden all day .",
    "she writes letters .",
    "two doctors and three teachers will visit the new school next week .",
    "why ?",
    "the big dog slept under the warm table while the cold rain fell outside .",
    "he laughs .",
]


class CopyModel(nn.Module):
    """A parameter-free "translator" that copies its source, then emits EOS."""

    vocab_size: int
    pad_id: int
    eos_id: int

    def __call__(self, src_tokens, tgt_input, *, deterministic=True):
        raise NotImplementedError("decoding only")

    def encode(self, src_tokens, *, deterministic=True):
        return {"memory": src_tokens, "src_mask": src_tokens != self.pad_id}   # [B, S]

    def init_cache(self, memory, src_tokens, max_length):
        del max_length
        return {"source": memory["memory"],
                "position": jnp.zeros(src_tokens.shape[:1], jnp.int32)}

    def decode_step(self, cache, tokens):
        del tokens
        source, position = cache["source"], cache["position"]               # [B, S], [B]
        padded = jnp.pad(source, ((0, 0), (0, 1)), constant_values=self.pad_id)
        following = jnp.take_along_axis(padded, position[:, None], 1)[:, 0]  # [B]
        following = jnp.where(following == self.pad_id, self.eos_id, following)
        logits = 8.0 * jax.nn.one_hot(following, self.vocab_size)            # [B, V]
        return jax.nn.log_softmax(logits), {**cache, "position": position + 1}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("spm") / "toy.model"
    return SentencePieceTokenizer.train(SENTENCES * 4, path, vocab_size=80, model_type="bpe",
                                        verbose=False, seed=0, num_threads=1)


def test_copy_model_round_trips_in_input_order(tokenizer):
    model = CopyModel(len(tokenizer), tokenizer.pad_id, tokenizer.eos_id)
    assert isinstance(model, Seq2SeqModel)
    translator = Translator(model, tokenizer, tokenizer, beam_size=2, batch_size=4,
                            bucket_round_to=8)
    assert translator.translate({}, SENTENCES) == SENTENCES
    # 11 sentences in batches of 4, 4, 2 and 1 rows (no dummy rows); source lengths rounded
    # to multiples of 8.
    assert len(translator.compiled_shapes) <= 4
    assert all(rows in (4, 2, 1) and length % 8 == 0
               for rows, length, _ in translator.compiled_shapes)
    compiled = encode_and_search._cache_size()
    again = [SENTENCES[i] for i in (10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)]
    assert translator.translate({}, again) == again
    assert encode_and_search._cache_size() == compiled, "same batch shapes must not recompile"
    assert translator.translate({}, []) == []


def test_next_batch_is_dispatched_before_the_last_one_is_read(tokenizer, monkeypatch):
    """The host prepares and dispatches batch n+1 while batch n runs; results keep input order."""
    model = CopyModel(len(tokenizer), tokenizer.pad_id, tokenizer.eos_id)
    translator = Translator(model, tokenizer, tokenizer, beam_size=2, batch_size=4)
    events = []
    dispatch, collect = translator._dispatch_group, translator._collect
    monkeypatch.setattr(translator, "_dispatch_group",
                        lambda *a: events.append("dispatch") or dispatch(*a))
    monkeypatch.setattr(translator, "_collect", lambda *a: events.append("read") or collect(*a))
    assert translator.translate({}, SENTENCES) == SENTENCES
    assert events[:3] == ["dispatch", "dispatch", "read"] and events[-2:] == ["read", "read"]


def test_max_length_caps_each_sentence(tokenizer):
    model = CopyModel(len(tokenizer), tokenizer.pad_id, tokenizer.eos_id)
    translator = Translator(model, tokenizer, tokenizer, beam_size=1, batch_size=4,
                            max_length=lambda n: n // 2 + 1)
    sources = tokenizer.encode(SENTENCES[:4])
    outputs = translator.translate_ids({}, sources)
    for source, output in zip(sources, outputs):
        cap = len(source) // 2 + 1
        assert output == source[:cap]


def test_mismatched_padding_is_reported(tokenizer):
    model = CopyModel(len(tokenizer), tokenizer.pad_id, tokenizer.eos_id)

    class Configured:
        config = type("Config", (), {"pad_id": tokenizer.pad_id + 1})()

    with pytest.raises(ValueError, match="pad"):
        Translator(Configured(), tokenizer, tokenizer)
    with pytest.raises(ValueError, match="batch_size"):
        Translator(model, tokenizer, tokenizer, batch_size=0)


class IdTokenizer:
    """Ids in, ids out: only the special ids matter to ``translate_ids``."""

    pad_id, bos_id, eos_id = 1, 2, 3


@pytest.fixture(scope="module")
def tiny_transformer():
    model = get_model("transformer_tiny", src_vocab_size=24, tgt_vocab_size=24, dropout=0.0,
                      pad_id=IdTokenizer.pad_id)
    dummy = jnp.full((1, 8), IdTokenizer.bos_id, jnp.int32)
    return model, model.init(jax.random.key(0), dummy, dummy)["params"]


def _decode_alone(model, params, source, max_length):
    src = jnp.asarray([source], jnp.int32)                                    # [1, S] unpadded
    encoded = model.apply({"params": params}, src, method="encode")
    cache = model.apply({"params": params}, encoded, src, max_length, method="init_cache")
    return beam_search(model_step_fn(model), params, cache, IdTokenizer.bos_id, beam_size=3,
                       max_length=max_length, eos_id=IdTokenizer.eos_id, alpha=0.6,
                       pad_id=IdTokenizer.pad_id)


@pytest.mark.slow
def test_transformer_sentence_alone_equals_sentence_in_padded_batch(tiny_transformer):
    model, params = tiny_transformer
    rng = np.random.default_rng(0)
    sources = [rng.integers(4, 24, size=n).tolist() for n in (7, 2, 13, 5, 3, 9)]
    translator = Translator(model, IdTokenizer(), IdTokenizer(), beam_size=3,
                            alpha=0.6, max_length=12, batch_size=4)
    outputs = translator.translate_ids(params, sources)
    assert translator.compiled_shapes == {(4, 8, 12), (2, 16, 12)}
    for index in (2, 4):   # the longest source (16-wide batch) and one padded 3 -> 8
        alone = _decode_alone(model, params, sources[index], 12)
        hypothesis = np.asarray(alone.tokens[0, 0, :alone.lengths[0, 0]]).tolist()
        assert outputs[index] == [t for t in hypothesis if t != IdTokenizer.eos_id]
    assert all(len(o) <= 12 for o in outputs) and any(outputs)


@pytest.mark.slow
def test_transformer_beam_one_equals_greedy_without_eos(tiny_transformer):
    model, params = tiny_transformer
    src = jnp.asarray(np.random.default_rng(1).integers(4, 24, size=(3, 8)), jnp.int32)
    encoded = model.apply({"params": params}, src, method="encode")
    cache = model.apply({"params": params}, encoded, src, 6, method="init_cache")
    options = dict(max_length=6, eos_id=IdTokenizer.eos_id, pad_id=IdTokenizer.pad_id,
                   min_length=6)
    beam = beam_search(model_step_fn(model), params, cache, IdTokenizer.bos_id, beam_size=1,
                       alpha=0.0, **options)
    greedy = greedy_search(model_step_fn(model), params, cache, IdTokenizer.bos_id, **options)
    np.testing.assert_array_equal(beam.tokens, greedy.tokens)
    np.testing.assert_allclose(beam.scores, greedy.scores, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 3])
def test_one_cache_segment_decodes_the_same_with_one_cache_length(tiny_transformer, beam_size,
                                                                 monkeypatch):
    """``grow_cache=False`` (translate.py --one-cache-segment): the same outputs, and the step
    only ever sees the full-length cache (the grown search resizes it through 8, 16, 40)."""
    model, params = tiny_transformer
    rng = np.random.default_rng(5)
    sources = [rng.integers(4, 24, size=n).tolist() for n in (7, 2, 13)]
    lengths = {True: set(), False: set()}
    original = Transformer._decode_hidden   # (both decode_step and decode_step_logits_t)

    def recording(self, cache, tokens):
        lengths[current].add(cache["layers"][0]["self"]["value"].shape[-2])
        return original(self, cache, tokens)

    monkeypatch.setattr(Transformer, "_decode_hidden", recording)
    outputs = {}
    for current in (True, False):
        translator = Translator(model, IdTokenizer(), IdTokenizer(), beam_size=beam_size,
                                max_length=40, grow_cache=current)
        outputs[current] = translator.translate_ids(params, sources)
    assert outputs[True] == outputs[False] and any(outputs[True])
    assert lengths[False] == {40} and lengths[True] == set(segment_lengths(40)) != {40}
    assert OneSegmentStep(model_step_fn(model)).resize_cache(None, None, 8) is None


@pytest.mark.slow
def test_warm_up_compiles_every_shape_a_request_meets(tiny_transformer):
    """After ``warm_up`` a request of any length up to the bound, alone or in a pair, runs a
    program already compiled (no new batch shape), and the outputs are the usual ones."""
    model, params = tiny_transformer
    translator = Translator(model, IdTokenizer(), IdTokenizer(), beam_size=2, max_length=6,
                            bucket_round_to=8, src_append_eos=True)
    assert translator.warm_up(params, max_source_length=16, rows=(1, 2)) == 4
    warm = set(translator.compiled_shapes)
    assert {(rows, length) for rows, length, _ in warm} == {(1, 8), (2, 8), (1, 16), (2, 16)}
    sources = [[5, 6, 7], list(range(4, 19)), [9] * 7]
    first = translator.translate_ids(params, sources[:1])
    pair = translator.translate_ids(params, sources[1:])
    assert translator.compiled_shapes == warm
    cold = Translator(model, IdTokenizer(), IdTokenizer(), beam_size=2, max_length=6,
                      bucket_round_to=8, src_append_eos=True)
    assert cold.translate_ids(params, sources[:1]) == first
    assert cold.translate_ids(params, sources[1:]) == pair
