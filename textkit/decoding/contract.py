"""The decoding contract: what a model offers a decoder, and what a decoder gives back.

Decoders never name a model class. They drive a model through ``apply`` (flax's
``model.apply({"params": params}, ..., method=name)``) and the methods of one of two protocols:

``Seq2SeqModel`` (Transformer, GNMT)::

    logits = model.apply(v, src_tokens, tgt_input)                       # f32 [B, T, V]
    encoded = model.apply(v, src_tokens, method="encode")                # Encoded
    cache = model.apply(v, encoded, src_tokens, max_length, method="init_cache")
    log_probs, cache = model.apply(v, cache, tokens, method="decode_step")  # f32 [B, V]

``LanguageModel`` (LSTM LM, AWD-LSTM LM, Transformer LM)::

    logits, state = model.apply(v, tokens, state)                        # f32 [B, T, V]
    state = model.initial_state(batch_size)                              # pytree or None
    cache = model.apply(v, batch_size, max_length, method="init_cache")
    log_probs, cache = model.apply(v, cache, tokens, method="decode_step")  # f32 [B, V]

What every conforming model guarantees (``tests/test_decoding_contract.py`` checks each
registered preset):

* ``decode_step`` fed ``tgt_input`` (or ``tokens``) one column at a time returns
  ``log_softmax`` of the teacher-forced forward logits at that column (float32), with dropout
  off; ``max_length`` bounds how many steps one cache takes.
* Every cache leaf has leading axis B; ``decode_step`` returns a cache of the same structure,
  and may return an unchanged leaf as the same object (beam search then skips reordering it).
* ``pad_id`` (the model config's) is padding: extra right padding of the source, or extra
  padded rows in the batch, leaves the real rows' outputs unchanged.

A decoder itself sees one function, ``StepFn``: ``step_fn(params, cache, tokens int32[N]) ->
(log_probs float32[N, V], cache)``. ``model_step_fn(model)`` is that function for a model; any
plain function with the same signature works too (the tests use transition tables). Decoders
(``beam_search``, ``greedy_search``, ``sample``) return a ``DecodeOutput``: ``tokens``
int32[B, n, L] (generated tokens only, no start token; the EOS that ended a hypothesis is kept,
every position after it is ``pad_id``), ``scores`` float32[B, n] best first and ``lengths``
int32[B, n] (generated tokens including the final EOS).

Optional fast-path hooks are declared Protocols: ``BeamHooks`` (``beam_cache``,
``reorder_beams``), ``ResizeHook`` (``resize_cache``) and ``CandidatesHook`` (``top_k_step``);
decoders test a step function with ``isinstance``, and a hook returning None means "not
supported". A step function that wraps another inherits ``StepWrapper``, which forwards every
hook, so a wrapper cannot drop a fast path by omission; it overrides only what it changes.

Beam hooks (``ModelStep`` has them for models that define ``beam_cache``, ``reorder_beams`` and
``resize_cache``, as the Transformer and the Transformer LM do): a step function may offer
``beam_cache(params, cache, K)`` (the B-row cache as a cache for B*K
hypotheses, rows b*K..b*K+K-1 being sentence b's, written in place; None: not supported),
``reorder_beams(params, cache, parent int32[B, K])`` (that cache after hypothesis k of sentence
b took parent ``parent[b, k]``) and ``resize_cache(params, cache, length)`` (the cache holding
``length`` positions, cut or zero-padded; None: not supported). Beam search then never copies
the cache per step (``expand_beams``, ``reorder_beams``), and decoders starting from an empty
cache let it grow with the output (``segment_lengths``, ``grown_cache``). A step function without
them gets the tiled cache and the per-step gather.

Candidates hook (optional): ``top_k_step(params, cache, tokens, k, exclude) -> (Candidates,
cache)``, what ``candidates(log_probs, k, exclude)`` gives of the step's log-probs, computed
without forming them (None: not supported). ``ModelStep`` has it for models that define
``decode_step_logits_t`` (the step's logits as [V, N], as the Transformer does). Beam search and
greedy search keep only that much of each step (``step_candidates``); sampling needs the whole
distribution.

Every decoder checks its arguments the same way before it runs (``check_decoding``):
``max_length`` >= 1, and ``eos_id``, ``pad_id`` and the start tokens inside the vocabulary
(``0 <= id < V``, V read from the step function's log-probs), each a ``ValueError`` naming the
argument, the id (and the row, for start tokens) and V. A model whose config has
``max_positions`` also refuses a cache longer than that (``init_cache``); ``Translator`` keeps
its sources and output caps within it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol, TypedDict, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from textkit.decoding.top_k import top_k, top_k_log_softmax

PyTree = Any
"""A JAX pytree: parameters, caches and recurrent states are opaque to the decoders."""

StepFn = Callable[[PyTree, PyTree, jax.Array], tuple[jax.Array, PyTree]]


class Encoded(TypedDict):
    """What ``Seq2SeqModel.encode`` returns for src_tokens int32[B, S].

    ``memory``: [B, S, D] encoder output (the model's output or compute dtype; unspecified at
    padding). ``src_mask``: bool[B, S], True at real source tokens.
    """

    memory: jax.Array
    src_mask: jax.Array


class StepModel(Protocol):
    """What every decoder needs from a model: flax's ``apply`` and ``decode_step``."""

    def apply(self, variables: Mapping[str, PyTree], *args: Any, **kwargs: Any) -> Any:
        """``model.apply({"params": params}, *args, method=name)`` (flax)."""

    def decode_step(self, cache: PyTree, tokens: jax.Array) -> tuple[jax.Array, PyTree]:
        """tokens int32[B] -> (log_probs float32[B, V], cache advanced one position)."""


