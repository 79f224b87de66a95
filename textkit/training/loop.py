"""``fit``: the one training program every task and recipe runs.

It owns the step loop (by steps or by epochs), the logging cadence (a tqdm bar with loss,
tokens/s and learning rate), evaluation and checkpoint cadence, the time budget (process 0
decides, every process follows), resume (train state, loop progress and the sampler's
position), the stop on a non-finite loss, throughput and compile counting, and a hook for
per-epoch work (e.g. a learning-rate decay on a validation plateau).

Its settings are one frozen ``FitConfig`` (each field a recipe flag); what differs between
tasks comes in as callables: the compiled ``train_step`` (with or without a recurrent carry),
the loader, ``evaluate(state) -> metrics``, ``to_device`` (the global batch of a multi-device
run) and ``count_tokens``. Every process must call ``fit`` with the same arguments: evaluation,
checkpoint saves and the budget decision are collective.
"""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

from textkit import parallel
from textkit.errors import ConfigError
from textkit.lookahead import one_ahead
from textkit.settings import flag
from textkit.training.checkpoint import CheckpointManager

__all__ = ["FitConfig", "FitResult", "Progress", "fit"]

# consecutive non-finite steps tolerated while a loss scale is in use (each one halves it)
_MAX_SKIPPED_STEPS = 32


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """How long ``fit`` trains and how often it logs, evaluates and saves. Each field is the
    recipe flag of the same name (``max_steps`` is ``--max-steps``)."""

    max_steps: int | None = flag(None, "train this many steps (overrides --epochs)",
                                 group="training")
    epochs: int | None = flag(None, "passes over the training data", group="training")
    time_budget_min: float | None = flag(
        None, "stop after this many minutes of training (evaluation excluded), then evaluate "
        "and test as at the end", group="training")
    log_every: int = flag(20, "steps between progress updates (loss, tokens/s, learning rate; "
                          "the time budget and non-finite losses are checked there)",
                          group="training")
    eval_every: int = flag(0, "steps between evaluations + checkpoints (0: at epoch ends / "
                           "the end only)", group="evaluation")
    save_every: int = flag(0, "steps between extra checkpoints without evaluation (0: none)",
                           group="output")
    eval_each_epoch: bool = flag(False, "evaluate (and save) after every epoch",
                                 group="evaluation")
    resume: bool = flag(False, "continue from the latest checkpoint of the run directory",
                        group="output")
    progress: bool = flag(True, "show the progress bar (process 0)", group="output")

    def __post_init__(self):
        if self.max_steps is None and self.epochs is None:
            raise ConfigError("give --max-steps or --epochs")
        for name in ("max_steps", "epochs", "log_every"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        for name in ("eval_every", "save_every"):
            if getattr(self, name) < 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 0 (0: never), got "
                                  f"{getattr(self, name)}")
        if self.time_budget_min is not None and not self.time_budget_min > 0:
            raise ConfigError(f"--time-budget-min must be > 0, got {self.time_budget_min}")

    @property
    def by_steps(self) -> bool:
        """True when ``max_steps`` ends the run (it wins over ``epochs``)."""
        return self.max_steps is not None


@dataclasses.dataclass
class Progress:
    """Loop bookkeeping saved with every checkpoint (plain JSON), so a resumed run goes on
    counting where the first one stopped."""

    step: int = 0
    epoch: int = 0             # completed epochs
    position: int = 0          # batches consumed in the current epoch
    train_s: float = 0.0       # training time, evaluation excluded
    compile_s: float = 0.0     # the first step of every segment (trace + compile)
    tokens: float = 0.0        # counted tokens (``count_tokens``) of every step
    compile_tokens: float = 0.0  # those of the steps timed in compile_s
    data_crc32: int = 0        # running checksum of every batch fed, in order
    last_loss: float | None = None
    skipped_steps: int = 0     # consecutive non-finite (loss-scale skip) steps
    skipped_total: int = 0     # every loss-scale skip
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        """Counted tokens per second of training, compilation excluded (the steps timed in
        ``compile_s`` and their tokens left out; a run with no other step counts them)."""
        steady_s = self.train_s - self.compile_s
        if steady_s <= 0 or self.tokens <= self.compile_tokens:
            return self.tokens / max(self.train_s, 1e-9)
        return (self.tokens - self.compile_tokens) / steady_s

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Progress:
        return cls(**{f.name: value[f.name] for f in dataclasses.fields(cls) if f.name in value})


