"""CheckpointManager (keep-N, best, atomic, JSON extra) and checkpoint averaging."""

import json
import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from textkit.precision import dynamic_loss_scale
from textkit.training import (
    CheckpointManager,
    TrainState,
    average_checkpoints,
    create_train_state,
    make_train_step,
)

_OPTIMIZER = dynamic_loss_scale(optax.adam(1e-3))


def _state(value: float) -> TrainState:
    params = {"w": jnp.full((2, 3), value, jnp.float32),
              "emb": jnp.full((4,), value, jnp.bfloat16)}
    return create_train_state(params, _OPTIMIZER, jax.random.key(0)).replace(
        step=jnp.asarray(int(value), jnp.int32))


def test_keeps_the_latest_n(tmp_path):
    with CheckpointManager(tmp_path, max_to_keep=2) as manager:
        for step in range(5):
            manager.save(step, _state(step))
        manager.wait_until_finished()
        assert manager.all_steps() == [3, 4]
        assert manager.latest_step() == 4
        assert manager.best_step() is None
        state, _ = manager.restore(target=_state(0))
    assert int(state.step) == 4
    np.testing.assert_array_equal(state.params["w"], np.full((2, 3), 4.0))
    assert state.params["emb"].dtype == jnp.bfloat16


@pytest.mark.parametrize("mode, best", [("max", 1), ("min", 4)])
def test_keeps_and_restores_the_best(tmp_path, mode, best):
    bleu = [5.0, 9.0, 3.0, 4.0, 2.0]
    with CheckpointManager(tmp_path, max_to_keep=2, best_metric="bleu", best_mode=mode) as m:
        for step, value in enumerate(bleu):
            m.save(step, _state(step), metrics={"bleu": np.float32(value)})
        m.wait_until_finished()
        assert m.best_step() == best
        assert m.all_steps() == sorted({3, 4, best})
        state, extra = m.restore("best", target=_state(0))
    assert int(state.step) == best
    assert extra["metrics"] == {"bleu": bleu[best]}


def test_extra_json_round_trips_sampler_state(tmp_path):
    extra = {"epoch": 3, "sampler": {"seed": np.int64(7), "position": 120,
                                     "order": np.arange(3)},
             "config": {"model": "transformer_tiny", "policy": "mixed_bfloat16"}}
    with CheckpointManager(tmp_path) as manager:
        manager.save(10, _state(1), extra=extra, metrics={"loss": 2.5})
        _, restored = manager.restore(10, target=_state(0))
    assert restored == {"epoch": 3, "sampler": {"seed": 7, "position": 120, "order": [0, 1, 2]},
                        "config": {"model": "transformer_tiny", "policy": "mixed_bfloat16"},
                        "metrics": {"loss": 2.5}}


def test_half_written_step_is_ignored(tmp_path):
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, _state(1))
        manager.save(2, _state(2))
    # A crash mid-save leaves Orbax's temporary directory behind, never a finished step.
    partial = tmp_path / "3.orbax-checkpoint-tmp-1700000000000000"
    (partial / "state").mkdir(parents=True)
    (partial / "state" / "garbage").write_bytes(b"\x00" * 10)
    with CheckpointManager(tmp_path) as manager:
        assert manager.all_steps() == [1, 2]
        state, _ = manager.restore("latest", target=_state(0))
        assert int(state.step) == 2
        manager.save(3, _state(3))           # the step can be written again
        manager.wait_until_finished()
        assert manager.latest_step() == 3


def test_restore_errors_are_clear(tmp_path):
    with CheckpointManager(tmp_path, best_metric="bleu") as manager:
        with pytest.raises(FileNotFoundError, match="no checkpoints"):
            manager.restore(target=_state(0))
        with pytest.raises(ValueError, match="lack best_metric 'bleu'"):
            manager.save(1, _state(1), metrics={"loss": 1.0})
        manager.save(1, _state(1), metrics={"bleu": 1.0})
        with pytest.raises(FileNotFoundError, match=r"step 7 .* available: \[1\]"):
            manager.restore(7, target=_state(0))
        with pytest.raises(ValueError, match="step must be"):
            manager.restore("first", target=_state(0))
    with CheckpointManager(tmp_path / "other") as manager:
        with pytest.raises(ValueError, match="best_metric"):
            manager.restore("best", target=_state(0))
        with pytest.raises(TypeError, match="JSON serialisable"):
            manager.save(1, _state(1), extra={"f": object()})
    with pytest.raises(ValueError, match="best_mode"):
        CheckpointManager(tmp_path / "x", best_mode="largest")


def test_average_checkpoints(tmp_path):
    with CheckpointManager(tmp_path, max_to_keep=4) as manager:
        for step in range(5):
            manager.save(step, _state(step + 0.25))
        averaged = average_checkpoints(manager, _state(0), last_n=3)
        np.testing.assert_allclose(averaged["w"], np.full((2, 3), 3.25))
        assert averaged["w"].dtype == jnp.float32
        assert averaged["emb"].dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(averaged["emb"], np.float32), 3.25)
        chosen = average_checkpoints(manager, _state(0), steps=[1, 4])
        np.testing.assert_allclose(chosen["w"], np.full((2, 3), 2.75))
        whole = average_checkpoints(manager, _state(0), steps=[3, 4], select=lambda s: s)
        assert int(whole.step) == 4                # non-float leaves come from the last step
        with pytest.raises(ValueError, match="exactly one"):
            average_checkpoints(manager, _state(0))
        with pytest.raises(ValueError, match="last_n=9"):
            average_checkpoints(manager, _state(0), last_n=9)


def test_checkpoint_files_are_plain_json_for_extra(tmp_path):
    with CheckpointManager(tmp_path) as manager:
        manager.save(0, {"x": jnp.ones(2)}, extra={"epoch": 1})
    found = []
    for root, _, files in os.walk(tmp_path / "0" / "extra"):
        for name in files:
            with open(os.path.join(root, name)) as handle:
                try:
                    found.append(json.load(handle))
                except ValueError:
                    continue
    assert {"epoch": 1, "metrics": {}} in found


def test_async_save_is_not_corrupted_by_donated_train_steps(tmp_path):
    optimizer = optax.sgd(1.0)

    def loss_fn(params, batch, rng):
        return (params["w"] * batch["x"]).sum(), (1.0, None)

    step = make_train_step(loss_fn, optimizer)          # donates the state
    state = create_train_state({"w": jnp.zeros((256, 256))}, optimizer, jax.random.key(0))
    batch = {"x": np.ones((256, 256), np.float32)}
    state, _ = step(state, batch)
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
        for _ in range(3):
            state, _ = step(state, batch)                # overwrites the donated buffers
        restored, _ = manager.restore(1, target=state)
    np.testing.assert_array_equal(restored.params["w"], np.full((256, 256), -1.0))
    np.testing.assert_array_equal(state.params["w"], np.full((256, 256), -4.0))


def test_saves_one_after_another_log_no_waiting_warning(tmp_path, monkeypatch, caplog):
    """Each save waits for itself, so none waits for a previous one: Orbax's "Waiting for
    previous save to complete" (its own wait counted at the next save) is not printed."""
    import orbax.checkpoint.checkpoint_manager as orbax_manager

    monkeypatch.setattr(orbax_manager, "_WAIT_FOR_PREV_SAVE_WARNING_THRESHOLD_SECS", 0.0)
    with caplog.at_level(logging.WARNING, logger="absl"), CheckpointManager(tmp_path) as manager:
        for step in (1, 2, 3):
            manager.save(step, _state(float(step)))
    assert not [r for r in caplog.records if "Waiting for previous save" in r.getMessage()]
