"""The one training program: ``fit`` and ``RunDir`` on a tiny regression problem."""

from __future__ import annotations

import json
import time
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from textkit.data import DataLoader, FixedBucketSampler
from textkit.errors import TextkitError
from textkit.precision import dynamic_loss_scale
from textkit.training import (
    CheckpointManager,
    FitConfig,
    RunDir,
    create_train_state,
    fit,
    learning_rate_of,
    make_train_step,
    with_learning_rate,
    with_loss_scaling,
)

DIM = 4


def loss_fn(params, batch, rng):
    """Squared error of a linear model; float32 sums over the batch rows."""
    pred = batch["x"] @ params["w"]                                   # [B]
    return jnp.sum((pred - batch["y"]) ** 2), (jnp.float32(batch["x"].shape[0]), {})


def make_loader(num: int = 48, batch_size: int = 4, bad_sample: int | None = None,
                value: float = np.nan, num_workers: int = 0) -> DataLoader:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(num, DIM)).astype(np.float32)
    y = (x @ np.arange(1, DIM + 1, dtype=np.float32)).astype(np.float32)
    if bad_sample is not None:
        x[bad_sample] = value
    samples = list(zip(x, y))
    sampler = FixedBucketSampler([DIM] * num, batch_size, bucket_keys=[DIM], round_to=None,
                                 shuffle=bad_sample is None, seed=1)

    def batchify(items, shape=None):
        return {"x": np.stack([a for a, _ in items]), "y": np.stack([b for _, b in items])}

    return DataLoader(samples, sampler, batchify, num_workers=num_workers)


def start(optimizer=None):
    optimizer = optimizer or optax.sgd(0.05)
    state = create_train_state({"w": jnp.zeros(DIM)}, optimizer, jax.random.key(0))
    return state, make_train_step(loss_fn, optimizer, donate=False)


def test_fit_trains_by_epochs_and_counts_compiles():
    state, step = start()
    loader = make_loader()
    result = fit(state, step, loader, FitConfig(epochs=3, log_every=5),
                 evaluate=lambda s: {"w0": float(s.params["w"][0])})
    assert result.progress.step == 3 * len(loader) and result.progress.epoch == 3
    assert result.stopped_by == "epochs" and result.num_compiles == 1
    assert [h["epoch"] for h in result.progress.history] == [3]    # evaluated at the end only
    assert result.progress.last_loss < 1.0 and result.progress.tokens == 3 * 48


def test_fit_compiles_every_bucket_shape_before_the_first_step():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 13, 60)          # three buckets of padded widths 4, 8, 12
    samples = [(np.ones(n, np.float32), np.float32(n)) for n in lengths]
    sampler = FixedBucketSampler(lengths, 24, num_buckets=3, bucket_keys=[4, 8, 12],
                                 batch_size_unit="tokens", round_to=None, shuffle=True)

    def batchify(items, shape):
        x = np.zeros((shape.rows, shape.lengths[0]), np.float32)
        for row, (values, _) in enumerate(items):
            x[row, :len(values)] = values
        y = np.zeros(shape.rows, np.float32)
        y[:len(items)] = [target for _, target in items]
        return {"x": x, "y": y}

    def sum_loss(params, batch, rng):
        pred = batch["x"].sum(-1) * params["w"][0]                    # [B]
        return jnp.sum((pred - batch["y"]) ** 2), (jnp.float32(batch["x"].shape[0]), {})

    loader = DataLoader(samples, sampler, batchify)
    assert [b["x"].shape for b in loader.shape_batches()] == [(6, 4), (3, 8), (2, 12)]
    optimizer = optax.sgd(0.001)
    state = create_train_state({"w": jnp.zeros(DIM)}, optimizer, jax.random.key(0))
    step = make_train_step(sum_loss, optimizer, donate=False)
    messages = []
    result = fit(state, step, loader, FitConfig(epochs=2, log_every=100), log=messages.append)
    assert "compiled the train step for 3 batch shapes" in messages[0]
    assert result.num_compiles == 3 and result.progress.step == 2 * len(loader)
    np.testing.assert_allclose(float(result.state.params["w"][0]), 1.0, atol=0.05)

    # Two steps cannot reach three shapes: only the shapes the run meets are compiled, and
    # the steps that compiled them are compilation, not training throughput.
    step = make_train_step(sum_loss, optimizer, donate=False)
    messages = []
    short = fit(state, step, loader, FitConfig(max_steps=2, log_every=100), log=messages.append)
    assert "2 steps left for 3 batch shapes" in messages[0]
    assert short.num_compiles in (1, 2)
    # Both steps compiled (two shapes) or only the first (one shape, equal batches).
    compiled = 1.0 if short.num_compiles == 2 else 0.5
    assert short.progress.compile_tokens == compiled * short.progress.tokens


