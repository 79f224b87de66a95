"""Continuous batching: a fixed number of slots in one compiled KV cache, a request joining while
the others decode (the prefill / insert / generate design of JAX inference servers).

The cache is ``init_cache(slots, context)`` of a ``DecoderLM``: row b is slot b. Each slot
writes at its own next column (``decode_logits_own_slots``), so slots start at different
times. A request's choice (one of its ``n``) is a ``Job``:

* **prefill + insert** (``_insert``): its prompt but the last token, right-padded to the
  smallest prefill bucket that holds it, is run through ``prefill`` on a one-row cache of that
  width, then copied into the free slot's row (keys, values, validity; the columns after it
  marked empty), with the slot's next column at the prompt's length less one;
* **generate** (``_decode``): one token for every slot up to the last busy one: the last
  prompt token (or the token just generated) in, a token out per slot, by argmax or by a draw
  with the choice's own key (``textkit.decoding.draws``: seed, prompt index and choice index
  folded in, then the slot's step), with the raw log-probabilities of the chosen token and its
  20 best alternatives;
* a slot whose job ended (EOS, its length, a stop string, a cancel) is free at once; the next
  waiting job is inserted before the next step (``inserts_per_step`` jobs per step).

A step decodes only the first rows of the cache, up to the last busy slot (``_decode``, one
program per row count 2, 4, 8, ... up to the slots; a new job takes the lowest free slot), so a
lone request does not pay for the idle slots. Every shape is fixed: ``_decode`` compiles once
per row count and ``_insert`` once per bucket, all in ``warm_up``; nothing compiles while
serving. Row b's attention sees only its own valid columns, so a job's greedy tokens equal
``Generator`` on that prompt alone, and its sampled tokens depend on its seed only, not on the
other slots.

The engine runs in a thread of its own (``start``); ``submit`` queues jobs (bounded:
``QueueFull``), each job's events go to its ``emit`` callable (called from the engine's
thread), ``Job.cancel`` frees its slot at the next step.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from textkit.decoding.contract import PyTree
from textkit.decoding.draws import (
    chosen_logprobs,
    draw,
    kept_rows,
    row_keys,
    seed_value,
    step_keys,
)

__all__ = ["TOP_LOGPROBS", "Engine", "EngineStopped", "Event", "Job", "QueueFull", "Sampling"]

logger = logging.getLogger("textkit.serve")

TOP_LOGPROBS = 20
"""Alternatives computed at every step (the most a request may ask for)."""
RATE_WINDOW = 10.0
"""Seconds over which ``Engine.tokens_per_second`` counts."""


class QueueFull(Exception):
    """The engine's queue has no room for a request's jobs."""


class EngineStopped(Exception):
    """The engine is stopping, or stopped on an error (``Engine.failure``): it takes no
    jobs."""


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How one job generates: ``max_new_tokens``; greedy unless ``do_sample`` (then
    ``temperature`` > 0, ``top_k`` (0: none), ``top_p``); ``seed`` with ``prompt_index`` and
    ``choice`` name the job's key; ``stop``: strings that end it (not part of its text);
    ``eos_ids``: ids that end it."""

    max_new_tokens: int
    eos_ids: tuple[int, ...]
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    prompt_index: int = 0
    choice: int = 0
    stop: tuple[str, ...] = ()


class Event(NamedTuple):
    """What one step gave a job: ``text`` (the new text; held back while it may be the start
    of a stop string), ``token_id`` and its raw ``logprob``, ``top`` (the 20 best
    ``(id, log-probability)``), ``finish_reason`` (None while running; "eos", "length", "stop"
    or "cancelled")."""

    text: str
    token_id: int | None
    logprob: float | None
    top: list[tuple[int, float]]
    finish_reason: str | None


@dataclasses.dataclass(eq=False)
class Job:
    """One choice of one request: prompt ``ids`` (at least one), its ``sampling``, and
    ``emit`` (called with each ``Event``, from the engine's thread)."""

    ids: list[int]
    sampling: Sampling
    emit: Callable[[Event], None]
    cancelled: bool = False
    generated: list[int] = dataclasses.field(default_factory=list)

    def cancel(self) -> None:
        """End the job at the engine's next step (its slot freed, a "cancelled" event)."""
        self.cancelled = True


def _buckets(context: int, smallest: int) -> tuple[int, ...]:
    """Prefill widths: ``smallest``, twice that, ... and ``context`` (holds any prompt)."""
    widths, width = [], smallest
    while width < context:
        widths.append(width)
        width *= 2
    return (*widths, context)


