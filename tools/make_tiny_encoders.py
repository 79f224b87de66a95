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
layouts; ModernBERT 3 layers, global / local / global, with a local window of 8 tokens, shorter
than the batches; DeBERTa-v3's options in ``deberta_v3_*``, DeBERTa-v2's others in
``deberta_v2_seqcls``) saved with ``save_pretrained`` next to its tokenizer's files.
Vocabularies are small cuts of the real ones (a few hundred entries, so that each directory is
~100-200 KB; the masked-LM ones, with their [B, T, V] reference logits, up to ~450 KB):
WordPiece entries of bert-base-uncased (BERT, ELECTRA, DistilBERT), the byte alphabet and the
first merges of roberta-base (RoBERTa, ModernBERT), tiny SentencePiece Unigram models trained
here on the test texts (XLM-R, with a small normalization map of its own; DeBERTa-v3). Some
directories keep ``tokenizer.json``, others only the vocabulary files (``vocab.txt``,
``vocab.json`` + ``merges.txt``, ``sentencepiece.bpe.model``, ``spm.model``), so both ways of
building a tokenizer are tested. Weights are redrawn with larger scales than transformers' init
(std 0.02 gives nearly constant outputs, which would hide a wrong mapping; ``randomize``), then
each head's last layers are trained for wide decision margins on random token ids
(``widen_margins``), as a trained model has them: random heads leave many decisions near a tie,
which any rounding flips, and the tests assert that mixed precision keeps the float32 argmax on
>= 99 % of the positions.

``reference.npz`` holds, for a padded batch of real sentences (``single/``) and of sentence
pairs (``pair/``), the tokenizer's ``input_ids`` / ``attention_mask`` / ``token_type_ids`` and
the model's fp32 outputs under transformers' names (``hidden_states`` stacked), computed with
eager attention (which also fixes what padded positions hold; ``--check`` compares
transformers' default attention at the real positions, and eager attention everywhere). The
tokenizer references (``tokenizers/``) are the ids, type ids and character offsets of
transformers' fast tokenizers for the generated texts of ``tokenizers/texts.json`` (>= 300 per
tokenizer: accents, CJK, emoji, control characters, very long words, empty strings, pairs,
truncation), for each fixture tokenizer and for the real files of ``../shared/data/tokenizers``
where present (bert-base-uncased / -cased, roberta-base, deberta-v3's ``spm.model``).
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
    # DeBERTa-v3's options (relative positions in log buckets from distance 4 on)
    "deberta-v3": ("DebertaV2", ["model", "mlm", "seqcls", "tokcls", "qa"],
                   dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=64, type_vocab_size=0,
                        relative_attention=True, position_buckets=8, max_relative_positions=32,
                        pos_att_type=["p2c", "c2p"], share_att_key=True,
                        norm_rel_ebd="layer_norm", position_biased_input=False,
                        hidden_act="gelu", layer_norm_eps=1e-7, pad_token_id=0), "spm", 5),
    # DeBERTa-v2's other options: separate position projections, absolute positions, token
    # types, unbucketed distances clipped at 16, no norm of the relative embeddings
    "deberta-v2": ("DebertaV2", ["seqcls"],
                   dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=64, type_vocab_size=2,
                        relative_attention=True, position_buckets=-1, max_relative_positions=16,
                        pos_att_type=["p2c", "c2p"], share_att_key=False, norm_rel_ebd="none",
                        position_biased_input=True, hidden_act="gelu", layer_norm_eps=1e-7,
                        pad_token_id=0), "spm", 7),
    "modernbert": ("ModernBert", ["model", "mlm", "seqcls", "tokcls", "qa"],
                   dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=40, max_position_embeddings=64, local_attention=8,
                        global_attn_every_n_layers=2, hidden_activation="gelu",
                        classifier_pooling="mean", global_rope_theta=160_000.0,
                        local_rope_theta=10_000.0), "modernbert", 6),
}
SPM_FILE = {"unigram": "sentencepiece.bpe.model", "spm": "spm.model"}
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


NORMALIZATION_RULES = {"\ufb01": "fi", "\u00bd": "1\u20442", "\uff21": "A", "\u2126": "\u03a9",
                       "\u00b2": "2", "\u3000": " "}
"""A small SentencePiece normalization map (ligature, fraction, full-width, compatibility
characters) for the XLM-R fixture: its precompiled form is a few KB, not nmt_nfkc's 240 KB."""