def test_fit_stops_on_a_non_finite_loss_naming_the_step():
    state, step = start()
    loader = make_loader(bad_sample=9)   # unshuffled: sample 9 is in the third batch
    with pytest.raises(FloatingPointError, match="at step 3: loss nan.*no checkpoint"):
        fit(state, step, loader, FitConfig(max_steps=10, log_every=5))


def test_a_loss_scaling_skip_is_not_an_error():
    state, step = start(dynamic_loss_scale(optax.sgd(0.05)))
    loader = make_loader(bad_sample=9, value=np.inf)
    messages = []
    result = fit(state, step, loader, FitConfig(max_steps=12, log_every=4), log=messages.append)
    assert result.progress.step == 12 and np.isfinite(result.progress.last_loss)
    assert result.progress.skipped_total == 1
    assert any("skipped 1 step(s)" in m and "[3]" in m for m in messages)
    assert np.all(np.isfinite(np.asarray(result.state.params["w"])))


def test_time_budget_then_resume_equals_an_uninterrupted_run(tmp_path):
    def run(save_dir, **kwargs):
        state, step = start(optax.adam(0.1))
        manager = RunDir(save_dir).checkpoint_manager(max_to_keep=2, best_metric="w0")
        config = FitConfig(max_steps=20, eval_every=6, log_every=3, **kwargs)
        result = fit(state, step, make_loader(), config, checkpoints=manager,
                     evaluate=lambda s: {"w0": float(s.params["w"][0])})
        manager.close()
        return result

    whole = run(tmp_path / "whole")
    cut = run(tmp_path / "cut", time_budget_min=1e-9)
    assert cut.stopped_by == "time_budget" and cut.progress.step == 3
    resumed = run(tmp_path / "cut", resume=True)
    assert [h["step"] for h in resumed.progress.history] == [3, 6, 12, 18, 20]
    assert resumed.progress.step == 20 and resumed.progress.data_crc32 == whole.progress.data_crc32
    np.testing.assert_allclose(resumed.state.params["w"], whole.state.params["w"], atol=1e-6)


def test_epoch_hook_changes_the_state_before_the_save():
    state, step = start(optax.inject_hyperparams(optax.sgd)(learning_rate=0.1))

    def halve(state, record, history):
        lr = learning_rate_of(state.opt_state)
        record["lr"] = lr
        return state.replace(opt_state=with_learning_rate(state.opt_state, lr / 2))

    result = fit(state, step, make_loader(), FitConfig(epochs=3, eval_each_epoch=True),
                 on_epoch_end=halve)
    assert [h["lr"] for h in result.progress.history] == pytest.approx([0.1, 0.05, 0.025])


def test_run_dir_refuses_reuse_without_resume_and_a_changed_config(tmp_path):
    run = RunDir(tmp_path / "run")
    run.open({"model": "a", "epochs": 1}, resume=False)
    state, step = start()
    manager = run.checkpoint_manager()
    fit(state, step, make_loader(), FitConfig(max_steps=2), checkpoints=manager)
    manager.close()
    with pytest.raises(TextkitError, match="--resume"):
        run.open({"model": "a", "epochs": 1}, resume=False)
    with pytest.raises(TextkitError, match=r"different \['model'\] \(\['a'\] there, \['b'\] now\): "
                       r"to continue it, give the settings it was started with \(its "
                       r"config.json\); to start a new run, give another --save-dir"):
        run.open({"model": "b", "epochs": 2}, resume=True, check=["model"])
    run.open({"model": "a", "epochs": 2}, resume=True, check=["model"])  # epochs may change
    assert json.loads(run.config_path.read_text())["epochs"] == 1      # written once


def test_resume_without_a_checkpoint_says_it_starts_at_step_0(tmp_path):
    """A run stopped before its first save (or never run) is resumed from scratch, saying so."""
    state, step = start()
    lines: list[str] = []
    with CheckpointManager(tmp_path / "checkpoints") as manager:
        result = fit(state, step, make_loader(), FitConfig(max_steps=2, resume=True),
                     checkpoints=manager, log=lines.append)
    assert result.progress.step == 2
    assert any(line.startswith("--resume: no checkpoint in ") and "starts at step 0" in line
               for line in lines)


