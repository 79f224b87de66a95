"""Subprocess side of tests/test_parallel.py, and the problem both sides train.

Run as a script in a fresh interpreter (so XLA_FLAGS and jax.distributed take effect before jax
initialises its backend):

    python parallel_worker.py devices OUT.npz
        on 8 forced host devices: train each model one step-sequence on one device and over an
        8-device data mesh from the same global batches; save both parameter sets.
    python parallel_worker.py process OUT_DIR --coordinator H:P --num-processes N --process-id I
        join a jax.distributed job, train on this process's sampler shard, save and restore an
        Orbax checkpoint from every process, and (process 0) save the final parameters.

Imported by the test for ``shard_batches``, ``train`` and ``flat_params`` (the reference runs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAD, BOS, EOS = 1, 2, 3
VOCAB = 40
STEPS = 3
MODELS = ("transformer", "lstm")


def build(kind: str):
    """``(model, loss_fn, init_inputs)`` for a tiny Transformer or LSTM LM (dropout on)."""
    import jax.numpy as jnp

    from textkit.models import get_model
    from textkit.training import cross_entropy

    if kind == "transformer":
        model = get_model("transformer_tiny", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB,
                          d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                          num_decoder_layers=1, dropout=0.1, pad_id=PAD)

        def loss_fn(params, batch, rng):
            logits = model.apply({"params": params}, batch["src_tokens"], batch["tgt_input"],
                                 deterministic=rng is None,
                                 rngs=None if rng is None else {"dropout": rng})
            loss_sum, weight_sum = cross_entropy(
                logits, batch["tgt_output"], batch["tgt_output"] != PAD)
            return loss_sum, (weight_sum, None)

        init_inputs = (jnp.ones((2, 8), jnp.int32), jnp.ones((2, 8), jnp.int32))
    elif kind == "lstm":
        model = get_model("lstm_lm_tiny", vocab_size=VOCAB, embed_size=16, hidden_size=16,
                          num_layers=1, dropout=0.1, pad_id=PAD)

        def loss_fn(params, batch, rng):
            logits, _ = model.apply({"params": params}, batch["inputs"],
                                    deterministic=rng is None,
                                    rngs=None if rng is None else {"dropout": rng})
            loss_sum, weight_sum = cross_entropy(logits, batch["targets"], batch["mask"])
            return loss_sum, (weight_sum, None)

        init_inputs = (jnp.ones((2, 8), jnp.int32),)
    else:
        raise ValueError(f"unknown model kind {kind!r}")
    return model, loss_fn, init_inputs


def dataset(kind: str, num_samples: int = 48, seed: int = 0) -> list[np.ndarray]:
    """Random token sequences of random lengths 1..21 (ids 4..VOCAB-1)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(4, VOCAB, size=int(rng.integers(1, 22))).astype(np.int32)
            for _ in range(num_samples)]


def collate(kind: str, samples: list[np.ndarray], shape) -> dict[str, np.ndarray]:
    """Batch dict (COMMON.md names) with exactly ``shape.rows`` rows (dummy rows all padding)."""
    from textkit.batchify import Pad

    pad = Pad(pad_val=PAD, ret_length=True, dtype=np.int32)
    if kind == "transformer":  # copy task: the target is the reversed source
        src, src_lengths = pad(samples, shape)
        tgt_in, tgt_lengths = pad([np.r_[BOS, s[::-1]] for s in samples], shape)
        tgt_out, _ = pad([np.r_[s[::-1], EOS] for s in samples], shape)
        return {"src_tokens": src, "src_lengths": src_lengths, "tgt_input": tgt_in,
                "tgt_output": tgt_out, "tgt_lengths": tgt_lengths}
    inputs, _ = pad([np.r_[BOS, s] for s in samples], shape)
    targets, _ = pad([np.r_[s, EOS] for s in samples], shape)
    return {"inputs": inputs, "targets": targets, "mask": (targets != PAD).astype(np.float32)}


def shard_batches(kind: str, num_shards: int, shard_id: int, rows_per_shard: int = 4,
                  steps: int = STEPS, num_buckets: int = 2) -> list[dict[str, np.ndarray]]:
    """The first ``steps`` batches of shard ``shard_id`` of a shuffled FixedBucketSampler."""
    from textkit.data import FixedBucketSampler

    samples = dataset(kind)
    sampler = FixedBucketSampler([len(s) + 1 for s in samples], batch_size=rows_per_shard,
                                 num_buckets=num_buckets, shuffle=True, seed=7,
                                 num_shards=num_shards, shard_id=shard_id)
    batches = []
    for batch in sampler:
        batches.append(collate(kind, [samples[i] for i in batch], batch.shape))
        if len(batches) == steps:
            return batches
    raise AssertionError(f"sampler gave {len(batches)} batches, fewer than {steps}")


