"""Decoder-only checkpoints (GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma) against transformers:
the tiny random-weight fixtures of ``tools/make_tiny_decoders.py`` with transformers' logits on
left- and right-padded batches and its ``generate`` outputs; export and reload; generation
options and bad input."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.decoding import GenerationConfig, Generator
from textkit.decoding.generate import _choose
from textkit.pretrained import load_pretrained, save_pretrained
from textkit.pretrained.errors import PretrainedError, UnsupportedArchitectureError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "decoders"
FAMILIES = ["gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma"]
_LOADED: dict = {}


def loaded(name: str, **overrides):
    key = (name, tuple(sorted(overrides.items())))
    if key not in _LOADED:
        _LOADED[key] = load_pretrained(FIXTURES / name, **overrides)
    return _LOADED[key]


def reference(name: str) -> dict:
    return json.loads((FIXTURES / name / "reference.json").read_text())


def test_fixtures_are_small():
    size = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert size < 2_000_000


@pytest.mark.parametrize("name", FAMILIES)
def test_logits_match_transformers_on_padded_batches(name):
    pretrained = loaded(name)
    assert pretrained.kind == "causal_lm"
    arrays = np.load(FIXTURES / name / "reference.npz")
    for side in ("left", "right"):
        mask = arrays[f"{side}_mask"].astype(bool)
        logits = pretrained.model.apply({"params": pretrained.params},
                                        jnp.asarray(arrays[f"{side}_ids"], jnp.int32),
                                        jnp.asarray(mask))
        # float32 rounding alone: transformers' own float32 logits of the qwen2 fixture lie
        # 1e-6 of their scale (|20|) from its float64 ones, and textkit's as far on the other
        # side; a tolerance of 4e-6 of the scale passes both jax ends, a real bug is >1e-3
        expected = arrays[f"{side}_logits"][mask]
        np.testing.assert_allclose(np.asarray(logits)[mask], expected, rtol=0,
                                   atol=4e-6 * np.abs(expected).max())


@pytest.mark.parametrize("name", FAMILIES)
def test_padding_never_changes_a_row(name):
    """A prompt's logits in a padded batch equal those of the prompt alone."""
    pretrained = loaded(name)
    apply = jax.jit(lambda t, m: pretrained.model.apply({"params": pretrained.params}, t, m))
    row = np.array([5, 17, 42, 9, 11], np.int32)
    alone = np.asarray(apply(row[None], np.ones((1, 5), bool)))[0]
    for left in (True, False):
        tokens = np.full((1, 9), 2, np.int32)
        mask = np.zeros((1, 9), bool)
        span = slice(4, 9) if left else slice(0, 5)
        tokens[0, span], mask[0, span] = row, True
        padded = np.asarray(apply(tokens, mask))[0, span]
        np.testing.assert_allclose(padded, alone, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_and_beam_equal_generate(name):
    pretrained, ref = loaded(name), reference(name)
    generator = Generator.from_pretrained(pretrained, max_new_tokens=ref["max_new_tokens"],
                                          batch_size=8)
    assert generator.config.eos_ids == tuple(ref["eos_token_id"])
    greedy = generator.generate(pretrained.params, ref["prompts"])
    assert [g.token_ids for g in greedy] == ref["greedy"]
    beams = generator.generate(pretrained.params, ref["prompts"], num_beams=4)
    assert [g.token_ids for g in beams] == ref["beam4"]
    assert greedy[0].text == pretrained.tokenizer.decode(ref["greedy"][0])


def test_stream_pieces_join_to_the_generated_text():
    pretrained, ref = loaded("qwen2"), reference("qwen2")
    generator = Generator.from_pretrained(pretrained, max_new_tokens=10, batch_size=4)
    prompts = ref["prompts"][:4]
    whole = generator.generate(pretrained.params, prompts)
    pieces = {i: "" for i in range(4)}
    for index, piece in generator.generate_stream(pretrained.params, prompts, chunk_size=3):
        pieces[index] += piece
    assert [pieces[i] for i in range(4)] == [g.text for g in whole]


def test_batches_run_one_ahead_and_equal_each_batch_generated_alone(monkeypatch):
    """Seven prompts in four batches: batch n + 1 is dispatched before batch n is read back,
    and every output (greedy, sampled, beam, streamed) equals that of its batch generated in
    a call of its own, where nothing runs ahead."""
    pretrained, ref = loaded("qwen2"), reference("qwen2")
    prompts = ref["prompts"][:7]
    generator = Generator.from_pretrained(pretrained, max_new_tokens=6, batch_size=2)
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))   # longest first
    batches = [order[k:k + 2] for k in range(0, len(order), 2)]
    for options in ({}, {"num_beams": 2}):
        together = generator.generate(pretrained.params, prompts, **options)
        alone = {}
        for batch in batches:
            alone.update(zip(batch, generator.generate(
                pretrained.params, [prompts[i] for i in batch], **options)))
        assert together == [alone[i] for i in range(len(prompts))], options
    # sampled rows draw from their own keys: the batching does not change them
    sampled = generator.generate(pretrained.params, prompts, seed=5, do_sample=True, top_k=20)
    wider = Generator.from_pretrained(pretrained, max_new_tokens=6, batch_size=4)
    assert wider.generate(pretrained.params, prompts, seed=5, do_sample=True,
                          top_k=20) == sampled
    assert generator.generate(pretrained.params, prompts[:1], seed=5, do_sample=True,
                              top_k=20) == sampled[:1]
    pieces = {i: "" for i in range(len(prompts))}
    for index, piece in generator.generate_stream(pretrained.params, prompts, chunk_size=2):
        pieces[index] += piece
    greedy = generator.generate(pretrained.params, prompts)
    assert [pieces[i] for i in range(len(prompts))] == [g.text for g in greedy]

    events = []
    dispatch, collect = generator._dispatch_batch, generator._collect_batch
    monkeypatch.setattr(generator, "_dispatch_batch",
                        lambda *a: events.append("dispatch") or dispatch(*a))
    monkeypatch.setattr(generator, "_collect_batch",
                        lambda *a: events.append("read") or collect(*a))
    assert generator.generate(pretrained.params, prompts) == greedy
    assert events == ["dispatch", "dispatch", "read", "dispatch", "read", "dispatch", "read",
                      "read"]