def train_sentencepiece(work: Path, kind: str) -> Path:
    """A tiny SentencePiece Unigram model trained on the reference sentences and the tokenizer
    test texts: XLM-R's (``<unk> <s> </s>`` first, the small normalization map) or DeBERTa's
    (``[PAD] [CLS] [SEP] [UNK]`` first, identity normalization as its tokenizer ignores the
    map)."""
    import sentencepiece

    lines = [t.replace("\n", " ") for t in generated_texts() if t.strip()]
    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(SINGLE * 5 + [a + " " + b for a, b in PAIRS] * 5 + lines * 2),
                      "utf-8")
    options = dict(input=str(corpus), vocab_size=300, character_coverage=1.0,
                   hard_vocab_limit=False, model_type="unigram", num_threads=1,
                   minloglevel=2, model_prefix=str(work / kind))
    if kind == "spm":
        options.update(pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]",
                       bos_piece="[CLS]", eos_piece="[SEP]", unk_piece="[UNK]",
                       normalization_rule_name="identity")
    else:
        rules = work / "rules.tsv"
        rules.write_text("".join(f"{ord(a):X}\t{' '.join(f'{ord(c):X}' for c in b)}\n"
                                 for a, b in NORMALIZATION_RULES.items()), "utf-8")
        options.update(normalization_rule_tsv=str(rules))
    sentencepiece.SentencePieceTrainer.train(**options)
    (work / f"{kind}.model").rename(work / SPM_FILE[kind])
    for name in (f"{kind}.vocab", "corpus.txt", "rules.tsv"):
        (work / name).unlink(missing_ok=True)
    return work / SPM_FILE[kind]


def modernbert_tokenizer(work: Path):
    """ModernBERT's tokenizer shape on the fixture byte-level BPE: ``[CLS] A [SEP] (B [SEP])``,
    ``[PAD]`` / ``[MASK]`` / ``[UNK]`` specials, no token types (tokenizer.json only)."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE

    vocab, merges = bpe_vocab()
    vocab = {t: i for i, t in enumerate(t for t in vocab if not t.startswith("<"))}
    tokenizer = Tokenizer(BPE(vocab=vocab, merges=[tuple(m.split()) for m in merges],
                              fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                  for t in specials])
    ids = {t: tokenizer.token_to_id(t) for t in specials}
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        pad_token="[PAD]", mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"])


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
    if kind == "modernbert":
        return modernbert_tokenizer(work)
    train_sentencepiece(work, kind)
    if kind == "spm":
        return transformers.DebertaV2Tokenizer.from_pretrained(work)
    return transformers.XLMRobertaTokenizer.from_pretrained(work)


# ------------------------------------------------------------------------------------ models
OUTPUT_ROWS = ("word_embeddings.weight", "tok_embeddings.weight", "classifier.weight",
               "out_proj.weight", "qa_outputs.weight", "dense_prediction.weight")
"""The rows that score the decisions: the (tied) decoder's embeddings and the final layers."""


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Redraw every parameter: matrices N(0, 1 / fan_in), layer-norm scales 1 + N(0, 0.1),
    biases N(0, 0.1), embeddings N(0, 0.5^2) (transformers' init gives nearly constant outputs at
    this size); the rows of ``OUTPUT_ROWS`` times exp(N(0, 0.7^2)) so that the top two scores
    of a decision are seldom a near-tie (the word embeddings from N(0, 0.1^2), the final layers
    halved, so that logits stay below ~20, where float32 rounding stays within 1e-5)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "LayerNorm" in name or "norm" in name.lower():
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * noise)
            elif p.ndim == 1:
                p.copy_(0.1 * noise)
            elif "embeddings" in name:
                p.copy_((0.1 if name.endswith(OUTPUT_ROWS) else 0.5) * noise)
            else:
                p.copy_(noise / p.shape[1] ** 0.5)
            if name.endswith(OUTPUT_ROWS) and p.ndim == 2:
                scale = 1.0 if "embeddings" in name else 0.5
                p.mul_(scale * torch.exp(0.7 * torch.randn((p.shape[0], 1), generator=gen)))


