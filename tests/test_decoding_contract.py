"""Every registered translation and language-model preset keeps the decoding contract
(``textkit.decoding.contract``) at tiny sizes: the protocol's signatures, ``decode_step`` equal
to the teacher-forced forward pass, and padding invariance."""

from __future__ import annotations

import dataclasses
import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from textkit.decoding import LanguageModel, Seq2SeqModel
from textkit.models import get_model, list_models

TRANSLATION = list_models("translation")
LANGUAGE_MODELS = list_models("language_model")
VOCAB = 23
TINY = {"src_vocab_size": VOCAB, "tgt_vocab_size": VOCAB, "vocab_size": VOCAB, "d_model": 16,
        "num_heads": 2, "d_ff": 32, "embed_size": 16, "hidden_size": 16, "max_len": 32}
LAYER_FIELDS = ("num_layers", "num_encoder_layers", "num_decoder_layers")
MAX_LAYERS = 3   # GNMT's residual connections start at layer 3
RATE = 0.5       # every dropout-like rate: nonzero, so that deterministic=True is checked too
BATCH, SRC_LEN, TGT_LEN, EXTRA = 3, 7, 5, 4
TOLERANCE = dict(atol=1e-4, rtol=1e-4)
# the fast tier keeps one preset per model class and option set; a preset equal at tiny sizes
# to a fast one but for its layer count (transformer_base / big / small, transformer_lm_base /
# small), and GNMT with Bahdanau attention and residual layers (gnmt_4layer / 8layer; its
# attention has fast tests in test_gnmt.py), each compile a model for 10-25 s: marked slow
SLOW_PRESETS = {"transformer_base", "transformer_big", "transformer_small", "gnmt_4layer",
                "gnmt_8layer", "transformer_lm_base", "transformer_lm_small"}


def tiered(names: list[str]) -> list:
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_PRESETS else n for n in names]


@functools.cache
def tiny_model(name: str):
    """Preset ``name`` with every size field its config has shrunk and every rate set to
    ``RATE``; presets that differ only in size become equal models and share compiled code."""
    config = get_model(name).config
    fields = {field.name for field in dataclasses.fields(config)}
    overrides = {key: value for key, value in TINY.items() if key in fields}
    overrides.update({key: min(getattr(config, key), MAX_LAYERS)
                      for key in LAYER_FIELDS if key in fields})
    overrides.update({key: RATE for key in fields if "drop" in key})
    return get_model(name, **overrides)


def _tokens(seed: int, shape: tuple[int, ...], pad_id: int) -> np.ndarray:
    """Random int32 ids in [0, VOCAB) other than ``pad_id``."""
    ids = np.random.default_rng(seed).integers(0, VOCAB - 1, size=shape)
    return (ids + (ids >= pad_id)).astype(np.int32)


def _pad_rows(x: np.ndarray, pad_id: int) -> np.ndarray:
    """One all-padding row before and one after the real rows."""
    row = np.full((1, *x.shape[1:]), pad_id, x.dtype)
    return np.concatenate([row, x, row])


def _scan_decode(model, params, cache, tokens):
    """decode_step over tokens int32[B, T] -> log_probs float32[B, T, V] (cache kept as-is)."""

    def step(cache, column):
        log_probs, new_cache = model.apply({"params": params}, cache, column,
                                           method="decode_step")
        return new_cache, log_probs

    _, log_probs = lax.scan(step, cache, tokens.T)
    return jnp.swapaxes(log_probs, 0, 1)


@functools.partial(jax.jit, static_argnums=0)
def _seq2seq_outputs(model, params, src, tgt):
    variables = {"params": params}
    logits = model.apply(variables, src, tgt)
    encoded = model.apply(variables, src, method="encode")
    cache = model.apply(variables, encoded, src, tgt.shape[1], method="init_cache")
    return {"forward": jax.nn.log_softmax(logits, axis=-1), "encoded": encoded, "cache": cache,
            "steps": _scan_decode(model, params, cache, tgt)}


@functools.partial(jax.jit, static_argnums=0)
def _lm_outputs(model, params, tokens):
    variables = {"params": params}
    logits, state = model.apply(variables, tokens)
    from_initial, _ = model.apply(variables, tokens, model.initial_state(tokens.shape[0]))
    cache = model.apply(variables, tokens.shape[0], tokens.shape[1], method="init_cache")
    return {"forward": jax.nn.log_softmax(logits, axis=-1), "state": state,
            "from_initial": jax.nn.log_softmax(from_initial, axis=-1), "cache": cache,
            "steps": _scan_decode(model, params, cache, tokens)}


@functools.cache
def seq2seq_case(model):
    """Outputs for a batch with right-padded sources, and for the same batch with extra source
    padding and a padding row before and after it."""
    pad = model.config.pad_id
    src = _tokens(0, (BATCH, SRC_LEN), pad)
    for row, length in enumerate((SRC_LEN, 3, 5)):
        src[row, length:] = pad
    tgt = _tokens(1, (BATCH, TGT_LEN), pad)
    params = jax.jit(model.init)(jax.random.key(0), src, tgt)["params"]
    wide = np.pad(src, ((0, 0), (0, EXTRA)), constant_values=pad)
    return src, {"plain": _seq2seq_outputs(model, params, src, tgt),
                 "padded": _seq2seq_outputs(model, params, _pad_rows(wide, pad),
                                            _pad_rows(tgt, pad))}


@functools.cache
def lm_case(model):
    """Outputs for a batch of windows, and for the same batch with extra right padding and a
    padding row before and after it."""
    pad = model.config.pad_id
    tokens = _tokens(2, (BATCH, TGT_LEN), pad)
    params = jax.jit(model.init)(jax.random.key(0), tokens)["params"]
    wide = np.pad(tokens, ((0, 0), (0, EXTRA)), constant_values=pad)
    return {"plain": _lm_outputs(model, params, tokens),
            "padded": _lm_outputs(model, params, _pad_rows(wide, pad))}


