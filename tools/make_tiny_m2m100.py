"""Build the tiny M2M100 checkpoint of ``tests/fixtures/tiny_m2m100`` and its reference outputs.

Needs transformers, torch and sentencepiece (not textkit's test dependencies); run it once in a
separate environment and commit what it writes::

    python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch==2.13.0 transformers \\
        sentencepiece
    /tmp/hfenv/bin/python tools/make_tiny_m2m100.py [--out tests/fixtures]

M2M100's published files (``sentencepiece.bpe.model``, ``vocab.json``) cannot reach these
machines, so a small SentencePiece BPE model is trained here on the sentences below, its pieces
written to ``vocab.json`` after fairseq's four specials, and both saved through transformers'
``M2M100Tokenizer``, which adds the family's 100 language tokens (``__en__``, ...) after the
vocabulary as the published tokenizer does. The model is a random
``M2M100ForConditionalGeneration`` (d_model 16, 2 + 2 layers, pre-norm, sinusoidal positions
offset by 2), trained briefly on the ten English-German pairs so that searches have real
choices. ``reference.json`` holds the tokenizer's ids (English sources, German targets),
teacher-forced logits on a padded batch and ``generate`` outputs with the German token forced
first (greedy, beam 4, beam 4 with length penalty 0).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import sentencepiece as spm
import torch
import transformers
from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

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


def make_tokenizer(work: Path) -> M2M100Tokenizer:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SOURCE + TARGET), model_prefix=str(work / "spm"), vocab_size=120,
        model_type="bpe", character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1,
        hard_vocab_limit=False)
    processor = spm.SentencePieceProcessor(model_file=str(work / "spm.model"))
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())
              if not (processor.is_control(i) or processor.is_unknown(i))]
    vocab = {token: i for i, token in enumerate(["<s>", "<pad>", "</s>", "<unk>", *pieces])}
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    return M2M100Tokenizer(str(work / "vocab.json"), str(work / "spm.model"), src_lang="en",
                           tgt_lang="de")


def make_model(tokenizer: M2M100Tokenizer) -> M2M100ForConditionalGeneration:
    # the published layout: vocabulary, 100 language tokens, 8 "madeup" words
    size = tokenizer.vocab_size + len(tokenizer.lang_code_to_id) + tokenizer.num_madeup_words
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


def references(model: M2M100ForConditionalGeneration, tokenizer: M2M100Tokenizer) -> dict:
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
    german = tokenizer.get_lang_id("de")
    out = {"inputs": INPUTS, "targets": TARGET[:len(INPUTS)], "src_lang": "en",
           "tgt_lang": "de", "forced_bos_token_id": german,
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
        target = args.out / "tiny_m2m100"
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
        refs = references(model, tokenizer)
    refs["transformers_version"] = transformers.__version__
    (target / "reference.json").write_text(json.dumps(refs, ensure_ascii=False))
    print("tiny_m2m100", sorted(p.name for p in target.iterdir()),
          sum(p.stat().st_size for p in target.iterdir()), "bytes")
    for run in ("greedy", "beam4"):
        print(" ", run, refs[run]["text"])


if __name__ == "__main__":
    main()
