"""transformers' ``generate`` outputs under the generation options the one reader maps
(``textkit.decoding.generation_config``), for the committed decoder fixtures.

Needs transformers and torch (not textkit's test dependencies); run once in a separate
environment and commit ``tests/fixtures/decoders/generation_options.json``::

    python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch==2.13.0 transformers
    /tmp/hfenv/bin/python tools/make_generation_references.py

Each prompt of the fixture's ``reference.json`` is generated alone (a batch of one), under
``CASES``: ``max_length`` counting the prompt, ``min_length`` counting it too, beam search
finishing by ``early_stopping`` True, False and "never" with two length penalties, and the two
best beams of four (``num_return_sequences``: a prompt's sequences one after the other, each cut
after its EOS). ``logprobs``: per prompt, the log-softmax of the greedy steps' raw logits
(``output_logits``) at the chosen ids, 10 new tokens. The file records transformers' version;
textkit's test generates all the prompts in one batch and compares each row.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM

FAMILIES = ("llama", "mistral")
CASES = {
    "max_length": {"max_length": 14},
    "min_length": {"max_new_tokens": 10, "min_length": 13},
    "beam4_early_true": {"num_beams": 4, "max_new_tokens": 10, "early_stopping": True},
    "beam4_early_false": {"num_beams": 4, "max_new_tokens": 10, "early_stopping": False},
    "beam4_early_never": {"num_beams": 4, "max_new_tokens": 10, "early_stopping": "never"},
    "beam4_never_lp2": {"num_beams": 4, "max_new_tokens": 10, "early_stopping": "never",
                        "length_penalty": 2.0},
    "beam4_true_lp2": {"num_beams": 4, "max_new_tokens": 10, "early_stopping": True,
                       "length_penalty": 2.0},
    "beam4_return2": {"num_beams": 4, "max_new_tokens": 10, "num_return_sequences": 2},
}


def cut(sequence: list[int], eos: list[int]) -> list[int]:
    """A returned sequence up to and including its first EOS (the rest is padding)."""
    ends = [i for i, token in enumerate(sequence) if token in eos]
    return sequence[:ends[0] + 1] if ends else sequence


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", default=str(Path(__file__).resolve().parent.parent /
                                                  "tests" / "fixtures" / "decoders"))
    args = parser.parse_args()
    root = Path(args.fixtures)
    out = {"transformers_version": transformers.__version__, "cases": CASES, "families": {}}
    for family in FAMILIES:
        reference = json.loads((root / family / "reference.json").read_text())
        model = AutoModelForCausalLM.from_pretrained(root / family).eval()
        eos = reference["eos_token_id"]
        results = {}
        for name, options in CASES.items():
            rows = []
            for prompt in reference["prompts"]:
                ids = torch.tensor([prompt])
                with torch.no_grad():
                    generated = model.generate(ids, attention_mask=torch.ones_like(ids),
                                               do_sample=False, eos_token_id=eos,
                                               pad_token_id=model.config.pad_token_id or 0,
                                               **options)
                eos_ids = eos if isinstance(eos, list) else [eos]
                rows += [cut(g[len(prompt):].tolist(), eos_ids) for g in generated]
            results[name] = rows
        logprobs = []
        for prompt in reference["prompts"]:
            ids = torch.tensor([prompt])
            with torch.no_grad():
                found = model.generate(ids, attention_mask=torch.ones_like(ids),
                                       do_sample=False, eos_token_id=eos, max_new_tokens=10,
                                       pad_token_id=model.config.pad_token_id or 0,
                                       output_logits=True, return_dict_in_generate=True)
            chosen = found.sequences[0, len(prompt):]
            logprobs.append([torch.log_softmax(step[0].float(), -1)[token].item()
                             for step, token in zip(found.logits, chosen)])
        out["families"][family] = {"prompts": reference["prompts"], "eos_token_id": eos,
                                   "outputs": results, "logprobs": logprobs}
    path = root / "generation_options.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
