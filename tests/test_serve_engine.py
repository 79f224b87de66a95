"""The continuous-batching engine on the decoder families with their own position schemes
(Mistral's sliding window, GPT-2's learned positions): 5 prompts through 3 slots, each
equal to ``Generator`` on that prompt alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from textkit.decoding import Generator
from textkit.pretrained import load_pretrained
from textkit.serve import engine as engine_module
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


def test_steps_decode_only_up_to_the_last_busy_slot_and_keep_the_others_rows(monkeypatch):
    """Jobs of different lengths through 4 slots: the rows decoded shrink and grow (jobs in
    slots 0 and 1 alone decode two rows; a job in a higher slot widens it again), and every
    job still equals ``Generator`` on its prompt alone, so no row's cache was lost on the
    way."""
    loaded = load_pretrained(FIXTURES / "llama")
    engine = Engine(loaded.model, loaded.params, loaded.tokenizer, slots=4, context=64,
                    smallest_prefill=32)
    assert engine.row_buckets == (2, 4)
    prompts = json.loads((FIXTURES / "llama" / "reference.json").read_text())["prompts"][:5]
    lengths = [12, 3, 6, 2, 9]
    eos = ()                                     # every job runs to its length
    events = [[] for _ in prompts]
    jobs = [Job(list(p), Sampling(n, eos), events[i].append)
            for i, (p, n) in enumerate(zip(prompts, lengths))]
    engine.submit(jobs[:3])
    rows = []
    original = engine_module._decode

    def spy(model, params, cache, slots, rows_now):
        rows.append(rows_now)
        return original(model, params, cache, slots, rows_now)

    monkeypatch.setattr(engine_module, "_decode", spy)
    while engine.busy:
        if len(rows) == 8:
            engine.submit(jobs[3:])
        engine.step()
    # slots 0, 1, 2 filled one step apart; slot 2 freed after step 8 and job 3 in slot 1
    assert rows[:3] == [2, 2, 4] and rows[8] == 2, rows
    for prompt, n, got in zip(prompts, lengths, events):
        generator = Generator.from_pretrained(loaded, max_new_tokens=n, batch_size=1)
        expected = generator.generate(loaded.params, [prompt])[0]
        assert [e.token_id for e in got][:len(expected.token_ids)] == expected.token_ids
