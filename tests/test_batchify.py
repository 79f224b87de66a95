import pickle
import typing

import numpy as np
import pytest

from textkit.batchify import BatchShape, Dict, List, NamedTuple, Pad, Stack, Tuple

RAGGED = [[5, 6, 7], [8], [9, 10]]


@pytest.mark.parametrize("as_type", [list, tuple, np.array])
@pytest.mark.parametrize("dtype", [None, np.int32])
def test_pad_to_batch_max(as_type, dtype):
    samples = [as_type(s) for s in RAGGED]
    out, lengths = Pad(pad_val=-1, ret_length=True, dtype=dtype)(samples)
    np.testing.assert_array_equal(out, [[5, 6, 7], [8, -1, -1], [9, 10, -1]])
    np.testing.assert_array_equal(lengths, [3, 1, 2])
    assert lengths.dtype == np.int32
    assert out.dtype == (np.dtype(dtype) if dtype else np.asarray(samples[0]).dtype)


def test_pad_without_ret_length_returns_array_and_infers_float():
    out = Pad(pad_val=0)([[1.5], [2.0, 3.0]])
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
    np.testing.assert_array_equal(out, [[1.5, 0], [2.0, 3.0]])
    mixed = Pad(pad_val=0)([[1], [2.5, 3]])  # int then float: one dtype for the whole batch
    np.testing.assert_array_equal(mixed, [[1, 0], [2.5, 3]])


def test_pad_round_to():
    out = Pad(pad_val=0, round_to=8, dtype=np.int32)(RAGGED)
    assert out.shape == (3, 8)
    out = Pad(pad_val=0, round_to=3)([[1, 2, 3]])
    assert out.shape == (1, 3)
    with pytest.raises(ValueError, match="round_to"):
        Pad(pad_val=0, round_to=0)


def test_pad_to_bucket_shape_with_dummy_rows():
    shape = BatchShape(rows=5, lengths=(4, 6))
    out, lengths = Pad(pad_val=1, ret_length=True, dtype=np.int32)(RAGGED, shape)
    assert out.shape == (5, 4)
    np.testing.assert_array_equal(out[3:], 1)
    np.testing.assert_array_equal(lengths, [3, 1, 2, 0, 0])
    np.testing.assert_array_equal(out[0], [5, 6, 7, 1])
    tgt = Pad(pad_val=1, length_index=1)(RAGGED, shape)
    assert tgt.shape == (5, 6)


@pytest.mark.parametrize("as_type", [list, np.array])
def test_pad_sample_longer_than_target_names_index(as_type):
    samples = [as_type(s) for s in [[1], [2, 3, 4, 5], [6]]]
    with pytest.raises(ValueError, match=r"sample 1 has length 4.*target length 3"):
        Pad(pad_val=0)(samples, BatchShape(rows=3, lengths=(3,)))


def test_pad_too_many_samples_for_shape():
    with pytest.raises(ValueError, match="4 samples.*2 rows"):
        Pad(pad_val=0)([[1]] * 4, BatchShape(rows=2, lengths=(3,)))


def test_pad_2d_samples_other_axis():
    a = np.arange(6).reshape(2, 3)
    b = np.arange(4).reshape(2, 2)
    out, lengths = Pad(axis=1, pad_val=-1, ret_length=True)([a, b])
    assert out.shape == (2, 2, 3)
    np.testing.assert_array_equal(out[1], [[0, 1, -1], [2, 3, -1]])
    np.testing.assert_array_equal(lengths, [3, 2])
    out = Pad(axis=-1, pad_val=-1)([a, b], BatchShape(rows=3, lengths=(5,)))
    assert out.shape == (3, 2, 5)
    np.testing.assert_array_equal(out[2], -1)


def test_pad_2d_list_samples_axis0():
    out = Pad(pad_val=0)([[[1, 2], [3, 4]], [[5, 6]]])
    assert out.shape == (2, 2, 2)
    np.testing.assert_array_equal(out[1], [[5, 6], [0, 0]])


@pytest.mark.parametrize("as_type", [list, np.array])
def test_pad_ragged_non_padded_axis_names_index(as_type):
    samples = [as_type(np.zeros((2, 3))), as_type(np.zeros((4, 3))), as_type(np.zeros((2, 5)))]
    with pytest.raises(ValueError, match=r"sample 2 has shape \(2, 5\)"):
        Pad(axis=0, pad_val=0)(samples)


def test_pad_errors():
    with pytest.raises(TypeError):
        Pad(0)  # pad_val is a required keyword
    with pytest.raises(ValueError, match="empty"):
        Pad(pad_val=0)([])
    with pytest.raises(ValueError, match="scalar"):
        Pad(pad_val=0)([np.int32(1), np.int32(2)])
    with pytest.raises(ValueError, match="out of range"):
        Pad(axis=2, pad_val=0)([np.zeros(3)])


