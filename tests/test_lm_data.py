from pathlib import Path

import numpy as np
import pytest

from textkit.data.lm import BPTTBatches, bptt_batches
from textkit.data.registry import get_dataset
from textkit.vocab import Vocab

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def test_windows_continue_each_row():
    stream = np.arange(23)  # B=2 -> rows of 11: [0..10], [11..21]; token 22 dropped
    windows = list(bptt_batches(stream, batch_size=2, seq_len=4))
    assert len(windows) == 3  # 10 targets per row -> 4 + 4 + 2 (kept, padded)
    np.testing.assert_array_equal(windows[0]["inputs"], [[0, 1, 2, 3], [11, 12, 13, 14]])
    np.testing.assert_array_equal(windows[0]["targets"], [[1, 2, 3, 4], [12, 13, 14, 15]])
    np.testing.assert_array_equal(windows[1]["inputs"][:, 0], [4, 15])  # continues the rows
    last = windows[2]
    np.testing.assert_array_equal(last["inputs"], [[8, 9, 0, 0], [19, 20, 0, 0]])
    np.testing.assert_array_equal(last["targets"], [[9, 10, 0, 0], [20, 21, 0, 0]])
    np.testing.assert_array_equal(last["mask"], [[1, 1, 0, 0], [1, 1, 0, 0]])
    for w in windows:
        assert w["inputs"].shape == w["targets"].shape == w["mask"].shape == (2, 4)
        assert w["inputs"].dtype == w["targets"].dtype == np.int32
        assert w["mask"].dtype == np.float32


def test_discard_and_exact_fit():
    stream = np.arange(23)
    windows = list(bptt_batches(stream, 2, 4, last_batch="discard"))
    assert len(windows) == 2 and all(w["mask"].all() for w in windows)
    exact = BPTTBatches(np.arange(18), 2, 4)  # rows of 9 -> 8 targets -> 2 full windows
    assert len(exact) == 2 and exact[-1]["mask"].all()
    assert exact[1]["targets"][1, -1] == 17


def test_every_target_seen_once_in_order():
    rng = np.random.default_rng(0)
    stream = rng.integers(0, 50, 1000)
    for batch_size, seq_len in [(1, 7), (3, 5), (8, 35), (4, 1000)]:
        windows = BPTTBatches(stream, batch_size, seq_len, pad_id=-1)
        row_len = len(stream) // batch_size
        for b in range(batch_size):
            targets = np.concatenate([w["targets"][b][w["mask"][b] > 0] for w in windows])
            inputs = np.concatenate([w["inputs"][b][w["mask"][b] > 0] for w in windows])
            row = stream[b * row_len:(b + 1) * row_len]
            np.testing.assert_array_equal(targets, row[1:])
            np.testing.assert_array_equal(inputs, row[:-1])
            assert all((w["inputs"][b][w["mask"][b] == 0] == -1).all() for w in windows)


def test_errors():
    with pytest.raises(ValueError, match="1-D"):
        BPTTBatches(np.zeros((2, 3)), 1, 2)
    with pytest.raises(ValueError, match="too few"):
        BPTTBatches(np.arange(3), 2, 2)
    with pytest.raises(ValueError, match="last_batch"):
        BPTTBatches(np.arange(30), 2, 2, last_batch="pad")
    with pytest.raises(IndexError, match="out of range"):
        BPTTBatches(np.arange(30), 2, 2)[100]


def test_ptb_stream_windows():
    root = DATA / "ptb"
    if not root.exists():
        pytest.skip(f"shared PTB data not found at {root}")
    train = get_dataset("ptb", "train", root=root)
    vocab = Vocab(train, pad_token=None, bos_token=None)
    assert len(vocab) == 10000
    val_ids = get_dataset("ptb", "val", root=root).token_ids(vocab)
    assert val_ids.shape == (73760,) and val_ids.dtype == np.int32
    windows = BPTTBatches(val_ids, batch_size=10, seq_len=35)
    assert sum(w["mask"].sum() for w in windows) == 10 * (73760 // 10 - 1)
    assert windows[0]["inputs"][0, :3].tolist() == vocab[["consumers", "may", "want"]]
