"""Generation from prompts with a decoder-only language model: ``GenerationConfig`` and
``Generator``.

Prompts of different lengths share a batch: they are left-padded to a common length P (rounded
up to a multiple of 8, so few shapes compile), all but their last column are fed to the model in
one parallel ``prefill`` pass, with a key-validity mask and per-row positions (``DecoderLM``),
so each row's output equals that prompt generated alone. The cache holds P + ``max_new_tokens``
slots, not the model's maximum. Then:

* greedy and sampling run in one ``lax.while_loop`` over the step function's logits, processed
  as transformers' ``generate`` processes them: repetition penalty (on the logits), no-repeat
  n-grams, ``min_new_tokens`` (EOS ids at -inf before it), then for sampling temperature, top-k,
  top-p and min-p; several EOS ids each end a row. The loop runs in chunks of ``chunk_size``
  tokens (one compiled program per chunk length), which is how ``generate_stream`` yields text
  while generating and how stop strings end rows;
* beam search is ``textkit.decoding.beam_search`` with transformers' finishing rule and length
  penalty ``n ** length_penalty`` over the generated tokens (several EOS ids supported).

Prompts beyond ``batch_size`` run in several batches, one ahead (``textkit.lookahead``): batch
n + 1 is padded, transferred and dispatched (prefill and first chunk) before batch n is read
back, so the host's work overlaps the device's; results keep the prompts' order.

Sampling is seeded: the same ``seed`` gives the same tokens. ``generation_config.json``'s keys
are read by the one reader (``textkit.decoding.generation_config``), as transformers reads them:
``max_length`` counts each prompt (a row's new tokens are ``max_length`` less its own prompt,
as that prompt alone gets), so do ``min_length`` and its floor, and beams finish by
``early_stopping``; options the Generator does not apply at a non-neutral value are named in a
``UserWarning``.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from textkit.decoding.beam_search import beam_search
from textkit.decoding.contract import PyTree, model_step_fn
from textkit.decoding.filters import (
    NEG_INF,
    ExcludeTokensStep,
    banned_ngrams,
    filled_length,
    top_k_top_p,
)
from textkit.decoding.generation_config import GenerationConfig, warn_unapplied
from textkit.lookahead import one_ahead

__all__ = ["GENERATOR_APPLIES", "Generation", "Generator"]

GENERATOR_APPLIES = frozenset({
    "max_new_tokens", "max_length", "min_new_tokens", "min_length", "num_beams",
    "early_stopping", "do_sample", "temperature", "top_k", "top_p", "min_p",
    "repetition_penalty", "no_repeat_ngram_size", "length_penalty", "eos_ids", "stop_strings",
    "banned_ids"})
"""The ``GenerationConfig`` fields the ``Generator`` follows (others are warned about)."""


class Generation(NamedTuple):
    """One prompt's result: ``text`` (the generated text, without the prompt) and
    ``token_ids`` (the generated ids, the final EOS included when one ended it)."""

    text: str
    token_ids: list[int]


class _Rows(NamedTuple):
    """The state of the greedy / sampling loop over N rows."""

    step: jax.Array          # int32[]: tokens generated so far
    cache: PyTree            # the model's cache, leaves [N, ...]
    last: jax.Array          # int32[N]: the next step's input
    tokens: jax.Array        # int32[N, L]: generated ids, pad after the end
    lengths: jax.Array       # int32[N]: generated tokens, the final EOS included
    caps: jax.Array          # int32[N]: most tokens each row generates
    floors: jax.Array        # int32[N]: tokens each row generates before EOS may end it
    running: jax.Array       # bool[N]
    seen: jax.Array          # bool[N, V]: ids in the prompt or generated (repetition penalty)
    history: jax.Array       # int32[N, H]: prompt then generated ids, -1 at padding (n-grams)
    rng: jax.Array           # a key


def _process(config: GenerationConfig, logits: jax.Array, state: _Rows) -> jax.Array:
    """transformers' logits processors, in its order, on logits float32[N, V]."""
    if config.repetition_penalty != 1.0:
        penalty = np.float32(config.repetition_penalty)
        penalised = jnp.where(logits < 0, logits * penalty, logits / penalty)
        logits = jnp.where(state.seen, penalised, logits)
    n = config.no_repeat_ngram_size
    if n:
        logits = jnp.where(banned_ngrams(state.history, n, logits.shape[-1]),
                           NEG_INF, logits)
    if config.min_new_tokens or config.min_length:
        eos = jnp.zeros(logits.shape[-1], bool).at[jnp.asarray(config.eos_ids)].set(True)
        logits = jnp.where(eos & (state.step < state.floors)[:, None], NEG_INF, logits)
    if config.banned_ids:
        banned = jnp.zeros(logits.shape[-1], bool).at[jnp.asarray(config.banned_ids)].set(True)
        logits = jnp.where(banned, NEG_INF, logits)
    return logits


