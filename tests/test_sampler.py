"""Samplers: coverage, shapes, token budgets, sharding, determinism and resume."""

import itertools

import numpy as np
import pytest

from textkit.batchify import BatchShape
from textkit.data.samplers import (
    Batch,
    FixedBucketSampler,
    SortedBucketSampler,
    SplitSampler,
    bucket_boundaries,
    least_padding_keys,
)

NUM_SAMPLES = 997  # prime, so no batch size divides it


def make_lengths(fields: int, num_samples: int = NUM_SAMPLES, seed: int = 0) -> np.ndarray:
    """Correlated (src, tgt) lengths like a parallel corpus, or a single length field."""
    rng = np.random.default_rng(seed)
    src = rng.integers(3, 60, size=num_samples)
    if fields == 1:
        return src
    tgt = np.clip(src + rng.integers(-6, 7, size=num_samples), 1, None)
    return np.stack([src, tgt], axis=1)


def first_fitting_key(length: np.ndarray, keys: np.ndarray) -> int:
    """Brute force: index of the first bucket key that fits ``length`` in every field."""
    return next(i for i, key in enumerate(keys) if (key >= length).all())


def epoch_batches(sampler) -> list[Batch]:
    return list(sampler)


GRID = list(
    itertools.product(
        [False, True],  # shuffle
        ["constant", "linear", "exp", "least_padding"],  # bucket_scheme
        ["sentences", "tokens"],  # batch_size_unit
        ["pad", "drop"],  # last_batch
        [1, 2],  # length fields
    )
)


@pytest.mark.parametrize("shuffle,scheme,unit,last_batch,fields", GRID)
def test_fixed_bucket_epoch_covers_each_sample_once(shuffle, scheme, unit, last_batch, fields):
    lengths = make_lengths(fields)
    length_matrix = lengths.reshape(NUM_SAMPLES, -1)
    batch_size = 16 if unit == "sentences" else 512
    sampler = FixedBucketSampler(
        lengths, batch_size, num_buckets=6, shuffle=shuffle, seed=3, bucket_scheme=scheme,
        batch_size_unit=unit, last_batch=last_batch,
    )
    batches = epoch_batches(sampler)
    assert len(batches) == len(sampler)
    seen = np.concatenate([b.indices for b in batches])
    assert len(np.unique(seen)) == len(seen), "a sample was emitted twice"
    if last_batch == "pad":
        np.testing.assert_array_equal(np.sort(seen), np.arange(NUM_SAMPLES))
    else:
        assert all(len(b) == b.shape.rows for b in batches)
        # only the partial tail of each bucket is dropped
        assert NUM_SAMPLES - len(seen) < int((sampler.bucket_batch_sizes).sum())

    keys = sampler.bucket_keys  # membership (GluonNLP's keys); shapes are rounded up
    padded = np.array([s.lengths for s in sampler.bucket_shapes])
    assert (padded % 8 == 0).all(), "padded lengths are rounded up to a multiple of 8"
    assert (padded >= keys).all() and (padded - keys < 8).all()
    for batch in batches:
        assert batch.indices.dtype == np.int64
        assert 0 < len(batch) <= batch.shape.rows
        bucket = sampler.bucket_shapes.index(batch.shape)
        for i in batch.indices:
            assert first_fitting_key(length_matrix[i], keys) == bucket
        if unit == "tokens":
            assert batch.shape.rows * max(batch.shape.lengths) <= batch_size
    shapes = {b.shape for b in batches}
    assert len(shapes) <= len(keys) <= 6


def test_unshuffled_order_is_bucket_by_bucket_in_index_order():
    lengths = [5, 30, 6, 31, 7, 32, 8]
    sampler = FixedBucketSampler(lengths, 2, bucket_keys=[8, 32], round_to=None)
    assert [b.indices.tolist() for b in sampler] == [[0, 2], [4, 6], [1, 3], [5]]
    assert [b.shape for b in FixedBucketSampler(lengths, 2, bucket_keys=[8, 32])] == [
        BatchShape(2, (8,)), BatchShape(2, (8,)), BatchShape(2, (32,)), BatchShape(2, (32,))
    ]


