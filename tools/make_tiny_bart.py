"""Build the tiny BART checkpoint of ``tests/fixtures/tiny_bart``, its reference outputs, and
the ids transformers' BART tokenizer gives with ``roberta-base``'s real files.

Needs transformers, torch and tokenizers (not textkit's test dependencies); run it once in a
separate environment and commit what it writes::

    python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch==2.13.0 transformers
    /tmp/hfenv/bin/python tools/make_tiny_bart.py [--out tests/fixtures]

The checkpoint is a random ``BartForConditionalGeneration`` (d_model 16, 2 + 2 layers, learned
positions with BART's offset of 2, the embedding layer norm) with a byte-level BPE of a few
hundred entries trained here on the sentences below and saved through transformers'
``BartTokenizerFast``, so that its files have the real layout. It is trained briefly on the
ten pairs (a random model repeats one token), so that searches have real choices. Its
``generation_config.json`` is BART's summarisation one (``forced_bos_token_id`` 0,
``early_stopping`` true, beam 4). ``reference.json`` holds the tokenizer's ids, teacher-forced
logits on a padded batch and ``generate`` outputs (greedy, beam 4 as configured, beam 4 with
``early_stopping`` false and with length penalty 0, greedy and beam 4 with
``no_repeat_ngram_size`` 1). ``seq2seq_tokenizers/bart.json`` holds
``BartTokenizer``'s ids for ``../shared/data/tokenizers/roberta-base``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
import transformers
from tokenizers import ByteLevelBPETokenizer
from transformers import BartConfig, BartForConditionalGeneration, BartTokenizerFast

SOURCE = [
    "the cat sat on the mat .", "a dog runs in the park .", "two men play football today .",
    "the children are singing a song .", "she reads a book in the garden .",
    "a woman rides a red bicycle .", "the old man walks his dog .", "people eat bread and cheese .",
    "my brother works in a big city .", "birds fly over the green hills .",
]
TARGET = [
    "cat on mat .", "dog in park .", "men play football .", "children sing .",
    "she reads .", "woman rides bicycle .", "old man walks dog .", "people eat .",
    "brother works in city .", "birds fly .",
]
INPUTS = ["the cat sat on the mat .", "a dog plays football in the city .",
          "birds eat bread", "Zebra quartz jumps!", "the", "people sing a song in the garden .",
          "my brother reads a book .", "two women ride red bicycles in the park ."]
TOKENIZER_TEXTS = ["Hello world!", "  leading spaces and\ttabs", "naïve café — résumé",
                   "<s> special </s> tokens <pad> <mask>", "numbers 12345 and 3.14",
                   "a dog plays football in the city .", "UPPER lower MiXeD", "emoji 🙂 here"]
TRAIN_STEPS = 200
SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "tokenizers"


def train_tokenizer(work: Path) -> BartTokenizerFast:
    """A byte-level BPE of about 300 entries with BART's specials, saved by transformers."""
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(SOURCE + TARGET + INPUTS, vocab_size=300, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(work))
    return BartTokenizerFast(vocab=str(work / "vocab.json"), merges=str(work / "merges.txt"))


def make_model(tokenizer: BartTokenizerFast) -> BartForConditionalGeneration:
    config = BartConfig(
        vocab_size=len(tokenizer), d_model=16, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, activation_function="gelu", pad_token_id=1, bos_token_id=0,
        eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2)
    torch.manual_seed(0)
    model = BartForConditionalGeneration(config)
    batch = tokenizer(SOURCE, text_target=TARGET, return_tensors="pt", padding=True)
    batch["labels"][batch["labels"] == 1] = -100
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        model.final_logits_bias.copy_(0.3 * torch.randn_like(model.final_logits_bias))
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=0, decoder_start_token_id=2, eos_token_id=2, forced_bos_token_id=0,
        forced_eos_token_id=2, pad_token_id=1, num_beams=4, max_length=20,
        early_stopping=True)
    return model


def references(model: BartForConditionalGeneration, tokenizer: BartTokenizerFast) -> dict:
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    targets = tokenizer(text_target=TARGET[:len(INPUTS)], return_tensors="pt", padding=True)
    decoder_input = model.prepare_decoder_input_ids_from_labels(labels=targets["input_ids"])
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_input).logits
    out = {"inputs": INPUTS, "targets": TARGET[:len(INPUTS)],
           "input_ids": [tokenizer(t)["input_ids"] for t in INPUTS],
           "target_ids": [tokenizer(text_target=t)["input_ids"] for t in TARGET[:len(INPUTS)]],
           "decoder_input_ids": decoder_input.tolist(),
           "logits": [[[round(x, 6) for x in row] for row in seq] for seq in logits.tolist()]}
    runs = {"greedy": dict(num_beams=1), "beam4": {},
            "beam4_early_false": dict(early_stopping=False),
            "beam4_lp0": dict(length_penalty=0.0),
            "greedy_no_repeat1": dict(num_beams=1, no_repeat_ngram_size=1),
            "beam4_no_repeat1": dict(no_repeat_ngram_size=1)}
    for name, options in runs.items():
        with torch.no_grad():
            generated = model.generate(**batch, **options)
        out[name] = {"options": options, "ids": generated.tolist(),
                     "text": tokenizer.batch_decode(generated, skip_special_tokens=True)}
    return out


def roberta_ids() -> dict:
    """transformers' BART tokenizer on roberta-base's files (BART's published vocabulary, its
    ``tokenizer.json`` read as a checkpoint directory's is)."""
    source = SHARED / "roberta-base"
    tokenizer = BartTokenizerFast.from_pretrained(source)
    return {"source": "shared/data/tokenizers/roberta-base", "texts": TOKENIZER_TEXTS,
            "ids": [tokenizer(t)["input_ids"] for t in TOKENIZER_TEXTS],
            "decoded": [tokenizer.decode(tokenizer(t)["input_ids"], skip_special_tokens=True)
                        for t in TOKENIZER_TEXTS],
            "transformers_version": transformers.__version__}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="tests/fixtures", type=Path)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = train_tokenizer(Path(tmp))
        model = make_model(tokenizer)
        target = args.out / "tiny_bart"
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
        refs = references(model, tokenizer)
    refs["transformers_version"] = transformers.__version__
    (target / "reference.json").write_text(json.dumps(refs, ensure_ascii=False))
    print("tiny_bart", sorted(p.name for p in target.iterdir()),
          sum(p.stat().st_size for p in target.iterdir()), "bytes")
    for run in ("greedy", "beam4"):
        print(" ", run, refs[run]["text"])
    (args.out / "seq2seq_tokenizers").mkdir(exist_ok=True)
    (args.out / "seq2seq_tokenizers" / "bart.json").write_text(
        json.dumps(roberta_ids(), ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