@dataclasses.dataclass
class FitResult:
    """The trained state, the loop's ``Progress``, why it stopped (``"steps"``, ``"epochs"``
    or ``"time_budget"``) and how many programs XLA compiled for the train step."""

    state: Any
    progress: Progress
    stopped_by: str
    num_compiles: int | None


@dataclasses.dataclass
class _Loop:
    """The arguments of ``fit`` and the running counters between two log points."""

    config: FitConfig
    train_step: Callable
    loader: Any
    evaluate: Callable[[Any], Mapping[str, Any]] | None
    checkpoints: CheckpointManager | None
    to_device: Callable[[Any], Any]
    initial_carry: Callable[[], Any] | None
    count_tokens: Callable[[Mapping[str, Any]], Any]
    on_epoch_end: Callable[[Any, dict[str, Any], list[dict[str, Any]]], Any] | None
    learning_rate: Callable[[Any], float] | None
    log: Callable[[str], None]
    writers: Sequence[Any] = ()
    progress: Progress = dataclasses.field(default_factory=Progress)
    window: list[tuple[Any, Any, Any]] = dataclasses.field(default_factory=list)
    window_start: float = 0.0
    segment_start: float = 0.0
    out_of_time: bool = False
    compiled: bool = False     # the first step (trace + compile) has been timed
    rate_origin: tuple[int, float] | None = None   # (step, training seconds) after compiling
    shapes: set[tuple] = dataclasses.field(default_factory=set)  # batch shapes compiled for
    window_stats: dict[str, float] = dataclasses.field(default_factory=dict)
    place: Callable[[Any], Any] = lambda state: state
    # the loader's state after the last batch stepped on, while an epoch runs (a batch
    # prefetched after it is not consumed yet); None between epochs
    sampler_state: dict[str, Any] | None = None

    @property
    def max_steps(self) -> int | None:
        return self.config.max_steps

    @property
    def epochs(self) -> int | None:
        return None if self.config.by_steps else self.config.epochs

    @property
    def time_budget_s(self) -> float | None:
        budget = self.config.time_budget_min
        return None if budget is None else 60.0 * budget

    @property
    def eval_due(self) -> bool:
        every = self.config.eval_every
        return bool(every) and self.progress.step % every == 0

    @property
    def done(self) -> bool:
        if self.out_of_time:
            return True
        if self.max_steps is not None:
            return self.progress.step >= self.max_steps
        return self.progress.epoch >= self.epochs

    @property
    def total_steps(self) -> int:
        return self.max_steps if self.max_steps is not None else self.epochs * len(self.loader)

    def elapsed(self) -> float:
        """Training seconds so far (this segment included)."""
        return self.progress.train_s + time.perf_counter() - self.segment_start

    def planned_steps(self) -> int | None:
        """The step at which training will end: ``max_steps``, ``epochs`` worth of steps, or
        with a time budget the steps the measured rate fits into the time left."""
        planned = self.max_steps if self.max_steps is not None else (
            self.epochs * len(self.loader) if self.epochs is not None else None)
        if self.time_budget_s is None or self.rate_origin is None:
            return planned
        origin_step, origin_s = self.rate_origin
        spent = self.elapsed() - origin_s
        if self.progress.step <= origin_step or spent <= 0:
            return planned
        rate = (self.progress.step - origin_step) / spent
        by_time = self.progress.step + int(rate * max(self.time_budget_s - self.elapsed(), 0.0))
        return by_time if planned is None else min(planned, by_time)

    def restart_clock(self) -> None:
        self.window_start = self.segment_start = time.perf_counter()

    def stop_clock(self, state: Any) -> None:
        jax.block_until_ready(state)
        self.progress.train_s += time.perf_counter() - self.segment_start

    def read_window(self) -> float:
        """Fetch the losses and token counts since the last read; stop on a non-finite loss or
        gradient (a loss-scaling skip is counted and logged instead, unless too many come in a
        row); return the window's token count."""
        if not self.window:
            return 0.0
        steps = [step for step, _, _ in self.window]
        losses, norms, scales, tokens = (np.asarray(jax.device_get(x), np.float64) for x in zip(
            *((m["loss"], m.get("grad_norm", 0.0), m.get("loss_scale", 1.0), t)
              for _, m, t in self.window)))
        self.window.clear()
        skipped = []
        for step, loss, norm, scale in zip(steps, losses, norms, scales):
            if math.isfinite(loss) and math.isfinite(norm):
                self.progress.skipped_steps = 0
                continue
            self.progress.skipped_steps += 1
            if scale == 1.0 or self.progress.skipped_steps > _MAX_SKIPPED_STEPS:
                raise FloatingPointError(self.non_finite_message(step, loss, norm, scale))
            skipped.append(step)
        if skipped:
            self.progress.skipped_total += len(skipped)
            self.log(f"loss scaling skipped {len(skipped)} step(s) with non-finite gradients "
                     f"({skipped}; {self.progress.skipped_total} in all)")
        self.progress.last_loss = float(losses[-1])
        total = float(tokens.sum())
        self.progress.tokens += total
        good = np.isfinite(losses) & np.isfinite(norms)
        self.window_stats = {"loss": float(losses[good].mean()) if good.any() else math.nan,
                             "grad_norm": float(norms[good][-1]) if good.any() else math.nan}
        if np.any(scales != 1.0):               # under loss scaling (float16)
            self.window_stats.update(loss_scale=float(scales[-1]),
                                     skipped_steps=float(self.progress.skipped_total))
        return total

    def non_finite_message(self, step: int, loss: float, norm: float, scale: float) -> str:
        latest = self.checkpoints.latest_step() if self.checkpoints is not None else None
        saved = ("no checkpoint was saved" if latest is None else
                 f"the last good checkpoint is step {latest} in {self.checkpoints.directory}")
        skips = ("" if scale == 1.0 else
                 f" after {self.progress.skipped_steps} loss-scale skips in a row")
        return (f"training stopped at step {step}: loss {loss}, gradient norm {norm}{skips} "
                f"(lower the learning rate, check the inputs, or use another precision); "
                f"{saved}")