def test_partial_batch_is_padded_with_dummy_rows_or_dropped():
    lengths = [4] * 10
    padded = list(FixedBucketSampler(lengths, 4, bucket_keys=[8]))
    assert [len(b) for b in padded] == [4, 4, 2]
    assert [b.num_dummy_rows for b in padded] == [0, 0, 2]
    assert {b.shape for b in padded} == {BatchShape(4, (8,))}
    dropped = list(FixedBucketSampler(lengths, 4, bucket_keys=[8], last_batch="drop"))
    assert [len(b) for b in dropped] == [4, 4]


def test_multi_field_buckets_are_keyed_on_every_field():
    # source fits the first key, target does not: the sample must go to the second bucket
    sampler = FixedBucketSampler([(3, 3), (3, 12)], 1, bucket_keys=[(8, 8), (16, 16)])
    assert [(b.indices.tolist(), b.shape.lengths) for b in sampler] == [
        ([0], (8, 8)), ([1], (16, 16))
    ]


@pytest.mark.parametrize("scheme", ["constant", "linear", "exp"])
def test_bucket_boundaries_cover_the_range(scheme):
    bounds = bucket_boundaries(5, 45, 16, scheme)
    assert len(bounds) == 16 and bounds[-1] == 45 and bounds[0] > 5
    assert (np.diff(bounds) >= 0).all()
    widths = np.diff(np.concatenate([[5], bounds]))
    if scheme != "constant":  # later buckets are wider than the first ones
        assert widths[-4:].mean() > widths[:4].mean()


def test_ratio_gives_short_buckets_more_rows():
    sampler = FixedBucketSampler([4, 16, 32], 8, bucket_keys=[8, 16, 32], ratio=1.0)
    assert sampler.bucket_batch_sizes.tolist() == [32, 16, 8]


@pytest.mark.parametrize("num_shards", [2, 4, 8])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("unit,last_batch", [("sentences", "pad"), ("sentences", "drop"),
                                             ("tokens", "pad")])
def test_shards_are_disjoint_covering_and_in_lockstep(num_shards, shuffle, unit, last_batch):
    lengths = make_lengths(2)
    batch_size = 8 if unit == "sentences" else 256
    shards = [
        epoch_batches(
            FixedBucketSampler(
                lengths, batch_size, num_buckets=5, shuffle=shuffle, seed=11,
                batch_size_unit=unit, last_batch=last_batch, num_shards=num_shards,
                shard_id=shard,
            )
        )
        for shard in range(num_shards)
    ]
    steps = {len(batches) for batches in shards}
    assert len(steps) == 1, f"shards take different numbers of steps: {steps}"
    for step in zip(*shards):
        assert len({b.shape for b in step}) == 1, "shards disagree on the bucket of a step"
        sizes = [len(b) for b in step]
        assert max(sizes) - min(sizes) <= 1, "a partial global batch is split unevenly"
        assert min(sizes) > 0, "a shard got a batch of dummy rows only"
    per_shard = [np.concatenate([b.indices for b in batches]) for batches in shards]
    everything = np.concatenate(per_shard)
    assert len(np.unique(everything)) == len(everything), "shards overlap"
    if last_batch == "pad":
        np.testing.assert_array_equal(np.sort(everything), np.arange(NUM_SAMPLES))
    else:
        assert all(len(b) == b.shape.rows for batches in shards for b in batches)


@pytest.mark.parametrize("num_shards", [2, 4, 8])
def test_no_shard_gets_only_dummy_rows(num_shards):
    # bucket 8: 3 samples (fewer than shards for 4 and 8); bucket 16: 2 full global batches + 1
    # sample; bucket 32: a single sample (the largest bucket is tiny too)
    rows = 4
    lengths = [5] * 3 + [12] * (2 * rows * num_shards + 1) + [30]
    shards = [
        list(FixedBucketSampler(lengths, rows, bucket_keys=[8, 16, 32], num_shards=num_shards,
                                shard_id=k))
        for k in range(num_shards)
    ]
    everything = np.concatenate([b.indices for batches in shards for b in batches])
    np.testing.assert_array_equal(np.sort(everything), np.arange(len(lengths)))
    for step in zip(*shards):
        assert min(len(b) for b in step) > 0
        assert len({b.shape for b in step}) == 1
        for b in step:
            assert max(lengths[i] for i in b.indices) <= b.shape.lengths[0]