@runtime_checkable
class Seq2SeqModel(StepModel, Protocol):
    """An encoder-decoder (see the module docstring for the guarantees)."""

    def __call__(self, src_tokens: jax.Array, tgt_input: jax.Array, *,
                 deterministic: bool = True) -> jax.Array:
        """src_tokens int32[B, S], tgt_input int32[B, T] -> logits float32[B, T, V]."""

    def encode(self, src_tokens: jax.Array, *, deterministic: bool = True) -> Encoded:
        """src_tokens int32[B, S] -> ``Encoded``."""

    def init_cache(self, memory: Encoded, src_tokens: jax.Array, max_length: int) -> PyTree:
        """Cache for decoding up to ``max_length`` tokens from ``memory`` (leaves [B, ...])."""


@runtime_checkable
class LanguageModel(StepModel, Protocol):
    """A left-to-right language model (see the module docstring for the guarantees)."""

    def __call__(self, tokens: jax.Array, state: PyTree = None, *,
                 deterministic: bool = True) -> tuple[jax.Array, PyTree]:
        """tokens int32[B, T], state from the previous window (None: ``initial_state``) ->
        (logits float32[B, T, V], state after the window)."""

    def initial_state(self, batch_size: int) -> PyTree:
        """Recurrent state before any token (leaves [B, ...]); None for a model without one."""

    def init_cache(self, batch_size: int, max_length: int) -> PyTree:
        """Empty cache for decoding up to ``max_length`` tokens (leaves [B, ...])."""


class DecodeOutput(NamedTuple):
    """Hypotheses of a batch, best first: tokens int32[B, n, L], scores float32[B, n],
    lengths int32[B, n] (tokens up to and including EOS; 0 for an empty slot)."""

    tokens: jax.Array
    scores: jax.Array
    lengths: jax.Array


class Candidates(NamedTuple):
    """The k most likely next tokens of N rows besides some ids given apart: ``values``
    float32[N, k] (log-probs, best first; ties lower id first, as ``lax.top_k``), ``ids``
    int32[N, k], and ``kept`` float32[N, E], the log-probs at the E ids set apart."""

    values: jax.Array
    ids: jax.Array
    kept: jax.Array


