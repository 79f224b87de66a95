"""Build the tiny Marian checkpoints of ``tests/fixtures`` and their reference outputs.

Needs transformers, torch and sentencepiece (not textkit's test dependencies); run it once in a
separate environment and commit what it writes::

    python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch transformers sentencepiece
    /tmp/hfenv/bin/python tools/make_tiny_marian.py [--out tests/fixtures]

Each checkpoint is a random ``MarianMTModel`` (d_model 16, 2 + 2 layers, a vocabulary of ~100
pieces from two SentencePiece models trained here on a few sentences) saved with
``save_pretrained`` next to its ``MarianTokenizer``. It is trained briefly on the ten sentence
pairs below (a random model repeats one token up to ``max_length``), so that greedy and beam
search have real choices and outputs end with EOS at different lengths. ``reference.json``
holds, for a few sentences, MarianTokenizer's ids, the teacher-forced logits and the outputs of
``generate`` (greedy, beam 4 with length_penalty 0 and with the default 1.0), ids and strings.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import sentencepiece as spm
import torch
from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

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
TRAIN_STEPS = 150
VARIANTS = {
    # name: (config overrides, seed)
    "tiny_marian": (dict(activation_function="swish"), 0),
    "tiny_marian_untied": (dict(activation_function="gelu", tie_word_embeddings=False), 1),
}


def train_spm(lines: list[str], prefix: Path, vocab_size: int) -> None:
    """A small unigram SentencePiece model without a normalisation table (keeps it a few KB)."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=vocab_size,
        model_type="unigram", normalization_rule_name="identity", character_coverage=1.0,
        bos_id=-1, eos_id=1, unk_id=0, pad_id=-1, hard_vocab_limit=False)


def build_vocab(work: Path) -> dict[str, int]:
    """Marian's shared vocab.json: </s>=0, <unk>=1, the pieces of both models, <pad> last.

    Two source pieces are left out on purpose so that encoding meets unknown pieces."""
    pieces: list[str] = []
    for name in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=str(work / f"{name}.model"))
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                   if not (sp.is_control(i) or sp.is_unknown(i))]
    ordered = list(dict.fromkeys(pieces))
    left_out = {"▁cat", "▁dog"}
    tokens = ["</s>", "<unk>"] + [p for p in ordered if p not in left_out] + ["<pad>"]
    return {token: i for i, token in enumerate(tokens)}


def make_model(vocab: dict[str, int], tokenizer: MarianTokenizer, overrides: dict,
               seed: int) -> MarianMTModel:
    """A MarianMTModel trained for a few hundred steps on the ten pairs (so that its outputs
    vary in length and end with EOS), then given a random ``final_logits_bias``."""
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=16, encoder_layers=2,
        decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, pad_token_id=pad, eos_token_id=0,
        decoder_start_token_id=pad, forced_eos_token_id=0, scale_embedding=True,
        share_encoder_decoder_embeddings=True, **overrides)
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    batch = tokenizer(SOURCE, text_target=TARGET, return_tensors="pt", padding=True)
    batch["labels"][batch["labels"] == pad] = -100
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        model.final_logits_bias.copy_(0.3 * torch.randn_like(model.final_logits_bias))
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad]], bos_token_id=0, decoder_start_token_id=pad, eos_token_id=0,
        forced_eos_token_id=0, max_length=24, num_beams=4, pad_token_id=pad)
    return model


def references(model: MarianMTModel, tokenizer: MarianTokenizer) -> dict:
    """Tokenizer ids, teacher-forced logits and generate() outputs for ``INPUTS``."""
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    targets = tokenizer(text_target=TARGET[:len(INPUTS)], return_tensors="pt", padding=True)
    labels = targets["input_ids"]
    decoder_input = model.prepare_decoder_input_ids_from_labels(labels=labels)
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_input).logits
    out = {"inputs": INPUTS, "targets": TARGET[:len(INPUTS)],
           "input_ids": [tokenizer(t)["input_ids"] for t in INPUTS],
           "target_ids": [tokenizer(text_target=t)["input_ids"] for t in TARGET[:len(INPUTS)]],
           "decoder_input_ids": decoder_input.tolist(),
           "logits": [[[round(x, 6) for x in row] for row in seq] for seq in logits.tolist()]}
    runs = {"greedy": dict(num_beams=1), "beam4_lp0": dict(num_beams=4, length_penalty=0.0),
            "beam4": dict(num_beams=4)}
    for name, options in runs.items():
        with torch.no_grad():
            generated = model.generate(**batch, **options)
        out[name] = {"options": options, "ids": generated.tolist(),
                     "text": tokenizer.batch_decode(generated, skip_special_tokens=True)}
    return out


def build(out: Path, name: str, overrides: dict, seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train_spm(SOURCE, work / "source", 48)
        train_spm(TARGET, work / "target", 48)
        vocab = build_vocab(work)
        (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
        tokenizer = MarianTokenizer(str(work / "source.model"), str(work / "target.model"),
                                    str(work / "vocab.json"), source_lang="en",
                                    target_lang="de")
        model = make_model(vocab, tokenizer, overrides, seed)
        target = out / name
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
        refs = references(model, tokenizer)
    refs["transformers_version"] = __import__("transformers").__version__
    (target / "reference.json").write_text(json.dumps(refs, ensure_ascii=False))
    print(name, sorted(p.name for p in target.iterdir()),
          sum(p.stat().st_size for p in target.iterdir()), "bytes")
    for run in ("greedy", "beam4_lp0"):
        print(" ", run, refs[run]["text"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="tests/fixtures", type=Path)
    args = p.parse_args()
    for name, (overrides, seed) in VARIANTS.items():
        build(args.out, name, overrides, seed)


if __name__ == "__main__":
    main()