def _choose(config: GenerationConfig, logits: jax.Array, key: jax.Array) -> jax.Array:
    """The next id of each row: argmax (greedy) or a draw after temperature, top-k, top-p and
    min-p (transformers' warpers, in its order)."""
    if not config.do_sample:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits / np.float32(config.temperature)
    values, ids = top_k_top_p(logits, config.top_k, config.top_p)               # [N, K]
    if config.min_p:
        probs = jax.nn.softmax(values, axis=-1)
        values = jnp.where(probs >= config.min_p * probs[:, :1], values, NEG_INF)
    choice = jax.random.categorical(key, values, axis=-1)
    return jnp.take_along_axis(ids, choice[:, None], 1)[:, 0].astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("model", "config", "pad_id"),
                   donate_argnames=("state",))
def _advance(model: Any, params: PyTree, state: _Rows, stopped: jax.Array, until: jax.Array,
             *, config: GenerationConfig, pad_id: int) -> _Rows:
    """Run the loop until ``until`` int32[] tokens are generated or every row has ended
    (``until`` is data: every chunk of a stream runs the same program); rows in ``stopped``
    bool[N] (a stop string seen on the host) end first."""
    eos = jnp.asarray(config.eos_ids, jnp.int32)
    positions = jnp.arange(state.tokens.shape[1])

    def extend(s: _Rows) -> _Rows:
        logits, cache = model.apply({"params": params}, s.cache, s.last,
                                    method="decode_logits")                     # [N, V]
        logits = _process(config, logits.astype(jnp.float32), s)
        token = _choose(config, logits, jax.random.fold_in(s.rng, s.step))      # [N]
        token = jnp.where(s.running, token, pad_id)
        history, seen = s.history, s.seen         # kept up to date only where an option reads
        if config.no_repeat_ngram_size:
            write = jnp.arange(history.shape[1]) == filled_length(history)[:, None]   # [N, H]
            history = jnp.where(s.running[:, None] & write, token[:, None], history)
        if config.repetition_penalty != 1.0:
            seen = seen.at[jnp.arange(token.shape[0]), token].max(s.running)
        new_length = s.step + 1
        return _Rows(
            step=new_length, cache=cache, last=token,
            tokens=jnp.where(positions == s.step, token[:, None], s.tokens),
            lengths=jnp.where(s.running, new_length, s.lengths),
            caps=s.caps, floors=s.floors,
            running=s.running & ~jnp.isin(token, eos) & (new_length < s.caps),
            seen=seen, history=history, rng=s.rng)

    state = state._replace(running=state.running & ~stopped)
    return lax.while_loop(lambda s: (s.step < until) & jnp.any(s.running), extend, state)


@functools.partial(jax.jit, static_argnames=("model", "slots"))
def _prefill(model: Any, params: PyTree, tokens: jax.Array, mask: jax.Array, *,
             slots: int) -> PyTree:
    """A cache of ``slots`` slots holding the prompts' columns but the last."""
    cache = model.apply({"params": params}, tokens.shape[0], slots, method="init_cache")
    if tokens.shape[1] <= 1:
        return cache
    return model.apply({"params": params}, cache, tokens[:, :-1], mask[:, :-1],
                       method="prefill")


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


