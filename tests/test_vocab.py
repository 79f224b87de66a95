import collections
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from textkit.vocab import Vocab

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TOKENS = "b a c a b a d".split()  # a:3 b:2 c:1 d:1


def test_default_order_and_special_ids():
    vocab = Vocab(TOKENS)
    assert vocab.idx_to_token == ["<unk>", "<pad>", "<bos>", "<eos>", "a", "b", "c", "d"]
    assert (vocab.unk_id, vocab.pad_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    assert vocab.token_to_idx["c"] == 6
    assert Vocab(collections.Counter(TOKENS)) == vocab
    assert Vocab([TOKENS[:3], TOKENS[3:]]) == vocab  # iterable of sentences


def test_reserved_min_freq_max_size_and_none_specials():
    vocab = Vocab(TOKENS, reserved_tokens=["<mask>"], min_freq=2, pad_token=None, bos_token=None)
    assert vocab.idx_to_token == ["<unk>", "<eos>", "<mask>", "a", "b"]
    assert vocab.pad_id is None and vocab.bos_id is None and vocab.eos_id == 1
    assert Vocab(TOKENS, max_size=2).idx_to_token[4:] == ["a", "b"]
    assert len(Vocab(TOKENS, max_size=0)) == 4
    bare = Vocab(TOKENS, unk_token=None, pad_token=None, bos_token=None, eos_token=None)
    assert bare.idx_to_token == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match="twice"):
        Vocab(TOKENS, reserved_tokens=["<pad>"])
    with pytest.raises(ValueError, match="min_freq"):
        Vocab(TOKENS, min_freq=0)


def test_specials_in_counter_are_not_duplicated():
    vocab = Vocab(["<unk>", "x", "<eos>", "x"])
    assert vocab.idx_to_token == ["<unk>", "<pad>", "<bos>", "<eos>", "x"]


def test_lookup_unknown_and_to_tokens():
    vocab = Vocab(TOKENS)
    assert vocab["a"] == 4 and vocab["zzz"] == vocab.unk_id
    assert vocab[["a", "zzz", "d"]] == [4, 0, 7]
    assert vocab[("b",)] == [5]
    assert "a" in vocab and "zzz" not in vocab and len(vocab) == 8
    assert vocab.to_tokens(5) == "b"
    assert vocab.to_tokens([4, 7]) == ["a", "d"]
    assert vocab.to_tokens(np.array([[0, 1]])) == ["<unk>", "<pad>"]
    with pytest.raises(IndexError, match="id 8 is out of range"):
        vocab.to_tokens([1, 8])
    with pytest.raises(IndexError, match="id -1"):
        vocab.to_tokens(-1)


def test_no_unk_raises_key_error_naming_token():
    vocab = Vocab(TOKENS, unk_token=None)
    with pytest.raises(KeyError, match="'zzz'"):
        vocab["zzz"]
    with pytest.raises(KeyError, match="'qq'"):
        vocab[["a", "qq"]]
    with pytest.raises(KeyError, match="sample 1: token 'qq'"):
        vocab.numericalize([["a"], ["b", "qq"]])
    with pytest.raises(KeyError, match="'qq'"):
        vocab.to_ids(iter(["a", "qq"]))


def test_numericalize_matches_getitem():
    vocab = Vocab(TOKENS)
    batch = [["a", "b"], [], ["zzz", "d", "c"]]
    out = vocab.numericalize(batch)
    assert [row.dtype for row in out] == [np.int32] * 3
    assert [row.tolist() for row in out] == [vocab[s] for s in batch]
    assert vocab.numericalize([]) == []
    ids = vocab.to_ids(iter(["a", "q"]))
    assert ids.dtype == np.int32 and ids.tolist() == [4, 0]


def test_json_save_load_pickle_round_trip(tmp_path):
    vocab = Vocab(TOKENS + ["über", "日本"], reserved_tokens=["<sep>"], bos_token=None)
    again = Vocab.from_json(vocab.to_json())
    assert again == vocab and again.idx_to_token == vocab.idx_to_token
    assert again.bos_id is None and again.reserved_tokens == ("<sep>",)
    path = tmp_path / "sub" / "vocab.json"
    vocab.save(path)
    assert Vocab.load(path) == vocab
    assert [p.name for p in path.parent.iterdir()] == ["vocab.json"]
    assert json.loads(path.read_text(encoding="utf-8"))["idx_to_token"][-1] in {"über", "日本"}
    clone = pickle.loads(pickle.dumps(vocab))
    assert clone == vocab and clone["über"] == vocab["über"]
    (tmp_path / "bad.json").write_text("{\"nope\": 1}")
    with pytest.raises(ValueError, match="bad.json"):
        Vocab.load(tmp_path / "bad.json")


def test_from_tokens_keeps_order():
    vocab = Vocab.from_tokens(["<s>", "</s>", "<unk>", "x"], unk_token="<unk>", pad_token=None,
                              bos_token="<s>", eos_token="</s>")
    assert (vocab.unk_id, vocab.bos_id, vocab.eos_id, vocab.pad_id) == (2, 0, 1, None)
    with pytest.raises(ValueError, match="pad token '<pad>' is not in the vocabulary"):
        Vocab.from_tokens(["<unk>"], bos_token=None, eos_token=None)


def test_ptb_vocab_is_exactly_10000_with_eos():
    train = DATA / "ptb" / "ptb.train.txt"
    if not train.exists():
        pytest.skip(f"shared PTB data not found at {train}")
    sentences = [line.split() for line in train.read_text().splitlines()]
    vocab = Vocab(sentences, pad_token=None, bos_token=None)
    assert len(vocab) == 10000
    assert vocab.idx_to_token[:2] == ["<unk>", "<eos>"]
    assert vocab.idx_to_token[2] == "the"  # the most frequent word
    ids = vocab.numericalize(sentences)
    assert sum(len(r) for r in ids) + len(sentences) == 929589
    assert not any((r == vocab.unk_id).sum() != s.count("<unk>") for r, s in zip(ids, sentences))