@functools.partial(jax.jit, static_argnames=("model",), donate_argnames=("cache",))
def _insert(model: Any, params: PyTree, cache: PyTree, tokens: jax.Array, mask: jax.Array,
            slot: jax.Array) -> PyTree:
    """Prefill tokens int32[1, W] (mask bool[1, W], real tokens first) on a one-row cache of
    W columns and copy it into row ``slot`` int32[] of ``cache``: keys and values of its
    columns (zero at padding), validity (the rest of the row empty), position and next column
    at the prompt's length."""
    width = tokens.shape[1]
    one = model.apply({"params": params}, 1, width, method="init_cache")
    one = model.apply({"params": params}, one, tokens, mask, method="prefill")
    real = mask[:, None, :, None]                                               # [1,1,W,1]
    layers = tuple(
        {name: lax.dynamic_update_slice(full[name], jnp.where(real, part[name], 0)
                                        .astype(full[name].dtype), (slot, 0, 0, 0))
         for name in ("key", "value")}
        for full, part in zip(cache["layers"], one["layers"]))
    row = jnp.zeros((1, cache["valid"].shape[1]), bool).at[:, :width].set(mask)
    length = mask.sum().astype(jnp.int32)
    return {"layers": layers,
            "valid": lax.dynamic_update_slice(cache["valid"], row, (slot, 0)),
            "position": cache["position"].at[slot].set(length),
            "index": cache["index"].at[slot].set(length)}


class _Slots(NamedTuple):
    """Per-slot inputs of one ``_decode`` step (host arrays, leading axis: slots)."""

    last: np.ndarray         # int32: the token fed in
    active: np.ndarray       # bool
    steps: np.ndarray        # int32: tokens the slot's job has generated
    seeds: np.ndarray        # uint32
    pairs: np.ndarray        # int32[slots, 2]: (prompt index, choice)
    do_sample: np.ndarray    # bool
    temperature: np.ndarray  # float32
    top_k: np.ndarray        # int32
    top_p: np.ndarray        # float32


def _row_buckets(slots: int) -> tuple[int, ...]:
    """The row counts ``_decode`` is compiled for: 2, 4, 8, ... below ``slots``, and ``slots``
    (no single row: XLA:CPU copied the whole cache around a one-row step, which made it slower
    than two rows)."""
    rows, count = [], 2
    while count < slots:
        rows.append(count)
        count *= 2
    return (*rows, slots)


@functools.partial(jax.jit, static_argnames=("model", "rows"), donate_argnames=("cache",))
def _decode(model: Any, params: PyTree, cache: PyTree, slots: _Slots, rows: int
            ) -> tuple[PyTree, _Slots, jax.Array, jax.Array, jax.Array, jax.Array]:
    """``_decode_rows`` on the first ``rows`` slots (the later ones hold no job), written back
    into the whole cache: of each row's keys and values only the column it wrote, so a step
    costs what its rows cost, not what every slot would. (cache, slots' next inputs [S],
    token int32[rows], log-prob float32[rows], ids int32[rows, 20], log-probs [rows, 20])."""
    if rows == slots.active.shape[0]:
        return _decode_rows(model, params, cache, slots)
    head = functools.partial(jax.tree.map, lambda x: x[:rows])
    part, following, *outputs = _decode_rows(model, params, head(cache), head(slots))
    r = jnp.arange(rows)
    written = jnp.where(slots.active[:rows], cache["index"][:rows], 0)          # [rows]
    layers = tuple({name: full[name].at[r, :, written].set(new[name][r, :, written])
                    for name in ("key", "value")}          # [slots, KV, context, Dh] each
                   for full, new in zip(cache["layers"], part["layers"]))
    merged = {"layers": layers, **{name: cache[name].at[:rows].set(part[name])
                                   for name in ("valid", "position", "index")}}
    following = jax.tree.map(lambda whole, head: whole.at[:rows].set(head), slots, following)
    return merged, following, *outputs


