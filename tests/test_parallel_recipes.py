"""The recipes unchanged on one device, on two local devices, and as two processes.

Each run is a fresh interpreter (XLA_FLAGS and ``jax.distributed`` must apply before jax
starts). All runs of a recipe start together, so their compiles overlap. The runs use the same
global batches (checked), so the final losses and parameters agree to 1e-5.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest
from subprocesses import free_port, run_all

from textkit.tasks import translation
from textkit.training import CheckpointManager, RunDir

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 420  # generous: the suite may share 2 cores with other jobs
TOLERANCE = 1e-5

# tiny NMT: one bucket shape, three steps (the first at learning rate 0), no dropout (row order
# within a global batch differs between one and two processes, and dropout masks follow rows),
# greedy decoding of 8 pairs
NMT = [str(ROOT / "examples" / "nmt" / "train.py"),
       "--toy-sizes", "200,8,8", "--spm-vocab-size", "200", "--batch-tokens", "512",
       "--batch-rows-multiple", "2", "--num-buckets", "1", "--max-steps", "3",
       "--eval-every", "0", "--beam-size", "1", "--decode-batch-size", "8",
       "--warmup-steps", "2", "--log-every", "1",
       # a budget never reached: every logged step still asks process 0 whether to stop
       "--time-budget-min", "1000",
       "--model-overrides",
       "d_model=32,d_ff=64,num_encoder_layers=1,num_decoder_layers=1,dropout=0.0"]


# tiny LSTM LM: rows split 2 + 2, two epochs with a learning-rate change in between (the state
# is re-placed), dropout on (the rows keep their order on every layout); SGD, which unlike Adam
# does not blow rounding noise in near-zero gradients up to steps of +-lr
LM = [str(ROOT / "examples" / "language_model" / "train.py"),
      "--model", "lstm_lm_tiny", "--toy-sentences", "60", "--batch-size", "4", "--bptt", "8",
      "--epochs", "2", "--optimizer", "sgd", "--lr", "2", "--decay-on", "epoch",
      "--decay-start", "1", "--lr-decay", "0.5", "--log-every", "50"]


def run_layouts(command: list[str], root: Path) -> dict[str, Path]:
    """Run ``command`` as 1 process x 1 device, 1 x 2 devices and 2 x 1 device (127.0.0.1),
    all at once; returns each layout's save directory. Fails with the logs on an error."""
    port = free_port()
    layouts = {
        "one_device": [([], 1)],
        "two_devices": [([], 2)],
        "two_processes": [(["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                            "--process-id", str(i)], 1) for i in range(2)],
    }
    run_all([([*command, "--save-dir", str(root / name), *flags], devices,
              root / f"{name}.{index}.log")
             for name, members in layouts.items()
             for index, (flags, devices) in enumerate(members)], TIMEOUT_S)
    return {name: root / name for name in layouts}


def _flat(tree, prefix="") -> dict[str, np.ndarray]:
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flat(sub, f"{prefix}/{key}").items()}
    return {prefix: np.asarray(tree)}


def latest_state(save_dir: Path, target=None) -> dict:
    """The latest checkpointed state, on this process's one device (``target``: a restored
    state of the same structure, needed when the run had other devices)."""
    if target is not None:
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        target = jax.tree_util.tree_map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), target)
    with CheckpointManager(save_dir / "checkpoints") as manager:
        return manager.restore("latest", target)[0]


# Attention key biases: softmax ignores a shift shared by all keys, so their gradient is zero
# up to rounding, and Adam turns rounding noise of either sign into steps of +-lr. They are left
# out (the slice of the fused projection); every other parameter must agree.
KEY_BIAS = {"qkv/bias": 1, "key_value/bias": 0}


def assert_same_params(got: dict[str, np.ndarray], expected: dict[str, np.ndarray], layout: str):
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        actual = got[name]
        for suffix, key_index in KEY_BIAS.items():
            if name.endswith(suffix):
                actual, value = np.delete(actual, key_index, 0), np.delete(value, key_index, 0)
        np.testing.assert_allclose(actual, value, rtol=0, atol=TOLERANCE,
                                   err_msg=f"{layout} {name}")


@pytest.fixture(scope="module")
def nmt_runs(tmp_path_factory) -> dict[str, Path]:
    return run_layouts(NMT, tmp_path_factory.mktemp("nmt_layouts"))


