"""T5 v1.0, T5 v1.1 / Flan-T5 and mT5 against transformers: the tiny random-weight fixtures of
``tools/make_tiny_t5.py`` (tokenizer ids with the task prefix, logits on a padded batch,
``generate`` greedy and beam 4 on 20 sources, the relative-position buckets of both
directions), T5's real ``spiece.model`` (``../shared``), the export round trip, bfloat16, the
task prefixes of ``task_specific_params`` and the errors a user meets."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.models.relative_bias import RelativePositionBias, relative_buckets
from textkit.pretrained import load_pretrained, load_translator, save_pretrained
from textkit.pretrained.errors import LanguageError, PretrainedError
from textkit.pretrained.t5_tokenizer import T5Tokenizer

FIXTURES = Path(__file__).resolve().parent / "fixtures"
T5, T5_V1_1, MT5 = (FIXTURES / n for n in ("tiny_t5", "tiny_t5_v1_1", "tiny_mt5"))
SPIECE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tokenizers" / "t5"


@pytest.fixture(scope="module", params=[T5, T5_V1_1, MT5], ids=["t5", "t5_v1_1", "mt5"])
def fixture(request):
    return request.param


@pytest.fixture(scope="module")
def t5(fixture):
    return load_pretrained(fixture)


@pytest.fixture(scope="module")
def ref(fixture):
    return json.loads((fixture / "reference.json").read_text("utf-8"))


def padded(rows: list[list[int]], pad: int) -> np.ndarray:
    tokens = np.full((len(rows), max(map(len, rows))), pad, np.int32)
    for row, ids in enumerate(rows):
        tokens[row, :len(ids)] = ids
    return tokens


def test_the_config_reads_each_variant(fixture, t5):
    config = t5.model.config
    hf = json.loads((fixture / "config.json").read_text())
    assert config.architecture == hf["model_type"]
    assert (config.head_dim, config.relative_buckets, config.relative_max_distance) == (4, 8, 20)
    assert config.head_dim * config.num_heads != config.d_model
    v1_0 = fixture == T5
    assert (config.tie_output, config.scale_decoder_output, config.gated_ff) == (
        v1_0, v1_0, not v1_0)
    assert config.activation == ("relu" if v1_0 else "gelu_new")


def test_tokenizer_ids_with_the_prefix(t5, ref):
    source = t5.tokenizer.configured(prefix=ref["prefix"])
    assert source.encode(ref["sources"]) == ref["input_ids"]
    assert t5.target_tokenizer.encode(ref["targets"]) == ref["target_ids"]
    assert t5.tokenizer.encode(["x"])[0][-1] == t5.tokenizer.eos_id == 1
    assert t5.target_tokenizer.decoder_start_id == t5.tokenizer.pad_id == 0


def test_logits_match_transformers_on_a_padded_batch(t5, ref):
    tokens = padded(ref["input_ids"][:6], t5.tokenizer.pad_id)
    logits = t5.model.apply({"params": t5.params}, jnp.asarray(tokens),
                            jnp.asarray(ref["decoder_input_ids"], jnp.int32))
    expected = np.asarray(ref["logits"])
    lengths = [len(ids) for ids in ref["target_ids"]]
    mask = np.arange(expected.shape[1])[None, :] < np.asarray(lengths)[:, None]
    np.testing.assert_allclose(np.asarray(logits)[mask], expected[mask], rtol=0,
                               atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("run", ["greedy", pytest.param("beam4", marks=pytest.mark.slow)])
def test_outputs_match_generate(fixture, ref, run):
    translator, params = load_translator(fixture, prefix=ref["prefix"],
                                         beam_size=ref[run]["options"]["num_beams"])
    ids = translator.translate_ids(params, translator.src_tokenizer.encode(ref["sources"]))
    eos = translator.eos_id
    generated = [row[1:] for row in ref[run]["ids"]]            # after the start token (pad)
    assert ids == [row[:row.index(eos)] if eos in row else row for row in generated]
    assert translator.translate(params, ref["sources"]) == ref[run]["text"]


def test_relative_buckets_equal_transformers_both_ways(t5, ref):
    distances = np.arange(-300, 301)
    for name, buckets in ref["buckets"].items():
        direction, count, limit = name.split("_")
        assert relative_buckets(distances, direction == "bidirectional", int(count),
                                int(limit)).tolist() == buckets, name
    table = np.asarray(t5.params["encoder_relative_bias"]["embedding"])        # [8, H]
    bias = RelativePositionBias(num_heads=2, buckets=8, max_distance=20, bidirectional=True)
    full = bias.apply({"params": {"embedding": table}}, 30, 40)                  # [1, H, Q, K]
    index = np.asarray(ref["buckets"]["bidirectional_8_20"])[
        np.arange(40)[None, :] - np.arange(30)[:, None] + 300]
    np.testing.assert_array_equal(np.asarray(full)[0], table[index].transpose(2, 0, 1))
    causal = RelativePositionBias(num_heads=2, buckets=8, max_distance=20, bidirectional=False)
    step = causal.apply({"params": {"embedding": table}}, jnp.asarray([0, 7, 29]), 30,
                        method="step")                                            # [3, H, 1, 30]
    index = np.asarray(ref["buckets"]["causal_8_20"])[
        np.arange(30)[None, :] - np.asarray([0, 7, 29])[:, None] + 300]
    np.testing.assert_array_equal(np.asarray(step)[:, :, 0], table[index].transpose(0, 2, 1))


@pytest.mark.skipif(not (SPIECE / "spiece.model").is_file(),
                    reason="T5's spiece.model is in ../shared/data/tokenizers/t5 (not in a "
                           "fresh clone)")
def test_the_real_spiece_model_gives_transformers_ids():
    expected = json.loads((FIXTURES / "t5_spiece_ids.json").read_text("utf-8"))
    tokenizer = T5Tokenizer.from_directory(SPIECE, 0)
    assert len(tokenizer) == expected["size"] == 32100
    assert tokenizer.encode(expected["texts"]) == expected["ids"]
    assert tokenizer.decode(expected["ids"]) == expected["decoded"]
    assert tokenizer.tokenizer.token_to_id("<extra_id_0>") == 32099


@pytest.mark.parametrize("name", ["tiny_t5", "tiny_t5_v1_1", "tiny_mt5"])
def test_export_round_trip_is_exact(name, tmp_path):
    t5 = load_pretrained(FIXTURES / name)
    save_pretrained(t5.model, t5.params, (t5.tokenizer, t5.target_tokenizer), tmp_path / "out")
    again = load_pretrained(tmp_path / "out")
    assert again.model.config == t5.model.config
    jax.tree_util.tree_map(np.testing.assert_array_equal, again.params, t5.params)
    assert again.tokenizer.encode(["the cat"]) == t5.tokenizer.encode(["the cat"])
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    original = json.loads((FIXTURES / name / "config.json").read_text())
    assert (hf["model_type"], hf["architectures"]) == (original["model_type"],
                                                       original["architectures"])


def test_bfloat16_keeps_the_float32_argmax():
    f32, bf16 = load_pretrained(T5_V1_1), load_pretrained(T5_V1_1, policy="mixed_bfloat16")
    ref = json.loads((T5_V1_1 / "reference.json").read_text("utf-8"))
    tokens = jnp.asarray(padded(ref["input_ids"][:6], 0))
    target = jnp.asarray(ref["decoder_input_ids"], jnp.int32)
    mask = np.arange(target.shape[1])[None, :] < np.asarray(
        [len(ids) for ids in ref["target_ids"]])[:, None]
    want = np.asarray(f32.model.apply({"params": f32.params}, tokens, target)).argmax(-1)
    got = np.asarray(bf16.model.apply({"params": bf16.params}, tokens, target)).argmax(-1)
    assert (want == got)[mask].mean() >= 0.99


def test_a_task_brings_its_prefix_and_settings():
    translator, _ = load_translator(T5, task="translation_en_to_de")
    assert translator.src_tokenizer.prefix == "translate English to German: "
    assert translator.beam_size == 4 and translator.max_length == 299
    with pytest.raises(PretrainedError, match=r"no task 'translation_en_to_es'.*it has "
                                              r"summarization, translation_en_to_de, "
                                              r"translation_en_to_fr"):
        load_translator(T5, task="translation_en_to_es")
    with pytest.raises(PretrainedError, match="it has none"):
        load_translator(T5_V1_1, task="summarization")


def test_a_prefix_for_a_family_without_one_warns():
    with pytest.warns(UserWarning, match="takes no text prefix; 'translate: ' is ignored"):
        translator, _ = load_translator(FIXTURES / "tiny_marian", prefix="translate: ")
    assert not hasattr(translator.src_tokenizer, "prefix")
    with pytest.raises(LanguageError, match="T5 checkpoints take no language codes"):
        load_translator(T5, src_lang="en", tgt_lang="de")


def test_a_bias_table_that_disagrees_with_the_bucket_count_is_named(tmp_path):
    copy = tmp_path / "t5"
    shutil.copytree(T5, copy)
    config = json.loads((copy / "config.json").read_text())
    config["relative_attention_num_buckets"] = 32
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(PretrainedError, match=r"relative_attention_bias.weight has 8 rows "
                                              r"\(buckets\) but config.json "
                                              r"relative_attention_num_buckets is 32"):
        load_pretrained(copy)



@pytest.mark.slow
def test_fine_tune_with_a_prefix_and_export(tmp_path):
    """``examples/nmt/train.py --init-from`` a T5 v1.1 checkpoint with ``--prefix``: a few
    steps, then the evaluated parameters exported in T5's layout (the untied head kept),
    loading back to exactly those parameters."""
    from subprocesses import load_script

    from textkit.training import RunDir

    root = Path(__file__).resolve().parents[1]
    train = load_script(root / "examples" / "nmt" / "train.py", "nmt_train_t5")
    summary = train.main([
        "--init-from", str(T5_V1_1), "--prefix", "translate English to German: ",
        "--max-steps", "3", "--toy-sizes", "60,4,4", "--eval-every", "0", "--max-length",
        "60", "--batch-tokens", "512", "--decode-batch-size", "4", "--lr", "1e-3",
        "--save-dir", str(tmp_path / "run")])
    assert summary["steps"] == 3 and summary["export"] == str(tmp_path / "run" / "export")
    exported = load_pretrained(tmp_path / "run" / "export")
    assert exported.model.config.architecture == "t5" and not exported.model.config.tie_output
    final, _ = RunDir(tmp_path / "run").load_final(jax.eval_shape(lambda: exported.params))
    jax.tree_util.tree_map(np.testing.assert_array_equal, exported.params, final)
    from textkit.errors import ConfigError

    with pytest.raises(ConfigError, match="a marian checkpoint takes no text prefix"):
        train.main(["--init-from", str(FIXTURES / "tiny_marian"), "--prefix", "x: ",
                    "--max-steps", "1", "--save-dir", str(tmp_path / "other")])


def test_translate_command_with_a_prefix_and_an_unknown_task(tmp_path, capsys):
    """``translate.py --pretrained DIR --prefix ...`` translates as transformers' greedy search
    on the prefixed sources; an unknown ``--task`` is one line listing the checkpoint's."""
    from textkit.cli.translate import main

    ref = json.loads((T5_V1_1 / "reference.json").read_text("utf-8"))
    source = tmp_path / "in.txt"
    source.write_text("\n".join(ref["sources"][:4]) + "\n")
    main(["--pretrained", str(T5_V1_1), "--prefix", ref["prefix"], "--beam-size", "1",
          "--input", str(source), "--output", str(tmp_path / "out.txt")])
    assert (tmp_path / "out.txt").read_text().splitlines() == ref["greedy"]["text"][:4]
    with pytest.raises(SystemExit) as exit_:
        main(["--pretrained", str(T5), "--task", "nope", "--input", str(source)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().endswith(
        "no task 'nope' in task_specific_params (it has summarization, translation_en_to_de, "
        "translation_en_to_fr)")