def fit(
    state: Any,
    train_step: Callable,
    loader: Any,
    config: FitConfig,
    *,
    evaluate: Callable[[Any], Mapping[str, Any]] | None = None,
    checkpoints: CheckpointManager | None = None,
    place: Callable[[Any], Any] = lambda state: state,
    to_device: Callable[[Any], Any] = lambda batch: batch,
    initial_carry: Callable[[], Any] | None = None,
    count_tokens: Callable[[Mapping[str, Any]], Any] = lambda metrics: metrics["tokens"],
    on_epoch_end: Callable[[Any, dict[str, Any], list[dict[str, Any]]], Any] | None = None,
    learning_rate: Callable[[Any], float] | None = None,
    log: Callable[[str], None] | None = None,
    writers: Sequence[Any] = (),
    desc: str = "train",
) -> FitResult:
    """Train ``state`` with ``train_step`` over ``loader`` as ``config`` says: until
    ``max_steps`` steps (or ``epochs`` epochs), the time budget, or a non-finite loss
    (``FloatingPointError``).

    ``train_step(state, batch) -> (state, metrics)``, or with ``initial_carry`` (called at the
    start of every epoch) ``train_step(state, batch, carry) -> (state, carry, metrics)``;
    ``metrics`` holds ``loss`` (and ``loss_scale`` under loss scaling). ``loader`` is iterable
    once per epoch, has ``len``, and with ``state_dict``/``load_state_dict`` resumes mid-epoch
    (otherwise a run resumed mid-epoch starts the next epoch). Each batch is placed
    (``to_device``, then its numpy arrays with the step's ``batch_sharding``) while the step
    before it runs; checkpoints count it as consumed only once stepped on, and a run that stops
    mid-epoch hands it back to the loader.

    ``evaluate(state) -> {name: value}`` runs every ``config.eval_every`` steps, after each
    epoch when ``config.eval_each_epoch``, and at the end; each result is a
    ``Progress.history`` record (with ``step`` and ``epoch``), then a checkpoint is saved
    (ranked by the manager's ``best_metric``); ``config.save_every`` saves without evaluating.
    ``on_epoch_end(state, record, history) -> state`` runs after an end-of-epoch evaluation
    (``history``: the earlier records), before the save, and may add entries to ``record``.
    With ``config.resume`` the latest checkpoint is restored and passed through ``place``
    (device placement). The time budget counts training time only and is checked every
    ``config.log_every`` steps. ``learning_rate(state)`` feeds the progress bar; ``log``
    prints messages (default: process 0, through tqdm); ``desc`` names the bar.
    ``writers`` (``textkit.training.writers.MetricWriter``: ``metrics.jsonl``, TensorBoard,
    curves, your own) get a row at every log point (loss, learning rate, tokens/s, gradient
    norm, loss scale and skipped steps under loss scaling) and every evaluation.
    """
    main = parallel.is_main_process()
    loop = _Loop(config, train_step, loader, evaluate, checkpoints, to_device, initial_carry,
                 count_tokens, on_epoch_end, learning_rate,
                 log or (lambda message: main and tqdm.write(message)), writers)
    loop.place = place
    if config.resume and checkpoints is not None:
        if checkpoints.latest_step() is not None:
            state = place(_restore(loop, state))
        else:
            loop.log(f"--resume: no checkpoint in {checkpoints.directory} yet (the run stopped "
                     "before its first save, or never ran): training starts at step 0")
    for writer in writers:
        writer.start(loop.progress.step)
    state = _plan_schedule(loop, state)
    bar = tqdm(total=loop.total_steps, initial=min(loop.progress.step, loop.total_steps),
               unit="step", desc=desc, disable=not (main and config.progress),
               dynamic_ncols=True)
    loop.restart_clock()
    if initial_carry is None and hasattr(train_step, "precompile") and not loop.done:
        _precompile(loop, state)
    try:
        while not loop.done:
            state = _run_epoch(loop, state, bar)
    finally:
        bar.close()
        for writer in writers:
            writer.close()
    if checkpoints is not None:
        checkpoints.wait_until_finished()
    stopped_by = ("time_budget" if loop.out_of_time
                  else "steps" if config.by_steps else "epochs")
    return FitResult(state, loop.progress, stopped_by, getattr(train_step, "num_traces", None))