@pytest.mark.slow
def test_nmt_recipe_gives_the_same_model_on_every_layout(nmt_runs):
    summaries = {name: json.loads((path / "summary.json").read_text())
                 for name, path in nmt_runs.items()}
    reference = summaries["one_device"]
    assert [(s["num_devices"], s["num_processes"]) for s in summaries.values()] == [
        (1, 1), (2, 1), (2, 2)]
    # one process reads the whole global batch: the same bytes on one and on two devices
    assert summaries["two_devices"]["data_crc32"] == reference["data_crc32"]
    reference_state = latest_state(nmt_runs["one_device"])
    expected = _flat(reference_state["params"])
    for layout in ("two_devices", "two_processes"):
        assert summaries[layout]["steps"] == reference["steps"] == 3
        np.testing.assert_allclose(summaries[layout]["last_loss"], reference["last_loss"],
                                   rtol=0, atol=TOLERANCE, err_msg=layout)
        state = latest_state(nmt_runs[layout], reference_state)
        assert_same_params(_flat(state["params"]), expected, layout)
        assert (nmt_runs[layout] / "spm.model").is_file()


@pytest.mark.slow
def test_nmt_two_process_shards_make_the_one_process_global_batches(nmt_runs):
    """Rebuild the recipe's loaders from its saved vocabulary: the two shards' rows of every
    step are exactly the rows of the one-process batch (in another order)."""
    from textkit.data import toy_translation

    src_tok, tgt_tok = translation.tokenizers(RunDir(nmt_runs["two_processes"]), joint=True)
    samples = translation.encode_pairs(toy_translation("train", num_sentences=200, seed=0), src_tok,
                           tgt_tok, max_length=128)

    def loader(budget: int, shards: int, shard: int, multiple: int):
        return translation.seq2seq_loader(samples, budget, pad_id=tgt_tok.pad_id,
                                   bos_id=tgt_tok.bos_id, eos_id=tgt_tok.eos_id, num_buckets=1,
                                   seed=0, num_shards=shards, shard_id=shard,
                                   batch_rows_multiple=multiple)

    def rows(batch) -> list[tuple]:
        return sorted(tuple(np.concatenate([batch["src_tokens"][i], batch["tgt_output"][i]]))
                      for i in range(len(batch["src_tokens"])))

    whole = loader(512, 1, 0, 2)
    halves = [loader(256, 2, shard, 1) for shard in range(2)]
    assert len(whole) == len(halves[0]) == len(halves[1]) > 2
    for step, (batch, first, second) in enumerate(zip(whole, *halves)):
        assert rows(batch) == sorted(rows(first) + rows(second)), f"step {step}"


@pytest.fixture(scope="module")
def lm_runs(tmp_path_factory) -> dict[str, Path]:
    return run_layouts(LM, tmp_path_factory.mktemp("lm_layouts"))


@pytest.mark.slow
def test_lm_recipe_gives_the_same_model_on_every_layout(lm_runs):
    summaries = {name: json.loads((path / "summary.json").read_text())
                 for name, path in lm_runs.items()}
    reference = summaries["one_device"]
    assert [(s["num_devices"], s["num_processes"]) for s in summaries.values()] == [
        (1, 1), (2, 1), (2, 2)]
    assert [h["lr"] for h in reference["history"]] == pytest.approx([2.0, 1.0])
    reference_state = latest_state(lm_runs["one_device"])
    expected = _flat(reference_state["params"])
    for layout in ("two_devices", "two_processes"):
        got = summaries[layout]
        assert [h["lr"] for h in got["history"]] == pytest.approx([2.0, 1.0])
        for key in ("last_loss", "valid_ppl", "test_ppl"):
            np.testing.assert_allclose(got[key], reference[key], rtol=TOLERANCE,
                                       err_msg=f"{layout} {key}")
        state = latest_state(lm_runs[layout], reference_state)
        assert_same_params(_flat(state["params"]), expected, layout)


def test_lm_step_keeps_the_recurrent_state_split_over_data():
    from textkit import parallel
    from textkit.models import get_model
    from textkit.tasks import language_model as lm
    from textkit.training import create_train_state

    model = get_model("lstm_lm_tiny", vocab_size=20, pad_id=1)
    tokens = np.full((2, 4), 3, np.int32)
    optimizer = lm.lm_optimizer("sgd", 0.1)[0]
    mesh = parallel.make_mesh()
    state = parallel.replicate(create_train_state(
        model.init(jax.random.key(0), tokens)["params"], optimizer, jax.random.key(1)), mesh)
    step = lm.lm_train_step(model, optimizer, **lm.train_step_shardings(mesh, state))
    batch = parallel.global_batch({"inputs": tokens, "targets": tokens,
                                   "mask": np.ones((2, 4), np.float32)}, mesh)
    carry = parallel.global_batch(model.initial_state(2), mesh)
    state, carry, metrics = step(state, batch, carry)
    data = parallel.data_sharding(mesh)
    for leaf in jax.tree_util.tree_leaves(carry):
        assert leaf.shape[0] == 2 and leaf.sharding.is_equivalent_to(data, leaf.ndim)
    assert metrics["loss"].sharding.is_fully_replicated