def test_pad_matches_reference_on_random_batches():
    rng = np.random.default_rng(0)
    for _ in range(20):
        lens = rng.integers(0, 30, rng.integers(1, 40))
        lens[0] = max(lens[0], 1)
        samples = [rng.integers(0, 1000, n).tolist() for n in lens]
        out, lengths = Pad(pad_val=1, ret_length=True, dtype=np.int32)(samples)
        assert out.shape == (len(samples), lens.max())
        for row, sample in zip(out, samples):
            assert row[: len(sample)].tolist() == sample
            assert (row[len(sample):] == 1).all()
        np.testing.assert_array_equal(lengths, lens)


def test_stack():
    out = Stack()([1, 2, 3])
    np.testing.assert_array_equal(out, [1, 2, 3])
    out = Stack(dtype=np.float32)([np.ones(2), np.zeros(2)])
    assert out.dtype == np.float32 and out.shape == (2, 2)
    out = Stack(np.int32)([4, 5], BatchShape(rows=4, lengths=(9,)))
    np.testing.assert_array_equal(out, [4, 5, 0, 0])
    assert out.dtype == np.int32
    with pytest.raises(ValueError, match=r"sample 1 has shape \(3,\)"):
        Stack()([[1, 2], [1, 2, 3]])
    with pytest.raises(ValueError, match=r"sample 2 has shape \(1,\)"):
        Stack()([np.zeros(2), np.zeros(2), np.zeros(1)])
    with pytest.raises(ValueError, match="3 samples.*2 rows"):
        Stack()([1, 2, 3], BatchShape(rows=2, lengths=(1,)))


def test_tuple_passes_shape_to_children():
    samples = [([1, 2, 3], [4], 0), ([5], [6, 7], 1)]
    fn = Tuple(Pad(pad_val=1, ret_length=True), Pad(pad_val=1, length_index=1), Stack())
    (src, src_len), tgt, label = fn(samples, BatchShape(rows=3, lengths=(8, 16)))
    assert src.shape == (3, 8) and tgt.shape == (3, 16) and label.shape == (3,)
    np.testing.assert_array_equal(src_len, [3, 1, 0])
    same = Tuple([Pad(pad_val=1, ret_length=True), Pad(pad_val=1), Stack()])(samples)
    assert same[0][0].shape == (2, 3) and same[1].shape == (2, 2)
    with pytest.raises(ValueError, match="sample 1 has 2 fields"):
        fn([samples[0], ([1], [2])])
    with pytest.raises(TypeError, match="not callable"):
        Tuple(Stack(), 3)


def test_dict_and_list():
    samples = [{"src": [1, 2], "label": 3, "raw": "a b"}, {"src": [4], "label": 5, "raw": "c"}]
    fn = Dict({"src": Pad(pad_val=0), "label": Stack(), "raw": List()})
    out = fn(samples, BatchShape(rows=4, lengths=(8,)))
    assert out["src"].shape == (4, 8) and out["label"].tolist() == [3, 5, 0, 0]
    assert out["raw"] == ["a b", "c"]
    with pytest.raises(ValueError, match=r"sample 1 lacks the field\(s\) \['label'\]"):
        fn([samples[0], {"src": [1], "raw": ""}])


class Pair(typing.NamedTuple):
    tokens: list
    label: int


def test_named_tuple():
    samples = [Pair([1, 2, 3], 0), Pair([4], 1)]
    out = NamedTuple(Pair, {"tokens": Pad(pad_val=0), "label": Stack()})(samples)
    assert isinstance(out, Pair) and out.tokens.shape == (2, 3) and out.label.tolist() == [0, 1]
    out = NamedTuple(Pair, [Pad(pad_val=0), Stack()])(samples, BatchShape(rows=3, lengths=(4,)))
    assert out.tokens.shape == (3, 4) and out.label.tolist() == [0, 1, 0]
    with pytest.raises(ValueError, match="fields"):
        NamedTuple(Pair, {"tokens": Pad(pad_val=0)})
    with pytest.raises(ValueError, match="sample 1 is a tuple"):
        NamedTuple(Pair, [Pad(pad_val=0), Stack()])([samples[0], ([1], 0)])


def test_batchify_objects_pickle():
    fn = Tuple(Pad(pad_val=1, dtype=np.int32), Stack())
    again = pickle.loads(pickle.dumps(fn))
    out = again([([1, 2], 0), ([3], 1)])
    np.testing.assert_array_equal(out[0], [[1, 2], [3, 1]])
