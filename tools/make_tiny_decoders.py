"""Build the tiny decoder-only checkpoints of ``tests/fixtures/decoders`` and their reference
outputs with transformers.

Needs transformers, torch and tokenizers (not textkit's test dependencies); run it by hand in a
separate environment and commit what it writes::

    python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch==2.13.0 transformers \
        safetensors numpy tokenizers
    /tmp/hfenv/bin/python tools/make_tiny_decoders.py [--out tests/fixtures/decoders]

    # textkit's exports of every fixture (textkit's environment), then the check with torch:
    .venv/bin/python -c "from textkit.pretrained import load_pretrained as l, save_pretrained as s
    for n in ('gpt2', 'llama', 'mistral', 'qwen2', 'qwen3', 'gemma'):
        p = l(f'tests/fixtures/decoders/{n}'); s(p.model, p.params, p.tokenizer,
                                                  f'/tmp/dec_exports/{n}', generation=p.generation)"
    /tmp/hfenv/bin/python tools/make_tiny_decoders.py --check /tmp/dec_exports

One directory per family (``gpt2``, ``llama`` with grouped-query attention, Llama-3's
``rope_scaling`` and untied embeddings, ``mistral`` with a sliding window of 4 tokens, shorter
than the prompts, ``qwen2`` with q/k/v biases and tied embeddings, ``qwen3`` with q/k norms and a
head_dim of its own, ``gemma``): a random model (hidden 32, 2 layers) saved with
``save_pretrained`` beside a small byte-level BPE ``tokenizer.json`` trained here (320 ids).
Weights are redrawn at larger scales than transformers' init so that next-token decisions have
margins (std 0.02 gives near-uniform logits, where any rounding flips an argmax). The first EOS
id of ``generation_config.json`` is a token the model often predicts, so outputs end at
different lengths.

``reference.npz``: a left-padded and a right-padded batch of prompts (``left_ids`` /
``left_mask``, ``right_ids`` / ``right_mask``) and transformers' float32 logits for each
(eager attention; each row's positions count its real tokens from 0, as ``generate`` sets
them). ``reference.json``: 20 prompts (ids) with transformers' ``generate`` outputs
(new tokens only) of each prompt alone: greedy and beam 4 (``max_new_tokens`` 10), and the
generation settings used. ``sampling.json`` (beside the directories): the support that
transformers' warpers (temperature, top-k, top-p, min-p) leave on fixed logits.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    GemmaConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

VOCAB = 320
TEXTS = ["the cat sat on the mat", "a dog runs in the park", "two men play football today",
         "she reads a book at home", "we walk to the station in the rain",
         "the quick brown fox jumps over the lazy dog", "hello world, how are you?",
         "numbers like 12345 and 678", "tokens, punctuation; and more!"] * 20
COMMON = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=64, max_position_embeddings=128, bos_token_id=0,
              eos_token_id=1, pad_token_id=2)
CONFIGS = {
    "gpt2": GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128,
                       bos_token_id=0, eos_token_id=1, pad_token_id=2),
    "llama": LlamaConfig(**COMMON, num_key_value_heads=2, tie_word_embeddings=False,
                         rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 16},
                         rope_theta=500000.0),
    "mistral": MistralConfig(**COMMON, num_key_value_heads=1, sliding_window=4,
                             tie_word_embeddings=False),
    "qwen2": Qwen2Config(**COMMON, num_key_value_heads=2, tie_word_embeddings=True),
    "qwen3": Qwen3Config(**COMMON, num_key_value_heads=2, head_dim=16,
                         tie_word_embeddings=True),
    "gemma": GemmaConfig(**COMMON, num_key_value_heads=1, head_dim=16),
}


def tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE of VOCAB ids trained on TEXTS (<s> 0, </s> 1, <pad> 2)."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(TEXTS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Redraw every weight: matrices N(0, 1/fan_in), embeddings N(0, 1), norms around 1 (Gemma's
    around 0), biases N(0, 0.1)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if "norm" in name or "ln_" in name:
                base = 0.0 if model.config.model_type == "gemma" else 1.0
                p.copy_(base + 0.1 * noise)
            elif p.ndim == 1:
                p.copy_(0.1 * noise)
            elif "embed" in name or "wte" in name or "wpe" in name:
                p.copy_(noise)
            else:
                fan_in = p.shape[0] if model.config.model_type == "gpt2" else p.shape[1]
                p.copy_(noise * 1.5 / fan_in ** 0.5)


def prompts(rng: np.random.Generator, count: int) -> list[list[int]]:
    """Random prompts of 1-9 ids (no special ids)."""
    return [rng.integers(3, VOCAB, size=int(rng.integers(1, 10))).tolist() for _ in range(count)]


def padded(rows: list[list[int]], left: bool) -> tuple[np.ndarray, np.ndarray]:
    width = max(map(len, rows))
    ids = np.full((len(rows), width), 2, np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span], mask[i, span] = row, 1
    return ids, mask


def generate(model, row: list[int], eos: list[int], **options) -> list[int]:
    ids = torch.tensor([row])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10,
                         eos_token_id=eos, pad_token_id=2, do_sample=False, **options)
    new = out[0, len(row):].tolist()
    while new and new[-1] == 2 and 2 not in eos:
        new.pop()
    return new


def build(name: str, out: Path, seed: int) -> None:
    torch.manual_seed(seed)
    config = CONFIGS[name]
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config).eval()
    randomize(model, seed)
    rng = np.random.default_rng(seed)
    rows = prompts(rng, 20)
    # the first EOS: the third most frequent greedy prediction, so outputs end at varied steps
    counts = np.zeros(VOCAB, np.int64)
    for row in rows:
        for token in generate(model, row, [1]):
            counts[token] += 1
    counts[:3] = 0
    eos = [int(np.argsort(-counts)[2]), 1]
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = 2
    model.generation_config.bos_token_id = 0
    directory = out / name
    model.save_pretrained(directory)
    tokenizer().save_pretrained(directory)
    batch = prompts(rng, 4)
    arrays = {}
    with torch.no_grad():
        for side in ("left", "right"):
            ids, mask = padded(batch, side == "left")
            arrays[f"{side}_ids"], arrays[f"{side}_mask"] = ids, mask
            positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)   # as ``generate`` has them
            arrays[f"{side}_logits"] = model(
                torch.tensor(ids), attention_mask=torch.tensor(mask),
                position_ids=torch.tensor(positions)).logits.numpy()
    np.savez_compressed(directory / "reference.npz", **arrays)
    reference = {"prompts": rows, "eos_token_id": eos, "max_new_tokens": 10,
                 "greedy": [generate(model, r, eos) for r in rows],
                 "beam4": [generate(model, r, eos, num_beams=4) for r in rows]}
    (directory / "reference.json").write_text(json.dumps(reference) + "\n")
    lengths = [len(o) for o in reference["greedy"]]
    print(f"{name}: {sum(p.numel() for p in model.parameters())} params, greedy lengths "
          f"{min(lengths)}-{max(lengths)}, eos {eos}")


def sampling_reference(out: Path) -> None:
    """Supports transformers' warpers leave on fixed logits (ids with finite scores)."""
    from transformers.generation import (
        MinPLogitsWarper,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((6, 50)) * 2.0).astype(np.float32)
    cases = []
    for settings in ({"temperature": 0.7, "top_k": 5, "top_p": 1.0, "min_p": 0.0},
                     {"temperature": 1.0, "top_k": 0, "top_p": 0.8, "min_p": 0.0},
                     {"temperature": 1.3, "top_k": 20, "top_p": 0.9, "min_p": 0.0},
                     {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.1},
                     {"temperature": 0.8, "top_k": 10, "top_p": 0.95, "min_p": 0.05}):
        scores = torch.tensor(logits)
        warpers = [TemperatureLogitsWarper(settings["temperature"])]
        if settings["top_k"]:
            warpers.append(TopKLogitsWarper(settings["top_k"]))
        if settings["top_p"] < 1.0:
            warpers.append(TopPLogitsWarper(settings["top_p"]))
        if settings["min_p"]:
            warpers.append(MinPLogitsWarper(settings["min_p"]))
        for warper in warpers:
            scores = warper(None, scores)
        support = [np.flatnonzero(np.isfinite(row)).tolist() for row in scores.numpy()]
        cases.append({"settings": settings, "support": support})
    (out / "sampling.json").write_text(json.dumps({"logits": logits.tolist(),
                                                   "cases": cases}) + "\n")