def _precompile(loop: _Loop, state: Any) -> None:
    """Compile the train step for every batch shape of the loader (``shape_batches``) at once,
    as training time (and in ``compile_s``, which runs to the end of the first step), before
    the first step; a run with fewer steps left than shapes cannot reach them all and compiles
    each shape when it first meets it instead (``_run_epoch`` times those steps as
    compilation)."""
    batches = getattr(loop.loader, "shape_batches", lambda: [])()
    remaining = loop.total_steps - loop.progress.step
    if len(batches) > 1 and remaining >= len(batches):
        start = time.perf_counter()
        placed = [_place(loop, batch) for batch in batches]
        loop.train_step.precompile(state, placed)
        loop.shapes.update(_batch_shape(batch) for batch in placed)
        loop.log(f"compiled the train step for {len(batches)} batch shapes in "
                 f"{time.perf_counter() - start:.1f}s")
    elif len(batches) > 1:
        loop.log(f"{remaining} steps left for {len(batches)} batch shapes: each shape is "
                 "compiled when the run first meets it")


def _batch_shape(batch: Any) -> tuple:
    """The shapes of a batch's arrays (what a compiled step is specialised to)."""
    return tuple(getattr(leaf, "shape", None) for leaf in jax.tree_util.tree_leaves(batch))


def _restore(loop: _Loop, state: Any) -> Any:
    state, extra = loop.checkpoints.restore("latest", state)
    loop.progress = Progress.from_dict(extra["progress"])
    if hasattr(loop.loader, "load_state_dict") and "sampler" in extra:
        loop.loader.load_state_dict(extra["sampler"])
    elif loop.progress.position:   # no resumable position: the partial epoch counts as done
        loop.progress.epoch, loop.progress.position = loop.progress.epoch + 1, 0
    loop.log(f"resumed from epoch {loop.progress.epoch}, step {loop.progress.step} of "
             f"{loop.checkpoints.directory}")
    return state