def candidates(log_probs: jax.Array, k: int, exclude: tuple[int, ...] = ()) -> Candidates:
    """``Candidates`` of log_probs float32[N, V]: the k best ids not in ``exclude``, and the
    log-probs at ``exclude``."""
    log_probs = log_probs.astype(jnp.float32)
    kept = log_probs[:, np.asarray(exclude, np.int32)]                          # [N, E]
    if exclude:
        allowed = np.ones(log_probs.shape[-1], bool)
        allowed[list(exclude)] = False
        log_probs = jnp.where(allowed, log_probs, -jnp.inf)
    values, ids = top_k(log_probs, k)                                           # [N, k]
    return Candidates(values, ids, kept)


@runtime_checkable
class BeamHooks(Protocol):
    """Optional fast path of a step function: beam search keeps the cache in place."""

    def beam_cache(self, params: PyTree, cache: PyTree, beam_size: int) -> PyTree | None:
        """The B-row cache as a cache for B*K hypotheses (None: not supported)."""

    def reorder_beams(self, params: PyTree, cache: PyTree, parent: jax.Array) -> PyTree:
        """That cache after hypothesis k of sentence b took parent ``parent[b, k]``."""


@runtime_checkable
class ResizeHook(Protocol):
    """Optional fast path: decoders starting from an empty cache grow it with the output."""

    def resize_cache(self, params: PyTree, cache: PyTree, length: int) -> PyTree | None:
        """The cache holding ``length`` positions (None: not supported)."""


@runtime_checkable
class CandidatesHook(Protocol):
    """Optional fast path: a step's best candidates without forming its log-probs."""

    def top_k_step(self, params: PyTree, cache: PyTree, tokens: jax.Array, k: int,
                   exclude: tuple[int, ...]) -> tuple[Candidates, PyTree] | None:
        """``candidates(log_probs, k, exclude)`` of the step, and the new cache (None: not
        supported)."""


@dataclasses.dataclass(frozen=True)
class StepWrapper:
    """Base of a step function that wraps another (``step_fn``): it declares every hook
    (``BeamHooks``, ``ResizeHook``, ``CandidatesHook``) and forwards each to the wrapped one
    (None where that lacks it), so a wrapper never drops a fast path by omission. A subclass
    overrides ``__call__`` and the hooks whose results it changes (returning None from a hook
    turns that fast path off). Frozen and hashable: usable as a static jit argument."""

    step_fn: StepFn

    def __call__(self, params: PyTree, cache: PyTree,
                 tokens: jax.Array) -> tuple[jax.Array, PyTree]:
        return self.step_fn(params, cache, tokens)

    def beam_cache(self, params: PyTree, cache: PyTree, beam_size: int) -> PyTree | None:
        if not isinstance(self.step_fn, BeamHooks):
            return None
        return self.step_fn.beam_cache(params, cache, beam_size)

    def reorder_beams(self, params: PyTree, cache: PyTree, parent: jax.Array) -> PyTree:
        return self.step_fn.reorder_beams(params, cache, parent)

    def resize_cache(self, params: PyTree, cache: PyTree, length: int) -> PyTree | None:
        return grown_cache(self.step_fn, params, cache, length)

    def top_k_step(self, params: PyTree, cache: PyTree, tokens: jax.Array, k: int,
                   exclude: tuple[int, ...]) -> tuple[Candidates, PyTree] | None:
        if not isinstance(self.step_fn, CandidatesHook):
            return None
        return self.step_fn.top_k_step(params, cache, tokens, k, exclude)


def step_candidates(step_fn: StepFn, params: PyTree, cache: PyTree, tokens: jax.Array, k: int,
                    exclude: tuple[int, ...] = ()) -> tuple[Candidates, PyTree]:
    """One step of ``step_fn`` reduced to ``Candidates`` [N, k] (its ``top_k_step`` hook when
    it has one, else ``candidates`` of its log-probs) and the new cache."""
    found = step_fn.top_k_step(params, cache, tokens, k, exclude) \
        if isinstance(step_fn, CandidatesHook) else None
    if found is not None:
        return found
    log_probs, cache = step_fn(params, cache, tokens)
    return candidates(log_probs, k, exclude), cache