def check(exports: Path, fixtures: Path) -> None:
    """transformers loads each export of textkit's and gives the fixture's logits and ids."""
    from transformers import AutoTokenizer

    for name in CONFIGS:
        model = AutoModelForCausalLM.from_pretrained(exports / name,
                                                     attn_implementation="eager").eval()
        arrays = np.load(fixtures / name / "reference.npz")
        worst = 0.0
        with torch.no_grad():
            for side in ("left", "right"):
                mask = arrays[f"{side}_mask"]
                positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
                logits = model(torch.tensor(arrays[f"{side}_ids"]),
                               attention_mask=torch.tensor(mask),
                               position_ids=torch.tensor(positions)).logits.numpy()
                worst = max(worst, float(np.abs(logits - arrays[f"{side}_logits"])[
                    mask.astype(bool)].max()))
        text = "the quick brown fox"
        same = (AutoTokenizer.from_pretrained(exports / name)(text)["input_ids"]
                == AutoTokenizer.from_pretrained(fixtures / name)(text)["input_ids"])
        print(f"{name}: max |logits - reference| {worst:.1e}, tokenizer ids equal: {same}")
        assert worst == 0.0 and same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/decoders"))
    parser.add_argument("--check", type=Path, help="a folder of textkit's exports to check")
    args = parser.parse_args()
    if args.check:
        check(args.check, args.out)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for seed, name in enumerate(CONFIGS):
        build(name, args.out, seed)
    sampling_reference(args.out)


if __name__ == "__main__":
    main()