def global_batches(kind: str, num_shards: int, **kwargs) -> list[dict[str, np.ndarray]]:
    """Each step's shards concatenated in shard order: the global batch a mesh sees."""
    shards = [shard_batches(kind, num_shards, s, **kwargs) for s in range(num_shards)]
    return [{name: np.concatenate([shard[step][name] for shard in shards])
             for name in shards[0][step]} for step in range(len(shards[0]))]


def initial_state(kind: str):
    import jax
    import optax

    from textkit.training import create_train_state

    model, loss_fn, init_inputs = build(kind)
    params = model.init(jax.random.key(0), *init_inputs)["params"]
    optimizer = optax.sgd(0.5, momentum=0.9)
    return create_train_state(params, optimizer, jax.random.key(1)), loss_fn, optimizer


def train(kind: str, batches, mesh=None):
    """Run the batches through ``make_train_step``; without ``mesh``, plain single-device jit.

    Returns ``(final state, list of host metrics dicts)``.
    """
    from textkit import parallel
    from textkit.training import make_train_step

    state, loss_fn, optimizer = initial_state(kind)
    if mesh is None:
        step = make_train_step(loss_fn, optimizer)
        place = dict
    else:
        state = parallel.replicate(state, mesh)
        step = make_train_step(loss_fn, optimizer, **parallel.train_step_shardings(mesh, state))
        place = lambda batch: parallel.global_batch(batch, mesh)  # noqa: E731
    history = []
    for batch in batches:
        state, metrics = step(state, place(batch))
        history.append(parallel.to_host(metrics))
    return state, history


def flat_params(state) -> dict[str, np.ndarray]:
    """``{'/'-joined path: numpy array}`` of the params (gathers across processes)."""
    import jax

    from textkit import parallel

    host = parallel.to_host(state.params)
    return {jax.tree_util.keystr(path, simple=True, separator="/"): leaf
            for path, leaf in jax.tree_util.tree_leaves_with_path(host)}


def _save(path: Path, arrays: dict[str, np.ndarray]) -> None:
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def run_devices(out: Path) -> None:
    """Single device vs an 8-device data mesh, per model, on the same global batches."""
    import jax

    from textkit import parallel

    assert jax.device_count() == 8, jax.devices()
    mesh = parallel.make_mesh()
    arrays = {}
    for kind in MODELS:
        # one bucket: one compiled program per layout keeps the test fast
        batches = global_batches(kind, 1, rows_per_shard=16, steps=2, num_buckets=1)
        for name, value in flat_params(initial_state(kind)[0]).items():
            arrays[f"{kind}|init|{name}"] = value
        for layout, layout_mesh in (("single", None), ("mesh", mesh)):
            state, history = train(kind, batches, layout_mesh)
            for name, value in flat_params(state).items():
                arrays[f"{kind}|{layout}|{name}"] = value
            arrays[f"{kind}|{layout}|#loss"] = np.array([m["loss"] for m in history])
            arrays[f"{kind}|{layout}|#grad_norm"] = np.array([m["grad_norm"] for m in history])
    _save(out, arrays)


def run_process(out_dir: Path, coordinator: str, num_processes: int, process_id: int) -> None:
    """One process of a data-parallel job: own shard, shared mesh, every process checkpoints."""
    import jax

    from textkit import parallel
    from textkit.training import CheckpointManager

    assert parallel.initialize(coordinator, num_processes, process_id, timeout_s=60)
    assert jax.process_index() == process_id and jax.process_count() == num_processes
    mesh = parallel.make_mesh()
    kind = "transformer"
    batches = shard_batches(kind, num_processes, process_id)
    state, history = train(kind, batches, mesh)
    final = flat_params(state)

    with CheckpointManager(out_dir / "checkpoints", max_to_keep=2) as manager:
        manager.save(STEPS, state, extra={"process_count": num_processes})
        manager.wait_until_finished()
        target = jax.tree_util.tree_map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
        restored, extra = manager.restore(STEPS, target)
    assert extra["process_count"] == num_processes, extra
    restored_params = flat_params(restored)
    for name, value in final.items():
        np.testing.assert_array_equal(restored_params[name], value, err_msg=name)
    same_placement = jax.tree_util.tree_map(
        lambda a, b: a.sharding.is_equivalent_to(b.sharding, a.ndim), restored, state)
    assert all(jax.tree_util.tree_leaves(same_placement)), "restored state lost its sharding"

    if parallel.is_main_process():
        final["#loss"] = np.array([m["loss"] for m in history])
        _save(out_dir / "params.npz", final)
    print(f"process {process_id}/{num_processes}: {len(batches)} steps, "
          f"devices {jax.local_device_count()}/{jax.device_count()}, checkpoint ok", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("devices", "process"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--coordinator")
    parser.add_argument("--num-processes", type=int)
    parser.add_argument("--process-id", type=int)
    args = parser.parse_args(argv)
    if args.mode == "devices":
        run_devices(args.out)
    else:
        run_process(args.out, args.coordinator, args.num_processes, args.process_id)


if __name__ == "__main__":
    main()