@dataclasses.dataclass(frozen=True)
class ModelStep:
    """``step_fn`` of a flax module with a ``decode_step(cache, tokens)`` method.

    A frozen dataclass rather than a lambda so that it hashes by the model's config: two
    ``model_step_fn(model)`` calls give equal static jit arguments and share compiled programs.
    """

    model: StepModel

    def __call__(self, params: PyTree, cache: PyTree,
                 tokens: jax.Array) -> tuple[jax.Array, PyTree]:
        return self.model.apply({"params": params}, cache, tokens, method="decode_step")

    def _hook(self, name: str, params: PyTree, *args: Any) -> PyTree | None:
        if not callable(getattr(self.model, name, None)):
            return None
        return self.model.apply({"params": params}, *args, method=name)

    def beam_cache(self, params: PyTree, cache: PyTree, beam_size: int) -> PyTree | None:
        """The model's ``beam_cache`` (None when it has none)."""
        return self._hook("beam_cache", params, cache, beam_size)

    def reorder_beams(self, params: PyTree, cache: PyTree, parent: jax.Array) -> PyTree:
        """The model's ``reorder_beams``."""
        return self._hook("reorder_beams", params, cache, parent)

    def resize_cache(self, params: PyTree, cache: PyTree, length: int) -> PyTree | None:
        """The model's ``resize_cache`` (None when it has none)."""
        return self._hook("resize_cache", params, cache, length)

    def top_k_step(self, params: PyTree, cache: PyTree, tokens: jax.Array, k: int,
                   exclude: tuple[int, ...]) -> tuple[Candidates, PyTree] | None:
        """``Candidates`` of the model's ``decode_step_logits_t`` (logits float32[V, N], see
        ``top_k.top_k_log_softmax``) and the new cache; None when it has no such method."""
        found = self._hook("decode_step_logits_t", params, cache, tokens)
        if found is None:
            return None
        logits_t, cache = found
        return Candidates(*top_k_log_softmax(logits_t, k, tuple(exclude))), cache


def model_step_fn(model: StepModel) -> ModelStep:
    """``step_fn(params, cache, tokens int32[N]) -> (log_probs float32[N, V], cache)`` for
    ``model``: ``model.apply({"params": params}, cache, tokens, method="decode_step")``."""
    return ModelStep(model)


def length_penalty(length: jax.Array | float, alpha: jax.Array | float,
                   length_offset: jax.Array | float = 5.0) -> jax.Array:
    """GNMT length penalty ``((length_offset + length) / (length_offset + 1)) ** alpha``
    (float32, elementwise; GNMT's constant K, 5 by default).

    A hypothesis' score is its summed log-probability divided by this; ``alpha=0`` gives 1, and
    ``length_offset=0`` gives transformers' ``length ** alpha``.
    """
    length = jnp.asarray(length, jnp.float32)
    return ((length_offset + length) / (length_offset + 1.0)) ** alpha


def batch_size_of(cache: PyTree) -> int:
    """Leading axis shared by every leaf of ``cache``; a clear error when they disagree."""
    leaves = jax.tree_util.tree_leaves_with_path(cache)
    if not leaves:
        raise ValueError("decoding needs a cache with at least one array leaf (leading axis B)")
    sizes = {jax.tree_util.keystr(path): jnp.shape(leaf)[0] if jnp.ndim(leaf) else None
             for path, leaf in leaves}
    distinct = set(sizes.values())
    if len(distinct) != 1 or None in distinct:
        raise ValueError(f"every cache leaf must have the same leading (batch) axis; got {sizes}")
    return distinct.pop()


def repeat_cache(cache: PyTree, times: int) -> PyTree:
    """Tile every leaf [B, ...] -> [B * times, ...]; row ``b * times + j`` is copy j of row b."""
    return jax.tree_util.tree_map(lambda leaf: jnp.repeat(leaf, times, axis=0), cache)


