"""Build the tiny T5-family checkpoints of ``tests/fixtures`` (T5 v1.0, T5 v1.1 / Flan-T5, mT5),
their reference outputs, and the reference ids of T5's real ``spiece.model``.

Needs transformers, torch, tokenizers and sentencepiece (not textkit's test dependencies); run
it once in the peers' environment and commit what it writes::

    /tmp/hfenv/bin/python tools/make_tiny_t5.py [--out tests/fixtures]
    /tmp/hfenv/bin/python tools/make_tiny_t5.py --check DIR   # textkit's exports, one per fixture

Written with transformers 5.24.0, tokenizers 0.23.3 and torch 2.13.0 (CPU).

* ``tiny_t5``: T5 v1.0 (``T5ForConditionalGeneration``): ReLU feed-forward, the head tied to
  the embeddings (rescaled by d_model^-0.5), t5-small's ``task_specific_params``;
* ``tiny_t5_v1_1``: T5 v1.1 / Flan-T5: gated-GELU feed-forward, an untied head (a
  ``lm_head.weight`` of its own, as the published v1.1 and Flan-T5 files have: transformers 5
  builds every T5 with the head tied, writes ``tie_word_embeddings: true`` and
  ``scale_decoder_outputs: false``, and unties a head whose file holds both, different);
* ``tiny_mt5``: mT5 (``MT5ForConditionalGeneration``, ``model_type`` mt5), as v1.1.

Each has d_model 16, 2 heads of ``d_kv`` 4 (not d_model / heads), d_ff 32, 2 + 2 layers, 8
relative-position buckets up to distance 20 (so the logarithmic buckets are reached by short
sentences), a vocabulary 8 rows larger than the tokenizer's (as t5-small's 32,128 for 32,100
ids), and a Unigram tokenizer of ~120 pieces trained here, saved through transformers'
``T5Tokenizer`` (pad 0, EOS 1, unk 2, 100 ``<extra_id_N>`` sentinels after the pieces, the last
first). transformers 5 saves it as ``tokenizer.json`` only. The models are trained briefly on
the ten sentence pairs of ``make_tiny_marian.py`` with T5's prefix, so that searches have real
choices. ``reference.json`` holds ids, teacher-forced logits on a padded batch, ``generate``
outputs (greedy, beam 4) on 20 sources and the relative-position buckets of transformers
(``T5Attention._relative_position_bucket``) for distances -300..300, both directions, at the
fixture's and at t5-base's settings (32 buckets, 128).

``t5_spiece_ids.json``: the ids transformers' ``T5Tokenizer`` gives a few texts with
``../shared/data/tokenizers/t5`` (T5's real ``spiece.model``; skipped when that folder is absent).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
import transformers
from make_tiny_marian import INPUTS, SOURCE, TARGET
from tokenizers import SentencePieceUnigramTokenizer
from transformers import (
    AutoTokenizer,
    MT5Config,
    MT5ForConditionalGeneration,
    T5Config,
    T5ForConditionalGeneration,
    T5Tokenizer,
)
from transformers.models.t5.modeling_t5 import T5Attention

PREFIX = "translate English to German: "
SOURCES = [*SOURCE, *INPUTS, "a man reads", "the dog sat in the garden .", "two birds sing .",
           "she eats cheese and bread in the city ."]
TRAIN_STEPS = 200
LEARNING_RATE = 3e-3
SHARED_T5 = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "tokenizers" / "t5"
SPIECE_TEXTS = ["translate English to German: The house is wonderful.",
                "summarize: studies have shown that owning a dog is good for you",
                "Hello   world!\tTabs, ÜMLAUTS and ﬁ ligatures… <extra_id_0> sentinel",
                "a <extra_id_0> b <extra_id_99>c", " leading and trailing spaces  ", "",
                "Zürich's 12,345.67 km² — ½ (test)"]
TASKS = {"summarization": {"early_stopping": True, "length_penalty": 2.0, "max_length": 200,
                           "min_length": 30, "no_repeat_ngram_size": 3, "num_beams": 4,
                           "prefix": "summarize: "},
         "translation_en_to_de": {"early_stopping": True, "max_length": 300, "num_beams": 4,
                                  "prefix": PREFIX},
         "translation_en_to_fr": {"early_stopping": True, "max_length": 300, "num_beams": 4,
                                  "prefix": "translate English to French: "}}
FIXTURES = {
    "tiny_t5": (T5Config, T5ForConditionalGeneration,
                dict(feed_forward_proj="relu", tie_word_embeddings=True,
                     task_specific_params=TASKS)),
    "tiny_t5_v1_1": (T5Config, T5ForConditionalGeneration,
                     dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)),
    "tiny_mt5": (MT5Config, MT5ForConditionalGeneration,
                 dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)),
}


def tokenizer() -> T5Tokenizer:
    unigram = SentencePieceUnigramTokenizer()
    unigram.train_from_iterator(SOURCE + TARGET + [PREFIX], vocab_size=120, unk_token="<unk>",
                                special_tokens=["<pad>", "</s>", "<unk>"])
    vocab = [tuple(entry) for entry in json.loads(unigram.to_str())["model"]["vocab"]]
    return T5Tokenizer(vocab=vocab, extra_ids=100)


def make_model(config_class: type, model_class: type, options: dict, tok: T5Tokenizer,
               seed: int) -> torch.nn.Module:
    config = config_class(
        vocab_size=len(tok) + 8, d_model=16, d_kv=4, num_heads=2, d_ff=32, num_layers=2,
        num_decoder_layers=2, relative_attention_num_buckets=8,
        relative_attention_max_distance=20, dropout_rate=0.0, pad_token_id=0, eos_token_id=1,
        decoder_start_token_id=0, **options)
    torch.manual_seed(seed)
    model = model_class(config)
    if not options["tie_word_embeddings"]:      # transformers 5 ties every T5 head at first
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
    batch = tok([PREFIX + s for s in SOURCE], text_target=TARGET, return_tensors="pt",
                padding=True)
    batch["labels"][batch["labels"] == 0] = -100
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    model.train()
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    model.eval()
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=0, eos_token_id=1, pad_token_id=0, max_length=24)
    return model


def buckets() -> dict[str, list[int]]:
    distances = torch.arange(-300, 301)
    out = {}
    for count, limit in ((8, 20), (32, 128)):
        for direction, bidirectional in (("bidirectional", True), ("causal", False)):
            out[f"{direction}_{count}_{limit}"] = T5Attention._relative_position_bucket(
                distances, bidirectional=bidirectional, num_buckets=count,
                max_distance=limit).tolist()
    return out


def references(model: torch.nn.Module, tok: T5Tokenizer) -> dict:
    sources = [PREFIX + s for s in SOURCES]
    batch = tok(sources[:6], return_tensors="pt", padding=True)
    labels = tok(text_target=TARGET[:6], return_tensors="pt", padding=True)["input_ids"]
    decoder_input = model._shift_right(labels)
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_input).logits
    out = {"prefix": PREFIX, "sources": SOURCES, "targets": TARGET[:6],
           "input_ids": [tok(s)["input_ids"] for s in sources],
           "target_ids": [tok(text_target=t)["input_ids"] for t in TARGET[:6]],
           "decoder_input_ids": decoder_input.tolist(),
           "logits": [[[round(x, 6) for x in row] for row in seq] for seq in logits.tolist()],
           "buckets": buckets()}
    full = tok(sources, return_tensors="pt", padding=True)
    for name, options in {"greedy": dict(num_beams=1), "beam4": dict(num_beams=4)}.items():
        with torch.no_grad():
            generated = model.generate(**full, **options)
        out[name] = {"options": options, "ids": generated.tolist(),
                     "text": tok.batch_decode(generated, skip_special_tokens=True)}
    return out


def build(out: Path, name: str, seed: int) -> None:
    config_class, model_class, options = FIXTURES[name]
    tok = tokenizer()
    model = make_model(config_class, model_class, options, tok, seed)
    target = out / name
    model.save_pretrained(target)
    tok.save_pretrained(target)
    refs = references(model, tok)
    refs["transformers_version"] = transformers.__version__
    (target / "reference.json").write_text(json.dumps(refs, ensure_ascii=False))
    print(name, sorted(p.name for p in target.iterdir()),
          sum(p.stat().st_size for p in target.iterdir()), "bytes")
    for run in ("greedy", "beam4"):
        print(" ", run, refs[run]["text"][:4])


def spiece_ids(out: Path) -> None:
    if not (SHARED_T5 / "spiece.model").is_file():
        print(f"skipped t5_spiece_ids.json: no {SHARED_T5 / 'spiece.model'}")
        return
    tok = AutoTokenizer.from_pretrained(SHARED_T5)
    ids = {"class": type(tok).__name__, "size": len(tok), "texts": SPIECE_TEXTS,
           "ids": [tok(t)["input_ids"] for t in SPIECE_TEXTS],
           "decoded": [tok.decode(tok(t)["input_ids"], skip_special_tokens=True)
                       for t in SPIECE_TEXTS],
           "transformers_version": transformers.__version__}
    (out / "t5_spiece_ids.json").write_text(json.dumps(ids, ensure_ascii=False, indent=1))
    print("t5_spiece_ids.json", ids["ids"][:2])


def check(exports: Path, fixtures: Path) -> None:
    """transformers loads each export of textkit's and gives the fixture's logits and ids."""
    for name in FIXTURES:
        refs = json.loads((fixtures / name / "reference.json").read_text())
        model = transformers.AutoModelForSeq2SeqLM.from_pretrained(exports / name).eval()
        tok = AutoTokenizer.from_pretrained(exports / name)
        batch = tok([PREFIX + s for s in SOURCES[:6]], return_tensors="pt", padding=True)
        with torch.no_grad():
            logits = model(**batch, decoder_input_ids=torch.tensor(
                refs["decoder_input_ids"])).logits.numpy()
        worst = float(np.abs(logits - np.asarray(refs["logits"], np.float32)).max())
        same = [tok(PREFIX + s)["input_ids"] for s in SOURCES] == refs["input_ids"]
        print(f"{name}: {type(model).__name__}, max |logits - reference| {worst:.1e}, "
              f"tokenizer ids equal: {same}")
        assert worst < 1e-5 and same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures"))
    parser.add_argument("--check", type=Path, help="a folder of textkit's exports to check")
    args = parser.parse_args()
    if args.check:
        check(args.check, args.out)
        return
    for seed, name in enumerate(FIXTURES):
        build(args.out, name, seed)
    spiece_ids(args.out)


if __name__ == "__main__":
    main()
