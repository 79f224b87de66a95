"""The one ``generation_config.json`` reader (``textkit.decoding.generation_config``): every key
read, named or neutral; lengths counting the prompt; the Translator's and the Generator's use
of it, against transformers' ``generate`` on the decoder fixtures
(``tools/make_generation_references.py``)."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from textkit.decoding import GenerationConfig, Generator
from textkit.decoding.generation_config import DEFAULT_NEW_TOKENS
from textkit.pretrained import generation_options, load_pretrained

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REFERENCES = FIXTURES / "decoders" / "generation_options.json"


def test_every_key_is_read_or_named():
    options = {"max_length": 30, "early_stopping": "never", "forced_bos_token_id": 5,
               "forced_eos_token_id": [2, 3], "decoder_start_token_id": 0,
               "bad_words_ids": [[3], [4, 5]], "eos_token_id": 2, "typical_p": 0.9,
               "num_return_sequences": 1, "pad_token_id": 1, "transformers_version": "5"}
    with pytest.warns(UserWarning, match=r"typical_p.*0\.9.*bad_words_ids.*\[\[4, 5\]\]"):
        config = GenerationConfig.from_dict(options, "somewhere/generation_config.json")
    assert (config.max_length, config.early_stopping, config.forced_bos_id,
            config.forced_eos_id, config.decoder_start_id, config.banned_ids,
            config.eos_ids) == (30, "never", 5, 2, 0, (3,), (2,))


def test_neutral_values_and_metadata_are_not_warned():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GenerationConfig.from_dict({"num_return_sequences": 1, "typical_p": 1.0,
                                    "_from_model_config": True, "bos_token_id": 0,
                                    "use_cache": True, "min_length": 0})


def test_lengths_count_the_prefix():
    assert GenerationConfig().new_tokens(7) == DEFAULT_NEW_TOKENS
    assert GenerationConfig(max_length=20).new_tokens(7) == 13
    assert GenerationConfig(max_length=20).new_tokens(25) == 1
    assert GenerationConfig(max_length=20, max_new_tokens=4).new_tokens(7) == 4
    assert GenerationConfig(min_length=10, min_new_tokens=2).min_tokens(7) == 3
    assert GenerationConfig(min_length=5, min_new_tokens=2).min_tokens(7) == 2


@pytest.mark.parametrize("bad", [{"early_stopping": "sometimes"}, {"max_length": 0},
                                 {"early_stopping": 1}, {"min_length": -1}])
def test_bad_values_are_named(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        GenerationConfig(**bad)


def test_translator_options_follow_the_reader(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({
        "num_beams": 5, "max_length": 40, "min_length": 6, "early_stopping": True,
        "length_penalty": 1.5, "forced_bos_token_id": 7, "eos_token_id": 2,
        "forced_eos_token_id": 2, "no_repeat_ngram_size": 3, "top_k": 10}))
    with pytest.warns(UserWarning, match=r"Translator of .* does not apply.*"
                                         r"\{'top_k': 10\}"):
        options = generation_options(tmp_path)
    assert options == {"beam_size": 5, "alpha": 1.5, "length_offset": 0.0, "max_length": 39,
                       "min_length": 5, "early_stopping": True, "forced_bos": 7,
                       "no_repeat_ngram": 3, "banned_ids": (), "hf_compatible": True,
                       "forced_eos": True}


def test_generation_keys_of_an_old_config_json_are_read(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "marian", "vocab_size": 10, "num_beams": 3, "max_length": 12}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        options = generation_options(tmp_path)
    assert (options["beam_size"], options["max_length"]) == (3, 11)


def test_the_generator_names_what_it_does_not_apply():
    pretrained = load_pretrained(FIXTURES / "decoders" / "llama")
    with pytest.warns(UserWarning, match="Generator does not apply.*forced_bos_id"):
        Generator(pretrained.model, pretrained.tokenizer, GenerationConfig(forced_bos_id=3))


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_generator_equals_transformers_under_each_option(family):
    """``max_length`` / ``min_length`` counting each prompt, the three ``early_stopping``
    rules and the two best beams (``num_return_sequences``): all prompts in one batch, each
    row equal to transformers on that prompt alone; the greedy tokens' log-probabilities equal
    the log-softmax of transformers' raw logits."""
    references = json.loads(REFERENCES.read_text())
    ref = references["families"][family]
    pretrained = load_pretrained(FIXTURES / "decoders" / family)
    generator = Generator.from_pretrained(pretrained, batch_size=8)
    for name, options in references["cases"].items():
        results = generator.generate(pretrained.params, ref["prompts"], **options)
        assert [r.token_ids for r in results] == ref["outputs"][name], name
    greedy = generator.generate(pretrained.params, ref["prompts"], max_new_tokens=10,
                                logprobs=0)
    for result, expected in zip(greedy, ref["logprobs"]):
        assert len(result.logprobs) == len(expected)
        np.testing.assert_allclose(result.logprobs, expected, atol=2e-4)