def expand_beams(step_fn: StepFn, params: PyTree, cache: PyTree,
                 beam_size: int) -> tuple[PyTree, bool]:
    """(cache for B*K hypotheses, in place?): the step function's ``beam_cache`` when it has
    one, else every leaf tiled [B, ...] -> [B*K, ...] (``repeat_cache``; for K = 1 the cache
    as it is: one hypothesis per row needs no slots)."""
    if beam_size == 1:
        return cache, False
    beam_cache = step_fn.beam_cache(params, cache, beam_size) \
        if isinstance(step_fn, BeamHooks) else None
    if beam_cache is not None:
        return beam_cache, True
    return repeat_cache(cache, beam_size), False


def reorder_beams(step_fn: StepFn, params: PyTree, new_cache: PyTree, old_cache: PyTree,
                  parent: jax.Array, in_place: bool) -> PyTree:
    """``new_cache`` after the hypotheses took parents int32[B, K]: the step function's
    ``reorder_beams`` for an in-place cache; else rows gathered by parent from every leaf
    ``step_fn`` changed (leaves returned as the same object stay). Nothing moves for K = 1."""
    if parent.shape[1] == 1:
        return new_cache
    if in_place:
        return step_fn.reorder_beams(params, new_cache, parent)
    new_leaves, treedef = jax.tree_util.tree_flatten(new_cache)
    old_leaves = jax.tree_util.tree_leaves(old_cache)
    if len(new_leaves) != len(old_leaves):
        raise ValueError("step_fn must return a cache with the same structure it was given")
    batch, beams = parent.shape
    flat_parent = (jnp.arange(batch)[:, None] * beams + parent).reshape(-1)    # [B*K]
    # Parents are valid rows by construction: no out-of-bounds fill (a select per element).
    moved = [new if new is old else new.at[flat_parent].get(mode="promise_in_bounds")
             for new, old in zip(new_leaves, old_leaves)]
    return jax.tree_util.tree_unflatten(treedef, moved)


