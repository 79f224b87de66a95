"""The continuous-batching engine on the decoder families with their own position schemes
(Mistral's sliding window, GPT-2's learned positions): 5 prompts through 3 slots, each
equal to ``Generator`` on that prompt alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from textkit.decoding import Generator
from textkit.pretrained import load_pretrained
from textkit.serve.engine import Engine, Job, Sampling

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "decoders"


@pytest.mark.slow
@pytest.mark.parametrize("family", ["mistral", "gpt2"])
def test_greedy_jobs_equal_the_generator_alone(family):
    loaded = load_pretrained(FIXTURES / family)
    engine = Engine(loaded.model, loaded.params, loaded.tokenizer, slots=3, context=64,
                    smallest_prefill=32)
    engine.warm_up()
    prompts = json.loads((FIXTURES / family / "reference.json").read_text())["prompts"][:5]
    generator = Generator.from_pretrained(loaded, max_new_tokens=10, batch_size=1)
    events = [[] for _ in prompts]
    engine.submit([Job(list(p), Sampling(10, generator.config.eos_ids), events[i].append)
                   for i, p in enumerate(prompts)])
    while engine.busy:
        engine.step()
    for prompt, got in zip(prompts, events):
        expected = generator.generate(loaded.params, [prompt])[0]
        assert [e.token_id for e in got] == expected.token_ids
        assert "".join(e.text for e in got) == expected.text
        assert got[-1].finish_reason == expected.finish_reason
