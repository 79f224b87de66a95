"""Bad inputs to models, decoders, the Translator, translate.py and sample.py (issue 15): each
is refused with an error naming what was wrong, or handled by the stated policy (long sources
truncated with a warning naming the line), never a silent NaN or an empty translation."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import subprocesses
from toy_decoders import BOS, EOS, make_table_model, table_step

from textkit.decoding import (
    LongSourceWarning,
    Translator,
    beam_search,
    greedy_search,
    model_step_fn,
    sample,
)
from textkit.models import get_model, max_positions, parse_overrides
from textkit.tasks import translation
from textkit.training import RunDir
from textkit.vocab import Vocab

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("the red friend runs . a cat reads the old book every morning before the long walk "
         "to the river . we sing . she writes letters . he laughs .").split()
NORMAL = [" ".join(WORDS[i:i + 6 + i % 4]) for i in range(0, 25, 5)]   # 5 short lines
LONG = " ".join(WORDS[i % len(WORDS)] for i in range(2000))             # >= 2,000 tokens
OVERRIDES = ("d_model=32,d_ff=64,num_encoder_layers=1,num_decoder_layers=1,max_len=32,"
             "tie_output=False,dropout=0.0")


# ----------------------------------------------------------------------------- models
def tiny_transformer(**overrides):
    fields = dict(src_vocab_size=40, tgt_vocab_size=40, d_model=16, d_ff=32, max_len=16,
                  num_encoder_layers=1, num_decoder_layers=1)
    return get_model("transformer_tiny", **{**fields, **overrides})


def test_max_positions_names_each_models_limit():
    assert max_positions(get_model("transformer_tiny")) == 256
    assert max_positions(get_model("transformer_lm_small").config) == 512
    assert max_positions(get_model("gnmt_tiny")) is None
    assert max_positions(get_model("lstm_lm_tiny")) is None
    config = get_model("gnmt_tiny", src_vocab_size=30, tgt_vocab_size=20).config
    assert (config.input_vocab_size, config.output_vocab_size) == (30, 20)
    assert get_model("textcnn", vocab_size=50).config.output_vocab_size is None
    with pytest.raises(ValueError, match="max_len=0"):
        get_model("transformer_tiny", max_len=0)


@pytest.mark.slow
def test_transformer_refuses_lengths_past_max_len_even_under_jit():
    model = tiny_transformer()
    ok = jnp.ones((2, 16), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), ok, ok)["params"]
    long = jnp.ones((2, 17), jnp.int32)
    apply = jax.jit(lambda p, s, t: model.apply({"params": p}, s, t))
    with pytest.raises(ValueError, match=r"src_tokens has 17 positions.*max_len=16"):
        apply(params, long, ok)
    with pytest.raises(ValueError, match=r"tgt_input has 17 positions.*max_len=16"):
        apply(params, ok, long)
    encoded = model.apply({"params": params}, ok, method="encode")
    with pytest.raises(ValueError, match=r"max_length\) has 40 positions.*max_len=16"):
        model.apply({"params": params}, encoded, ok, 40, method="init_cache")
    assert np.isfinite(np.asarray(apply(params, ok, ok))).all()


def test_transformer_lm_refuses_windows_and_caches_past_max_len():
    model = get_model("transformer_lm_tiny", vocab_size=30, d_model=16, d_ff=32, num_layers=1,
                      max_len=8)
    params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 8), jnp.int32))["params"]
    with pytest.raises(ValueError, match=r"tokens has 9 positions.*max_len=8"):
        jax.jit(lambda p, t: model.apply({"params": p}, t))(params, jnp.ones((1, 9), jnp.int32))
    with pytest.raises(ValueError, match=r"has 9 positions.*max_len=8"):
        model.apply({"params": params}, 1, 9, method="init_cache")


@pytest.mark.parametrize("name, fields, call", [
    ("transformer_tiny", dict(src_vocab_size=40, tgt_vocab_size=40, d_model=16, d_ff=32),
     "seq2seq"),
    pytest.param("gnmt_tiny", dict(src_vocab_size=40, tgt_vocab_size=40), "seq2seq",
                 marks=pytest.mark.slow),                  # 10 s: compiles all of GNMT
    ("lstm_lm_tiny", dict(vocab_size=40), "lm"),
    ("awd_lstm_lm_tiny", dict(vocab_size=40), "lm"),
    pytest.param("textcnn", dict(vocab_size=40, embed_dim=8, num_filters=4), "one",
                 marks=pytest.mark.slow),                  # bilstm_classifier: the fast case
    ("bilstm_classifier", dict(vocab_size=40, embed_dim=8, hidden_size=8), "one"),
])
def test_out_of_range_ids_are_refused_naming_sample_and_position(name, fields, call):
    model = get_model(name, **fields)
    good = jnp.full((2, 8), 3, jnp.int32)
    bad = good.at[1, 5].set(40)
    args = (good, good) if call == "seq2seq" else (good,)
    params = model.init(jax.random.PRNGKey(0), *args)["params"]
    bad_args = (bad, good) if call == "seq2seq" else (bad,)
    with pytest.raises(ValueError, match=r"\[1, 5\] = 40 is outside the vocabulary.*< 40"):
        model.apply({"params": params}, *bad_args)
    with pytest.raises(ValueError, match=r"\[0, 2\] = -1"):
        model.apply({"params": params}, *((good.at[0, 2].set(-1),) + args[1:]))


# --------------------------------------------------------------------------- decoders
def decode(kind: str, start=BOS, **options):
    params, cache = make_table_model(seed=0, vocab=6, length=4, rows=3)
    options = {"max_length": 4, "eos_id": EOS, **options}
    if kind == "beam":
        return beam_search(table_step, params, cache, start, beam_size=2, **options)
    if kind == "greedy":
        return greedy_search(table_step, params, cache, start, **options)
    return sample(table_step, params, cache, start, jax.random.key(0), **options)


DECODERS = ("beam", "greedy", "sample")


@pytest.mark.parametrize("kind", DECODERS)
@pytest.mark.parametrize("option, value", [("eos_id", 6), ("eos_id", -1), ("pad_id", 6),
                                           ("pad_id", 99)])
def test_decoders_refuse_special_ids_outside_the_vocabulary(kind, option, value):
    with pytest.raises(ValueError, match=rf"{option}={value} is outside the vocabulary.*V=6"):
        decode(kind, **{option: value})


@pytest.mark.parametrize("kind", DECODERS)
def test_decoders_refuse_start_tokens_outside_the_vocabulary(kind):
    with pytest.raises(ValueError, match=r"start_tokens = 6 is outside.*< 6"):
        decode(kind, start=6)
    with pytest.raises(ValueError, match=r"start_tokens\[2\] \(batch row 2\) = 7"):
        decode(kind, start=jnp.asarray([BOS, BOS, 7]))


@pytest.mark.parametrize("kind", DECODERS)
@pytest.mark.parametrize("max_length", [0, -3])
def test_decoders_refuse_max_length_below_one_alike(kind, max_length):
    with pytest.raises(ValueError, match=rf"max_length must be an int >= 1.*got {max_length}"):
        decode(kind, max_length=max_length)


def test_sample_refuses_num_samples_below_one():
    with pytest.raises(ValueError, match="num_samples must be an int >= 1; got 0"):
        decode("sample", num_samples=0)


# ------------------------------------------------------------------ Translator, translate.py
def never_eos(model, params, tokenizer):
    """Random params whose output never puts mass on a special id: every hypothesis runs to
    its cap, so an empty translation can only come from a broken pipeline."""
    specials = [tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id]
    params = jax.tree_util.tree_map(np.array, params)
    params["decoder_norm"]["norm"]["bias"][0] = 10.0
    params["output"]["kernel"][0] = 0.0
    params["output"]["kernel"][0, specials] = -10.0
    return jax.tree_util.tree_map(jnp.asarray, params)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A --save-dir as translate.py reads it: config.json, a joint SentencePiece model and
    ``final/`` params of a tiny Transformer (max_len 32) that never emits EOS."""
    root = tmp_path_factory.mktemp("bad_inputs") / "run"
    run = RunDir(root)
    config = {"model": "transformer_tiny", "model_overrides": OVERRIDES, "joint_spm": True,
              "precision": "float32", "beam_size": 2, "alpha": 0.6, "decode_batch_size": 4}
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config))
    pairs = [(line, line) for line in NORMAL * 20]
    src_tok, _ = translation.tokenizers(run, True, pairs, vocab_size=60)
    model = translation.seq2seq_preset(
        "transformer_tiny", src_vocab_size=len(src_tok), tgt_vocab_size=len(src_tok),
        pad_id=src_tok.pad_id, shared_vocab=True, **parse_overrides(OVERRIDES))
    params = translation.init_seq2seq_params(model, jax.random.PRNGKey(0))
    params = never_eos(model, params, src_tok)
    run.save_final(0, params, "test")
    return root