def test_run_dir_resumes_a_run_written_before_a_setting_existed(tmp_path):
    """A config.json without a later-added key counts as holding the value such runs had."""
    run = RunDir(tmp_path / "old")
    run.open({"model": "a"}, resume=False)                  # written before "accum" existed
    run.open({"model": "a", "accum": 1}, resume=True, check=["model", "accum"],
             added={"accum": 1})
    with pytest.raises(TextkitError, match="accum"):
        run.open({"model": "a", "accum": 2}, resume=True, check=["model", "accum"],
                 added={"accum": 1})
    with pytest.raises(TextkitError, match="accum"):          # no default given: a change
        run.open({"model": "a", "accum": 1}, resume=True, check=["model", "accum"])


def test_with_loss_scaling_follows_the_policy():
    inner = optax.sgd(0.1)
    assert with_loss_scaling(inner, "float32") is inner
    scaled = with_loss_scaling(inner, "mixed_float16")
    assert scaled is not inner and "scale" in scaled.init({"w": jnp.zeros(2)})._fields


def budget_optimizer(total_steps=1000, ema_decay=None):
    from textkit.tasks import translation
    return translation.seq2seq_optimizer(0.05, 2, 1.0, schedule="budget", total_steps=total_steps,
                                 decay_fraction=0.5, ema_decay=ema_decay)[0]


def test_budget_schedule_shape():
    from textkit.training.schedules import budget_learning_rate
    lr = [float(budget_learning_rate(s, 10, 1.0, 2, 0.5)) for s in range(12)]
    assert lr[:3] == pytest.approx([0.0, 0.5, 1.0])          # warm-up
    assert lr[3:6] == pytest.approx([1.0, 1.0, 1.0])         # stable
    assert lr[6:] == pytest.approx([0.8, 0.6, 0.4, 0.2, 0.0, 0.0])   # decay to 0 at 10


def test_a_warm_up_longer_than_half_the_run_is_cut_to_half():
    """200 warm-up steps in a run a time budget cuts to 40: the peak at step 20, 0 at 40."""
    from textkit.training.schedules import budget_learning_rate
    lr = [float(budget_learning_rate(s, 40, 1.0, 200, 0.2)) for s in (10, 20, 31, 36, 40)]
    assert lr == pytest.approx([0.5, 1.0, 1.0, 0.5, 0.0])


def test_warm_up_and_decay_follow_the_planned_end():
    """A recipe's warm-up fraction is of the steps the run will take (``fit`` moves
    ``total_steps`` there, e.g. from 50 epochs to what a time budget allows), not of its first
    estimate: the encoder recipes' AdamW, the causal-LM and pretraining schedules share it."""
    from textkit.tasks.encoder_task import adamw

    params = {"w": jnp.zeros((2, 2))}
    tx, rate = adamw(params, learning_rate=1.0, total_steps=50_000, warmup=0.1,
                     weight_decay=0.0, num_layers=1)
    state = optax.tree_utils.tree_set(tx.init(params), total_steps=jnp.float32(100))
    for _ in range(20):
        _, state = tx.update({"w": jnp.ones((2, 2))}, state, params)
    assert learning_rate_of(state) == pytest.approx((100 - 19) / 90)   # warmed up at 10
    assert rate(types.SimpleNamespace(opt_state=state)) == learning_rate_of(state)


def test_fit_ends_the_budget_schedule_at_max_steps():
    import optax

    state, step = start(budget_optimizer(total_steps=1000))   # a wrong first estimate
    result = fit(state, step, make_loader(), FitConfig(max_steps=7, log_every=3))
    assert float(optax.tree_utils.tree_get(result.state.opt_state, "total_steps")) == 7.0
    assert learning_rate_of(result.state.opt_state) == pytest.approx(0.05 * 1 / 3.5)


def test_fit_converts_a_time_budget_into_steps():
    import optax

    state, step = start(budget_optimizer(total_steps=10_000))
    slow = lambda batch: (time.sleep(0.004), batch)[1]    # a steady ~250 steps/s
    result = fit(state, step, make_loader(num=400), FitConfig(
        epochs=50, log_every=5, time_budget_min=1.5 / 60, progress=False), to_device=slow)
    planned = float(optax.tree_utils.tree_get(result.state.opt_state, "total_steps"))
    assert result.stopped_by == "time_budget"
    assert planned < 10_000 and abs(planned - result.progress.step) <= 0.25 * planned


