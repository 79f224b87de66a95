"""BART checkpoints against transformers: the tiny random-weight fixture of
``tools/make_tiny_bart.py`` (logits on a padded batch, ``generate`` with the forced first token
and ``early_stopping``), the export round trip, bfloat16, and BART's tokenizer on
``roberta-base``'s real files (skipped where ``../shared`` is absent)."""
from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.pretrained import load_pretrained, load_translator, save_pretrained
from textkit.pretrained.bart import BartTokenizer
from textkit.pretrained.encoder_tokenizer import EncoderTokenizer

FIXTURES = Path(__file__).resolve().parent / "fixtures"
BART = FIXTURES / "tiny_bart"
ROBERTA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tokenizers" / "roberta-base"


@pytest.fixture(scope="module")
def bart():
    return load_pretrained(BART)


@pytest.fixture(scope="module")
def ref():
    return json.loads((BART / "reference.json").read_text("utf-8"))


def padded(rows: list[list[int]], pad: int) -> np.ndarray:
    tokens = np.full((len(rows), max(map(len, rows))), pad, np.int32)
    for row, ids in enumerate(rows):
        tokens[row, :len(ids)] = ids
    return tokens


def test_the_fixture_loads_as_bart(bart, ref):
    config = bart.model.config
    assert bart.kind == "translation" and config.architecture == "bart"
    assert (config.pre_norm, config.embedding_norm, config.positions,
            config.position_offset) == (False, True, "learned", 2)
    assert bart.tokenizer.encode(ref["inputs"]) == ref["input_ids"]
    quiet = bart.target_tokenizer.configured(add_eos=False)
    assert [ids + [quiet.eos_id] for ids in quiet.encode(ref["targets"])] == ref["target_ids"]
    assert bart.target_tokenizer.decoder_start_id == 2 == ref["decoder_input_ids"][0][0]


def test_logits_match_transformers_on_a_padded_batch(bart, ref):
    tokens = padded(ref["input_ids"], bart.tokenizer.pad_id)
    logits = bart.model.apply({"params": bart.params}, jnp.asarray(tokens),
                              jnp.asarray(ref["decoder_input_ids"], jnp.int32))
    expected = np.asarray(ref["logits"])
    mask = np.asarray(ref["decoder_input_ids"]) != bart.tokenizer.pad_id
    # float32 rounding alone: 1.2e-5 at most on logits up to |14| (1e-6 of the scale)
    np.testing.assert_allclose(np.asarray(logits)[mask], expected[mask], rtol=0,
                               atol=1e-6 * np.abs(expected).max())


@pytest.mark.parametrize("run,options", [
    ("greedy", dict(beam_size=1)), ("beam4", {}),
    ("beam4_early_false", dict(early_stopping=False)), ("beam4_lp0", dict(alpha=0.0)),
    ("greedy_no_repeat1", dict(beam_size=1, no_repeat_ngram=1)),
    ("beam4_no_repeat1", dict(no_repeat_ngram=1))])
def test_outputs_match_generate(ref, run, options):
    translator, params = load_translator(BART, **options)
    assert translator.forced_bos == 0 and translator.early_stopping is options.get(
        "early_stopping", True)
    ids = translator.translate_ids(params, translator.src_tokenizer.encode(ref["inputs"]))
    generated = [[i for i in row[2:] if i != translator.pad_id] for row in ref[run]["ids"]]
    assert all(row[1] == 0 for row in ref[run]["ids"])        # the forced first token
    assert ids == [row[:-1] if row and row[-1] == translator.eos_id else row
                   for row in generated]
    assert translator.translate(params, ref["inputs"]) == ref[run]["text"]


def test_export_round_trip_is_exact(bart, tmp_path):
    save_pretrained(bart.model, bart.params, (bart.tokenizer, bart.target_tokenizer),
                    tmp_path / "out", generation=bart.generation)
    again = load_pretrained(tmp_path / "out")
    assert again.model.config == bart.model.config
    jax.tree_util.tree_map(np.testing.assert_array_equal, again.params, bart.params)
    assert again.generation == bart.generation
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (hf["model_type"], hf["architectures"]) == ("bart", ["BartForConditionalGeneration"])


def test_bfloat16_keeps_the_float32_argmax(ref):
    f32 = load_pretrained(BART)
    bf16 = load_pretrained(BART, policy="mixed_bfloat16")
    tokens = jnp.asarray(padded(ref["input_ids"], f32.tokenizer.pad_id))
    target = jnp.asarray(ref["decoder_input_ids"], jnp.int32)
    mask = np.asarray(target) != f32.tokenizer.pad_id
    a = np.asarray(f32.model.apply({"params": f32.params}, tokens, target)).argmax(-1)
    b = np.asarray(bf16.model.apply({"params": bf16.params}, tokens, target)).argmax(-1)
    assert (a == b)[mask].mean() >= 0.99


def test_language_codes_are_refused_by_name(bart):
    with pytest.raises(ValueError, match="BART checkpoints take no language codes"):
        bart.tokenizer.for_languages("en_XX", None)


@pytest.mark.skipif(not ROBERTA.is_dir(), reason="../shared/data/tokenizers/roberta-base is "
                    "absent (a fresh clone without the shared data)")
def test_roberta_base_files_give_transformers_ids():
    expected = json.loads((FIXTURES / "seq2seq_tokenizers" / "bart.json").read_text("utf-8"))
    tokenizer = BartTokenizer(EncoderTokenizer.from_directory(ROBERTA, "roberta"), 2)
    assert tokenizer.encode(expected["texts"]) == expected["ids"]
    assert tokenizer.decode(expected["ids"]) == expected["decoded"]


@pytest.mark.slow
def test_fine_tune_and_export(tmp_path):
    """``examples/nmt/train.py --init-from`` a BART checkpoint: a few steps, then the evaluated
    parameters exported in BART's layout, loading back to exactly those parameters."""
    from subprocesses import load_script

    from textkit.training import RunDir

    root = Path(__file__).resolve().parents[1]
    train = load_script(root / "examples" / "nmt" / "train.py", "nmt_train")
    summary = train.main([
        "--init-from", str(BART), "--max-steps", "3", "--toy-sizes", "60,4,4",
        "--eval-every", "0", "--max-length", "60", "--batch-tokens", "512",
        "--decode-batch-size", "4", "--lr", "1e-3", "--save-dir", str(tmp_path / "run")])
    assert summary["steps"] == 3 and summary["export"] == str(tmp_path / "run" / "export")
    exported = load_pretrained(tmp_path / "run" / "export")
    assert exported.model.config.architecture == "bart"
    assert exported.generation == load_pretrained(BART).generation
    final, _ = RunDir(tmp_path / "run").load_final(jax.eval_shape(lambda: exported.params))
    jax.tree_util.tree_map(np.testing.assert_array_equal, exported.params, final)
    with pytest.raises(SystemExit):
        train.main(["--export", "--max-steps", "1", "--save-dir", str(tmp_path / "other")])
