"""Damaged files textkit reads are named (issue 44): tokenizer and generation settings of wrong
types, tokenizer and vocabulary files that are not what they claim, a run's config.json, and
token stores whose files disagree. Each error is a TextkitError naming the file (and key or
line) and what was expected."""

from __future__ import annotations

import json

import numpy as np
import pytest

from textkit.data.token_store import TokenStore, TokenStoreError, build_token_store
from textkit.errors import TextkitError
from textkit.pretrained import EncoderTokenizer
from textkit.pretrained.errors import PretrainedError
from textkit.pretrained.files import GENERATION_TYPES, read_settings
from textkit.pretrained.loader import generation_options
from textkit.training import RunDir
from textkit.training.run_dir import DamagedRunFileError

VOCAB = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\n##s\n"


@pytest.fixture
def bert_dir(tmp_path):
    root = tmp_path / "bert"
    root.mkdir()
    (root / "vocab.txt").write_text(VOCAB, encoding="utf-8")
    return root


def test_an_intact_vocabulary_still_loads(bert_dir):
    (bert_dir / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": True, "pad_token": {"content": "[PAD]"}, "strip_accents": None}))
    assert EncoderTokenizer.from_directory(bert_dir, "bert").encode_batch(["the cats"])[
        "input_ids"].tolist() == [[2, 5, 6, 7, 3]]


@pytest.mark.parametrize("settings,match", [
    ('{"do_lower_case": "yes"', r"tokenizer_config\.json: not valid JSON"),
    ('{"do_lower_case": "yes"}', r'tokenizer_config\.json: do_lower_case is "yes", expected '
     r"true or false"),
    ('{"pad_token": 0}', r"tokenizer_config\.json: pad_token is 0, expected a string or an "
     r"object with a string content"),
    ('{"model_max_length": "512"}', r'model_max_length is "512", expected a number'),
])
def test_tokenizer_settings_of_the_wrong_type_are_named(bert_dir, settings, match):
    (bert_dir / "tokenizer_config.json").write_text(settings)
    with pytest.raises(PretrainedError, match=match):
        EncoderTokenizer.from_directory(bert_dir, "bert")


@pytest.mark.parametrize("damage,match", [
    (lambda d: (d / "vocab.txt").write_text(""), r"vocab\.txt: empty \(expected one WordPiece"),
    (lambda d: (d / "vocab.txt").write_bytes(VOCAB.encode() + b"caf\xe9\n"),
     r"vocab\.txt, line 9: invalid utf-8"),
    (lambda d: (d / "tokenizer.json").write_text('{"version": "1.0", "model": '),
     r"tokenizer\.json: not a tokenizers file, or damaged"),
])
def test_damaged_tokenizer_files_are_named(bert_dir, damage, match):
    damage(bert_dir)
    with pytest.raises(PretrainedError, match=match):
        EncoderTokenizer.from_directory(bert_dir, "bert")


@pytest.mark.parametrize("settings,match", [
    ({"num_beams": "4"}, r'num_beams is "4", expected an integer'),
    ({"length_penalty": [1.0]}, r"length_penalty is \[1.0\], expected a number"),
    ({"eos_token_id": [0, "</s>"]}, r"eos_token_id is .*expected an integer or a list of "
     "integers"),
    ({"do_sample": 1}, "do_sample is 1, expected true or false"),
])
def test_generation_settings_of_the_wrong_type_are_named(tmp_path, settings, match):
    path = tmp_path / "generation_config.json"
    path.write_text(json.dumps(settings))
    with pytest.raises(PretrainedError, match=rf"{path}: {match}"):
        generation_options(tmp_path)
    with pytest.raises(PretrainedError, match=match):
        read_settings(path, GENERATION_TYPES)


def test_generation_settings_with_nulls_and_id_lists_load(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"num_beams": 4, "eos_token_id": [0, 2], "pad_token_id": None, "length_penalty": 1}))
    assert generation_options(tmp_path)["beam_size"] == 4


@pytest.mark.parametrize("text,match", [
    ('{"seed": 1', r"config\.json is not valid JSON .*damaged or truncated"),
    ("[1, 2]", r"config\.json holds a JSON list, not an object of settings"),
])
def test_a_damaged_run_config_is_named(tmp_path, text, match):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(DamagedRunFileError, match=match):
        RunDir.start(tmp_path, "unused", {"seed": 1}, resume=True)
    assert (tmp_path / "config.json").read_text() == text          # left as it was


class Chars:
    def __len__(self):
        return 300

    def encode(self, texts):
        return [[ord(c) % 300 for c in text] for text in texts]


def _meta(store, **changes):
    meta = json.loads((store / "meta.json").read_text())
    (store / "meta.json").write_text(json.dumps({**meta, **changes}))


@pytest.mark.parametrize("damage,name,match", [
    (lambda d: (d / "meta.json").write_text('{"format": '), "meta.json", "not valid JSON"),
    (lambda d: _meta(d, fields=None), "meta.json", "fields is None, expected a list"),
    (lambda d: _meta(d, dtype="float64"), "meta.json", "dtype is 'float64', expected one of"),
    (lambda d: (d / "lengths.npy").write_bytes((d / "lengths.npy").read_bytes()[:-4]),
     "lengths.npy", "unreadable"),
    (lambda d: np.save(d / "lengths.npy", np.ones(3, np.int32)), "lengths.npy",
     r"int32 \[3\], expected integers \[num_samples, 2\]"),
    (lambda d: (d / "tgt.bin").unlink(), "tgt.bin", "missing"),
])
def test_a_damaged_token_store_is_named_and_rebuilt(tmp_path, damage, name, match):
    build = lambda: build_token_store(tmp_path / "s", lambda: [("abc", "de")] * 3,  # noqa: E731
                                      [Chars(), Chars()], key="k")
    build()
    damage(tmp_path / "s")
    with pytest.raises(TokenStoreError, match=rf"s/{name}: {match}.*the store is damaged"):
        TokenStore(tmp_path / "s")
    assert issubclass(TokenStoreError, TextkitError)
    assert build()[2][1].tolist() == [ord("d"), ord("e")]


def test_a_metrics_file_cut_by_a_killed_run_is_tolerated_on_resume(tmp_path):
    from textkit.training.writers import JsonlWriter

    path = tmp_path / "metrics.jsonl"
    rows = [{"kind": "train", "step": s, "epoch": 0, "wall_s": 1.0, "loss": 2.0} for s in (1, 2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"kind": "train", "st')
    writer = JsonlWriter(path)
    writer.start(2)                               # the resumed run's step
    writer.write("train", 3, 0, {"loss": 1.5})
    writer.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3]


@pytest.mark.parametrize("family,key,value,expected", [
    ("bert", "hidden_size", "768", "an integer"),
    ("bert", "layer_norm_eps", None, None),
    ("llama", "num_key_value_heads", 2.5, "an integer"),
    ("gpt2", "n_embd", [64], "an integer"),
    ("llama", "rms_norm_eps", "1e-6", "a number"),
])
def test_a_model_config_value_of_the_wrong_type_is_named(tmp_path, family, key, value,
                                                         expected):
    from textkit.pretrained.decoders import decoder_config
    from textkit.pretrained.encoders import encoder_config

    build = encoder_config if family == "bert" else decoder_config
    config = {"model_type": family, key: value}
    if expected is None:                    # null is "not set": the missing keys are named
        with pytest.raises(PretrainedError, match="missing the key"):
            build(config, tmp_path)
        return
    with pytest.raises(PretrainedError, match=rf"{tmp_path / 'config.json'}: {key} is "
                       rf".*, expected {expected}"):
        build(config, tmp_path)
