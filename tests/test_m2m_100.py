"""The multilingual translation checkpoints against transformers: M2M100 and NLLB-200
(``model_type`` m2m_100) and mBART-50 (``mbart``), the tiny random-weight fixtures of
``tools/make_tiny_multilingual.py`` (their
tokenizers' ids with language tokens, logits on a padded batch, ``generate`` with the target
language forced first), language codes and their errors, the export round trip and
bfloat16."""
from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.pretrained import load_pretrained, load_translator, save_pretrained
from textkit.pretrained.errors import LanguageError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
M2M = FIXTURES / "tiny_m2m100"
NLLB = FIXTURES / "tiny_nllb"
MBART50 = FIXTURES / "tiny_mbart50"


@pytest.fixture(scope="module", params=[M2M, NLLB, MBART50], ids=["m2m100", "nllb", "mbart50"])
def fixture(request):
    return request.param


@pytest.fixture(scope="module")
def m2m(fixture):
    return load_pretrained(fixture)


@pytest.fixture(scope="module")
def ref(fixture):
    return json.loads((fixture / "reference.json").read_text("utf-8"))


def text_of(ref: dict, run: str) -> list[str]:
    """transformers' text of ``run``: transformers 5 keeps M2M100's language token in the text
    (it does not list the language tokens as special when it saves that tokenizer); textkit
    leaves it out."""
    prefix = f"__{ref['tgt_lang']}__"
    return [text.removeprefix(prefix).strip() if text.startswith(prefix) else text
            for text in ref[run]["text"]]


def padded(rows: list[list[int]], pad: int) -> np.ndarray:
    tokens = np.full((len(rows), max(map(len, rows))), pad, np.int32)
    for row, ids in enumerate(rows):
        tokens[row, :len(ids)] = ids
    return tokens


def test_tokenizer_ids_with_language_tokens(fixture, m2m, ref):
    source = m2m.tokenizer.for_languages(ref["src_lang"], ref["tgt_lang"])
    target = m2m.target_tokenizer.for_languages(ref["src_lang"], ref["tgt_lang"])
    assert source.encode(ref["inputs"]) == ref["input_ids"]
    assert target.encode(ref["targets"]) == ref["target_ids"]
    assert target.forced_bos_id == ref["forced_bos_token_id"] and source.forced_bos_id is None
    assert m2m.model.config.architecture == json.loads(
        (fixture / "config.json").read_text())["model_type"]


def test_logits_match_transformers_on_a_padded_batch(m2m, ref):
    tokens = padded(ref["input_ids"], m2m.tokenizer.pad_id)
    logits = m2m.model.apply({"params": m2m.params}, jnp.asarray(tokens),
                             jnp.asarray(ref["decoder_input_ids"], jnp.int32))
    expected = np.asarray(ref["logits"])
    mask = np.asarray(ref["decoder_input_ids"]) != m2m.tokenizer.pad_id
    # float32 against torch: mBART-50's largest difference is 1.2e-6 of the largest logit
    # at XLA's defaults and 2.2e-6 under the test session's compile flags (conftest.py)
    np.testing.assert_allclose(np.asarray(logits)[mask], expected[mask], rtol=0,
                               atol=4e-6 * np.abs(expected).max())


@pytest.mark.parametrize("run,options", [("greedy", dict(beam_size=1)), ("beam4", {}),
                                         ("beam4_lp0", dict(alpha=0.0))])
def test_outputs_match_generate(fixture, ref, run, options):
    translator, params = load_translator(fixture, src_lang=ref["src_lang"],
                                         tgt_lang=ref["tgt_lang"],
                                         **{"beam_size": 4, **options})
    assert translator.forced_bos == ref["forced_bos_token_id"]
    ids = translator.translate_ids(params, translator.src_tokenizer.encode(ref["inputs"]))
    generated = [[i for i in row[2:] if i != translator.pad_id] for row in ref[run]["ids"]]
    assert ids == [row[:-1] if row and row[-1] == translator.eos_id else row
                   for row in generated]
    assert translator.translate(params, ref["inputs"]) == text_of(ref, run)