def _place(loop: _Loop, batch: Any) -> Any:
    """``batch`` as the step takes it: ``to_device(batch)`` (the global batch of a
    multi-device run), then every numpy array still on the host copied (asynchronously) with
    the step's ``batch_sharding``, or to the default device for a step without one."""
    sharding = getattr(loop.train_step, "batch_sharding", None)
    return jax.tree_util.tree_map(
        lambda x: jax.device_put(x, sharding) if isinstance(x, np.ndarray | np.generic) else x,
        loop.to_device(batch))


def _take(loop: _Loop, batch: Any) -> tuple[dict[str, Any] | None, Any]:
    """The loader's state right after it handed out ``batch`` (None: not resumable) and
    ``batch`` placed on the device (``_place``)."""
    sampler_state = loop.loader.state_dict() if hasattr(loop.loader, "state_dict") else None
    return sampler_state, _place(loop, batch)


def _run_epoch(loop: _Loop, state: Any, bar: tqdm) -> Any:
    """One pass over the loader (or what is left of it); returns the state.

    Batches are prefetched one ahead (``one_ahead``): batch n + 1 is taken from the loader and
    on its way to the device before step n is called. It is not consumed: checkpoints save the
    loader's state after batch n, and a run that stops before stepping on it hands it back
    (the loader is reset to that state)."""
    progress = loop.progress
    carry = loop.initial_carry() if loop.initial_carry is not None else None
    batches = one_ahead(loop.loader, lambda batch: _take(loop, batch))
    try:
        state = _run_batches(loop, state, bar, batches, carry)
    finally:
        batches.close()
        if (loop.sampler_state is not None and progress.position < len(loop.loader)
                and hasattr(loop.loader, "load_state_dict")):
            loop.loader.load_state_dict(loop.sampler_state)   # the prefetched batch goes back
        loop.sampler_state = None
    if loop.done:
        return state
    progress.epoch, progress.position = progress.epoch + 1, 0
    if loop.config.eval_each_epoch or loop.eval_due or loop.done:
        state = _evaluate_and_save(loop, state, epoch_end=True)
    return state


def _run_batches(loop: _Loop, state: Any, bar: tqdm, batches: Any, carry: Any) -> Any:
    """Step on ``batches`` (``(batch, (sampler state, placed batch))``) until they end or
    the run is done; returns the state."""
    progress = loop.progress
    for batch, (sampler_state, placed) in batches:
        loop.sampler_state = sampler_state
        progress.data_crc32 = _crc32(batch, progress.data_crc32)
        shape = _batch_shape(placed)
        compiling = loop.compiled and shape not in loop.shapes   # a shape met after the first
        loop.shapes.add(shape)
        if compiling:
            jax.block_until_ready(state)
            compile_start = time.perf_counter()
        if loop.initial_carry is not None:
            state, carry, metrics = loop.train_step(state, placed, carry)
        else:
            state, metrics = loop.train_step(state, placed)
        progress.step += 1
        progress.position += 1
        tokens = loop.count_tokens(metrics)
        loop.window.append((progress.step, metrics, tokens))
        bar.update(1)
        if compiling:   # its compilation is not training throughput
            jax.block_until_ready(metrics["loss"])
            progress.compile_s += time.perf_counter() - compile_start
            progress.compile_tokens += float(np.asarray(jax.device_get(tokens)))
        if not loop.compiled:
            jax.block_until_ready(metrics["loss"])
            progress.compile_s += time.perf_counter() - loop.segment_start
            progress.compile_tokens += float(np.asarray(jax.device_get(tokens)))
            loop.compiled = True
            loop.rate_origin = (progress.step, loop.elapsed())
        if progress.step % loop.config.log_every == 0 or loop.done:
            _log_point(loop, state, bar)
            state = _plan_schedule(loop, state)
        if loop.done or (loop.eval_due and progress.position < len(loop.loader)):
            state = _evaluate_and_save(loop, state, epoch_end=False)
        elif loop.config.save_every and progress.step % loop.config.save_every == 0:
            loop.stop_clock(state)   # saving is not training time
            _save(loop, state, {})
            loop.restart_clock()
        if loop.done:
            break
    return state


