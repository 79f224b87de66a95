"""Build the tiny NLLB-200 checkpoint of ``tests/fixtures/tiny_nllb`` and its reference outputs.

Needs transformers, torch and tokenizers (not textkit's test dependencies); run it once in a
separate environment and commit what it writes::

    python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch==2.13.0 transformers
    /tmp/hfenv/bin/python tools/make_tiny_nllb.py [--out tests/fixtures]

NLLB's published tokenizer cannot reach these machines, so a small SentencePiece-style BPE is
trained here (``tokenizers``) on the sentences below, fairseq's four specials first, and saved
through transformers' ``NllbTokenizerFast`` given NLLB's 202 language codes (transformers 5
does not add them by itself to a tokenizer built from a bare model: ``eng_Latn`` would be
``<unk>``), which puts them after the vocabulary as special tokens. The model is a random
``M2M100ForConditionalGeneration`` (``model_type`` m2m_100, as NLLB-200's) trained briefly on
the ten English-German pairs. ``reference.json`` holds the tokenizer's ids (``eng_Latn``
sources, ``deu_Latn`` targets), teacher-forced logits on a padded batch and ``generate``
outputs with ``deu_Latn`` forced first (greedy, beam 4, beam 4 with length penalty 0).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
import transformers
import transformers.models.nllb.tokenization_nllb as nllb
from tokenizers import SentencePieceBPETokenizer
from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizerFast

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


def make_tokenizer(work: Path) -> NllbTokenizerFast:
    bpe = SentencePieceBPETokenizer()
    bpe.train_from_iterator(SOURCE + TARGET, vocab_size=120,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split()) for m in model["merges"]]
    return NllbTokenizerFast(vocab=model["vocab"], merges=merges,
                             additional_special_tokens=list(nllb.FAIRSEQ_LANGUAGE_CODES),
                             src_lang="eng_Latn", tgt_lang="deu_Latn")


def make_model(tokenizer: NllbTokenizerFast) -> M2M100ForConditionalGeneration:
    size = len(tokenizer)
    config = M2M100Config(
        vocab_size=size, d_model=16, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, activation_function="relu", scale_embedding=True,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(config)
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


def references(model: M2M100ForConditionalGeneration, tokenizer: NllbTokenizerFast) -> dict:
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
    german = tokenizer.convert_tokens_to_ids("deu_Latn")
    out = {"inputs": INPUTS, "targets": TARGET[:len(INPUTS)], "src_lang": "eng_Latn",
           "tgt_lang": "deu_Latn", "forced_bos_token_id": german,
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
        target = args.out / "tiny_nllb"
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
        refs = references(model, tokenizer)
    refs["transformers_version"] = transformers.__version__
    (target / "reference.json").write_text(json.dumps(refs, ensure_ascii=False))
    print("tiny_nllb", sorted(p.name for p in target.iterdir()),
          sum(p.stat().st_size for p in target.iterdir()), "bytes")
    for run in ("greedy", "beam4"):
        print(" ", run, refs[run]["text"])


if __name__ == "__main__":
    main()