def _decode_rows(model: Any, params: PyTree, cache: PyTree, slots: _Slots
                 ) -> tuple[PyTree, _Slots, jax.Array, jax.Array, jax.Array, jax.Array]:
    """One token for every row B of ``cache`` and ``slots``: (cache, the slots' next inputs
    (``last`` the new token, ``steps`` one on), token int32[B], its raw log-prob float32[B], the
    ``TOP_LOGPROBS`` best ids int32[B, 20] and log-probs float32[B, 20]). Idle slots write at
    column 0 of their own row (reset by the next insert) and do not advance."""
    active = slots.active
    index = jnp.where(active, cache["index"], 0)
    logits, new = model.apply({"params": params}, {**cache, "index": index}, slots.last,
                              method="decode_logits_own_slots")
    raw = logits.astype(jnp.float32)                                            # [B, V]
    greedy = jnp.argmax(raw, axis=-1).astype(jnp.int32)

    def sampled() -> jax.Array:
        scaled = raw / slots.temperature[:, None]
        keys = step_keys(row_keys(slots.seeds, slots.pairs), slots.steps)
        token = draw(keys, scaled, kept_rows(scaled, slots.top_k, slots.top_p))
        return jnp.where(slots.do_sample, token, greedy)

    token = lax.cond(jnp.any(slots.do_sample & active), sampled, lambda: greedy)
    chosen, ids, values = chosen_logprobs(raw, token, TOP_LOGPROBS)
    new = {**new, "index": jnp.where(active, new["index"], 0),
           "position": jnp.where(active, new["position"], cache["position"])}
    following = slots._replace(last=jnp.where(active, token, slots.last),
                               steps=slots.steps + active.astype(jnp.int32))
    return new, following, token, chosen, ids, values


class _Running:
    """A job in a slot: its text so far (``TextStream``) and what was emitted."""

    def __init__(self, job: Job, stream: Any):
        self.job, self.stream = job, stream
        self.text = ""          # all decoded text
        self.sent = 0           # characters of ``text`` emitted