def translator_of(run_dir: Path, **options):
    run = RunDir(run_dir)
    tok, _ = translation.tokenizers(run, True)
    model = translation.seq2seq_preset(
        "transformer_tiny", src_vocab_size=len(tok), tgt_vocab_size=len(tok),
        pad_id=tok.pad_id, shared_vocab=True, **parse_overrides(OVERRIDES))
    target = jax.eval_shape(lambda k: translation.init_seq2seq_params(model, k),
                            jax.random.PRNGKey(0))
    params, _ = run.load_final(target)
    return Translator(model, tok, tok, beam_size=2, batch_size=4, **options), params, tok


@pytest.mark.slow
def test_translator_truncates_a_long_source_and_names_its_line(run_dir):
    translator, params, tok = translator_of(run_dir)
    assert len(tok.encode([LONG])[0]) >= 2000
    with pytest.warns(LongSourceWarning, match=r"line 6 \(\d+ tokens\)") as record:
        out = translator.translate(params, [*NORMAL, LONG])
    assert len(record) == 1 and "truncated to 32 tokens" in str(record[0].message)
    assert len(out) == 6 and all(line.strip() for line in out)
    truncated = tok.decode([tok.encode([LONG])[0][:32]])[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert translator.translate(params, [truncated])[0] == out[5]
        assert translator.translate(params, NORMAL) == out[:5]
    # output caps stay within the 32 target positions, whatever max_length asks
    assert all(length <= 32 for _, _, length in translator.compiled_shapes)


def test_translator_refuses_long_sources_and_bad_ids_naming_the_line(run_dir):
    translator, params, tok = translator_of(run_dir, on_long_source="error")
    with pytest.raises(ValueError, match=r"line 6: the source has \d+ tokens.*at most 32"):
        translator.translate(params, [*NORMAL, LONG])
    with pytest.raises(ValueError, match=r"line 2: source id 999 is outside.*< " +
                       str(len(tok))):
        translator.translate_ids(params, [[5, 6], [5, 999]])
    with pytest.raises(ValueError, match="on_long_source='drop'"):
        translator_of(run_dir, on_long_source="drop")
    with pytest.raises(ValueError, match="max_length must be >= 1"):
        translator_of(run_dir, max_length=0)


def test_translator_max_source_length_caps_models_with_or_without_a_limit(run_dir):
    _, _, tok = translator_of(run_dir)
    limit = len(tok.encode([NORMAL[0]])[0]) + 1   # below the model's 32 positions
    translator, params, _ = translator_of(run_dir, max_source_length=limit)
    assert (translator.max_positions, translator.source_limit) == (32, limit)
    with pytest.warns(LongSourceWarning, match=rf"^1 source.*to {limit} tokens: line 2 \("):
        out = translator.translate(params, [NORMAL[0], LONG])
    assert all(line.strip() for line in out)
    with pytest.raises(ValueError, match="max_source_length=0 leaves no room"):
        translator_of(run_dir, max_source_length=0)


def test_traced_out_of_range_ids_read_nan_rows_as_documented():
    model = tiny_transformer()
    ok = jnp.ones((1, 4), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), ok, ok)["params"]
    logits = jax.jit(lambda p, s: model.apply({"params": p}, s, ok))(params, ok.at[0, 1].set(40))
    assert not np.isfinite(np.asarray(logits)).all()