def test_ema_parameters_follow_the_trained_ones():
    state, step = start(budget_optimizer(total_steps=24, ema_decay=0.9))
    result = fit(state, step, make_loader(), FitConfig(max_steps=24, log_every=6))
    from textkit.training import ema_params_of
    averaged, trained = ema_params_of(result.state)["w"], result.state.params["w"]
    assert not np.allclose(averaged, 0.0) and not np.allclose(averaged, trained)
    np.testing.assert_allclose(averaged, trained, atol=0.5 * float(np.abs(trained).max()))


def test_throughput_leaves_out_the_compiling_step():
    """The end-of-run tokens/s measures training, not the compiler: the first step (timed in
    ``compile_s``) and its tokens are left out."""
    from textkit.training.loop import Progress

    state, step = start()
    progress = fit(state, step, make_loader(), FitConfig(max_steps=6, log_every=3)).progress
    assert progress.tokens == 6 * 4 and progress.compile_tokens == 4     # 4 rows a step
    assert 0 < progress.compile_s < progress.train_s
    assert progress.tokens_per_s == pytest.approx(20 / (progress.train_s - progress.compile_s))
    only_compiling = Progress(train_s=2.0, compile_s=2.0, tokens=8.0, compile_tokens=8.0)
    assert only_compiling.tokens_per_s == 4.0          # nothing else ran: the steps it has


class CountingLoader:
    """``loader``'s batches, counting those handed out (``taken``); not resumable."""

    def __init__(self, loader: DataLoader):
        self.loader, self.taken = loader, 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            self.taken += 1
            yield batch


def test_fit_prefetches_one_batch_to_the_device_in_loader_order():
    """The step sees the loader's batches in order, each already a device array, and the
    next batch is taken from the loader before the step on the current one is called."""
    loader = CountingLoader(make_loader(num_workers=2))
    seen, taken = [], []

    def step(state, batch):
        assert all(isinstance(x, jax.Array) for x in batch.values())
        seen.append(np.asarray(batch["x"]))
        taken.append(loader.taken)
        return state, {"loss": jnp.float32(0.0), "tokens": jnp.float32(batch["x"].shape[0])}

    state, _ = start()
    result = fit(state, step, loader, FitConfig(epochs=2, log_every=5))
    reference = make_loader()
    expected = [b["x"] for b in reference] + [b["x"] for b in reference]   # epochs 0 and 1
    assert result.progress.epoch == 2 and len(seen) == len(expected) == 2 * 12
    for got, want in zip(seen, expected):
        np.testing.assert_array_equal(got, want)
    per_epoch = [min(k + 1, 12) for k in range(1, 13)]   # one ahead, none past the epoch
    assert taken == per_epoch + [12 + k for k in per_epoch]


def test_a_stop_mid_epoch_hands_the_prefetched_batch_back():
    loader = make_loader(num_workers=2)
    state, step = start()
    fit(state, step, loader, FitConfig(max_steps=5, log_every=2))
    assert loader.state_dict()["position"] == 5 and loader.state_dict()["epoch"] == 0


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_run_stopped_mid_epoch_resumes_to_the_uninterrupted_result(tmp_path, num_workers):
    """Stopped at step 5 of 12 (its checkpoint saved with batch 6 already prefetched), then
    resumed to step 30 across two epoch ends: the same batches, the same parameters."""
    def run(save_dir, max_steps, resume=False):
        state, step = start(optax.adam(0.1))
        manager = RunDir(save_dir).checkpoint_manager(max_to_keep=2)
        config = FitConfig(max_steps=max_steps, save_every=4, log_every=3, resume=resume)
        result = fit(state, step, make_loader(num_workers=num_workers), config,
                     checkpoints=manager)
        manager.close()
        return result

    whole = run(tmp_path / "whole", 30)
    cut = run(tmp_path / "cut", 5)
    assert cut.progress.step == 5 and cut.progress.position == 5
    resumed = run(tmp_path / "cut", 30, resume=True)
    assert resumed.progress.step == 30 and resumed.progress.epoch == whole.progress.epoch == 2
    assert resumed.progress.data_crc32 == whole.progress.data_crc32
    np.testing.assert_allclose(resumed.state.params["w"], whole.state.params["w"], atol=1e-6)
