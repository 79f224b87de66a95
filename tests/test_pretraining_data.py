"""Pretraining data on generated text: documents by layout, packing within documents (across
them only when asked), NSP / SOP pairs and their labels, the store's counts and cache, batches
with their special tokens, and the masking: counts within binomial bounds, whole words
together, special tokens and padding never picked, new masks each epoch and the same ones on
resume."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from textkit.batchify.shape import BatchShape
from textkit.data import DataLoader, FixedBucketSampler
from textkit.data.masking import MaskedLoader, Masker, MaskingConfig, max_predictions_for
from textkit.data.pretraining_corpus import (
    PackingConfig,
    PretrainingBatchify,
    SpecialIds,
    build_pretraining_corpus,
    pack_documents,
    stream_documents,
)
from textkit.errors import ConfigError

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def corpus_documents(num_documents: int = 12, seed: int = 0) -> list[list[str]]:
    """Documents of 1 to 7 sentences of 1 to 9 words; word ``d<i>s<j>w<k>`` is word k of
    sentence j of document i, so every token says where it came from."""
    rng = np.random.default_rng(seed)
    return [[" ".join(f"d{d}s{s}w{w}" for w in range(rng.integers(1, 10)))
             for s in range(rng.integers(1, 8))] for d in range(num_documents)]


def word_tokenizer(documents: list[list[str]]) -> Tokenizer:
    """One id per word of ``documents`` (after the special tokens)."""
    words = sorted({w for doc in documents for s in doc for w in s.split()})
    vocab = {t: i for i, t in enumerate(SPECIALS + words)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def origins(tokenizer: Tokenizer, ids: np.ndarray) -> list[tuple[int, int, int]]:
    """(document, sentence, word) of every id."""
    out = []
    for i in ids.tolist():
        d, rest = tokenizer.id_to_token(i)[1:].split("s")
        s, w = rest.split("w")
        out.append((int(d), int(s), int(w)))
    return out


def kept_tokens(documents: list[list[str]]) -> list[str]:
    """The words of the documents packing keeps (those of two tokens or more)."""
    words = [[w for s in doc for w in s.split()] for doc in documents]
    return [w for doc in words if len(doc) >= 2 for w in doc]


def packed(documents, config, tokenizer=None):
    tokenizer = tokenizer or word_tokenizer(documents)
    stats = dict.fromkeys(("documents", "skipped_documents", "sentences", "tokens",
                           "sequences", "full_sequences"), 0)
    return list(pack_documents(documents, tokenizer, config, stats)), stats, tokenizer


def test_documents_by_layout(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(" = One = \n a b \n\n = = Sub = = \n c \n = Two = \n d\n", encoding="utf-8")
    assert list(stream_documents([path], "wikitext")) == [
        ["= One =", "a b", "= = Sub = =", "c"], ["= Two =", "d"]]
    assert list(stream_documents([path], "paragraphs")) == [
        ["= One =", "a b"], ["= = Sub = =", "c", "= Two =", "d"]]
    assert list(stream_documents([path, path], "lines"))[-2:] == [["= Two ="], ["d"]]


def test_packing_keeps_documents_and_sentences_whole():
    documents = corpus_documents(30)
    samples, stats, tokenizer = packed(documents, PackingConfig(max_length=16))
    tokens = kept_tokens(documents)
    flat = [tokenizer.id_to_token(i) for ids, _, _ in samples for i in ids.tolist()]
    assert flat == tokens                                          # nothing lost, in order
    for ids, starts, pieces in samples:
        where = origins(tokenizer, ids)
        assert len({d for d, _, _ in where}) == 1 and pieces.tolist() == [len(ids)]
        assert len(ids) + 2 <= 16
        assert where[0][2] == 0 or where[0][:2] == where[-1][:2]    # starts at a sentence
        assert starts.all()                                          # a token per word
    assert stats["sequences"] == len(samples) and stats["tokens"] == len(tokens)
    assert stats["full_sequences"] == sum(len(ids) == 14 for ids, _, _ in samples)


def test_word_starts_come_from_the_word_ids():
    from textkit.tasks.encoder_task import train_wordpiece

    documents = [[s.replace("w", " w") for s in doc] for doc in corpus_documents(20)]
    tokenizer = train_wordpiece((s for doc in documents for s in doc), 60, "bert").tokenizer
    samples, _, _ = packed(documents, PackingConfig(max_length=64), tokenizer)
    pieces = [tokenizer.id_to_token(i) for ids, _, _ in samples for i in ids.tolist()]
    starts = [int(s) for _, word_starts, _ in samples for s in word_starts.tolist()]
    assert any(p.startswith("##") for p in pieces)
    assert starts == [int(not p.startswith("##")) for p in pieces]


def test_packing_crosses_documents_only_when_asked():
    documents = corpus_documents(30)
    samples, _, tokenizer = packed(documents, PackingConfig(max_length=32,
                                                            cross_documents=True))
    crossing = 0
    for ids, _, pieces in samples:
        assert len(ids) + 1 + len(pieces) <= 32                      # a separator per piece
        where = origins(tokenizer, ids)
        bounds = np.cumsum(pieces)[:-1].tolist()
        changes = [k for k in range(1, len(where)) if where[k][0] != where[k - 1][0]]
        assert changes == bounds                                     # pieces are documents
        crossing += bool(changes)
    assert crossing > 0
    flat = [tokenizer.id_to_token(i) for ids, _, _ in samples for i in ids.tolist()]
    assert flat == kept_tokens(documents)


@pytest.mark.parametrize("pairs", ["nsp", "sop"])
def test_sentence_pairs_and_their_labels(pairs):
    documents = corpus_documents(60, seed=1)
    samples, _, tokenizer = packed(documents, PackingConfig(max_length=24, pairs=pairs))
    labels = []
    for ids, _, pieces, label in samples:
        assert len(pieces) == 2 and min(pieces) >= 1 and len(ids) + 3 <= 24
        a, b = origins(tokenizer, ids[:pieces[0]]), origins(tokenizer, ids[pieces[0]:])
        same_document = a[0][0] == b[0][0]
        in_order = (a[-1][1], a[-1][2]) < (b[0][1], b[0][2])
        if pairs == "nsp":
            assert (label[0] == 0) == (same_document and in_order)
            if label[0] == 0:
                assert same_document and in_order
        else:
            assert same_document and in_order == (label[0] == 0)
        labels.append(int(label[0]))
    assert 0.25 < np.mean(labels) < 0.75


def test_store_counts_skipped_documents_and_is_reused(tmp_path):
    documents = [["a b c", "d e"], ["x"], ["f g h i j k l m n o p q"]]
    tokenizer = Tokenizer(models.WordLevel(
        {t: i for i, t in enumerate(SPECIALS + list("abcdefghijklmnopqx"))}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    config = PackingConfig(max_length=7)
    corpus = build_pretraining_corpus(tmp_path / "store", lambda: iter(documents), tokenizer,
                                      config, vocab_size=tokenizer.get_vocab_size(), key="k1")
    assert corpus.stats == {"documents": 2, "skipped_documents": 1, "sentences": 3,
                            "tokens": 17, "sequences": 4, "full_sequences": 3}
    lengths = [len(corpus.store[i][0]) for i in range(len(corpus))]
    assert lengths == [5, 5, 5, 2] and corpus.store.fields == ("ids", "word_starts", "pieces")

    def fail():
        raise AssertionError("the store was built again")

    again = build_pretraining_corpus(tmp_path / "store", fail, tokenizer, config,
                                     vocab_size=tokenizer.get_vocab_size(), key="k1")
    assert again.stats == corpus.stats and len(again) == len(corpus)


SPECIAL = SpecialIds(cls=2, sep=3, pad=0, mask=4, never_masked=(0, 1, 2, 3, 4), vocab_size=50)


def test_batches_put_special_tokens_and_token_types():
    batchify = PretrainingBatchify(SPECIAL, 10, with_token_types=True, pairs=True)
    sample = (np.array([11, 12, 13, 14, 15]), np.array([1, 0, 1, 1, 0]), np.array([2, 3]),
              np.array([1]))
    batch = batchify([sample], BatchShape(2, (10,)))
    assert batch["input_ids"].tolist() == [[2, 11, 12, 3, 13, 14, 15, 3, 0, 0], [0] * 10]
    assert batch["token_type_ids"][0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 0, 0]
    assert batch["attention_mask"].sum(1).tolist() == [8, 0]
    assert batch["word_starts"][0].tolist() == [1, 1, 0, 1, 1, 1, 0, 1, 1, 1]
    assert batch["pair_labels"].tolist() == [1, 0] and batch["pair_weights"].tolist() == [1, 0]


def random_batch(rows: int, width: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Rows of real tokens (ids 5..49) between CLS and SEP, then padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 50, size=(rows, width)).astype(np.int32)
    lengths = rng.integers(width // 2, width + 1, size=rows)
    ids[:, 0] = 2
    ids[np.arange(rows), lengths - 1] = 3
    ids[np.arange(width) >= lengths[:, None]] = 0
    starts = rng.random((rows, width)) < 0.5
    starts[:, 0] = True
    return {"input_ids": ids, "word_starts": starts}


def within(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("whole_word", [False, True])
def test_mask_counts_within_binomial_bounds(whole_word):
    batch = random_batch(64, 256)
    masker = Masker(MaskingConfig(whole_word=whole_word), mask_id=4, vocab_size=50,
                    never_masked=SPECIAL.never_masked)
    out = masker(batch, np.random.default_rng(1))
    ids, picked = masker.mask(batch["input_ids"], batch["word_starts"], np.random.default_rng(1))
    original = batch["input_ids"]
    assert (out["input_ids"] == ids).all() and (out["targets"] == original).all()
    assert "word_starts" not in out and out["mlm_positions"].shape == (64, 72)   # 1.5 x 38.4
    slots = np.zeros_like(picked)
    np.put_along_axis(slots, out["mlm_positions"], out["mlm_weights"] > 0, axis=1)
    assert (slots == picked).all() and (out["mlm_weights"].sum(1) == picked.sum(1)).all()
    maskable = original >= 5
    assert not picked[~maskable].any() and (ids[~maskable] == original[~maskable]).all()
    if not whole_word:
        assert within(int(picked.sum()), int(maskable.sum()), 0.15)
    n = int(picked.sum())
    masked = picked & (ids == 4)
    kept = picked & (ids == original)
    randomised = picked & ~masked & ~kept
    assert within(int(masked.sum()), n, 0.8) and within(int(kept.sum()), n, 0.1 + 0.1 / 45)
    assert within(int(randomised.sum()), n, 0.1 * 44 / 45)
    assert (ids[randomised] >= 5).all()                 # never a special token
    assert (ids[~picked] == original[~picked]).all()


def test_whole_words_are_masked_together():
    batch = random_batch(64, 256, seed=3)
    masker = Masker(MaskingConfig(whole_word=True), mask_id=4, vocab_size=50,
                    never_masked=SPECIAL.never_masked)
    _, picked = masker.mask(batch["input_ids"], batch["word_starts"], np.random.default_rng(2))
    maskable = batch["input_ids"] >= 5
    words = np.cumsum(batch["word_starts"], axis=1)
    word_count = picked_words = 0
    for row in range(len(picked)):
        for word in np.unique(words[row][maskable[row]]):
            members = (words[row] == word) & maskable[row]
            assert picked[row][members].all() or not picked[row][members].any()
            word_count += 1
            picked_words += bool(picked[row][members].any())
    assert within(picked_words, word_count, 0.15)


def test_a_row_picking_more_than_its_slots_keeps_a_random_subset():
    assert max_predictions_for(128, 0.15) == 40 and max_predictions_for(16, 0.5) == 16
    batch = random_batch(32, 64, seed=4)
    masker = Masker(MaskingConfig(probability=0.9, max_predictions=5), mask_id=4,
                    vocab_size=50, never_masked=SPECIAL.never_masked)
    out = masker(batch, np.random.default_rng(0))
    changed = out["input_ids"] != batch["input_ids"]
    assert out["mlm_weights"].shape == (32, 5) and (out["mlm_weights"] == 1).all()
    assert (changed.sum(1) <= 5).all()                   # unkept picks stay unmasked
    firsts = out["mlm_positions"][:, 0]
    assert len(set(firsts.tolist())) > 3                 # not always the first picks


@pytest.mark.parametrize("probability", [0.0, 1.0, -0.1, 1.5])
def test_mask_probability_outside_zero_one_is_refused(probability):
    with pytest.raises(ConfigError, match="--mask-probability"):
        MaskingConfig(probability=probability)
    with pytest.raises(ConfigError, match="--mask-rate"):
        MaskingConfig(mask_rate=0.95, random_rate=0.1)


def masked_loader(store, shuffle: bool = True) -> MaskedLoader:
    sampler = FixedBucketSampler(np.full(len(store), 16), 4, num_buckets=1, round_to=None,
                                 shuffle=shuffle, seed=5)
    batchify = PretrainingBatchify(SPECIAL, 16, with_token_types=False, pairs=False)
    masker = Masker(MaskingConfig(probability=0.3), mask_id=4, vocab_size=50,
                    never_masked=SPECIAL.never_masked)
    return MaskedLoader(DataLoader(store, sampler, batchify, num_workers=1), masker, seed=7)


def test_masks_change_every_epoch_and_resume_reproduces_them():
    rng = np.random.default_rng(0)
    store = [(rng.integers(5, 50, size=int(n)).astype(np.int32), np.ones(int(n), np.int32),
              np.array([int(n)])) for n in rng.integers(4, 15, size=40)]
    loader = masked_loader(store, shuffle=False)
    first, second = list(loader), list(loader)
    assert all((a["targets"] == b["targets"]).all() for a, b in zip(first, second))
    assert any((a["input_ids"] != b["input_ids"]).any() for a, b in zip(first, second))
    loader = masked_loader(store)
    list(loader)                                         # epoch 0
    batches = iter(loader)                               # epoch 1
    expected = [next(batches) for _ in range(5)]
    batches.close()
    resumed = masked_loader(store)
    resumed.load_state_dict({**loader.state_dict(), "position": 3})
    assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["position"] == 5
    for want, got in zip(expected[3:], resumed):
        assert want.keys() == got.keys()
        assert all((want[k] == got[k]).all() for k in want)
