"""What a ``Generator`` result carries besides its text: log-probabilities (the raw log-softmax
of the model's logits, checked against the teacher-forced forward pass whose logits the decoder
tests compare with transformers'), ``num_return_sequences``, ``finish_reason`` and token
counts, one string as a prompt, and chat over conversations through a checkpoint's template."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.decoding import Generator
from textkit.pretrained import load_pretrained

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "decoders"


@pytest.fixture(scope="module")
def chat_lm():
    return load_pretrained(FIXTURES / "qwen2_chat")


@pytest.mark.slow
def test_logprobs_are_the_raw_log_softmax_of_the_forward_logits(chat_lm):
    generator = Generator.from_pretrained(chat_lm, max_new_tokens=6, batch_size=2)
    prompts = [[5, 6, 7, 8], [9, 10]]
    forward = jax.jit(lambda params, ids: chat_lm.model.apply({"params": params}, ids))
    for options in ({}, {"do_sample": True, "temperature": 0.7, "top_k": 5, "seed": 3}):
        results = generator.generate(chat_lm.params, prompts, logprobs=3, **options)
        for prompt, result in zip(prompts, results):
            ids = prompt + result.token_ids
            logits = forward(chat_lm.params, jnp.asarray([ids], jnp.int32))[0]
            expected = np.asarray(jax.nn.log_softmax(logits, axis=-1))[len(prompt) - 1:-1]
            steps = np.arange(len(result.token_ids))
            np.testing.assert_allclose(result.logprobs,
                                       expected[steps, result.token_ids], atol=1e-5)
            for t, top in enumerate(result.top_logprobs):
                best = np.argsort(-expected[t], kind="stable")[:3]
                assert [i for i, _ in top] == best.tolist()
                np.testing.assert_allclose([v for _, v in top], expected[t, best], atol=1e-5)
            if not options:     # greedy: the chosen id is the best one
                assert [top[0][0] for top in result.top_logprobs] == result.token_ids
    plain = generator.generate(chat_lm.params, prompts)
    assert plain[0].logprobs is None and plain[0].top_logprobs is None
    assert [r.token_ids for r in plain] == [r.token_ids for r in generator.generate(
        chat_lm.params, prompts, logprobs=0)]


def test_finish_reasons_counts_and_one_string_prompt(chat_lm):
    generator = Generator.from_pretrained(chat_lm, max_new_tokens=12, batch_size=4)
    prompts = json.loads((FIXTURES / "qwen2" / "reference.json").read_text())["prompts"][:8]
    results = generator.generate(chat_lm.params, prompts)
    reasons = {r.finish_reason for r in results}
    assert reasons == {"eos", "length"}     # the fixture's EOS ends some rows early
    for prompt, r in zip(prompts, results):
        assert r.prompt_tokens == len(prompt)
        assert (r.finish_reason == "eos") == (r.token_ids[-1] in generator.config.eos_ids)
        assert r.finish_reason == "eos" or len(r.token_ids) == 12
    long = next(r for r in results if len(r.text) > 4)
    stop = long.text[2:4]
    cut = generator.generate(chat_lm.params, [prompts[results.index(long)]],
                             stop_strings=(stop,))[0]
    assert cut.finish_reason == "stop" and cut.text.endswith(stop)
    text = "hello there"
    assert generator.generate(chat_lm.params, text) == generator.generate(chat_lm.params,
                                                                           [text])


def test_num_return_sequences(chat_lm):
    generator = Generator.from_pretrained(chat_lm, max_new_tokens=6, batch_size=4)
    prompts = [[5, 6, 7], [11, 12]]
    sampled = generator.generate(chat_lm.params, prompts, do_sample=True, seed=1,
                                 num_return_sequences=3)
    assert len(sampled) == 6
    assert len({tuple(r.token_ids) for r in sampled[:3]}) > 1    # each draws its own key
    alone = generator.generate(chat_lm.params, prompts[:1], do_sample=True, seed=1,
                               num_return_sequences=3)
    assert alone == sampled[:3]
    beams = generator.generate(chat_lm.params, prompts, num_beams=3, num_return_sequences=2)
    best = generator.generate(chat_lm.params, prompts, num_beams=3)
    assert [beams[0], beams[2]] == best and beams[0] != beams[1]
    with pytest.raises(ValueError, match="num_return_sequences=4 exceeds num_beams=3"):
        generator.generate(chat_lm.params, prompts, num_beams=3, num_return_sequences=4)
    with pytest.raises(ValueError, match="not for beam search"):
        generator.generate(chat_lm.params, prompts, num_beams=3, logprobs=1)


def test_chat_renders_conversations_through_the_template(chat_lm):
    generator = Generator.from_pretrained(chat_lm, max_new_tokens=4, batch_size=2)
    conversation = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello"},
                    {"role": "user", "content": "Bye"}]
    text = chat_lm.tokenizer.apply_chat_template(conversation)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert text.endswith("<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n")
    ids = chat_lm.tokenizer.encode(text, add_special_tokens=False)
    one = generator.chat(chat_lm.params, conversation)
    assert one == generator.generate(chat_lm.params, [ids])
    assert generator.chat(chat_lm.params, [conversation, conversation[1:2]])[0] == one[0]
    with pytest.raises(ValueError, match="conversation 0, message 1: role 'robot'"):
        generator.chat(chat_lm.params, [{"role": "user", "content": "a"},
                                        {"role": "robot", "content": "b"}])
    with pytest.raises(TypeError, match="message 0: content must be a string"):
        generator.chat(chat_lm.params, [{"role": "user", "content": 3}])
