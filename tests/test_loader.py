"""DataLoader: order, shapes, prefetch, error propagation, early-stop cleanup, resume."""

import itertools
import threading
import time
import traceback

import numpy as np
import pytest

from textkit.batchify import BatchShape, Dict, Pad, Stack
from textkit.data.loader import DataLoader
from textkit.data.samplers import FixedBucketSampler


def make_dataset(num_samples: int = 203, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {"tokens": rng.integers(4, 50, size=rng.integers(1, 30)).tolist(), "id": i}
        for i in range(num_samples)
    ]


def pad_rows(samples, shape: BatchShape):
    """A tiny batchify of our own: ids padded with -1 to the bucket's rows and length."""
    tokens = np.full((shape.rows, shape.lengths[0]), -1, dtype=np.int32)
    for row, sample in enumerate(samples):
        tokens[row, : len(sample["tokens"])] = sample["tokens"]
    ids = np.full(shape.rows, -1, dtype=np.int64)
    ids[: len(samples)] = [s["id"] for s in samples]
    return {"tokens": tokens, "id": ids}


def make_sampler(dataset, **kwargs) -> FixedBucketSampler:
    lengths = [len(s["tokens"]) for s in dataset]
    return FixedBucketSampler(lengths, 8, num_buckets=4, **kwargs)


def wait_for_thread_count(target: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while threading.active_count() > target and time.monotonic() < deadline:
        time.sleep(0.01)
    return threading.active_count()


@pytest.mark.parametrize("num_workers,prefetch", [(0, None), (1, None), (3, None), (2, 7)])
def test_batches_follow_sampler_order_with_the_bucket_shape(num_workers, prefetch):
    dataset = make_dataset()
    sampler = make_sampler(dataset, shuffle=True, seed=4)
    expected = [(b.indices.tolist(), b.shape) for b in make_sampler(dataset, shuffle=True, seed=4)]
    loader = DataLoader(dataset, sampler, pad_rows, num_workers=num_workers, prefetch=prefetch)
    assert len(loader) == len(expected)
    out = list(loader)
    assert len(out) == len(expected)
    for batch, (indices, shape) in zip(out, expected):
        assert batch["tokens"].shape == (shape.rows, shape.lengths[0])
        assert batch["id"][: len(indices)].tolist() == indices
        assert (batch["id"][len(indices):] == -1).all()  # dummy rows


def test_with_textkit_batchify_and_plain_index_lists():
    dataset = make_dataset(20)
    sampler = make_sampler(dataset)
    batchify = Dict({"tokens": Pad(pad_val=0, dtype=np.int32, ret_length=True), "id": Stack()})
    for batch in DataLoader(dataset, sampler, batchify, num_workers=2):
        tokens, lengths = batch["tokens"]
        assert tokens.shape[0] == 8 and tokens.shape[1] % 8 == 0
        assert lengths.dtype == np.int32
    # a plain list-of-indices sampler: batchify gets no shape, pads to the batch maximum
    plain = [[0, 1], [2]]
    batches = list(DataLoader(dataset, plain, Dict({"id": Stack()}), num_workers=1))
    assert [b["id"].tolist() for b in batches] == [[0, 1], [2]]


def test_getitems_fetches_a_whole_batch_at_once():
    class Columnar:
        def __init__(self):
            self.calls = []

        def __getitems__(self, indices):
            self.calls.append(list(indices))
            return [{"tokens": [1] * (i % 5 + 1), "id": i} for i in indices]

    dataset = Columnar()
    sampler = FixedBucketSampler([i % 5 + 1 for i in range(12)], 4, bucket_keys=[8])
    batches = list(DataLoader(dataset, sampler, pad_rows))
    assert dataset.calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert [b["id"].tolist() for b in batches] == dataset.calls


def explode_on_sample_13(samples, shape):
    if any(s["id"] == 13 for s in samples):
        raise ValueError("sample 13 is malformed")
    return pad_rows(samples, shape)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_worker_error_reaches_the_consumer_with_its_traceback(num_workers):
    dataset = make_dataset()
    baseline = threading.active_count()
    loader = DataLoader(dataset, make_sampler(dataset), explode_on_sample_13, num_workers)
    with pytest.raises(ValueError, match="sample 13 is malformed") as info:
        list(loader)
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "explode_on_sample_13" in frames, "the worker's frames are part of the traceback"
    notes = getattr(info.value, "__notes__", [])
    assert any("sample indices" in note and "13" in note for note in notes)
    assert wait_for_thread_count(baseline) <= baseline


@pytest.mark.parametrize("stop", ["break", "close"])
def test_early_stop_joins_the_workers(stop):
    dataset = make_dataset()
    baseline = threading.active_count()

    def slow_pad(samples, shape):
        time.sleep(0.002)
        return pad_rows(samples, shape)

    loader = DataLoader(dataset, make_sampler(dataset), slow_pad, num_workers=4, prefetch=6)
    iterator = iter(loader)
    next(iterator)
    assert threading.active_count() > baseline
    if stop == "close":
        iterator.close()
    else:
        for _ in iterator:
            break
        del iterator
    assert wait_for_thread_count(baseline) <= baseline


@pytest.mark.parametrize("num_workers", [0, 3])
def test_state_counts_consumed_batches_and_resumes(num_workers):
    dataset = make_dataset()
    reference = [b["id"].tolist() for b in
                 DataLoader(dataset, make_sampler(dataset, shuffle=True), pad_rows)]

    loader = DataLoader(dataset, make_sampler(dataset, shuffle=True), pad_rows, num_workers,
                        prefetch=5)
    head = []
    for batch in loader:
        head.append(batch["id"].tolist())
        if len(head) == 3:
            assert loader.state_dict()["position"] == 3  # prefetched batches are not counted
            break
    state = loader.state_dict()
    assert state["position"] == 3 and state["epoch"] == 0

    resumed = DataLoader(dataset, make_sampler(dataset, shuffle=True), pad_rows, num_workers)
    resumed.load_state_dict(state)
    tail = [b["id"].tolist() for b in resumed]
    assert head + tail == reference
    assert resumed.state_dict()["epoch"] == 1 and resumed.state_dict()["position"] == 0


def test_iterating_again_continues_an_interrupted_epoch():
    dataset = make_dataset()
    loader = DataLoader(dataset, make_sampler(dataset), pad_rows, num_workers=2)
    head = [b["id"].tolist() for b in itertools.islice(loader, 2)]
    rest = [b["id"].tolist() for b in loader]
    assert head + rest == [b["id"].tolist() for b in DataLoader(dataset, make_sampler(dataset),
                                                                 pad_rows)]


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader([], [], num_workers=-1)
    with pytest.raises(ValueError, match="prefetch"):
        DataLoader([], [], num_workers=2, prefetch=0)


def test_prefetch_bounds_the_batches_loaded_ahead():
    dataset = make_dataset()
    started = []

    def counting_pad(samples, shape):
        started.append(1)
        return pad_rows(samples, shape)

    sampler = make_sampler(dataset)
    assert len(sampler) > 10
    iterator = iter(DataLoader(dataset, sampler, counting_pad, num_workers=2, prefetch=3))
    next(iterator)
    time.sleep(0.2)  # give the workers time to run ahead if nothing stopped them
    assert len(started) <= 3
    iterator.close()
