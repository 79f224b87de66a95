"""Build the tiny mBART-50 checkpoint of ``tests/fixtures/tiny_mbart50`` and its references.

Needs transformers, torch and tokenizers (not textkit's test dependencies); run it once in a
separate environment and commit what it writes::

    python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch==2.13.0 transformers
    /tmp/hfenv/bin/python tools/make_tiny_mbart50.py [--out tests/fixtures]

mBART-50's published tokenizer cannot reach these machines, so a small SentencePiece-style
Unigram model is trained here (``tokenizers``) on the sentences below and saved through
transformers' ``MBart50TokenizerFast``, which adds the family's 52 language codes (``en_XX``,
...) after the vocabulary as special tokens, as the published tokenizer has them. The model is
a random ``MBartForConditionalGeneration`` (pre-norm with final norms, the embedding norm,
learned positions offset by 2, scaled embeddings) trained briefly on the ten English-German
pairs. ``reference.json`` holds the tokenizer's ids (``en_XX`` sources, ``de_DE`` targets),
teacher-forced logits on a padded batch and ``generate`` outputs with ``de_DE`` forced first
(greedy, beam 4, beam 4 with length penalty 0).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
import transformers
from tokenizers import SentencePieceUnigramTokenizer
from transformers import MBart50TokenizerFast, MBartConfig, MBartForConditionalGeneration

SOURCE = [
    "the cat sat on the mat .", "a dog runs in the park .", "two men play football today .",
    "the children are singing a song .", "she reads a book in the garden .",
    "a woman rides a red bicycle .", "the old man walks his dog .", "people eat bread and cheese .",
    "my brother works in a big city .", "birds fly over the green hills .",
]
TARGET = [
    "die katze sitzt auf der matte .", "ein hund rennt im park .",
    "zwei maenner spielen heute fussball .", "die kinder singen ein lied .",
    "sie liest ein buch im garten .", "eine frau faehrt ein rotes fahrrad .",
    "der alte mann fuehrt seinen hund aus .", "leute essen brot und kaese .",
    "mein bruder arbeitet in einer grossen stadt .", "voegel fliegen ueber die gruenen huegel .",
]
INPUTS = ["the cat sat on the mat .", "a dog plays football in the city .",
          "birds eat bread", "Zebra quartz jumps!", "the", "people sing a song in the garden ."]
TRAIN_STEPS = 200


def make_tokenizer(work: Path) -> MBart50TokenizerFast:
    unigram = SentencePieceUnigramTokenizer()
    unigram.train_from_iterator(SOURCE + TARGET, vocab_size=120, unk_token="<unk>",
                                special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    vocab = [tuple(entry) for entry in json.loads(unigram.to_str())["model"]["vocab"]]
    return MBart50TokenizerFast(vocab=vocab, src_lang="en_XX", tgt_lang="de_DE")


def make_model(tokenizer: MBart50TokenizerFast) -> MBartForConditionalGeneration:
    size = len(tokenizer)
    config = MBartConfig(
        vocab_size=size, d_model=16, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, activation_function="gelu", scale_embedding=True,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    torch.manual_seed(0)
    model = MBartForConditionalGeneration(config)
    batch = tokenizer(SOURCE, text_target=TARGET, return_tensors="pt", padding=True)
    batch["labels"][batch["labels"] == 1] = -100
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    model.eval()
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=0, decoder_start_token_id=2, eos_token_id=2, pad_token_id=1,
        max_length=24)
    return model


def references(model: MBartForConditionalGeneration, tokenizer: MBart50TokenizerFast) -> dict:
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    targets = tokenizer(text_target=TARGET[:len(INPUTS)], return_tensors="pt", padding=True)
    labels = targets["input_ids"]
    decoder_input = model.prepare_decoder_input_ids_from_labels(labels=labels) \
        if hasattr(model, "prepare_decoder_input_ids_from_labels") else None
    if decoder_input is None:
        from transformers.models.m2m_100.modeling_m2m_100 import shift_tokens_right
        decoder_input = shift_tokens_right(labels, 1, 2)
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_input).logits
    german = tokenizer.convert_tokens_to_ids("de_DE")
    out = {"inputs": INPUTS, "targets": TARGET[:len(INPUTS)], "src_lang": "en_XX",
           "tgt_lang": "de_DE", "forced_bos_token_id": german,
           "input_ids": [tokenizer(t)["input_ids"] for t in INPUTS],
           "target_ids": [tokenizer(text_target=t)["input_ids"] for t in TARGET[:len(INPUTS)]],
           "decoder_input_ids": decoder_input.tolist(),
           "logits": [[[round(x, 6) for x in row] for row in seq] for seq in logits.tolist()]}
    runs = {"greedy": dict(num_beams=1), "beam4": dict(num_beams=4),
            "beam4_lp0": dict(num_beams=4, length_penalty=0.0)}
    for name, options in runs.items():
        with torch.no_grad():
            generated = model.generate(**batch, forced_bos_token_id=german, **options)
        out[name] = {"options": options, "ids": generated.tolist(),
                     "text": tokenizer.batch_decode(generated, skip_special_tokens=True)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="tests/fixtures", type=Path)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = make_tokenizer(Path(tmp))
        model = make_model(tokenizer)
        target = args.out / "tiny_mbart50"
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
        refs = references(model, tokenizer)
    refs["transformers_version"] = transformers.__version__
    (target / "reference.json").write_text(json.dumps(refs, ensure_ascii=False))
    print("tiny_mbart50", sorted(p.name for p in target.iterdir()),
          sum(p.stat().st_size for p in target.iterdir()), "bytes")
    for run in ("greedy", "beam4"):
        print(" ", run, refs[run]["text"])


if __name__ == "__main__":
    main()