def test_sampling_is_seeded_and_filters_as_transformers():
    pretrained = loaded("llama")
    generator = Generator.from_pretrained(pretrained, max_new_tokens=6, batch_size=2,
                                          do_sample=True, top_k=20, top_p=0.9)
    prompts = [[5, 6, 7], [9]]
    first = generator.generate(pretrained.params, prompts, seed=3)
    assert first == generator.generate(pretrained.params, prompts, seed=3)
    data = json.loads((FIXTURES / "sampling.json").read_text())
    logits = jnp.asarray(data["logits"], jnp.float32)
    for case in data["cases"]:
        config = GenerationConfig(do_sample=True, **case["settings"])
        choose = jax.jit(jax.vmap(lambda key, config=config: _choose(
            config, logits, jax.random.split(key, len(logits)))))
        draws = np.asarray(choose(jax.random.split(jax.random.key(0), 300)))  # [300, rows]
        for row, support in enumerate(case["support"]):
            assert set(draws[:, row]) <= set(support)
            if len(support) <= 5:
                assert set(draws[:, row]) == set(support)


def test_repetition_penalty_and_no_repeat_ngrams_change_greedy_output():
    pretrained, ref = loaded("gpt2"), reference("gpt2")
    generator = Generator.from_pretrained(pretrained, max_new_tokens=10, batch_size=4,
                                          min_new_tokens=10)
    prompts = ref["prompts"][:4]
    for out in generator.generate(pretrained.params, prompts, no_repeat_ngram_size=1):
        assert len(out.token_ids) == 10 and len(set(out.token_ids)) == 10
    for out in generator.generate(pretrained.params, prompts, no_repeat_ngram_size=2):
        grams = list(zip(out.token_ids, out.token_ids[1:]))
        assert len(grams) == len(set(grams))