@pytest.mark.slow
def test_translate_script_end_to_end_long_line(run_dir):
    text = "".join(line + "\n" for line in [*NORMAL, LONG])
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples/nmt/translate.py"), "--checkpoint", str(run_dir)],
        input=text.encode(), capture_output=True, env=subprocesses.cpu_env(1), timeout=300)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr[-3000:]
    lines = done.stdout.decode().split("\n")
    assert lines[-1] == "" and len(lines[:-1]) == 6 and all(s.strip() for s in lines[:-1])
    assert "line 6 (" in stderr and "LongSourceWarning" in stderr


@pytest.fixture(scope="module")
def translate_script():
    return subprocesses.load_script(ROOT / "examples/nmt/translate.py", "bad_inputs_translate")


def test_translate_script_refuses_bad_input_naming_line_and_file(run_dir, translate_script,
                                                                 monkeypatch, tmp_path, capsys):
    def refused(argv):
        """The one line (exit status 2) that the command ends with for ``argv``."""
        with pytest.raises(SystemExit) as exit_:
            translate_script.main(argv)
        assert exit_.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        return lines[0]

    data = b"one line\nthe red friend\n" + b"caf\xe9 au lait\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert refused(["--checkpoint", str(run_dir)]).startswith(
        "error: standard input, line 3: not UTF-8")
    source = tmp_path / "in.txt"
    source.write_bytes(data)
    assert re.search(r"in.txt, line 3: invalid utf-8",
                     refused(["--checkpoint", str(run_dir), "--input", str(source)]))
    source.write_text("\n".join([*NORMAL, LONG]) + "\n")
    assert f"--input {source}, line 6: the source has" in refused(
        ["--checkpoint", str(run_dir), "--input", str(source), "--on-long-source", "error"])
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "config.json").write_text((run_dir / "config.json").read_text()[:25])
    assert "damaged/config.json is not valid JSON" in refused(
        ["--checkpoint", str(damaged), "--input", str(source)])
    assert refused(["--checkpoint", str(run_dir), "--input", str(tmp_path / "missing.txt")]) \
        == f"error: --input {tmp_path / 'missing.txt'}: no such file"
    assert "argument --batch-size: expected an integer >= 1, got '0'" in refused(
        ["--checkpoint", str(run_dir), "--batch-size", "0"])