def test_language_codes_are_checked_by_name(fixture, m2m, ref):
    source, target = ref["src_lang"], ref["tgt_lang"]
    with pytest.raises(LanguageError, match=rf"no language code '{source}x'.*nearest: {source}"):
        m2m.tokenizer.for_languages(source + "x", target)
    with pytest.raises(LanguageError, match="needs tgt_lang"):
        load_translator(fixture, src_lang=source)
    with pytest.raises(LanguageError, match="needs src_lang"):
        load_translator(fixture, tgt_lang=target)
    with pytest.raises(LanguageError, match="choose it with for_languages"):
        m2m.tokenizer.encode(["no language chosen"])


def test_export_round_trip_is_exact(fixture, m2m, tmp_path):
    save_pretrained(m2m.model, m2m.params, (m2m.tokenizer, m2m.target_tokenizer),
                    tmp_path / "out", generation=m2m.generation)
    again = load_pretrained(tmp_path / "out")
    assert again.model.config == m2m.model.config
    jax.tree_util.tree_map(np.testing.assert_array_equal, again.params, m2m.params)
    assert again.tokenizer.languages == m2m.tokenizer.languages
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    original = json.loads((fixture / "config.json").read_text())
    assert (hf["model_type"], hf["architectures"]) == (original["model_type"],
                                                       original["architectures"])


def test_bfloat16_keeps_the_float32_argmax(fixture, ref):
    f32, bf16 = load_pretrained(fixture), load_pretrained(fixture, policy="mixed_bfloat16")
    tokens = jnp.asarray(padded(ref["input_ids"], f32.tokenizer.pad_id))
    target = jnp.asarray(ref["decoder_input_ids"], jnp.int32)
    mask = np.asarray(target) != f32.tokenizer.pad_id
    a = np.asarray(f32.model.apply({"params": f32.params}, tokens, target)).argmax(-1)
    b = np.asarray(bf16.model.apply({"params": bf16.params}, tokens, target)).argmax(-1)
    assert (a == b)[mask].mean() >= 0.99


@pytest.mark.slow
def test_fine_tune_with_language_codes_and_export(tmp_path):
    """``examples/nmt/train.py --init-from`` an M2M100 checkpoint with its language codes: the
    targets start with the German token, the export loads back to the evaluated params; a
    code the checkpoint lacks is refused before the first step."""
    from subprocesses import load_script

    from textkit.errors import ConfigError
    from textkit.training import RunDir

    root = Path(__file__).resolve().parents[1]
    train = load_script(root / "examples" / "nmt" / "train.py", "nmt_train_m2m")
    common = ["--init-from", str(M2M), "--max-steps", "2", "--toy-sizes", "60,4,4",
              "--eval-every", "0", "--max-length", "60", "--batch-tokens", "512",
              "--decode-batch-size", "4", "--lr", "1e-3"]
    summary = train.main([*common, "--src-lang-code", "en", "--tgt-lang-code", "de",
                          "--save-dir", str(tmp_path / "run")])
    exported = load_pretrained(tmp_path / "run" / "export")
    final, _ = RunDir(tmp_path / "run").load_final(jax.eval_shape(lambda: exported.params))
    jax.tree_util.tree_map(np.testing.assert_array_equal, exported.params, final)
    assert summary["export"] == str(tmp_path / "run" / "export")
    with pytest.raises(ConfigError, match=r"--tgt-lang-code: .*no language code 'xx'"):
        train.main([*common, "--src-lang-code", "en", "--tgt-lang-code", "xx",
                    "--save-dir", str(tmp_path / "bad")])


@pytest.mark.slow
def test_translate_script_with_language_codes():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    ref = json.loads((M2M / "reference.json").read_text("utf-8"))
    text = "".join(line + "\n" for line in ref["inputs"])
    done = subprocess.run(
        [sys.executable, "examples/nmt/translate.py", "--pretrained", str(M2M),
         "--src-lang-code", "en", "--tgt-lang-code", "de", "--beam-size", "1"],
        input=text.encode(), cwd=root, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == text_of(ref, "greedy")
    done = subprocess.run(
        [sys.executable, "examples/nmt/translate.py", "--pretrained", str(M2M),
         "--src-lang-code", "en", "--tgt-lang-code", "deu"], input=b"x\n", cwd=root,
        capture_output=True, timeout=300)
    assert done.returncode == 2
    assert "--tgt-lang-code: " in done.stderr.decode() and "nearest: de" in done.stderr.decode()