def test_mixed_precision_keeps_the_float32_argmax():
    arrays = np.load(FIXTURES / "llama" / "reference.npz")
    mask = arrays["right_mask"].astype(bool)
    tokens = jnp.asarray(arrays["right_ids"], jnp.int32)
    full = loaded("llama")
    half = loaded("llama", policy="mixed_bfloat16")
    want = np.asarray(full.model.apply({"params": full.params}, tokens, mask)).argmax(-1)
    got = np.asarray(half.model.apply({"params": half.params}, tokens, mask)).argmax(-1)
    assert (want == got)[mask].mean() >= 0.99


@pytest.mark.parametrize("name", ["gpt2", "qwen3", "gemma"])
def test_export_round_trip_is_exact(name, tmp_path):
    import os

    pretrained = loaded(name)
    mask = os.umask(0o022)
    try:
        save_pretrained(pretrained.model, pretrained.params, pretrained.tokenizer,
                        tmp_path / name, generation=pretrained.generation)
    finally:
        os.umask(mask)
    assert (tmp_path / name / "model.safetensors").stat().st_mode & 0o777 == 0o644
    again = load_pretrained(tmp_path / name)
    assert again.model.config == pretrained.model.config
    jax.tree_util.tree_map(np.testing.assert_array_equal, again.params, pretrained.params)
    assert again.generation["eos_token_id"] == pretrained.generation["eos_token_id"]
    assert again.tokenizer.encode("the cat sat") == pretrained.tokenizer.encode("the cat sat")


def _edited(tmp_path: Path, name: str, **changes) -> Path:
    target = tmp_path / name
    target.mkdir(parents=True)
    for path in (FIXTURES / name).iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    config = json.loads((target / "config.json").read_text())
    config.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        config.pop(key)
    (target / "config.json").write_text(json.dumps(config))
    return target


def test_unsupported_options_are_named(tmp_path):
    with pytest.raises(UnsupportedArchitectureError, match="architectures"):
        load_pretrained(_edited(tmp_path, "llama",
                                architectures=["LlamaForSequenceClassification"]))
    root = _edited(tmp_path / "b", "llama",
                   rope_parameters={"rope_type": "yarn", "factor": 2.0})
    with pytest.raises(UnsupportedArchitectureError, match="rope_type"):
        load_pretrained(root)
    with pytest.raises(PretrainedError, match="hidden_size"):
        load_pretrained(_edited(tmp_path / "c", "qwen2", hidden_size=None))