def _parameter_kinds(function) -> list[tuple]:
    """(name, kind, required) of every parameter, ``self`` included."""
    return [(p.name, p.kind, p.default is inspect.Parameter.empty)
            for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize(("name", "protocol", "methods"), [
    *[pytest.param(n, Seq2SeqModel, ("__call__", "encode", "init_cache", "decode_step"), id=n)
      for n in TRANSLATION],
    *[pytest.param(n, LanguageModel, ("__call__", "initial_state", "init_cache", "decode_step"),
                   id=n) for n in LANGUAGE_MODELS],
])
def test_model_satisfies_protocol(name, protocol, methods):
    model = tiny_model(name)
    assert isinstance(model, protocol)
    for method in methods:
        assert _parameter_kinds(getattr(type(model), method)) == \
            _parameter_kinds(getattr(protocol, method)), f"{name}.{method}"
    assert isinstance(model.config.pad_id, int)


def test_every_preset_is_covered():
    assert len(TRANSLATION) >= 2 and len(LANGUAGE_MODELS) >= 3
    assert not set(TRANSLATION) & set(LANGUAGE_MODELS)


def _assert_close(actual, expected, what: str):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), err_msg=what,
                               **TOLERANCE)


def _check_cache(cache, rows: int, what: str):
    leaves = jax.tree.leaves(cache)
    assert leaves and all(leaf.shape[0] == rows for leaf in leaves), f"{what}: leading axis"


@pytest.mark.slow
@pytest.mark.parametrize("name", TRANSLATION)
def test_seq2seq_decode_step_equals_forward(name):
    src, outputs = seq2seq_case(tiny_model(name))
    out = outputs["plain"]
    assert out["steps"].dtype == jnp.float32
    assert out["steps"].shape == (BATCH, TGT_LEN, VOCAB)
    _assert_close(out["steps"], out["forward"], f"{name}: decode_step vs forward")
    memory, mask = out["encoded"]["memory"], out["encoded"]["src_mask"]
    assert memory.shape[:2] == (BATCH, SRC_LEN) and mask.dtype == jnp.bool_
    np.testing.assert_array_equal(mask, src != tiny_model(name).config.pad_id)
    _check_cache(out["cache"], BATCH, name)


@pytest.mark.parametrize("name", tiered(TRANSLATION))
def test_seq2seq_padding_invariance(name):
    _, outputs = seq2seq_case(tiny_model(name))
    plain, padded = outputs["plain"], outputs["padded"]
    for key in ("forward", "steps"):
        _assert_close(padded[key][1:-1], plain[key], f"{name}: padding, {key}")
    _check_cache(padded["cache"], BATCH + 2, name)


@pytest.mark.parametrize("name", tiered(LANGUAGE_MODELS))
def test_lm_decode_step_equals_forward(name):
    out = lm_case(tiny_model(name))["plain"]
    assert out["steps"].dtype == jnp.float32
    assert out["steps"].shape == (BATCH, TGT_LEN, VOCAB)
    _assert_close(out["steps"], out["forward"], f"{name}: decode_step vs forward")
    _assert_close(out["from_initial"], out["forward"], f"{name}: initial_state vs None")
    _check_cache(out["cache"], BATCH, name)
    state = tiny_model(name).initial_state(BATCH)
    if state is not None:
        _check_cache(state, BATCH, f"{name} initial_state")


@pytest.mark.parametrize("name", tiered(LANGUAGE_MODELS))
def test_lm_padding_invariance(name):
    outputs = lm_case(tiny_model(name))
    plain, padded = outputs["plain"], outputs["padded"]
    for key in ("forward", "steps"):
        _assert_close(padded[key][1:-1, :TGT_LEN], plain[key], f"{name}: padding, {key}")
    # Trailing padding leaves the carried state where the last real token left it.
    jax.tree.map(lambda a, b: _assert_close(a[1:-1], b, f"{name}: state"), padded["state"],
                 plain["state"])


def test_a_wrapper_keeps_every_fast_path_it_does_not_override():
    """``StepWrapper`` declares and forwards the hooks: a wrapper that overrides only
    ``__call__`` still offers the wrapped step's beam, resize and candidates paths."""
    from textkit.decoding import BeamHooks, CandidatesHook, ResizeHook, StepWrapper
    from textkit.decoding.contract import step_candidates

    @dataclasses.dataclass(frozen=True)
    class Doubled(StepWrapper):
        def __call__(self, params, cache, tokens):
            return self.step_fn(params, cache, tokens)

    model = get_model("transformer_tiny", **{k: TINY[k] for k in (
        "src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "d_ff", "max_len")})
    from textkit.decoding import model_step_fn

    src = jnp.ones((2, 5), jnp.int32)
    params = model.init(jax.random.key(0), src, src)["params"]
    encoded = model.apply({"params": params}, src, method="encode")
    cache = model.apply({"params": params}, encoded, src, 8, method="init_cache")
    inner, wrapped = model_step_fn(model), Doubled(model_step_fn(model))
    for hook in (BeamHooks, ResizeHook, CandidatesHook):
        assert isinstance(wrapped, hook)
    assert wrapped.beam_cache(params, cache, 2) is not None
    assert wrapped.resize_cache(params, cache, 4) is not None
    tokens = jnp.zeros((2,), jnp.int32)
    got, _ = step_candidates(wrapped, params, cache, tokens, 3, (1,))
    want, _ = step_candidates(inner, params, cache, tokens, 3, (1,))
    np.testing.assert_allclose(np.asarray(got.values), np.asarray(want.values), rtol=1e-6)