class Generator:
    """Generates text with a decoder-only LM (``DecoderLM``) and its tokenizer
    (``LMTokenizer``): ``generate`` (a result per prompt, in order), ``generate_stream``
    (text pieces as they are produced) and ``warm_up`` (compile a server's shapes at start-up).

    ``config``: a ``GenerationConfig`` (e.g. ``GenerationConfig.from_dict`` of the checkpoint's
    ``generation_config.json``; ``Generator.from_pretrained`` does that). ``batch_size``: prompts
    decoded together (a batch is padded to it with empty rows, so one shape compiles).
    ``truncate``: a prompt longer than the positions left for ``max_new_tokens`` is cut from the
    left, with a warning naming it; False (default) refuses it with a ``ValueError`` naming
    its index and both lengths. An empty prompt generates from the tokenizer's BOS (a
    ``ValueError`` when it has none). ``quantize="int8"``: int8 weights (``Dense`` kernels and
    the embedding table, ``textkit.models.kernels.quantize_int8``; CPU inference), made once
    from the params of the first call and kept while the same params are passed.
    """

    def __init__(self, model: Any, tokenizer: Any, config: GenerationConfig | None = None, *,
                 batch_size: int = 16, truncate: bool = False, quantize: str | None = None):
        if quantize not in (None, "int8"):
            raise ValueError(f"quantize={quantize!r}; expected None or 'int8'")
        if quantize == "int8":
            from textkit.models.kernels import require_int8_backend
            require_int8_backend()
        self.model, self.tokenizer = model, tokenizer
        self.quantize = quantize
        self._quantized: tuple[PyTree, PyTree] | None = None
        config = config or GenerationConfig()
        warn_unapplied(config, GENERATOR_APPLIES, "the Generator")
        if not config.eos_ids:
            config = dataclasses.replace(config, eos_ids=tuple(tokenizer.eos_ids))
        if not config.eos_ids:
            raise ValueError("generation needs at least one EOS id: neither the generation "
                             "config nor the tokenizer names one")
        self.config = config
        self.batch_size = batch_size
        self.truncate = truncate
        self.pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else config.eos_ids[0]

    @classmethod
    def from_pretrained(cls, loaded: Any, **options: Any) -> Generator:
        """A generator for a ``load_pretrained`` result of kind "causal_lm", following its
        ``generation_config.json``; ``options``: ``GenerationConfig`` fields, ``batch_size``,
        ``truncate``, ``quantize``."""
        if loaded.kind != "causal_lm":
            raise ValueError(f"Generator needs a causal_lm checkpoint; got {loaded.kind}")
        own = {k: options.pop(k) for k in ("batch_size", "truncate", "quantize")
               if k in options}
        config = GenerationConfig.from_dict(loaded.generation, "generation_config.json",
                                            **options)
        return cls(loaded.model, loaded.tokenizer, config, **own)

    # ------------------------------------------------------------------------ prompts
    def _prompt_ids(self, prompts: Sequence[str | Sequence[int]],
                    config: GenerationConfig) -> list[list[int]]:
        limit = self.model.config.max_positions
        rows = []
        for index, prompt in enumerate(prompts):
            ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
            if not ids:
                if self.tokenizer.bos_id is None:
                    raise ValueError(f"prompt {index} is empty and the tokenizer has no BOS "
                                     f"token to start from")
                ids = [self.tokenizer.bos_id]
            new = config.new_tokens(len(ids))
            room = limit - new if limit is not None else None
            if room is not None and len(ids) > room:
                if not self.truncate or room < 1:
                    raise ValueError(
                        f"prompt {index} has {len(ids)} tokens, but the model takes "
                        f"{limit} positions and {new} new tokens leave "
                        f"{max(room, 0)} for the prompt (shorten it, lower max_new_tokens, or "
                        f"truncate=True to cut it from the left)")
                warnings.warn(f"prompt {index}: {len(ids)} tokens cut to its last {room} "
                              f"({new} new tokens of {limit} positions)",
                              UserWarning, stacklevel=3)
                ids = ids[-room:]
            rows.append(ids)
        return rows

    def _batches(self, rows: list[list[int]]) -> Iterator[list[int]]:
        """Indices of ``rows`` in batches of similar lengths (longest first)."""
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        for start in range(0, len(order), self.batch_size):
            yield order[start:start + self.batch_size]

    def _start(self, params: PyTree, rows: list[list[int]], config: GenerationConfig,
               seed: int, budget: int) -> _Rows:
        """Prefilled loop state for up to ``batch_size`` prompts (the batch padded), room for
        ``budget`` new tokens."""
        batch = self.batch_size
        width = _round_up(max(map(len, rows)), 8)
        tokens = np.full((batch, width), self.pad_id, np.int32)
        mask = np.zeros((batch, width), bool)
        for i, ids in enumerate(rows):
            tokens[i, width - len(ids):], mask[i, width - len(ids):] = ids, True
        tokens[len(rows):, -1], mask[len(rows):, -1] = self.pad_id, True     # empty rows
        vocab = self.model.config.vocab_size
        slots = width + budget
        cache = _prefill(self.model, params, jnp.asarray(tokens), jnp.asarray(mask),
                         slots=slots)
        seen = np.zeros((batch, vocab), bool)
        history = np.full((batch, width + budget), -1, np.int32)
        for i, ids in enumerate(rows):
            seen[i, ids] = True
            history[i, :len(ids)] = ids
        running = np.arange(batch) < len(rows)
        caps, floors = np.ones(batch, np.int32), np.zeros(batch, np.int32)
        caps[:len(rows)] = [config.new_tokens(len(ids)) for ids in rows]
        floors[:len(rows)] = [config.min_tokens(len(ids)) for ids in rows]
        return _Rows(step=jnp.zeros((), jnp.int32), cache=cache,
                     last=jnp.asarray(tokens[:, -1]),
                     tokens=jnp.full((batch, budget), self.pad_id, jnp.int32),
                     lengths=jnp.zeros((batch,), jnp.int32), caps=jnp.asarray(caps),
                     floors=jnp.asarray(floors), running=jnp.asarray(running),
                     seen=jnp.asarray(seen), history=jnp.asarray(history),
                     rng=jax.random.key(seed))

    # ------------------------------------------------------------------------ generation
    def generate(self, params: PyTree, prompts: Sequence[str | Sequence[int]], *,
                 seed: int = 0, adapter: Any = None, **options: Any) -> list[Generation]:
        """One ``Generation`` per prompt (a string, or token ids), in the prompts' order.
        ``options`` replace ``GenerationConfig`` fields for this call. ``adapter``: a LoRA
        ``textkit.adapters.Adapter`` merged into ``params`` for this call (one base, several
        adapters switched per call; the merge compiles once per adapter shape)."""
        results: dict[int, Generation] = {}
        if adapter is not None:
            params = adapter.merge(params)
        for index, piece in self._run(params, prompts, seed, options, stream=False):
            results[index] = piece
        return [results[i] for i in range(len(prompts))]

    def generate_stream(self, params: PyTree, prompts: Sequence[str | Sequence[int]], *,
                        chunk_size: int = 8, seed: int = 0, adapter: Any = None,
                        **options: Any) -> Iterator[tuple[int, str]]:
        """``(prompt index, text piece)`` as tokens are produced, ``chunk_size`` tokens per
        compiled call (1: a host round trip per token). Joining a prompt's pieces gives its
        ``generate`` text. Greedy and sampling only. ``adapter``: as ``generate``'s."""
        if adapter is not None:
            params = adapter.merge(params)
        yield from self._run(params, prompts, seed, {**options, "_chunk": chunk_size},
                             stream=True)

    def warm_up(self, params: PyTree, prompt_lengths: Sequence[int] = (8,), **options: Any
                ) -> None:
        """Compile the programs of prompts up to each length in ``prompt_lengths`` (rounded
        up to a multiple of 8) with this generator's settings, so a server answers its first
        request without compiling."""
        for length in prompt_lengths:
            self.generate(params, [[self.pad_id] * max(1, length)], **options)

    def _weights(self, params: PyTree) -> PyTree:
        """``params``, or their int8 copy (``quantize="int8"``; made once per params)."""
        if self.quantize is None:
            return params
        if self._quantized is None or self._quantized[0] is not params:
            from textkit.models.kernels import int8_carrier, quantize_int8

            self._quantized = (params, quantize_int8(
                self.model, params, jnp.zeros((1, 8), jnp.int32),
                carrier=int8_carrier(self.batch_size)))
        return self._quantized[1]

    def _run(self, params: PyTree, prompts: Sequence[str | Sequence[int]], seed: int,
             options: dict[str, Any], *, stream: bool) -> Iterator[tuple[int, Any]]:
        params = self._weights(params)
        chunk = options.pop("_chunk", None)
        config = dataclasses.replace(self.config, **options) if options else self.config
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings (or of token-id lists), "
                            "not one string")
        if config.num_beams > 1 and stream:
            raise ValueError("generate_stream streams greedy or sampled output; "
                             "beam search returns whole hypotheses (use generate)")
        rows = self._prompt_ids(prompts, config)
        budget = max(config.new_tokens(len(ids)) for ids in rows) if rows else 1
        step = chunk or (8 if config.stop_strings else budget)

        def dispatch(batch: tuple[int, list[int]]) -> Any:    # (batch number, prompt indices)
            number, indices = batch
            return self._dispatch_batch(params, [rows[i] for i in indices], config,
                                        seed + number, step, budget)

        for (_, indices), started in one_ahead(enumerate(self._batches(rows)), dispatch):
            yield from self._collect_batch(params, indices, started, config, step, stream)

    def _dispatch_batch(self, params: PyTree, rows: list[list[int]], config: GenerationConfig,
                        seed: int, step: int, budget: int) -> Any:
        """Start one batch of prompts on the device, not waiting for it: beam search's
        ``DecodeOutput``, or the greedy / sampling loop state after its first ``step`` tokens
        (at most ``budget``)."""
        state = self._start(params, rows, config, seed, budget)
        if config.num_beams > 1:
            step_fn = model_step_fn(self.model)
            if config.banned_ids:
                step_fn = ExcludeTokensStep(step_fn, config.banned_ids, renormalize=False)
            return beam_search(step_fn, params, state.cache, state.last,
                               beam_size=config.num_beams, max_length=budget,
                               max_lengths=state.caps, eos_id=config.eos_ids,
                               alpha=config.length_penalty, length_offset=0.0,
                               pad_id=self.pad_id, min_length=state.floors, hf_finish=True,
                               early_stopping=config.early_stopping)
        no_stop = jnp.zeros(self.batch_size, bool)
        return _advance(self.model, params, state, no_stop, jnp.int32(min(step, budget)),
                        config=config, pad_id=self.pad_id)

    def _collect_batch(self, params: PyTree, indices: list[int], started: Any,
                       config: GenerationConfig, step: int,
                       stream: bool) -> Iterator[tuple[int, Any]]:
        """Read a dispatched batch (``_dispatch_batch``) of the prompts ``indices`` back:
        ``(prompt index, Generation or text piece)``."""
        if config.num_beams > 1:
            tokens = np.asarray(started.tokens[:, 0])
            lengths = np.asarray(started.lengths[:, 0])
            for r, i in enumerate(indices):
                ids = tokens[r, :lengths[r]].tolist()
                yield i, Generation(self.tokenizer.decode(ids), ids)
            return
        yield from self._sample_rows(params, indices, started, config, step, stream)

    def _sample_rows(self, params: PyTree, indices: list[int], state: _Rows,
                     config: GenerationConfig, step: int,
                     stream: bool) -> Iterator[tuple[int, Any]]:
        """Go on with the greedy / sampling loop ``state`` (its first chunk dispatched) in
        chunks of ``step`` tokens until its rows end, yielding as ``_collect_batch``."""
        count, budget = len(indices), state.tokens.shape[1]
        streams = [self.tokenizer.stream() for _ in range(count)]
        texts = [""] * count
        done_at = [None] * count
        stopped = np.zeros(self.batch_size, bool)
        emitted = [0] * count
        while True:
            tokens, lengths = np.asarray(state.tokens), np.asarray(state.lengths)
            for r in range(count):
                if done_at[r] is not None:
                    continue
                new = tokens[r, emitted[r]:lengths[r]].tolist()
                emitted[r] = int(lengths[r])
                piece = streams[r].push(new)
                if not bool(state.running[r]) or int(state.step) >= budget:
                    piece += streams[r].flush()
                    done_at[r] = emitted[r]
                cut = _stop(texts[r] + piece, config.stop_strings)
                if cut is not None:     # ids end with the token that completes the string
                    piece = (texts[r] + piece)[len(texts[r]):cut]
                    ids = tokens[r, :emitted[r]].tolist()
                    stopped[r], done_at[r] = True, next(
                        k for k in range(1, len(ids) + 1)
                        if _stop(self.tokenizer.decode(ids[:k]), config.stop_strings))
                texts[r] += piece
                if stream and piece:
                    yield indices[r], piece
            if all(d is not None for d in done_at):
                break
            until = min(int(state.step) + step, budget)
            state = _advance(self.model, params, state, jnp.asarray(stopped),
                             jnp.int32(until), config=config, pad_id=self.pad_id)
        if not stream:
            for r in range(count):
                ids = tokens[r, :done_at[r]].tolist()
                yield indices[r], Generation(texts[r], ids)


def _stop(text: str, stop_strings: tuple[str, ...]) -> int | None:
    """The end of the first stop string in ``text`` (None: none there)."""
    ends = [text.find(s) + len(s) for s in stop_strings if s in text]
    return min(ends) if ends else None