MARGIN_PARAMS = ("classifier.weight", "out_proj.weight", "qa_outputs.weight",
                 "dense_prediction.weight", "predictions.transform.dense.weight",
                 "predictions.transform.LayerNorm.weight", "predictions.transform.LayerNorm.bias",
                 "lm_head.dense.weight", "lm_head.layer_norm.weight", "lm_head.layer_norm.bias",
                 "generator_predictions.dense.weight", "generator_predictions.LayerNorm.weight",
                 "generator_predictions.LayerNorm.bias", "vocab_transform.weight",
                 "vocab_layer_norm.weight", "vocab_layer_norm.bias", "head.dense.weight",
                 "head.norm.weight")
"""The weights that ``widen_margins`` trains: the final layer of the classification, span and
discriminator heads; the masked-LM transform before the decoder (tied to the word embeddings,
which also feed the inputs)."""
FINAL_PARAMS = MARGIN_PARAMS[:4]
"""The final layers' weights (scores are linear in each)."""


def relative_margins(outputs, mask: torch.Tensor, head: str) -> torch.Tensor:
    """Each decision's margin over the spread of its scores: top-1 minus top-2 score (the
    discriminator: |score|) over the std of all the output's scores, at every real position
    (``seqcls``: every row; ``qa``: every row, over its real positions)."""
    margins = []
    for key in ("start_logits", "end_logits") if head == "qa" else ("logits",):
        scores = outputs[key]
        spread = scores.std()
        if head == "pretraining":
            margins.append(scores.abs()[mask] / spread)
            continue
        if head == "qa":
            scores = scores.masked_fill(~mask, -1e4)
        top = scores.topk(2, dim=-1).values
        margin = top[..., 0] - top[..., 1]
        margins.append((margin[mask] if head in ("mlm", "tokcls") else margin) / spread)
    return torch.cat(margins)


def widen_margins(model: torch.nn.Module, head: str, vocab_size: int, seed: int,
                  steps: int = 200) -> None:
    """Train the ``MARGIN_PARAMS`` of a head, on batches of random token ids, to widen the
    relative margins of its decisions (maximise the mean log margin), then scale the final
    layer (masked LM: the last norm) so that the largest |score| is ~10 (float32 rounding stays
    within 1e-5). Random weights leave many decisions near a tie, which rounding to bfloat16
    flips; a trained model's decisions have margins (the mixed-precision tests assert the same
    decision on >= 99 % of positions)."""
    params = [p for name, p in model.named_parameters() if name.endswith(MARGIN_PARAMS)]
    if head == "model" or not params:
        return
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(params, lr=0.01)
    for _ in range(steps):
        ids = torch.randint(5, vocab_size, (32, 24), generator=gen)
        lengths = torch.randint(8, 25, (32, 1), generator=gen)
        mask = torch.arange(24)[None] < lengths
        outputs = model(input_ids=ids, attention_mask=mask.long())
        loss = -torch.log(relative_margins(outputs, mask, head) + 1e-3).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        outputs = model(input_ids=ids, attention_mask=mask.long())
        largest = max(outputs[k].abs().max() for k in ("logits", "start_logits", "end_logits")
                      if outputs.get(k) is not None)
        names = [n for n, _ in model.named_parameters() if n.endswith(FINAL_PARAMS)] or [
            n for n, _ in model.named_parameters()
            if n.endswith(MARGIN_PARAMS) and "norm" in n.lower()]     # masked LM: the last norm
        for name, p in model.named_parameters():
            if name in names:
                p.mul_(10.0 / largest)
        for p in params:
            p.requires_grad_(False)


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


def special_ids(tokenizer, kind: str) -> dict[str, int]:
    """ModernBERT's token-id entries of config.json (from its tokenizer)."""
    if kind != "modernbert":
        return {}
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    return dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=cls, cls_token_id=cls,
                eos_token_id=sep, sep_token_id=sep)