def segment_lengths(max_length: int) -> tuple[int, ...]:
    """Cache lengths a decoder grows through, at most three (each is one more compiled copy
    of the step): a quarter of ``max_length`` rounded up to a multiple of 8 (at least 8),
    twice that, then ``max_length``; e.g. 8, 16, 32 for 32 and 16, 32, 58 for 58."""
    first = max(8, -(-max_length // 32) * 8)
    lengths = [n for n in (first, 2 * first) if n < max_length]
    return (*lengths, max_length)


def may_grow(step_fn: StepFn, start_tokens: int | jax.Array) -> bool:
    """Whether a decoder may grow the cache in segments: the step function has
    ``resize_cache`` and the start token is an int (a fresh cache, nothing decoded yet; a
    prefix continued through ``prefill`` starts from int32[B] tokens)."""
    return isinstance(start_tokens, int | np.integer) and isinstance(step_fn, ResizeHook)


def grown_cache(step_fn: StepFn, params: PyTree, cache: PyTree, length: int) -> PyTree | None:
    """The step function's ``resize_cache`` (None when it has none)."""
    if not isinstance(step_fn, ResizeHook):
        return None
    return step_fn.resize_cache(params, cache, length)


def start_token_array(start_tokens: int | jax.Array, batch_size: int) -> jax.Array:
    """``start_tokens`` (an int such as bos, or int32[B]) as int32[B]."""
    start = jnp.asarray(start_tokens, jnp.int32)
    if start.ndim == 0:
        return jnp.full((batch_size,), start, jnp.int32)
    if start.shape != (batch_size,):
        raise ValueError(
            f"start_tokens must be an int or int32[{batch_size}] (one per cache row); "
            f"got shape {start.shape}")
    return start


def length_caps(max_lengths: jax.Array | None, max_length: int, batch_size: int) -> jax.Array:
    """Per-row cap on generated tokens, int32[B]: ``max_lengths`` clipped to [1, max_length]."""
    if max_lengths is None:
        return jnp.full((batch_size,), max_length, jnp.int32)
    caps = jnp.asarray(max_lengths, jnp.int32)
    if caps.shape != (batch_size,):
        raise ValueError(f"max_lengths must be int32[{batch_size}]; got shape {caps.shape}")
    return jnp.clip(caps, 1, max_length)


def prefill(step_fn: StepFn, params: PyTree, cache: PyTree,
            prefix: jax.Array) -> tuple[PyTree, jax.Array]:
    """Run all but the last token of ``prefix`` int32[B, P] through ``step_fn``.

    Returns ``(cache, last_tokens int32[B])``: pass them to a decoder as ``cache`` and
    ``start_tokens`` to continue the prefix (language models). Every row has the same prefix
    length P.
    """
    head = jnp.swapaxes(prefix[:, :-1], 0, 1)                     # [P-1, B]

    def feed(cache: PyTree, tokens: jax.Array) -> tuple[PyTree, None]:
        _, cache = step_fn(params, cache, tokens)
        return cache, None

    cache, _ = lax.scan(feed, cache, head)
    return cache, prefix[:, -1].astype(jnp.int32)


_VOCAB_SIZES: dict[Any, int] = {}


def vocab_size_of(step_fn: StepFn, params: PyTree, cache: PyTree, start: jax.Array) -> int:
    """V of ``step_fn``'s log-probs [N, V] for this cache and start int32[N] (traced abstractly
    with ``jax.eval_shape``, once per step function and shapes)."""
    leaves, treedef = jax.tree_util.tree_flatten((params, cache))
    key = (step_fn, treedef, tuple((jnp.shape(x), str(jnp.result_type(x))) for x in leaves))
    if key not in _VOCAB_SIZES:
        if len(_VOCAB_SIZES) > 64:
            _VOCAB_SIZES.clear()
        log_probs, _ = jax.eval_shape(step_fn, params, cache, start)
        _VOCAB_SIZES[key] = int(log_probs.shape[-1])
    return _VOCAB_SIZES[key]


def check_max_length(max_length: int) -> None:
    """``ValueError`` unless ``max_length`` is an int >= 1."""
    if isinstance(max_length, bool) or not isinstance(max_length, int | np.integer) \
            or max_length < 1:
        raise ValueError(f"max_length must be an int >= 1 (tokens to generate); "
                         f"got {max_length!r}")


def check_decoding(step_fn: StepFn, params: PyTree, cache: PyTree,
                   start_tokens: int | jax.Array, start: jax.Array, *, max_length: int,
                   eos_id: int, pad_id: int) -> int:
    """Check a decoder's arguments; returns the vocabulary size V.

    ``eos_id``, ``pad_id`` and ``start_tokens`` (an int, or int32[B] as given; ``start`` is
    its int32[B] form) must lie in ``[0, V)``. Start tokens traced inside an outer ``jit``
    cannot be read and are not checked.
    """
    check_max_length(max_length)
    vocab = vocab_size_of(step_fn, params, cache, start)
    for name, value in (("eos_id", eos_id), ("pad_id", pad_id)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) \
                or not 0 <= value < vocab:
            raise ValueError(f"{name}={value!r} is outside the vocabulary: the step function's "
                             f"log-probs have V={vocab} entries (expected 0 <= {name} < {vocab})")
    if isinstance(start_tokens, jax.core.Tracer):
        return vocab
    ids = np.asarray(start_tokens)
    bad = np.flatnonzero((ids < 0) | (ids >= vocab))
    if bad.size:
        where = f"[{bad[0]}] (batch row {bad[0]})" if ids.ndim else ""
        value = ids.reshape(-1)[bad[0]]
        raise ValueError(f"start_tokens{where} = {value} is outside the vocabulary: expected "
                         f"0 <= id < {vocab} ({bad.size} such row(s))")
    return vocab