def test_shard_len_is_steps_per_shard():
    lengths = make_lengths(1)
    one = FixedBucketSampler(lengths, 8, num_buckets=4)
    four = FixedBucketSampler(lengths, 8, num_buckets=4, num_shards=4, shard_id=2)
    assert len(four) == len(list(four)) < len(one)


@pytest.mark.parametrize(
    "make",
    [
        lambda: FixedBucketSampler(make_lengths(2), 16, num_buckets=5, shuffle=True, seed=5),
        lambda: FixedBucketSampler(make_lengths(2), 16, num_buckets=5, shuffle=True, seed=5,
                                   num_shards=4, shard_id=1),
        lambda: SortedBucketSampler(make_lengths(1), 16, mult=4, shuffle=True, seed=5),
        lambda: SplitSampler(NUM_SAMPLES, num_parts=3, part_index=1, shuffle=True, seed=5),
    ],
    ids=["fixed", "fixed-sharded", "sorted", "split"],
)
@pytest.mark.parametrize("stop_at", [0, 1, 17])
def test_resume_mid_epoch_equals_uninterrupted(make, stop_at):
    def as_list(items):
        return [np.asarray(item).tolist() for item in items]

    reference = make()
    reference.set_epoch(2)
    full_epoch = as_list(reference)

    interrupted = make()
    interrupted.set_epoch(2)
    head = as_list(itertools.islice(iter(interrupted), stop_at))
    state = interrupted.state_dict()
    assert state["epoch"] == 2 and state["position"] == stop_at
    assert len(state) <= 4, "the state must stay O(1)"

    resumed = make()
    resumed.load_state_dict(state)
    assert head + as_list(resumed) == full_epoch
    assert resumed.state_dict()["epoch"] == 3 and resumed.state_dict()["position"] == 0


def test_same_seed_and_epoch_same_batches_other_epoch_differs():
    def plan(seed, epoch):
        sampler = FixedBucketSampler(make_lengths(2), 16, shuffle=True, seed=seed)
        sampler.set_epoch(epoch)
        return [b.indices.tolist() for b in sampler]

    assert plan(1, 4) == plan(1, 4)
    assert plan(1, 4) != plan(1, 5)
    assert plan(1, 4) != plan(2, 4)


def test_epoch_advances_after_a_full_pass():
    sampler = FixedBucketSampler(make_lengths(1), 32, shuffle=True)
    first, second = list(sampler), list(sampler)
    assert sampler.epoch == 2
    assert [b.indices.tolist() for b in first] != [b.indices.tolist() for b in second]


def test_load_state_dict_rejects_a_different_plan():
    state = FixedBucketSampler(make_lengths(1), 32).state_dict()
    with pytest.raises(ValueError, match="steps per epoch"):
        FixedBucketSampler(make_lengths(1), 16).load_state_dict(state)
    with pytest.raises(KeyError, match="position"):
        FixedBucketSampler(make_lengths(1), 32).load_state_dict({"epoch": 0})