# ------------------------------------------------------------------------------ sample.py
def test_sample_script_fits_prompt_and_length_into_the_model(capsys):
    script = subprocesses.load_script(ROOT / "examples/language_model/sample.py",
                                      "bad_inputs_sample")
    vocab = Vocab(["a", "b", "c"] * 2)
    model = get_model("transformer_lm_tiny", vocab_size=len(vocab), max_len=8)
    words = ["a", "b", "c", "a", "b", "c"]
    assert script.prompt_ids(vocab, model, words, 1) == [vocab.eos_id, *vocab.to_ids(words)]
    ids = script.prompt_ids(vocab, model, words, 4)
    assert ids == [vocab.eos_id, *vocab.to_ids(words[-3:])]
    assert "only its last 3 fit in the model's 8 positions" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"--length 8 .* 8 positions.*--length <= 7"):
        script.prompt_ids(vocab, model, words, 8)
    with pytest.raises(ValueError, match="--length must be >= 1"):
        script.prompt_ids(vocab, model, words, 0)
    small = get_model("transformer_lm_tiny", vocab_size=len(vocab) - 1)
    with pytest.raises(ValueError, match="do not belong together"):
        script.prompt_ids(vocab, small, words, 2)
    unlimited = get_model("lstm_lm_tiny", vocab_size=len(vocab))
    assert len(script.prompt_ids(vocab, unlimited, words * 50, 500)) == 301


def test_model_step_fn_decoding_refuses_a_cache_past_max_len():
    model = get_model("transformer_lm_tiny", vocab_size=30, d_model=16, d_ff=32, num_layers=1,
                      max_len=8)
    params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 8), jnp.int32))["params"]
    cache = model.apply({"params": params}, 2, 8, method="init_cache")
    out = greedy_search(model_step_fn(model), params, cache, 3, max_length=8, eos_id=2)
    assert np.isfinite(np.asarray(out.scores)).all()
    with pytest.raises(ValueError, match="eos_id=30 is outside the vocabulary.*V=30"):
        greedy_search(model_step_fn(model), params, cache, 3, max_length=8, eos_id=30)
