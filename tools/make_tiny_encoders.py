"""Build the tiny encoder checkpoints of ``tests/fixtures/encoders`` and their reference outputs;
check that transformers loads textkit's exports with the same outputs.

Needs transformers, torch and tokenizers (not textkit's test dependencies); run it by hand in a
separate environment and commit what it writes::

    python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch==2.13.0 transformers \
        safetensors numpy tokenizers
    /tmp/hfenv/bin/python tools/make_tiny_encoders.py [--out tests/fixtures/encoders]

    # textkit's exports of every fixture (textkit's environment), then the check with torch:
    .venv/bin/python tools/export_tiny_encoders.py /tmp/encoder_exports
    /tmp/hfenv/bin/python tools/make_tiny_encoders.py --check /tmp/encoder_exports

Each ``<family>_<head>/`` directory is a random transformers model (hidden 32, 2 layers, real
layouts) saved with ``save_pretrained`` next to its tokenizer's files. Vocabularies are small
cuts of the real ones (a few hundred entries, so that each directory is ~100-200 KB): WordPiece
entries of bert-base-uncased (BERT, ELECTRA, DistilBERT), the byte alphabet and the first
merges of roberta-base (RoBERTa), a small Unigram vocabulary (XLM-R). Some directories keep
``tokenizer.json``, others only the vocabulary files, so both ways of building a tokenizer are
tested. Weights are redrawn with larger scales than transformers' init (std 0.02 gives nearly
constant outputs, which would hide a wrong mapping).

``reference.npz`` holds, for a padded batch of real sentences (``single/``) and of sentence
pairs (``pair/``), the tokenizer's ``input_ids`` / ``attention_mask`` / ``token_type_ids`` and
the model's fp32 outputs under transformers' names (``hidden_states`` stacked). The tokenizer
references (``tokenizers/``) are the ids, type ids and character offsets of transformers' fast
tokenizers for the generated texts of ``tokenizers/texts.json`` (>= 300 per tokenizer: accents,
CJK, emoji, control characters, very long words, empty strings, pairs, truncation), for each
fixture tokenizer and for the real files of ``../shared/data/tokenizers`` where present.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "tokenizers"

SINGLE = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France.",
    "I love it!",
    "He said that the new model was not as good as the old one, but it was faster.",
]
PAIRS = [
    ("Who wrote the book?", "The book was written by a man who lived in London."),
    ("Is it good?", "Yes."),
    ("Where is the city?", "It is in the north of the country, near the sea."),
]
HEADS = {
    # head: architecture suffix
    "model": "Model", "mlm": "ForMaskedLM", "pretraining": "ForPreTraining",
    "seqcls": "ForSequenceClassification", "tokcls": "ForTokenClassification",
    "qa": "ForQuestionAnswering",
}
FAMILIES = {
    # family: (class prefix, heads, config kwargs, tokenizer kind, seed)
    "bert": ("Bert", ["model", "mlm", "seqcls", "tokcls", "qa"],
             dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=37, max_position_embeddings=64, type_vocab_size=2,
                  hidden_act="gelu", pad_token_id=0), "wordpiece", 0),
    "roberta": ("Roberta", ["model", "mlm", "seqcls", "tokcls", "qa"],
                dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=66, type_vocab_size=1,
                     hidden_act="gelu", pad_token_id=1, bos_token_id=0, eos_token_id=2,
                     layer_norm_eps=1e-5), "bpe", 1),
    "xlm-roberta": ("XLMRoberta", ["model", "mlm", "seqcls", "tokcls", "qa"],
                    dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=48, max_position_embeddings=66, type_vocab_size=1,
                         hidden_act="gelu", pad_token_id=1, bos_token_id=0, eos_token_id=2,
                         layer_norm_eps=1e-5), "unigram", 2),
    "electra": ("Electra", ["model", "pretraining", "mlm", "seqcls", "tokcls", "qa"],
                dict(embedding_size=16, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=2, intermediate_size=40, max_position_embeddings=64,
                     type_vocab_size=2, hidden_act="gelu", pad_token_id=0), "wordpiece", 3),
    "distilbert": ("DistilBert", ["model", "mlm", "seqcls", "tokcls", "qa"],
                   dict(dim=32, n_layers=2, n_heads=4, hidden_dim=52,
                        max_position_embeddings=64, activation="gelu", pad_token_id=0,
                        sinusoidal_pos_embds=False), "wordpiece", 4),
}
NUM_LABELS = {"seqcls": 3, "tokcls": 5}
KEEP_TOKENIZER_JSON = {"model", "mlm"}   # the other heads keep only the vocabulary files
BATCHES = {"model": ("single", "pair"), "mlm": ("single",), "pretraining": ("single",),
           "seqcls": ("single", "pair"), "tokcls": ("single",), "qa": ("pair",)}


# ------------------------------------------------------------------------------ vocabularies
def common_words() -> list[str]:
    words = " ".join(SINGLE + [a + " " + b for a, b in PAIRS]).lower()
    for ch in ".,!?":
        words = words.replace(ch, " ")
    return sorted(set(words.split()))


def wordpiece_vocab() -> list[str]:
    """A cut of bert-base-uncased's vocab.txt: specials, ASCII / Latin-1 / a few CJK characters
    (with their ## forms), the 250 most frequent words and the reference sentences' words."""
    full = (REAL / "bert-base-uncased" / "vocab.txt").read_text("utf-8").splitlines()
    keep = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    cjk = set("中文字日本語한국어的是")
    for token in full[999:1996]:                       # the single characters and ## forms
        ch = token[2:] if token.startswith("##") else token
        if len(ch) == 1 and (ord(ch) < 0x250 or ch in cjk):
            keep.add(token)
    keep.update(full[1996:2246])
    wanted = set(common_words())
    keep.update(t for t in full if t in wanted)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return specials + [t for t in full if t in keep and t not in specials]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (byte-level BPE's alphabet)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


def bpe_vocab(merge_count: int = 300) -> tuple[dict[str, int], list[str]]:
    """roberta-base's byte alphabet and its first ``merge_count`` merges (and the words of the
    reference sentences' merges up to rank 3000)."""
    full = json.loads((REAL / "roberta-base" / "vocab.json").read_text("utf-8"))
    lines = (REAL / "roberta-base" / "merges.txt").read_text("utf-8").splitlines()[1:]
    vocab = ["<s>", "<pad>", "</s>", "<unk>"] + sorted(bytes_to_unicode().values(),
                                                     key=lambda c: full[c])
    have = set(vocab)
    merges = []
    for line in lines[:merge_count]:
        a, b = line.split()
        if a in have and b in have and a + b in full:
            merges.append(line)
            if a + b not in have:
                vocab.append(a + b)
                have.add(a + b)
    vocab.append("<mask>")
    return {t: i for i, t in enumerate(vocab)}, merges


def unigram_vocab() -> list[tuple[str, float]]:
    """A small SentencePiece-style Unigram vocabulary (XLM-R's specials first)."""
    pieces: dict[str, float] = {}
    for i, word in enumerate(common_words()):
        pieces["▁" + word] = -5.0 - 0.01 * i
        for j in range(2, len(word)):
            pieces.setdefault(word[:j], -9.0 - 0.1 * j)
    chars = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-()"
             "éèàüöñç中文字日本語😀")
    for ch in chars:
        pieces.setdefault(ch, -12.0)
    pieces.setdefault("▁", -6.0)
    specials = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    return specials + sorted(pieces.items(), key=lambda kv: -kv[1]) + [("<mask>", 0.0)]


def make_tokenizer(kind: str, work: Path):
    """The fixture tokenizer of ``kind`` (a transformers fast tokenizer)."""
    if kind == "wordpiece":
        (work / "vocab.txt").write_text("\n".join(wordpiece_vocab()) + "\n", "utf-8")
        return transformers.BertTokenizerFast.from_pretrained(work)
    if kind == "bpe":
        vocab, merges = bpe_vocab()
        (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
        (work / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", "utf-8")
        return transformers.RobertaTokenizerFast.from_pretrained(work)
    return transformers.XLMRobertaTokenizerFast(vocab=unigram_vocab())


# ------------------------------------------------------------------------------------ models
def randomize(model: torch.nn.Module, seed: int) -> None:
    """Redraw every parameter: matrices N(0, 0.3^2 / fan-ish), layer-norm scales 1 + N(0, 0.1),
    biases N(0, 0.1) (transformers' init gives nearly constant outputs at this size)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "LayerNorm" in name or "layer_norm" in name.lower():
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * noise)
            elif p.ndim == 1:
                p.copy_(0.1 * noise)
            elif "embeddings" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(noise / p.shape[1] ** 0.5)


def batch_inputs(tokenizer, pair: bool) -> dict[str, torch.Tensor]:
    if pair:
        return tokenizer([a for a, _ in PAIRS], [b for _, b in PAIRS], padding=True,
                         return_tensors="pt")
    return tokenizer(SINGLE, padding=True, return_tensors="pt")


def run_model(model, inputs: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The model's fp32 outputs (transformers' names; ``hidden_states`` stacked)."""
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True)
    arrays = {}
    for key, value in out.items():
        if key == "hidden_states":
            arrays[key] = torch.stack(value).numpy()
        elif isinstance(value, torch.Tensor):
            arrays[key] = value.numpy()
    return arrays


def build(out: Path, family: str) -> None:
    prefix, heads, kwargs, kind, seed = FAMILIES[family]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokenizer = make_tokenizer(kind, work)
        config_cls = getattr(transformers, f"{prefix}Config")
        for head in heads:
            name = f"{family.replace('-', '_')}_{head}"
            config = config_cls(vocab_size=len(tokenizer), num_labels=NUM_LABELS.get(head, 2),
                                **kwargs)
            torch.manual_seed(seed)
            model = getattr(transformers, prefix + HEADS[head])(config)
            randomize(model, seed * 100 + len(name))
            model.eval()
            target = out / name
            if target.exists():
                shutil.rmtree(target)
            model.save_pretrained(target)
            tokenizer.save_pretrained(target)
            if head not in KEEP_TOKENIZER_JSON and kind != "unigram":
                # transformers 5 writes tokenizer.json only: these keep the vocabulary files
                (target / "tokenizer.json").unlink()
                for f in work.iterdir():
                    shutil.copy(f, target / f.name)
            for extra in ("special_tokens_map.json",):
                (target / extra).unlink(missing_ok=True)
            arrays = {}
            for batch in BATCHES[head]:
                inputs = batch_inputs(tokenizer, batch == "pair")
                if family == "distilbert":
                    inputs.pop("token_type_ids", None)
                arrays.update({f"{batch}/{k}": v.numpy().astype(np.int32)
                               for k, v in inputs.items()})
                outputs = run_model(model, inputs)
                if head != "model":
                    outputs.pop("hidden_states")      # asked of the bare models only
                arrays.update({f"{batch}/{k}": v for k, v in outputs.items()})
            np.savez_compressed(target / "reference.npz", **arrays)
            (target / "reference.json").write_text(json.dumps({
                "transformers_version": transformers.__version__,
                "torch_version": torch.__version__, "architecture": prefix + HEADS[head],
                "single": SINGLE, "pairs": PAIRS,
                "outputs": sorted(k for k in arrays if not k.endswith("_ids")
                                  and not k.endswith("attention_mask"))}, indent=1) + "\n")
            size = sum(p.stat().st_size for p in target.iterdir())
            print(f"{name}: {size} bytes, {sorted(p.name for p in target.iterdir())}")


# -------------------------------------------------------------------------------- tokenizers
def generated_texts(count: int = 320, seed: int = 0) -> list[str]:
    """Deterministic test texts: words, accents, CJK, emoji, control characters, very long
    words, empty and blank strings, special-token strings, numbers and URLs."""
    rng = random.Random(seed)
    words = ["the", "model", "Hello", "world", "tokenizer", "Paris", "naïve", "café", "Zürich",
             "résumé", "coöperate", "Ångström", "ﬁnance", "straße", "İstanbul", "e\u0301",
             "中文", "日本語のテキスト", "한국어", "漢字", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "don't",
             "U.S.A.", "3.14159", "1,000,000", "e-mail", "http://example.com/a?b=c", "#tag",
             "@user", "[MASK]", "<mask>", "[SEP]", "</s>", "<s>", "\t", "\n", "\x00", "\x7f",
             "\u200b", "\u00ad", "\ufeff", "  ", "—", "«quoted»", "¿qué?", "Ω", "x²", "½",
             "supercalifragilisticexpialidocious", "a" * 120, "ab" * 80,
             "Pneumonoultramicroscopicsilicovolcanoconiosis", "ALLCAPS", "MiXeD", "–"]
    texts = ["", " ", "\t\n", "a", "[MASK]", "Hello <mask> world", "\x00\x01\x02",
             "word " * 60, "🙂" * 20, "中" * 50]
    while len(texts) < count:
        n = rng.randint(1, 14)
        sep = rng.choice([" ", " ", " ", "", "  ", "\t"])
        texts.append(sep.join(rng.choice(words) for _ in range(n)))
    return texts


def tokenizer_cases(texts: list[str]) -> dict[str, dict]:
    """(texts, pairs, max_length) of each case: singles, pairs, pairs truncated to 24."""
    half = len(texts) // 2
    pairs = list(zip(texts[:half], texts[half:2 * half]))
    return {"single": dict(texts=texts, pairs=None, max_length=None),
            "pair": dict(texts=[a for a, _ in pairs], pairs=[b for _, b in pairs],
                         max_length=None),
            "pair_trunc24": dict(texts=[a for a, _ in pairs], pairs=[b for _, b in pairs],
                                 max_length=24),
            "single_trunc16": dict(texts=texts, pairs=None, max_length=16)}


def tokenizer_reference(tokenizer, texts: list[str]) -> dict[str, np.ndarray]:
    """Ragged ids, type ids and offsets of every case, flattened with row lengths."""
    arrays = {}
    for case, spec in tokenizer_cases(texts).items():
        kwargs = dict(return_offsets_mapping=True, return_token_type_ids=True)
        if spec["max_length"]:
            kwargs.update(truncation=True, max_length=spec["max_length"])
        if spec["pairs"] is None:
            enc = tokenizer(spec["texts"], **kwargs)
        else:
            enc = tokenizer(spec["texts"], spec["pairs"], **kwargs)
        arrays[f"{case}/lengths"] = np.array([len(x) for x in enc["input_ids"]], np.int32)
        arrays[f"{case}/input_ids"] = np.concatenate(
            [np.array(x, np.int32) for x in enc["input_ids"]])
        arrays[f"{case}/token_type_ids"] = np.concatenate(
            [np.array(x, np.int32) for x in enc["token_type_ids"]])
        arrays[f"{case}/offsets"] = np.concatenate(
            [np.array(x, np.int32).reshape(-1, 2) for x in enc["offset_mapping"]])
    return arrays


def real_tokenizer_dirs(work: Path) -> dict[str, Path]:
    """Directories of the real tokenizer files as a user has them (config.json with the
    model_type; bert-base-cased: tokenizer_config.json with do_lower_case false, as published).
    The tests build the same directories."""
    dirs = {}
    for name, model_type, extra in (("bert-base-uncased", "bert", None),
                                    ("bert-base-cased", "bert", {"do_lower_case": False}),
                                    ("roberta-base", "roberta", None),
                                    ("roberta-base-vocab", "roberta", None)):
        src = REAL / name.replace("-vocab", "")
        if not src.is_dir():
            continue
        target = work / name
        target.mkdir()
        for f in src.iterdir():
            if not (name.endswith("-vocab") and f.name == "tokenizer.json"):
                shutil.copy(f, target / f.name)
        (target / "config.json").write_text(json.dumps({"model_type": model_type}))
        if extra:
            (target / "tokenizer_config.json").write_text(json.dumps(extra))
        dirs[name] = target
    return dirs


def build_tokenizer_references(out: Path) -> None:
    target = out / "tokenizers"
    target.mkdir(parents=True, exist_ok=True)
    texts = generated_texts()
    (target / "texts.json").write_text(json.dumps(texts, ensure_ascii=True, indent=0) + "\n")
    sources = {name: out / f"{name}_model" for name in ("bert", "roberta", "xlm_roberta")}
    sources["bert_seqcls"] = out / "bert_seqcls"          # built from vocab.txt
    sources["roberta_seqcls"] = out / "roberta_seqcls"    # built from vocab.json + merges.txt
    with tempfile.TemporaryDirectory() as tmp:
        sources.update(real_tokenizer_dirs(Path(tmp)))
        for name, directory in sources.items():
            tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
            arrays = tokenizer_reference(tokenizer, texts)
            np.savez_compressed(target / f"{name}.npz", **arrays)
            print(f"tokenizers/{name}.npz: {type(tokenizer).__name__}, "
                  f"{int(arrays['single/lengths'].sum())} ids")


# ------------------------------------------------------------------------------------- check
def check(exports: Path, fixtures: Path) -> None:
    """Load every export in ``exports`` with transformers and compare its outputs with the
    fixture's reference (max abs difference per output)."""
    worst = 0.0
    for directory in sorted(p for p in exports.iterdir() if p.is_dir()):
        ref = np.load(fixtures / directory.name / "reference.npz")
        arch = json.loads((directory / "config.json").read_text())["architectures"][0]
        model = getattr(transformers, arch).from_pretrained(directory)
        model.eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        report = []
        for batch in sorted({k.split("/")[0] for k in ref.files}):
            inputs = batch_inputs(tokenizer, batch == "pair")
            if "distilbert" in directory.name:
                inputs.pop("token_type_ids", None)
            for key, value in inputs.items():
                assert np.array_equal(value.numpy(), ref[f"{batch}/{key}"]), (directory, key)
            for key, value in run_model(model, inputs).items():
                if f"{batch}/{key}" not in ref:
                    continue
                diff = float(np.abs(value - ref[f"{batch}/{key}"]).max())
                worst = max(worst, diff)
                report.append(f"{batch}/{key} {diff:.2e}")
        print(f"{directory.name} ({arch}): {', '.join(report)}")
    print(f"max abs difference over all exports: {worst:.3e}")
    assert worst < 1e-5, worst


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=ROOT / "tests" / "fixtures" / "encoders", type=Path)
    p.add_argument("--check", type=Path, help="a directory of textkit exports to check")
    args = p.parse_args()
    if args.check:
        check(args.check, args.out)
        return
    for family in FAMILIES:
        build(args.out, family)
    build_tokenizer_references(args.out)


if __name__ == "__main__":
    main()
