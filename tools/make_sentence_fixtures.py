"""Build the tiny sentence-transformers directories of ``tests/fixtures/sentence`` and their
reference embeddings (``SentenceTransformer.encode``); check that sentence-transformers loads
textkit's exports with the same vectors.

Needs sentence-transformers, transformers and torch (not textkit's test dependencies); run it
by hand in a separate environment and commit what it writes::

    /tmp/hfenv/bin/python tools/make_sentence_fixtures.py [--out tests/fixtures/sentence]
    # textkit's export of each fixture (textkit's environment), then the check with torch:
    .venv/bin/python -c "from textkit.pretrained import load_pretrained, save_pretrained as s
    for n in ('bert_mean_normalize', 'bert_cls_dense'):
        p = load_pretrained(f'tests/fixtures/sentence/{n}')
        s(p.model, p.params, p.tokenizer, f'/tmp/st_exports/{n}')"
    /tmp/hfenv/bin/python tools/make_sentence_fixtures.py --check /tmp/st_exports

Both directories hold one random BERT (hidden 32, 2 layers, a ~700-entry cut of
bert-base-uncased's WordPiece vocabulary; weights redrawn at larger scales than transformers'
init so that a wrong mapping shows):

- ``bert_mean_normalize``: Transformer (at the root) -> mean Pooling -> Normalize, as
  sentence-transformers 6 saves it (``pooling_mode``; ``model_max_length`` 24 in
  ``tokenizer_config.json``, so the longest texts are truncated).
- ``bert_cls_dense``: the older layout: the Transformer in ``0_Transformer/`` with
  ``sentence_bert_config.json`` (``max_seq_length`` 20), ``pooling_mode_cls_token`` booleans,
  a ``2_Dense`` (32 -> 16, tanh), modules.json with ``sentence_transformers.models.*`` types.

``texts.json`` holds the sentences (varied lengths, accents, one longer than either limit);
each ``reference.npy`` is ``encode(texts, batch_size=8)``, float32 [N, E].
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer import modules

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "tokenizers"
NAMES = ("bert_mean_normalize", "bert_cls_dense")

TEXTS = [
    "A man is playing a guitar.",
    "The cat sat on the mat.",
    "Hello!",
    "Where is the nearest train station?",
    "She has been working at the hospital for more than ten years and still loves it.",
    "Stocks fell sharply on Monday after the central bank raised interest rates again.",
    "I don't know.",
    "The quick brown fox jumps over the lazy dog.",
    "Can you recommend a good book about the history of science?",
    "It rained all day, so we stayed inside, played board games, cooked a big dinner "
    "together and talked until late in the night about everything and nothing.",
    "Yes",
    "The café on the corner serves the best crème brûlée in town.",
    "Two dogs are running through a field of tall green grass.",
    "What time does the museum open on Sundays?",
    "He said that the new model was not as good as the old one, but it was faster.",
    "Paris is the capital of France.",
    "A woman is slicing an onion in the kitchen.",
    "The meeting has been moved to next Thursday afternoon.",
    "",
    "Music, art and literature help people understand each other across cultures and "
    "generations, even when they do not share a language.",
]


def wordpiece_vocab() -> list[str]:
    """Specials, the single characters of bert-base-uncased (with ## forms) below U+0250, its
    300 most frequent words and every word of ``TEXTS``."""
    full = (REAL / "bert-base-uncased" / "vocab.txt").read_text("utf-8").splitlines()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    keep = set(specials)
    for token in full[999:1996]:
        ch = token[2:] if token.startswith("##") else token
        if len(ch) == 1 and ord(ch) < 0x250:
            keep.add(token)
    keep.update(full[1996:2296])
    words = " ".join(TEXTS).lower()
    for ch in ".,!?'":
        words = words.replace(ch, " ")
    keep.update(w for w in words.split() if w in set(full))
    return specials + [t for t in full if t in keep and t not in specials]


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Redraw every parameter: matrices N(0, 1 / fan_in), embeddings N(0, 0.5^2), layer-norm
    scales 1 + N(0, 0.1^2), biases N(0, 0.1^2)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "LayerNorm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * noise)
            elif p.ndim == 1:
                p.copy_(0.1 * noise)
            elif "embeddings" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(noise / p.shape[1] ** 0.5)


def tiny_bert(work: Path, seed: int) -> Path:
    """A random BertModel with its tokenizer, saved in ``work / "bert"``."""
    (work / "vocab.txt").write_text("\n".join(wordpiece_vocab()) + "\n", "utf-8")
    tokenizer = transformers.BertTokenizerFast.from_pretrained(work)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=37, max_position_embeddings=64)
    torch.manual_seed(seed)
    model = transformers.BertModel(config)
    randomize(model, seed)
    target = work / "bert"
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def legacy_layout(target: Path) -> None:
    """Rewrite a saved directory into sentence-transformers 2's layout (module docstring)."""
    inner = target / "0_Transformer"
    inner.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "sentence_bert_config.json"):
        shutil.move(target / name, inner / name)
    (inner / "sentence_bert_config.json").write_text(json.dumps(
        {"max_seq_length": 20, "do_lower_case": False}, indent=2))
    (target / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": True,
         "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
         "pooling_mode_mean_sqrt_len_tokens": False}, indent=2))
    types = {"0_Transformer": "Transformer", "1_Pooling": "Pooling", "2_Dense": "Dense"}
    (target / "modules.json").write_text(json.dumps(
        [{"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
         for i, (path, kind) in enumerate(types.items())], indent=2))


def build(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "texts.json").write_text(json.dumps(TEXTS, indent=1, ensure_ascii=False) + "\n",
                                    "utf-8")
    for seed, name in enumerate(NAMES):
        with tempfile.TemporaryDirectory() as tmp:
            source = tiny_bert(Path(tmp), seed + 10)
            transformer = modules.Transformer(str(source), max_seq_length=24)
            if name == "bert_mean_normalize":
                parts = [transformer, modules.Pooling(32, pooling_mode="mean"),
                         modules.Normalize()]
            else:
                dense = modules.Dense(32, 16)
                randomize(dense, seed + 20)
                parts = [transformer, modules.Pooling(32, pooling_mode="cls"), dense]
            target = out / name
            if target.exists():
                shutil.rmtree(target)
            SentenceTransformer(modules=parts).save(str(target))
            for extra in ("README.md", "special_tokens_map.json"):
                (target / extra).unlink(missing_ok=True)
            if name == "bert_cls_dense":
                legacy_layout(target)
        vectors = encode(target)
        np.save(target / "reference.npy", vectors)
        print(f"{target}: {vectors.shape}, "
              f"{sum(p.stat().st_size for p in target.rglob('*') if p.is_file())} bytes")


def encode(directory: Path) -> np.ndarray:
    """``SentenceTransformer(directory).encode(TEXTS)`` as float32 numpy."""
    model = SentenceTransformer(str(directory), device="cpu")
    model.eval()
    return model.encode(TEXTS, batch_size=8, convert_to_numpy=True).astype(np.float32)


def check(exports: Path, fixtures: Path) -> None:
    """sentence-transformers loads each export with the fixture's vectors (within 1e-5)."""
    for name in NAMES:
        got, want = encode(exports / name), np.load(fixtures / name / "reference.npy")
        error = float(np.abs(got - want).max())
        print(f"{name}: max |export - reference| = {error:.2e}")
        assert error < 1e-5, name


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "sentence")
    p.add_argument("--check", type=Path, default=None,
                   help="a directory of textkit's exports to load with sentence-transformers")
    args = p.parse_args()
    if args.check:
        check(args.check, args.out)
    else:
        build(args.out)


if __name__ == "__main__":
    main()
