"""Build the tiny multilingual translation checkpoints of ``tests/fixtures`` (M2M100, NLLB-200,
mBART-50) and their reference outputs.

Needs transformers, torch, tokenizers and sentencepiece (not textkit's test dependencies); run
it once in a separate environment and commit what it writes::

    python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch==2.13.0 transformers \\
        sentencepiece
    /tmp/hfenv/bin/python tools/make_tiny_multilingual.py [--out tests/fixtures] [--only NAME]

The published tokenizers of these families cannot reach these machines, so each gets a small
model trained here on the ten sentence pairs of ``make_tiny_marian.py`` and saved through
transformers' own class of the family, which gives the family's language codes the ids its
published files give them relative to the vocabulary (after it):

* ``tiny_m2m100``: a SentencePiece BPE model, its pieces written to ``vocab.json`` after
  fairseq's four specials, saved by ``M2M100Tokenizer`` (the 100 ``__xx__`` tokens);
* ``tiny_nllb``: a SentencePiece-style BPE (``tokenizers``) saved by ``NllbTokenizerFast``,
  given NLLB's 202 codes (transformers 5 does not add them by itself to a tokenizer built from
  a bare model: ``eng_Latn`` would be ``<unk>``);
* ``tiny_mbart50``: a SentencePiece-style Unigram model saved by ``MBart50TokenizerFast`` (its
  52 codes such as ``en_XX``).

Each model is random (d_model 16, 2 + 2 layers; ``M2M100ForConditionalGeneration`` for M2M100
and NLLB, ``MBartForConditionalGeneration`` for mBART-50), trained briefly on the English-German
pairs so that searches have real choices. ``reference.json`` holds the tokenizer's ids
(English sources, German targets), teacher-forced logits on a padded batch and ``generate``
outputs with the German code forced first (greedy, beam 4, beam 4 with length penalty 0).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import sentencepiece as spm
import torch
import transformers
import transformers.models.nllb.tokenization_nllb as nllb
from make_tiny_marian import INPUTS, SOURCE, TARGET
from tokenizers import SentencePieceBPETokenizer, SentencePieceUnigramTokenizer
from transformers import (
    M2M100Config,
    M2M100ForConditionalGeneration,
    M2M100Tokenizer,
    MBart50TokenizerFast,
    MBartConfig,
    MBartForConditionalGeneration,
    NllbTokenizerFast,
)

TRAIN_STEPS = 200
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def m2m100_tokenizer(work: Path) -> Any:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SOURCE + TARGET), model_prefix=str(work / "spm"), vocab_size=120,
        model_type="bpe", character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1,
        hard_vocab_limit=False)
    processor = spm.SentencePieceProcessor(model_file=str(work / "spm.model"))
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())
              if not (processor.is_control(i) or processor.is_unknown(i))]
    vocab = {token: i for i, token in enumerate([*SPECIALS, *pieces])}
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    return M2M100Tokenizer(str(work / "vocab.json"), str(work / "spm.model"), src_lang="en",
                           tgt_lang="de")


def nllb_tokenizer(work: Path) -> Any:
    bpe = SentencePieceBPETokenizer()
    bpe.train_from_iterator(SOURCE + TARGET, vocab_size=120, special_tokens=SPECIALS)
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split()) for m in model["merges"]]
    return NllbTokenizerFast(vocab=model["vocab"], merges=merges,
                             additional_special_tokens=list(nllb.FAIRSEQ_LANGUAGE_CODES),
                             src_lang="eng_Latn", tgt_lang="deu_Latn")


def mbart50_tokenizer(work: Path) -> Any:
    unigram = SentencePieceUnigramTokenizer()
    unigram.train_from_iterator(SOURCE + TARGET, vocab_size=120, unk_token="<unk>",
                                special_tokens=SPECIALS)
    vocab = [tuple(entry) for entry in json.loads(unigram.to_str())["model"]["vocab"]]
    return MBart50TokenizerFast(vocab=vocab, src_lang="en_XX", tgt_lang="de_DE")


class Family(NamedTuple):
    tokenizer: Callable[[Path], Any]
    config: type
    model: type
    activation: str
    codes: tuple[str, str]       # the source and target language codes


def m2m100_size(tokenizer: Any) -> int:
    """The published layout: the vocabulary, 100 language tokens, 8 "madeup" words."""
    return tokenizer.vocab_size + len(tokenizer.lang_code_to_id) + tokenizer.num_madeup_words


FAMILIES = {
    "tiny_m2m100": Family(m2m100_tokenizer, M2M100Config, M2M100ForConditionalGeneration,
                          "relu", ("en", "de")),
    "tiny_nllb": Family(nllb_tokenizer, M2M100Config, M2M100ForConditionalGeneration, "relu",
                        ("eng_Latn", "deu_Latn")),
    "tiny_mbart50": Family(mbart50_tokenizer, MBartConfig, MBartForConditionalGeneration,
                           "gelu", ("en_XX", "de_DE")),
}


def make_model(family: Family, tokenizer: Any) -> Any:
    size = m2m100_size(tokenizer) if family.config is M2M100Config and hasattr(
        tokenizer, "num_madeup_words") else len(tokenizer)
    config = family.config(
        vocab_size=size, d_model=16, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, activation_function=family.activation, scale_embedding=True,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    torch.manual_seed(0)
    model = family.model(config)
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


def references(model: Any, tokenizer: Any, codes: tuple[str, str]) -> dict:
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    targets = tokenizer(text_target=TARGET[:len(INPUTS)], return_tensors="pt", padding=True)
    labels = targets["input_ids"]
    if hasattr(model, "prepare_decoder_input_ids_from_labels"):
        decoder_input = model.prepare_decoder_input_ids_from_labels(labels=labels)
    else:
        from transformers.models.m2m_100.modeling_m2m_100 import shift_tokens_right
        decoder_input = shift_tokens_right(labels, 1, 2)
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_input).logits
    forced = tokenizer.convert_tokens_to_ids(
        f"__{codes[1]}__" if isinstance(tokenizer, M2M100Tokenizer) else codes[1])
    out = {"inputs": INPUTS, "targets": TARGET[:len(INPUTS)], "src_lang": codes[0],
           "tgt_lang": codes[1], "forced_bos_token_id": forced,
           "input_ids": [tokenizer(t)["input_ids"] for t in INPUTS],
           "target_ids": [tokenizer(text_target=t)["input_ids"] for t in TARGET[:len(INPUTS)]],
           "decoder_input_ids": decoder_input.tolist(),
           "logits": [[[round(x, 6) for x in row] for row in seq] for seq in logits.tolist()]}
    runs = {"greedy": dict(num_beams=1), "beam4": dict(num_beams=4),
            "beam4_lp0": dict(num_beams=4, length_penalty=0.0)}
    for name, options in runs.items():
        with torch.no_grad():
            generated = model.generate(**batch, forced_bos_token_id=forced, **options)
        out[name] = {"options": options, "ids": generated.tolist(),
                     "text": tokenizer.batch_decode(generated, skip_special_tokens=True)}
    return out


def build(out: Path, name: str, family: Family) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = family.tokenizer(Path(tmp))
        model = make_model(family, tokenizer)
        target = out / name
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
        refs = references(model, tokenizer, family.codes)
    refs["transformers_version"] = transformers.__version__
    (target / "reference.json").write_text(json.dumps(refs, ensure_ascii=False))
    print(name, sorted(p.name for p in target.iterdir()),
          sum(p.stat().st_size for p in target.iterdir()), "bytes")
    for run in ("greedy", "beam4"):
        print(" ", run, refs[run]["text"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="tests/fixtures", type=Path)
    p.add_argument("--only", choices=sorted(FAMILIES), help="build this fixture alone")
    args = p.parse_args()
    for name, family in FAMILIES.items():
        if args.only in (None, name):
            build(args.out, name, family)


if __name__ == "__main__":
    main()