def _plan_schedule(loop: _Loop, state: Any) -> Any:
    """Tell a budget-aware schedule (``total_steps`` in the optimizer state) where training
    ends now; other optimizers are left alone."""
    current = optax.tree_utils.tree_get(state.opt_state, "total_steps")
    if current is None:
        return state
    planned = parallel.main_process_value(loop.planned_steps() or 0)  # one clock decides
    if not planned or int(current) == planned:
        return state
    opt_state = optax.tree_utils.tree_set(state.opt_state,
                                          total_steps=jnp.float32(max(planned, 1)))
    return loop.place(state.replace(opt_state=opt_state))


def _log_point(loop: _Loop, state: Any, bar: tqdm) -> None:
    tokens = loop.read_window()
    now = time.perf_counter()
    rate = tokens / max(now - loop.window_start, 1e-9)
    postfix = {"loss": f"{loop.progress.last_loss:.3f}", "tok_s": f"{rate:,.0f}"}
    row = {**loop.window_stats, "tokens_per_s": rate}
    if loop.learning_rate is not None:
        row["learning_rate"] = loop.learning_rate(state)
        postfix["lr"] = f"{row['learning_rate']:.3g}"
    bar.set_postfix(postfix)
    for writer in loop.writers:
        writer.write("train", loop.progress.step, loop.progress.epoch, row)
    loop.window_start = now
    elapsed = loop.progress.train_s + now - loop.segment_start
    if loop.time_budget_s is not None and parallel.main_process_decides(
            elapsed >= loop.time_budget_s):
        loop.out_of_time = True
        loop.log(f"time budget of {loop.time_budget_s / 60:g} min reached at step "
                 f"{loop.progress.step}")


def _evaluate_and_save(loop: _Loop, state: Any, *, epoch_end: bool) -> Any:
    """Evaluate, run the epoch hook, record, checkpoint; training time excludes all of it."""
    loop.stop_clock(state)
    loop.read_window()
    progress = loop.progress
    record: dict[str, Any] = {"step": progress.step, "epoch": progress.epoch,
                              "train_s": round(progress.train_s, 2)}
    if loop.evaluate is not None:
        record.update(loop.evaluate(state))
    if epoch_end and loop.on_epoch_end is not None:
        state = loop.on_epoch_end(state, record, progress.history)
    progress.history.append(record)
    for writer in loop.writers:
        writer.write("eval", progress.step, progress.epoch,
                     {k: v for k, v in record.items() if k not in ("step", "epoch")})
    loop.log(f"step {progress.step} (epoch {progress.epoch}): " + ", ".join(
        f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()
        if k not in ("step", "epoch")))
    evaluated = {k: v for k, v in record.items() if isinstance(v, int | float)}
    _save(loop, state, evaluated if loop.evaluate is not None else {})  # unranked: no scores
    loop.restart_clock()
    return state


def _save(loop: _Loop, state: Any, metrics: dict[str, Any]) -> None:
    """Checkpoint ``state`` with the loop's progress and the sampler's position (a save
    without metrics is not ranked for ``best``)."""
    if loop.checkpoints is None:
        return
    extra = {"progress": loop.progress.to_dict()}
    if loop.sampler_state is not None:
        extra["sampler"] = loop.sampler_state
    elif hasattr(loop.loader, "state_dict"):
        extra["sampler"] = loop.loader.state_dict()
    loop.checkpoints.save(loop.progress.step, state, extra=extra, metrics=metrics)


def _crc32(batch: Any, crc: int) -> int:
    """``crc`` updated with every numpy array of ``batch`` (a pytree), in key order."""
    for leaf in jax.tree_util.tree_leaves(batch):
        if isinstance(leaf, np.ndarray):
            crc = zlib.crc32(np.ascontiguousarray(leaf).tobytes(), crc)
    return crc