def test_stats_reports_counts_keys_sizes_and_padding():
    lengths = make_lengths(2)
    sampler = FixedBucketSampler(lengths, 16, num_buckets=4, bucket_scheme="exp")
    text = sampler.stats()
    assert text.startswith("FixedBucketSampler:")
    assert f"sample_num={NUM_SAMPLES}, batch_num={len(sampler)}" in text
    keys = [tuple(k) for k in sampler.bucket_keys.tolist()]
    assert f"key={keys}" in text
    assert f"cnt={sampler.bucket_counts.tolist()}" in text
    assert sum(sampler.bucket_counts) == NUM_SAMPLES
    assert f"batch_size={sampler.bucket_batch_sizes.tolist()}" in text

    # padding fraction by brute force over the epoch, dummy rows counted as padding
    cells = real = 0
    for batch in sampler:
        cells += batch.shape.rows * sum(batch.shape.lengths)
        real += int(lengths[batch.indices].sum())
    expected = 1 - real / cells
    assert sampler.padding_fraction() == pytest.approx(expected)
    assert f"padding_fraction={expected:.4f}" in text


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(lengths=[3, 50], batch_size=2, bucket_keys=[8, 16]), "sample 1 has length"),
        (dict(lengths=[3, -1], batch_size=2), r"lengths\[1\]"),
        (dict(lengths=[(3, 4)], batch_size=2, bucket_keys=[(8, 16), (16, 8)]), "non-decreasing"),
        (dict(lengths=[30], batch_size=16, batch_size_unit="tokens"), "token budget"),
        (dict(lengths=[3], batch_size=2, bucket_scheme="cubic"), "bucket_scheme"),
        (dict(lengths=[3], batch_size=2, num_shards=2, shard_id=2), "shard_id"),
        (dict(lengths=[], batch_size=2), "non-empty"),
        (dict(lengths=[30], batch_size=40, batch_size_unit="tokens", batch_rows_multiple=2),
         "1 rows, fewer than batch_rows_multiple=2"),
        (dict(lengths=[3], batch_size=2, batch_rows_multiple=0), "batch_rows_multiple"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FixedBucketSampler(**kwargs)


@pytest.mark.parametrize("num_shards", [1, 2])
def test_batch_rows_multiple_rounds_rows_down_and_keeps_the_global_batch(num_shards):
    # token budget 200: buckets of padded length 8, 16, 24 get 25, 12, 8 rows; multiple 4 ->
    # 24, 12, 8. Over 2 shards with half the budget and half the multiple the global rows and the
    # global batches (as sets of samples) are the same as with 1 shard.
    lengths = make_lengths(1)[:300] % 24 + 1
    plain = FixedBucketSampler(lengths, 200, bucket_keys=[8, 16, 24], batch_size_unit="tokens")
    assert plain.bucket_batch_sizes.tolist() == [25, 12, 8]
    rounded = FixedBucketSampler(lengths, 200, bucket_keys=[8, 16, 24], batch_size_unit="tokens",
                                 batch_rows_multiple=4, shuffle=True, seed=3)
    assert rounded.bucket_batch_sizes.tolist() == [24, 12, 8]
    assert [s.rows for s in rounded.bucket_shapes] == [24, 12, 8]
    shards = [FixedBucketSampler(lengths, 200 // num_shards, bucket_keys=[8, 16, 24],
                                 batch_size_unit="tokens", batch_rows_multiple=4 // num_shards,
                                 shuffle=True, seed=3, num_shards=num_shards, shard_id=s)
              for s in range(num_shards)]
    assert (shards[0].bucket_batch_sizes * num_shards).tolist() == [24, 12, 8]
    for whole, parts in zip(rounded, zip(*shards)):
        assert sorted(np.concatenate([p.indices for p in parts]).tolist()) == sorted(whole)
        assert {p.shape.rows * num_shards for p in parts} == {whole.shape.rows}


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("last_batch", ["pad", "drop"])
def test_sorted_bucket_sampler(shuffle, last_batch):
    lengths = make_lengths(2)
    sampler = SortedBucketSampler(
        lengths, 10, mult=5, shuffle=shuffle, seed=1, last_batch=last_batch
    )
    batches = list(sampler)
    assert len(batches) == len(sampler)
    seen = np.concatenate([b.indices for b in batches])
    assert len(np.unique(seen)) == len(seen)
    assert len(seen) == (NUM_SAMPLES if last_batch == "pad" else NUM_SAMPLES // 10 * 10)
    for batch in batches:
        assert batch.shape.rows == 10
        assert (lengths[batch.indices].max(axis=0) <= batch.shape.lengths).all()
        assert all(length % 8 == 0 for length in batch.shape.lengths)
    if not shuffle:  # each chunk of batch_size * mult samples is sorted longest first
        chunk = seen[:50]
        np.testing.assert_array_equal(
            np.sort(chunk), np.arange(50)
        )
        src = lengths[chunk, 0]
        assert (np.diff(src) <= 0).all()


@pytest.mark.parametrize("length,num_parts", [(10, 3), (7, 7), (100, 8), (5, 8)])
def test_split_sampler_parts_are_disjoint_and_cover(length, num_parts):
    parts = [list(SplitSampler(length, num_parts, k, shuffle=True, seed=2))
             for k in range(num_parts)]
    assert sorted(itertools.chain(*parts)) == list(range(length))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    for k, part in enumerate(parts):  # contiguous ranges
        assert sorted(part) == list(range(k * length // num_parts, (k + 1) * length // num_parts))


def test_batch_behaves_like_a_list_of_indices():
    batch = Batch(np.array([4, 1, 7], dtype=np.int64), BatchShape(4, (8,)))
    assert len(batch) == 3 and list(batch) == [4, 1, 7] and batch[1] == 1
    assert all(type(i) is int for i in batch)
    np.testing.assert_array_equal(np.asarray(batch), [4, 1, 7])
    assert batch.num_dummy_rows == 1


def test_padded_membership_fills_the_rounded_shape_first():
    lengths = np.arange(16, 32)                     # GluonNLP: constant keys [23, 31]
    by_key = FixedBucketSampler(lengths, 8, num_buckets=2, round_to=8)
    by_padded = FixedBucketSampler(lengths, 8, num_buckets=2, round_to=8, membership="padded")
    assert by_key.bucket_keys.ravel().tolist() == by_padded.bucket_keys.ravel().tolist() == [23, 31]
    assert by_key.bucket_counts.tolist() == [8, 8] and len(by_key) == 2
    assert by_padded.bucket_counts.tolist() == [9, 7]            # 24 fits the padded 24
    with pytest.raises(ValueError, match="membership"):
        FixedBucketSampler(lengths, 8, membership="rounded")


def brute_force_least_padding(lengths: np.ndarray, num_buckets: int, round_to: int):
    """(total padded length, fewest keys reaching it) over every key set of the candidates."""
    high = int(lengths.max())
    candidates = [k for k in range(round_to, high, round_to) if k >= lengths.min()]
    best = None
    for size in range(1, num_buckets + 1):
        for inner in itertools.combinations(candidates, size - 1):
            keys = np.array([*inner, high])
            padded = -(-keys[np.searchsorted(keys, lengths)] // round_to) * round_to
            if best is None or padded.sum() < best[0]:
                best = (int(padded.sum()), keys.tolist())
    return best


@pytest.mark.parametrize("seed", range(40))
def test_least_padding_keys_pad_least_with_the_fewest_buckets(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(rng.integers(1, 6), rng.integers(7, 40), rng.integers(1, 80))
    num_buckets, round_to = int(rng.integers(1, 5)), int(rng.choice([1, 2, 4, 8]))
    keys = least_padding_keys(lengths, num_buckets, round_to)
    total, best_keys = brute_force_least_padding(lengths, num_buckets, round_to)
    padded = -(-np.array(keys)[np.searchsorted(keys, lengths)] // round_to) * round_to
    assert padded.sum() == total and len(keys) == len(best_keys)
    assert keys[-1] == lengths.max() and (np.diff(keys) > 0).all()


def test_least_padding_scheme_pads_a_skewed_corpus_less_than_constant_widths():
    # many short samples and a long tail, as in SST-2: equal widths waste the short end
    lengths = np.random.default_rng(0).geometric(0.08, 5000) + 2
    kwargs = dict(num_buckets=6, batch_size_unit="tokens", round_to=4, membership="padded")
    least = FixedBucketSampler(lengths, 512, bucket_scheme="least_padding", **kwargs)
    constant = FixedBucketSampler(lengths, 512, **kwargs)
    assert least.bucket_keys.ravel().tolist() == least_padding_keys(lengths, 6, 4)
    assert least.padding_fraction() < 0.6 * constant.padding_fraction()
    with pytest.raises(ValueError, match="least_padding_keys"):
        bucket_boundaries(3, 40, 4, "least_padding")


@pytest.mark.parametrize("last_batch", ["pad", "drop"])
def test_shape_batches_give_one_batch_of_every_shape_an_epoch_yields(last_batch):
    lengths = make_lengths(1)
    sampler = FixedBucketSampler(lengths, 256, num_buckets=6, batch_size_unit="tokens",
                                 last_batch=last_batch, shuffle=True, seed=1)
    examples = sampler.shape_batches()
    epoch_shapes = {batch.shape for batch in epoch_batches(sampler)}
    assert [b.shape for b in examples] == sorted(epoch_shapes, key=lambda s: s.lengths)
    for batch in examples:                      # real samples of that bucket, none too long
        assert 0 < len(batch) <= batch.shape.rows
        assert (lengths[batch.indices] <= batch.shape.lengths[0]).all()