def build(out: Path, family: str) -> None:
    prefix, heads, kwargs, kind, seed = FAMILIES[family]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokenizer = make_tokenizer(kind, work)
        config_cls = getattr(transformers, f"{prefix}Config")
        for head in heads:
            name = f"{family.replace('-', '_')}_{head}"
            config = config_cls(vocab_size=len(tokenizer), num_labels=NUM_LABELS.get(head, 2),
                                **kwargs, **special_ids(tokenizer, kind))
            config._attn_implementation = "eager"
            torch.manual_seed(seed)
            model = getattr(transformers, prefix + HEADS[head])(config)
            randomize(model, seed * 100 + len(name))
            model.eval()
            widen_margins(model, head, len(tokenizer), seed)
            target = out / name
            if target.exists():
                shutil.rmtree(target)
            model.save_pretrained(target)
            tokenizer.save_pretrained(target)
            for f in SPM_FILE.values():
                (target / f).unlink(missing_ok=True)
            if head not in KEEP_TOKENIZER_JSON and kind != "modernbert":
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
                                    ("roberta-base-vocab", "roberta", None),
                                    ("deberta-v3", "deberta-v2", None)):
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
    sources = {name: out / f"{name}_model"
               for name in ("bert", "roberta", "xlm_roberta", "deberta_v3", "modernbert")}
    sources["bert_seqcls"] = out / "bert_seqcls"          # built from vocab.txt
    sources["roberta_seqcls"] = out / "roberta_seqcls"    # built from vocab.json + merges.txt
    sources["xlm_roberta_seqcls"] = out / "xlm_roberta_seqcls"  # from sentencepiece.bpe.model
    sources["deberta_v3_seqcls"] = out / "deberta_v3_seqcls"    # from spm.model
    with tempfile.TemporaryDirectory() as tmp:
        sources.update(real_tokenizer_dirs(Path(tmp)))
        for name, directory in sources.items():
            tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
            arrays = tokenizer_reference(tokenizer, texts)
            np.savez_compressed(target / f"{name}.npz", **arrays)
            print(f"tokenizers/{name}.npz: {type(tokenizer).__name__}, "
                  f"{int(arrays['single/lengths'].sum())} ids")


# ------------------------------------------------------------------------------------- check
def at_real_positions(key: str, value: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """An output's entries at the real tokens (``mask`` bool[B, T]); a per-row output whole.
    What a padded position holds is no model output (transformers' attention kernels differ
    there: a padded query of a local layer whose window holds only padding is a fully masked
    row, uniform under eager attention, something else under SDPA)."""
    if key == "hidden_states":
        return value[:, mask]
    if value.shape[:2] == mask.shape:
        return value[mask]
    return value


def check(exports: Path, fixtures: Path) -> None:
    """Load every export in ``exports`` with transformers (its default attention) and compare
    its outputs with the fixture's reference (max abs difference per output at the real
    positions; the fixtures were made with eager attention, which also fixes the padded ones),
    then again with eager attention at every position."""
    worst = {"real positions (default attention)": 0.0, "all positions (eager)": 0.0}
    for directory in sorted(p for p in exports.iterdir() if p.is_dir()):
        ref = np.load(fixtures / directory.name / "reference.npz")
        arch = json.loads((directory / "config.json").read_text())["architectures"][0]
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        report = []
        for what, options in zip(worst, ({}, {"attn_implementation": "eager"})):
            model = getattr(transformers, arch).from_pretrained(directory, **options)
            model.eval()
            for batch in sorted({k.split("/")[0] for k in ref.files}):
                inputs = batch_inputs(tokenizer, batch == "pair")
                if "distilbert" in directory.name:
                    inputs.pop("token_type_ids", None)
                for key, value in inputs.items():
                    assert np.array_equal(value.numpy(), ref[f"{batch}/{key}"]), (directory, key)
                mask = inputs["attention_mask"].numpy().astype(bool)
                for key, value in run_model(model, inputs).items():
                    if f"{batch}/{key}" not in ref:
                        continue
                    want = ref[f"{batch}/{key}"]
                    if not options:
                        value, want = (at_real_positions(key, v, mask) for v in (value, want))
                    diff = float(np.abs(value - want).max())
                    worst[what] = max(worst[what], diff)
                    if not options:
                        report.append(f"{batch}/{key} {diff:.2e}")
        print(f"{directory.name} ({arch}): {', '.join(report)}")
    for what, diff in worst.items():
        print(f"max abs difference over all exports, {what}: {diff:.3e}")
    assert max(worst.values()) < 1e-5, worst


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=ROOT / "tests" / "fixtures" / "encoders", type=Path)
    p.add_argument("--check", type=Path, help="a directory of textkit exports to check")
    p.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=sorted(FAMILIES),
                   help="the families to (re)build (default: all)")
    args = p.parse_args()
    if args.check:
        check(args.check, args.out)
        return
    for family in args.families:
        build(args.out, family)
    build_tokenizer_references(args.out)


if __name__ == "__main__":
    main()