def test_bad_prompts_and_settings_are_refused():
    pretrained = loaded("llama")
    generator = Generator.from_pretrained(pretrained, max_new_tokens=100, batch_size=2)
    with pytest.raises(ValueError, match="prompt 1 has 40 tokens.*128 positions"):
        generator.generate(pretrained.params, [[5], [7] * 40])
    cutting = Generator.from_pretrained(pretrained, max_new_tokens=100, batch_size=2,
                                        truncate=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = cutting.generate(pretrained.params, [[7] * 40], max_new_tokens=100)
    assert "prompt 0: 40 tokens cut to its last 28" in str(caught[0].message)
    assert len(out[0].token_ids) <= 100
    empty = generator.generate(pretrained.params, [""], max_new_tokens=3)
    assert len(empty[0].token_ids) >= 1                       # generated from BOS
    for bad in ({"temperature": 0.0}, {"top_p": 1.5}, {"min_p": -0.1}, {"top_k": -1},
                {"max_new_tokens": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            GenerationConfig(**bad)


def test_generate_recipe_prints_jsonl_in_input_order(capsys):
    from textkit.cli.generate import main

    ref = reference("mistral")
    prompts = [" ".join(map(str, p)) for p in ref["prompts"][:3]]
    assert main(["--pretrained", str(FIXTURES / "mistral"), "--jsonl", "--max-new-tokens", "4",
                 *[a for p in prompts for a in ("--prompt", p)]]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    tokenizer = loaded("mistral").tokenizer
    generator = Generator.from_pretrained(loaded("mistral"), max_new_tokens=4)
    want = generator.generate(loaded("mistral").params, prompts)
    assert [r["token_ids"] for r in rows] == [w.token_ids for w in want]
    assert [r["text"] for r in rows] == [tokenizer.decode(w.token_ids) for w in want]
    with pytest.raises(SystemExit) as exit_:
        main(["--pretrained", str(FIXTURES / "mistral"), "--chat", "--prompt", "x"])
    assert exit_.value.code == 2 and "no chat_template" in capsys.readouterr().err


@pytest.mark.slow
def test_int8_weights_mostly_keep_the_greedy_choice():
    """int8 weights round every matrix: most first choices stay (a measure, not identity)."""
    pretrained, ref = loaded("gpt2"), reference("gpt2")
    generator = Generator.from_pretrained(pretrained, max_new_tokens=4, batch_size=8,
                                          quantize="int8")
    out = generator.generate(pretrained.params, ref["prompts"])
    assert generator.generate(pretrained.params, ref["prompts"]) == out     # quantized once
    agree = sum(o.token_ids[:1] == r[:1] for o, r in zip(out, ref["greedy"]))
    assert agree >= 16, agree
    with pytest.raises(ValueError, match="quantize"):
        Generator.from_pretrained(pretrained, quantize="int4")


def test_damaged_weights_are_named(tmp_path):
    """A cut file, an absurd header length and a damaged shard each name the file."""
    import struct

    from safetensors.numpy import load_file, save_file

    cut = _edited(tmp_path / "cut", "llama")
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[:len(data) // 2])
    with pytest.raises(PretrainedError, match=r"cut/llama/model.safetensors: cut short"):
        load_pretrained(cut)
    absurd = _edited(tmp_path / "absurd", "llama")
    (absurd / "model.safetensors").write_bytes(struct.pack("<Q", 10 ** 12) + data[8:])
    with pytest.raises(PretrainedError, match="header length field says 1,000,000,000,000"):
        load_pretrained(absurd)
    sharded = _edited(tmp_path / "sharded", "llama")
    tensors = load_file(str(sharded / "model.safetensors"))
    (sharded / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"a.safetensors": names[::2], "b.safetensors": names[1::2]}
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(sharded / file))
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: f for f, ks in shards.items() for k in ks}}))
    assert load_pretrained(sharded).kind == "causal_lm"
    shard = (sharded / "b.safetensors").read_bytes()
    (sharded / "b.safetensors").write_bytes(shard[:-100])
    with pytest.raises(PretrainedError, match=r"b.safetensors \(a shard named by "
                                              r"model.safetensors.index.json\): cut short"):
        load_pretrained(sharded)


def test_stop_strings_end_a_row_after_the_string():
    pretrained, ref = loaded("qwen3"), reference("qwen3")
    generator = Generator.from_pretrained(pretrained, max_new_tokens=10, batch_size=4,
                                          min_new_tokens=10)
    prompts = ref["prompts"][:3]
    full = generator.generate(pretrained.params, prompts)
    stop = next(g.text[3:5] for g in full if len(g.text) > 6)
    cut = generator.generate(pretrained.params, prompts, stop_strings=(stop,))
    for whole, short in zip(full, cut):
        end = whole.text.find(stop)
        assert short.text == (whole.text if end < 0 else whole.text[:end + len(stop)])
        assert short.token_ids == whole.token_ids[:len(short.token_ids)]
        if end >= 0:        # the ids stop at the token that completes the stop string
            assert stop in pretrained.tokenizer.decode(short.token_ids)
            assert stop not in pretrained.tokenizer.decode(short.token_ids[:-1])


def test_a_tokenizer_larger_than_the_embeddings_is_refused(tmp_path):
    from textkit.pretrained.errors import VocabSizeMismatchError

    with pytest.raises(VocabSizeMismatchError, match="tokenizer has 320 ids but the model 100"):
        load_pretrained(_edited(tmp_path, "llama", vocab_size=100))


def test_stream_chunks_share_one_compiled_program():
    from textkit.decoding.generate import _advance

    pretrained = loaded("gemma")
    generator = Generator.from_pretrained(pretrained, max_new_tokens=9, batch_size=2,
                                          min_new_tokens=9)
    list(generator.generate_stream(pretrained.params, [[5, 6]], chunk_size=2))
    before = _advance._cache_size()
    pieces = list(generator.generate_stream(pretrained.params, [[7, 8, 9]], chunk_size=2))
    assert pieces and _advance._cache_size() == before     # 5 chunks, no new program
