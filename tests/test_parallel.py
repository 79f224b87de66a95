"""Data parallelism: 8 forced host devices vs one, two jax.distributed processes vs one, and
the lockstep guarantees of sharded samplers.

Multi-device and multi-process runs happen in fresh interpreters (``parallel_worker.py``) so
that XLA_FLAGS and ``jax.distributed`` apply before jax starts; this session keeps one device.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import parallel_worker as worker
import pytest
from jax.sharding import PartitionSpec as P
from subprocesses import cpu_env, free_port, log_tails, run_all

from textkit import parallel
from textkit.data import FixedBucketSampler
from textkit.training import CheckpointManager

WORKER = Path(__file__).resolve().with_name("parallel_worker.py")
TIMEOUT_S = 420  # generous: the suite may share 2 cores with other jobs
TOLERANCE = 1e-5


# ---------------------------------------------------------------- 8 devices vs 1 device


@pytest.fixture(scope="module")
def eight_device_run(tmp_path_factory) -> dict[str, np.ndarray]:
    out = tmp_path_factory.mktemp("devices") / "params.npz"
    log = out.with_name("log.txt")
    with open(log, "w") as log_file:
        result = subprocess.run(
            [sys.executable, str(WORKER), "devices", str(out)], env=cpu_env(8),
            stdout=log_file, stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    assert result.returncode == 0, log_tails([log])
    with np.load(out) as arrays:
        return dict(arrays)


@pytest.mark.slow
@pytest.mark.parametrize("kind", worker.MODELS)
def test_eight_device_step_equals_single_device_step(eight_device_run, kind):
    runs = {layout: {key.split("|", 2)[2]: value for key, value in eight_device_run.items()
                     if key.startswith(f"{kind}|{layout}|")}
            for layout in ("init", "single", "mesh")}
    assert runs["single"].keys() == runs["mesh"].keys()
    moved = max(np.abs(runs["single"][name] - runs["init"][name]).max() for name in runs["init"])
    assert moved > 1e-3, "training did not change the parameters; the comparison would be empty"
    for name, single in runs["single"].items():
        np.testing.assert_allclose(runs["mesh"][name], single, rtol=0, atol=TOLERANCE,
                                   err_msg=f"{kind} {name}")


# ---------------------------------------------------------------- 2 processes vs 1 process


@pytest.mark.slow
def test_two_processes_equal_one_process(tmp_path):
    port, num_processes = free_port(), 2
    logs = [tmp_path / f"process{i}.log" for i in range(num_processes)]
    run_all([([str(WORKER), "process", str(tmp_path), "--coordinator", f"127.0.0.1:{port}",
               "--num-processes", str(num_processes), "--process-id", str(process_id)], 2, log)
             for process_id, log in enumerate(logs)], TIMEOUT_S)

    # One process, one device, the same global batches (the shards concatenated in order).
    reference, history = worker.train("transformer", worker.global_batches("transformer", 2))
    expected = worker.flat_params(reference)
    with np.load(tmp_path / "params.npz") as got:
        np.testing.assert_allclose(got["#loss"], [m["loss"] for m in history], atol=TOLERANCE)
        for name, value in expected.items():
            np.testing.assert_allclose(got[name], value, rtol=0, atol=TOLERANCE, err_msg=name)

    # The checkpoint both processes saved restores in a single process.
    with CheckpointManager(tmp_path / "checkpoints") as manager:
        assert manager.all_steps() == [worker.STEPS]
        restored, extra = manager.restore(worker.STEPS, reference)
    assert extra["process_count"] == num_processes
    for name, value in worker.flat_params(restored).items():
        np.testing.assert_allclose(value, expected[name], rtol=0, atol=TOLERANCE, err_msg=name)


# ---------------------------------------------------------------- sharded samplers


def _random_case(rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    num_samples = int(rng.choice([1, 5, 20, 60, 150, 400]))
    distribution = rng.choice(["uniform", "geometric", "constant", "two_peaks"])
    if distribution == "uniform":
        lengths = rng.integers(1, 60, num_samples)
    elif distribution == "geometric":
        lengths = np.minimum(rng.geometric(0.05, num_samples), 300)
    elif distribution == "constant":
        lengths = np.full(num_samples, int(rng.integers(1, 30)))
    else:
        lengths = np.where(rng.random(num_samples) < 0.8, rng.integers(3, 8, num_samples),
                           rng.integers(80, 120, num_samples))
    if rng.random() < 0.4:  # two length fields, like (source, target)
        lengths = np.stack([lengths, np.maximum(lengths + rng.integers(-5, 6, num_samples), 0)],
                           axis=1)
    unit = str(rng.choice(["sentences", "tokens"]))
    padded_longest = -(-int(np.max(lengths)) // 8) * 8
    settings = {
        "batch_size": int(rng.integers(1, 9)) if unit == "sentences"
        else int(rng.integers(padded_longest, 4 * padded_longest + 1)),
        "batch_size_unit": unit,
        "num_buckets": int(rng.integers(1, 12)),
        "bucket_scheme": str(rng.choice(["constant", "linear", "exp"])),
        "ratio": float(rng.choice([0.0, 0.5, 2.0])) if unit == "sentences" else 0.0,
        "shuffle": bool(rng.random() < 0.7),
        "seed": int(rng.integers(0, 1000)),
        "last_batch": "drop" if rng.random() < 0.3 else "pad",
    }
    return lengths, settings


CASES = [(num_shards, case) for num_shards in (2, 4, 8) for case in range(30)]


@pytest.mark.parametrize(("num_shards", "case"), CASES)
def test_sharded_samplers_are_disjoint_covering_and_in_lockstep(num_shards, case):
    rng = np.random.default_rng([num_shards, case])
    lengths, settings = _random_case(rng)
    samplers = [FixedBucketSampler(lengths, num_shards=num_shards, shard_id=s, **settings)
                for s in range(num_shards)]
    steps = {len(sampler) for sampler in samplers}
    assert len(steps) == 1, f"shards take different step counts {steps} ({settings})"
    sample_lengths = np.asarray(lengths).reshape(len(lengths), -1)
    for epoch in range(2):
        per_shard = [list(sampler) for sampler in samplers]
        assert {len(batches) for batches in per_shard} == steps, f"epoch {epoch}"
        seen = []
        for step, batches in enumerate(zip(*per_shard)):
            shapes = {batch.shape for batch in batches}
            assert len(shapes) == 1, f"epoch {epoch} step {step}: shapes {shapes}"
            shape = shapes.pop()
            for batch in batches:
                assert len(batch) <= shape.rows
                if len(batch):
                    fits = sample_lengths[batch.indices] <= np.asarray(shape.lengths)
                    assert fits.all(), f"step {step}: a sample exceeds {shape}"
                seen.extend(batch.indices.tolist())
        assert len(seen) == len(set(seen)), f"epoch {epoch}: shards overlap ({settings})"
        if settings["last_batch"] == "pad":
            assert sorted(seen) == list(range(len(lengths))), f"epoch {epoch}: not covering"
        else:  # "drop" loses less than one global batch per bucket, like the unsharded sampler
            largest = int(samplers[0].bucket_batch_sizes.max()) * num_shards
            dropped = len(lengths) - len(seen)
            assert 0 <= dropped < largest * len(samplers[0].bucket_keys)


# ---------------------------------------------------------------- helpers, one process


def test_initialize_is_a_no_op_without_a_coordinator(monkeypatch):
    for name in (*parallel.ENV_COORDINATOR, *parallel.ENV_NUM_PROCESSES, *parallel.ENV_PROCESS_ID,
                 "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert parallel.initialize() is False
    assert parallel.initialize(num_processes=1, process_id=0) is False
    assert not jax.distributed.is_initialized() and parallel.is_main_process()


@pytest.mark.parametrize(("kwargs", "env", "message"), [
    ({"num_processes": 2, "process_id": 0}, {}, "need a coordinator"),
    ({}, {"TEXTKIT_NUM_PROCESSES": "2", "TEXTKIT_PROCESS_ID": "1"}, "need a coordinator"),
    ({"coordinator_address": "127.0.0.1:1234", "num_processes": 2}, {}, "process_id"),
    ({}, {"TEXTKIT_COORDINATOR": "127.0.0.1:1234", "TEXTKIT_PROCESS_ID": "0"},
     "num_processes"),
    ({}, {"JAX_NUM_PROCESSES": "two"}, "JAX_NUM_PROCESSES='two' must be an integer"),
    ({"num_processes": 1, "process_id": 3}, {}, "process_id=3 but num_processes=1"),
])
def test_initialize_rejects_incomplete_settings(monkeypatch, kwargs, env, message):
    for name in (*parallel.ENV_COORDINATOR, *parallel.ENV_NUM_PROCESSES, *parallel.ENV_PROCESS_ID,
                 "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        parallel.initialize(**kwargs)
    assert not jax.distributed.is_initialized()


def test_per_process_and_mesh_on_one_device():
    assert parallel.per_process(4096, "token budget") == 4096
    mesh = parallel.make_mesh()
    assert mesh.axis_names == (parallel.DATA_AXIS, parallel.MODEL_AXIS)
    assert mesh.shape == {"data": jax.device_count(), "model": 1}
    with pytest.raises(ValueError, match="model-parallel groups of 3"):
        parallel.make_mesh(model_parallel=3, devices=jax.devices() * 2)


def test_param_shardings_follow_rules_and_reject_wrong_ranks():
    state = worker.initial_state("transformer")[0]
    mesh = parallel.make_mesh()
    rules = [(r"feed_forward/wi/kernel$", P(None, "model")),
             (r"feed_forward/wo/kernel$", P("model", None))]
    shardings = parallel.param_shardings(state, mesh, rules)
    names = {jax.tree_util.keystr(path, simple=True, separator="/"): sharding.spec
             for path, sharding in jax.tree_util.tree_leaves_with_path(shardings)}
    assert names["params/encoder_0/feed_forward/wi/kernel"] == P(None, "model")
    assert names["params/decoder_0/feed_forward/wo/kernel"] == P("model", None)
    assert names["params/encoder_0/feed_forward/wi/bias"] == P()
    assert names["step"] == P()
    placed = parallel.shard_params(state, mesh, rules)
    assert placed.params["encoder_0"]["feed_forward"]["wi"]["kernel"].sharding.spec == P(
        None, "model")
    with pytest.raises(ValueError, match="has only 1 dimensions"):
        parallel.param_shardings(state, mesh, [(r"wi/bias$", P(None, "model"))])


def test_global_batch_and_to_host_round_trip_on_one_device():
    mesh = parallel.make_mesh()
    local = {"tokens": np.arange(12, dtype=np.int32).reshape(4, 3),
             "mask": np.ones(4, np.float32)}
    batch = parallel.global_batch(local, mesh)
    assert batch["tokens"].sharding.spec == P(parallel.DATA_AXIS)
    host = parallel.to_host(batch)
    np.testing.assert_array_equal(host["tokens"], local["tokens"])
    with pytest.raises(ValueError, match="'scalar'"):
        parallel.global_batch({"scalar": np.float32(1.0)}, mesh)


def test_local_copy_is_a_private_single_device_copy():
    mesh = parallel.make_mesh()
    placed = parallel.replicate({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, mesh)
    local = parallel.local_copy(placed)
    assert local["w"].sharding == jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    np.testing.assert_array_equal(np.asarray(local["w"]), np.arange(6).reshape(2, 3))


def test_global_batch_places_any_pytree_of_rows():
    mesh = parallel.make_mesh()
    carry = ((np.zeros((2, 3), np.float32), np.ones((2, 3), np.float32)),)
    placed = parallel.global_batch(carry, mesh)
    assert placed[0][1].sharding.spec == P(parallel.DATA_AXIS)
    np.testing.assert_array_equal(parallel.to_host(placed)[0][1], carry[0][1])
