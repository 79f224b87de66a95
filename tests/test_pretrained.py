"""Marian / OPUS-MT checkpoints: load, translate, export, fine-tune (no network, no torch).

The fixtures in ``tests/fixtures/tiny_marian*`` and their ``reference.json`` (MarianTokenizer
ids, teacher-forced logits, ``generate`` outputs) were made by ``tools/make_tiny_marian.py``
with transformers; textkit must reproduce them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.errors import TextkitError
from textkit.pretrained import (
    MissingFileError,
    NotCheckpointError,
    NotMarianCheckpointError,
    PretrainedError,
    UnsupportedArchitectureError,
    VocabSizeMismatchError,
    generation_options,
    load_pretrained,
    load_translator,
    marian,
    save_pretrained,
)
from textkit.tasks import translation
from textkit.training import RunDir

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
VARIANTS = ["tiny_marian", "tiny_marian_untied"]


def reference(name: str) -> dict:
    return json.loads((FIXTURES / name / "reference.json").read_text("utf-8"))


@pytest.fixture(scope="module", params=VARIANTS)
def loaded(request):
    return request.param, load_pretrained(FIXTURES / request.param)


def test_fixture_is_small():
    size = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file()
               and p.parent.name in VARIANTS)
    assert size < 1_000_000


def test_tokenizer_ids_match_marian_tokenizer(loaded):
    name, pretrained = loaded
    src, tgt = pretrained.tokenizer, pretrained.target_tokenizer
    ref = reference(name)
    assert src.encode(ref["inputs"]) == ref["input_ids"]       # includes unknown pieces
    assert tgt.encode(ref["targets"]) == ref["target_ids"]
    assert src.unk_id in sum(ref["input_ids"], [])
    assert tgt.bos_id == tgt.pad_id                            # Marian starts with pad


def test_logits_match_transformers(loaded):
    name, pretrained = loaded
    model, params, src = pretrained.model, pretrained.params, pretrained.tokenizer
    ref = reference(name)
    ids = ref["input_ids"]
    tokens = np.full((len(ids), max(map(len, ids))), src.pad_id, np.int32)
    for row, seq in enumerate(ids):
        tokens[row, :len(seq)] = seq
    logits = model.apply({"params": params}, jnp.asarray(tokens),
                         jnp.asarray(ref["decoder_input_ids"], jnp.int32))
    np.testing.assert_allclose(np.asarray(logits), np.asarray(ref["logits"]), atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("run,options", [("greedy", dict(beam_size=1)),
                                         ("beam4_lp0", dict(beam_size=4, alpha=0.0)),
                                         ("beam4", dict(beam_size=4))])
def test_outputs_match_generate(loaded, run, options):
    name, _ = loaded
    ref = reference(name)
    translator, params = load_translator(FIXTURES / name, **options)
    assert translator.translate(params, ref["inputs"]) == ref[run]["text"]
    ids = translator.translate_ids(params, translator.src_tokenizer.encode(ref["inputs"]))
    generated = [[i for i in row[1:] if i != translator.pad_id] for row in ref[run]["ids"]]
    assert ids == [row[:-1] if row and row[-1] == translator.eos_id else row
                   for row in generated]


def test_generation_options_map_the_config():
    options = generation_options(FIXTURES / "tiny_marian")
    pad = json.loads((FIXTURES / "tiny_marian" / "config.json").read_text())["pad_token_id"]
    assert options == {"beam_size": 4, "alpha": 1.0, "length_offset": 0.0, "max_length": 23,
                       "banned_ids": (pad,), "hf_compatible": True, "forced_eos": True}


def test_round_trip_is_exact(loaded, tmp_path):
    name, pretrained = loaded
    model, params = pretrained.model, pretrained.params
    src, tgt = pretrained.tokenizer, pretrained.target_tokenizer
    gen = json.loads((FIXTURES / name / "generation_config.json").read_text())
    save_pretrained(model, params, (src, tgt), tmp_path / "out", generation=gen)
    again = load_pretrained(tmp_path / "out")
    assert again.model.config == model.config
    jax.tree_util.tree_map(np.testing.assert_array_equal, again.params, params)
    ref = reference(name)
    assert again.tokenizer.encode(ref["inputs"]) == ref["input_ids"]
    keys = json.loads((tmp_path / "out" / "config.json").read_text())
    assert keys["model_type"] == "marian"
    assert generation_options(tmp_path / "out") == generation_options(FIXTURES / name)


def _copy(tmp_path: Path, name: str = "tiny_marian") -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return target


def _edit_config(path: Path, **changes) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def test_not_a_checkpoint_directory(tmp_path):
    with pytest.raises(NotCheckpointError, match="no config.json"):
        load_pretrained(tmp_path)
    with pytest.raises(NotCheckpointError, match="not a directory"):
        load_pretrained(tmp_path / "nothing")
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(NotCheckpointError, match="expected a JSON object"):
        load_pretrained(tmp_path)


def test_unknown_model_type_names_file_key_and_value(tmp_path):
    path = _copy(tmp_path)
    _edit_config(path, model_type="pegasus")
    with pytest.raises(UnsupportedArchitectureError,
                       match=r"tiny_marian/config\.json: model_type='pegasus' is not supported"):
        load_pretrained(path)
    with pytest.raises(NotMarianCheckpointError, match="model_type is 'pegasus'"):
        marian.load(path, json.loads((path / "config.json").read_text()))
    assert issubclass(PretrainedError, TextkitError) and issubclass(PretrainedError, ValueError)


@pytest.mark.parametrize("missing", ["vocab.json", "target.spm", "model.safetensors"])
def test_missing_file_is_named(tmp_path, missing):
    path = _copy(tmp_path)
    (path / missing).unlink()
    with pytest.raises(MissingFileError, match=missing.replace(".", r"\.")):
        load_pretrained(path)


@pytest.mark.parametrize("key,value,match", [
    ("activation_function", "tanh", "activation_function='tanh'"),
    ("decoder_ffn_dim", 64, "decoder_ffn_dim=64"),
    ("normalize_before", True, "normalize_before=True"),
])
def test_unsupported_option_names_key_and_value(tmp_path, key, value, match):
    path = _copy(tmp_path)
    _edit_config(path, **{key: value})
    with pytest.raises(UnsupportedArchitectureError, match=match):
        load_pretrained(path)


def test_vocab_size_mismatch(tmp_path):
    path = _copy(tmp_path)
    vocab_size = json.loads((path / "config.json").read_text())["vocab_size"]
    _edit_config(path, vocab_size=vocab_size + 5, decoder_vocab_size=vocab_size + 5)
    with pytest.raises(VocabSizeMismatchError, match="shape"):
        load_pretrained(path)
    _edit_config(path, vocab_size=vocab_size - 5, decoder_vocab_size=vocab_size - 5)
    with pytest.raises(VocabSizeMismatchError, match="vocabulary"):
        load_pretrained(path)


@pytest.mark.slow
def test_translate_script_pretrained():
    ref = reference("tiny_marian")
    text = "".join(line + "\n" for line in ref["inputs"])
    for flags, run in ((["--beam-size", "1"], "greedy"),
                       (["--beam-size", "4", "--alpha", "0"], "beam4_lp0")):
        done = subprocess.run(
            [sys.executable, "examples/nmt/translate.py", "--pretrained",
             str(FIXTURES / "tiny_marian"), *flags], input=text.encode(), cwd=ROOT,
            capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr.decode()
        assert done.stdout.decode().splitlines() == ref[run]["text"]
    done = subprocess.run([sys.executable, "examples/nmt/translate.py", "--pretrained",
                           str(ROOT / "tests")], input=b"x\n", cwd=ROOT, capture_output=True,
                          timeout=300)
    assert done.returncode != 0 and b"no config.json" in done.stderr


@pytest.mark.slow
def test_fine_tune_from_pretrained(tmp_path):
    from subprocesses import load_script

    train = load_script(ROOT / "examples" / "nmt" / "train.py", "nmt_train")
    summary = train.main([
        "--init-from", str(FIXTURES / "tiny_marian"), "--max-steps", "4",
        "--toy-sizes", "120,8,8", "--eval-every", "0", "--max-length", "60",
        "--batch-tokens", "1024", "--decode-batch-size", "8", "--lr", "1e-3",
        "--save-dir", str(tmp_path / "run")])
    assert summary["steps"] == 4 and summary["stopped_by"] == "steps"
    assert len((tmp_path / "run" / "test.hyp").read_text().splitlines()) == 8
    # the run started from the checkpoint's weights: four small steps away from them (a
    # random init would be far off), every tensor moved, none missing or added
    pretrained = translation.init_from(str(FIXTURES / "tiny_marian"))
    params, _ = RunDir(tmp_path / "run").load_final(jax.eval_shape(lambda: pretrained.params))
    assert summary["num_params"] == sum(x.size for x in jax.tree_util.tree_leaves(params))
    moved = jax.tree_util.tree_leaves(jax.tree_util.tree_map(
        lambda a, b: float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b)))),
        params, pretrained.params))
    assert 0 < min(moved) and max(moved) < 1e-3, (min(moved), max(moved))


def test_every_family_loads_as_one_typed_result():
    """``load_pretrained`` gives the same ``Pretrained`` type for every family, fields by
    name (not a tuple whose length depends on the family)."""
    from textkit.pretrained import Pretrained

    marian = load_pretrained(FIXTURES / "tiny_marian")
    encoder = load_pretrained(FIXTURES / "encoders" / "bert_seqcls")
    assert type(marian) is type(encoder) is Pretrained
    assert (marian.kind, encoder.kind) == ("translation", "encoder")
    assert marian.target_tokenizer is not None and encoder.target_tokenizer is None
    assert marian.generation["num_beams"] == 4 and encoder.generation == {}
    with pytest.raises(TypeError):
        _model, _params, _tokenizer = encoder          # no positional unpacking