class Engine:
    """Continuous batching over a decoder-only LM (module docstring).

    ``model`` / ``params`` / ``tokenizer``: a ``load_pretrained`` "causal_lm" result's.
    ``slots``: requests decoded together. ``context``: cache columns per slot (a job's prompt
    plus its new tokens fit in it; default the model's ``max_positions``). ``max_queue``: jobs
    waiting for a slot before ``submit`` raises ``QueueFull``. ``quantize="int8"``: int8
    weights (as ``Generator``'s). ``smallest_prefill``: the narrowest prefill bucket (then
    doubling up to ``context``: one compiled program each). ``inserts_per_step``: waiting jobs
    prefilled between two steps (1: requests arriving together get their first tokens one
    step apart, the first after one prefill, not all after every prefill)."""

    def __init__(self, model: Any, params: PyTree, tokenizer: Any, *, slots: int = 8,
                 context: int | None = None, max_queue: int = 64,
                 quantize: str | None = None, smallest_prefill: int = 8,
                 inserts_per_step: int = 1):
        limit = model.config.max_positions
        context = context or limit
        if context is None or context < 2:
            raise ValueError("the engine needs a context of at least 2 columns (the model "
                             "names no max_positions: pass context)")
        if limit is not None and context > limit:
            raise ValueError(f"context={context} exceeds the model's {limit} positions")
        if min(slots, max_queue, inserts_per_step) < 1:
            raise ValueError(f"slots={slots}, max_queue={max_queue} and inserts_per_step="
                             f"{inserts_per_step}: expected >= 1 each")
        if quantize not in (None, "int8"):
            raise ValueError(f"quantize={quantize!r}; expected None or 'int8'")
        if quantize == "int8":
            from textkit.models.kernels import (
                int8_carrier,
                quantize_int8,
                require_int8_backend,
            )

            require_int8_backend()
            params = quantize_int8(model, params, jnp.zeros((1, 8), jnp.int32),
                                   carrier=int8_carrier(slots))
        self.model, self.params, self.tokenizer = model, params, tokenizer
        self.slots, self.context, self.max_queue = slots, context, max_queue
        self.inserts_per_step = inserts_per_step
        self.buckets = _buckets(context, smallest_prefill)
        self.pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
        cache = model.apply({"params": params}, slots, context, method="init_cache")
        if set(cache) != {"layers", "valid", "position", "index"} or any(
                set(layer) != {"key", "value"} for layer in cache["layers"]):
            raise ValueError(f"{type(model).__name__}'s cache is not a DecoderLM's (layers of "
                             f"keys and values, valid, position, index): the engine serves "
                             f"decoder-only models")
        self.row_buckets = _row_buckets(slots)
        self._cache = jax.tree.map(jnp.copy, cache)  # a buffer per leaf: they are donated
        self._host = _Slots(
            last=np.zeros(slots, np.int32), active=np.zeros(slots, bool),
            steps=np.zeros(slots, np.int32), seeds=np.zeros(slots, np.uint32),
            pairs=np.zeros((slots, 2), np.int32), do_sample=np.zeros(slots, bool),
            temperature=np.ones(slots, np.float32), top_k=np.zeros(slots, np.int32),
            top_p=np.ones(slots, np.float32))
        self._device: _Slots | None = None    # the host arrays on the device, while current
        self._running: list[_Running | None] = [None] * slots
        self._queue: deque[Job] = deque()
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.failure: str | None = None   # why the loop stopped on an error
        self.generated_tokens = 0      # counters read by the metrics
        self.finished_jobs = 0
        self._recent: deque[tuple[float, int]] = deque()   # (time, tokens) of recent steps

    # ------------------------------------------------------------------ state for callers
    @property
    def queue_depth(self) -> int:
        """Jobs waiting for a slot."""
        return len(self._queue)

    @property
    def active_slots(self) -> int:
        """Slots holding a job."""
        return sum(r is not None for r in self._running)

    @property
    def tokens_per_second(self) -> float:
        """Tokens generated per second over the last ``RATE_WINDOW`` seconds."""
        now = time.monotonic()
        recent = [(t, n) for t, n in list(self._recent) if now - t <= RATE_WINDOW]
        return sum(n for _, n in recent) / RATE_WINDOW

    @property
    def busy(self) -> bool:
        """Jobs waiting or running."""
        return bool(self._queue) or self.active_slots > 0

    def check(self, prompt_length: int, max_new_tokens: int) -> str | None:
        """Why a job of this size cannot run (None: it can): its prompt plus its new tokens
        must fit the ``context``."""
        if prompt_length < 1:
            return "the prompt is empty"
        if prompt_length + max_new_tokens > self.context:
            return (f"the prompt has {prompt_length} tokens and {max_new_tokens} new tokens "
                    f"were asked for; the context is {self.context} tokens")
        return None

    # ------------------------------------------------------------------------- the loop
    def warm_up(self) -> None:
        """Compile every program the engine runs (``_insert`` per bucket, ``_decode``), so
        that serving compiles nothing; leaves every slot free."""
        for width in self.buckets:
            tokens = np.full((1, width), self.pad_id, np.int32)
            self._cache = _insert(self.model, self.params, self._cache, jnp.asarray(tokens),
                                  jnp.zeros((1, width), bool), jnp.int32(0))
        for rows in self.row_buckets:
            self._cache, *_ = _decode(self.model, self.params, self._cache, self._upload(),
                                      rows)
        jax.block_until_ready(self._cache)

    def submit(self, jobs: Sequence[Job]) -> None:
        """Queue ``jobs`` (a request's choices, all or none): ``QueueFull`` when the queue
        has no room for them, ``ValueError`` when one cannot fit (``check``)."""
        for job in jobs:
            problem = self.check(len(job.ids), job.sampling.max_new_tokens)
            if problem:
                raise ValueError(problem)
        with self._lock:
            if self._stopping:
                raise EngineStopped(self.failure or "the engine is stopping")
            if any(job.cancelled for job in self._queue):    # their clients left
                self._drop_cancelled()
            if len(self._queue) + len(jobs) > self.max_queue:
                raise QueueFull(f"{len(self._queue)} jobs wait for a slot (at most "
                                f"{self.max_queue})")
            self._queue.extend(jobs)
            self._lock.notify()

    def start(self) -> None:
        """Run the loop in a daemon thread until ``stop``."""
        self._thread = threading.Thread(target=self._loop, name="textkit-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the loop (jobs still queued or running get a "cancelled" event)."""
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and not self._queue and not self.active_slots:
                    self._lock.wait()
                if self._stopping:
                    break
            try:
                self.step()
            except Exception as err:   # the cache may be gone with it: stop, say why
                logger.exception("the engine stopped on an error")
                with self._lock:
                    self._stopping = True
                    self.failure = f"the engine stopped on an error: {err!r}"
                break
        for job in [*self._queue, *(r.job for r in self._running if r is not None)]:
            job.emit(Event("", None, None, [], "cancelled"))
        self._queue.clear()

    def step(self) -> None:
        """Free cancelled slots, insert up to ``inserts_per_step`` waiting jobs into free
        slots, then generate one token in every busy slot and hand each job its ``Event``."""
        for slot, running in enumerate(self._running):
            if running is not None and running.job.cancelled:
                self._free(slot, Event("", None, None, [], "cancelled"), running)
        free = [slot for slot in range(self.slots) if self._running[slot] is None]
        for slot in free[:self.inserts_per_step]:
            job = self._next_job()
            if job is None:
                break
            self._start_job(slot, job)
        if not self.active_slots:
            return
        if self._device is None:       # a slot was filled or freed: the inputs anew
            self._device = self._upload()
        last = max(slot for slot, running in enumerate(self._running) if running is not None)
        rows = next(rows for rows in self.row_buckets if rows > last)
        self._cache, self._device, tokens, chosen, ids, values = _decode(
            self.model, self.params, self._cache, self._device, rows)
        tokens, chosen = np.asarray(tokens), np.asarray(chosen)
        ids, values = np.asarray(ids), np.asarray(values)
        now = time.monotonic()
        self._recent.append((now, self.active_slots))
        while self._recent and now - self._recent[0][0] > RATE_WINDOW:
            self._recent.popleft()
        for slot, running in enumerate(self._running):
            if running is not None:
                self._advance(slot, running, int(tokens[slot]), float(chosen[slot]),
                              list(zip(ids[slot].tolist(), values[slot].tolist())))

    def _upload(self) -> _Slots:
        """The host's slot inputs as device arrays (copies: the host's change later)."""
        return _Slots(*map(jnp.array, self._host))

    def _drop_cancelled(self) -> None:
        """Take the cancelled jobs out of the queue (under the lock), each told so."""
        for job in [job for job in self._queue if job.cancelled]:
            self._queue.remove(job)
            job.emit(Event("", None, None, [], "cancelled"))

    def _next_job(self) -> Job | None:
        with self._lock:
            while self._queue:
                job = self._queue.popleft()
                if not job.cancelled:
                    return job
                job.emit(Event("", None, None, [], "cancelled"))
        return None

    def _start_job(self, slot: int, job: Job) -> None:
        prefix = job.ids[:-1]
        width = next(w for w in self.buckets if w >= len(prefix))
        tokens = np.full((1, width), self.pad_id, np.int32)
        tokens[0, :len(prefix)] = prefix
        mask = np.arange(width)[None] < len(prefix)
        self._cache = _insert(self.model, self.params, self._cache, jnp.asarray(tokens),
                              jnp.asarray(mask), jnp.int32(slot))
        s = job.sampling
        h = self._host
        h.last[slot], h.active[slot], h.steps[slot] = job.ids[-1], True, 0
        h.seeds[slot], h.pairs[slot] = seed_value(s.seed), (s.prompt_index, s.choice)
        h.do_sample[slot], h.temperature[slot] = s.do_sample, s.temperature
        h.top_k[slot], h.top_p[slot] = s.top_k, s.top_p
        self._running[slot] = _Running(job, self.tokenizer.stream())
        self._device = None

    def _free(self, slot: int, event: Event, running: _Running) -> None:
        self._running[slot] = None
        self._host.active[slot] = False
        self._device = None
        self.finished_jobs += 1
        running.job.emit(event)

    def _advance(self, slot: int, running: _Running, token: int, logprob: float,
                 top: list[tuple[int, float]]) -> None:
        """Take slot ``slot``'s new ``token``: its text, and whether the job ended."""
        job, s = running.job, running.job.sampling
        job.generated.append(token)
        self.generated_tokens += 1
        self._host.last[slot] = token
        self._host.steps[slot] += 1
        running.text += running.stream.push([token])
        reason = None
        if token in s.eos_ids:
            reason = "eos"
        elif len(job.generated) >= s.max_new_tokens:
            reason = "length"
        if reason:
            running.text += running.stream.flush()
        ends = [(running.text.find(t, max(0, running.sent - len(t))), t) for t in s.stop]
        found = [(at, t) for at, t in ends if at >= 0]
        if found:
            reason, end = "stop", min(found)[0]
        elif reason:
            end = len(running.text)
        else:   # keep back what may be the start of a stop string
            hold = max((len(t) - 1 for t in s.stop), default=0)
            end = max(running.sent, len(running.text) - hold)
        event = Event(running.text[running.sent:end], token, logprob, top, reason)
        running.sent = end
        if reason:
            self._free(slot, event, running)
        else:
            job.emit(event)
