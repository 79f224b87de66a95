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

Sampling is seeded per row: the seed, the prompt's index and the sequence's index make the row's
key (``textkit.decoding.draws``), so a prompt's tokens do not depend on its batch-mates. Each
result (``Generation``) carries its finish reason and token counts, and on request the raw
log-probabilities of its tokens with their best alternatives; ``num_return_sequences`` gives n
results per prompt; ``chat`` renders conversations through the checkpoint's chat template.
``generation_config.json``'s keys are read by the one reader
(``textkit.decoding.generation_config``), as transformers reads them: ``max_length`` counts each
prompt (a row's new tokens are ``max_length`` less its own prompt, as that prompt alone gets),
so do ``min_length`` and its floor, and beams finish by ``early_stopping``; options the
Generator does not apply at a non-neutral value are named in a ``UserWarning``.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from textkit.decoding.beam_search import beam_search
from textkit.decoding.contract import PyTree, model_step_fn
from textkit.decoding.draws import (
    chosen_logprobs,
    draw,
    kept,
    row_keys,
    seed_value,
    step_keys,
)
from textkit.decoding.filters import NEG_INF, ExcludeTokensStep, banned_ngrams, filled_length
from textkit.decoding.generation_config import GenerationConfig, warn_unapplied
from textkit.lookahead import one_ahead

__all__ = ["FINISH_REASONS", "GENERATOR_APPLIES", "Generation", "Generator"]

GENERATOR_APPLIES = frozenset({
    "max_new_tokens", "max_length", "min_new_tokens", "min_length", "num_beams",
    "early_stopping", "do_sample", "temperature", "top_k", "top_p", "min_p",
    "repetition_penalty", "no_repeat_ngram_size", "length_penalty", "eos_ids", "stop_strings",
    "banned_ids", "num_return_sequences"})
"""The ``GenerationConfig`` fields the ``Generator`` follows (others are warned about)."""


FINISH_REASONS = ("eos", "stop", "length")
"""Why a result ended: an EOS id, a stop string, or its length cap."""


class Generation(NamedTuple):
    """One result: ``text`` (the generated text, without the prompt), ``token_ids`` (the
    generated ids, the final EOS included when one ended it), ``finish_reason`` (one of
    ``FINISH_REASONS``), ``prompt_tokens`` (the prompt's length in tokens, after any cut) and,
    when ``logprobs`` was asked for, ``logprobs`` (the raw log-probability of each generated id,
    ``textkit.decoding.draws``) and ``top_logprobs`` (per generated id, its ``logprobs`` best
    alternatives as ``(id, log-probability)``, best first)."""

    text: str
    token_ids: list[int]
    finish_reason: str = "length"
    prompt_tokens: int = 0
    logprobs: list[float] | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None


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
    keys: jax.Array          # key[N]: each row's own key (``draws.row_keys``)
    logprobs: jax.Array      # float32[N, L] (or [N, 0]: not asked): chosen ids' log-probs
    top_ids: jax.Array       # int32[N, L, K]: the K best alternatives at each step
    top_logprobs: jax.Array  # float32[N, L, K]: their log-probs


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


def _choose(config: GenerationConfig, logits: jax.Array, keys: jax.Array) -> jax.Array:
    """The next id of each row: argmax (greedy) or a draw with the row's own key key[N] after
    temperature, top-k, top-p and min-p (transformers' warpers, in its order; ``draws``)."""
    if not config.do_sample:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits / np.float32(config.temperature)
    return draw(keys, logits, kept(logits, config.top_k, config.top_p, config.min_p))


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
        raw = logits.astype(jnp.float32)
        token = _choose(config, _process(config, raw, s), step_keys(s.keys, s.step))  # [N]
        token = jnp.where(s.running, token, pad_id)
        logprobs, top_ids, top_logprobs = s.logprobs, s.top_ids, s.top_logprobs
        if logprobs.shape[1]:           # asked for: the raw log-probs (``draws``)
            chosen, ids, values = chosen_logprobs(raw, token, top_ids.shape[2])
            logprobs = lax.dynamic_update_slice(logprobs, chosen[:, None], (0, s.step))
            top_ids = lax.dynamic_update_slice(top_ids, ids[:, None], (0, s.step, 0))
            top_logprobs = lax.dynamic_update_slice(top_logprobs, values[:, None],
                                                    (0, s.step, 0))
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
            seen=seen, history=history, keys=s.keys, logprobs=logprobs, top_ids=top_ids,
            top_logprobs=top_logprobs)

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


_row_keys = jax.jit(row_keys)

CHAT_ROLES = ("system", "user", "assistant")
"""The message roles ``Generator.chat`` takes."""


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

    def chat_prompts(self, conversations: Sequence[Any]) -> list[list[int]]:
        """The prompt ids of each conversation (a list of ``{"role", "content"}`` messages,
        roles system / user / assistant; or one such conversation) rendered through the
        checkpoint's chat template with the assistant's turn opened."""
        if conversations and isinstance(conversations[0], Mapping):
            conversations = [conversations]
        prompts = []
        for number, messages in enumerate(conversations):
            for index, message in enumerate(messages):
                where = f"conversation {number}, message {index}"
                if not isinstance(message, Mapping):
                    raise TypeError(f"{where}: expected a dict with role and content, got a "
                                    f"{type(message).__name__}")
                if message.get("role") not in CHAT_ROLES:
                    raise ValueError(f"{where}: role {message.get('role')!r}; expected one "
                                     f"of {', '.join(CHAT_ROLES)}")
                if not isinstance(message.get("content"), str):
                    raise TypeError(f"{where}: content must be a string")
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
            prompts.append(self.tokenizer.encode(text, add_special_tokens=False))
        return prompts

    def _batches(self, rows: list[list[int]]) -> Iterator[list[int]]:
        """Indices of ``rows`` in batches of similar lengths (longest first)."""
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        for start in range(0, len(order), self.batch_size):
            yield order[start:start + self.batch_size]

    def _start(self, params: PyTree, rows: list[list[int]], pairs: list[tuple[int, int]],
               config: GenerationConfig, seed: int, budget: int,
               logprobs: int | None) -> _Rows:
        """Prefilled loop state for up to ``batch_size`` prompts (the batch padded), room for
        ``budget`` new tokens; ``pairs``: each row's (prompt index, sequence index), its key."""
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
        key_pairs = np.zeros((batch, 2), np.int32)
        key_pairs[:len(rows)] = pairs
        steps = budget if logprobs is not None else 0
        return _Rows(step=jnp.zeros((), jnp.int32), cache=cache,
                     last=jnp.asarray(tokens[:, -1]),
                     tokens=jnp.full((batch, budget), self.pad_id, jnp.int32),
                     lengths=jnp.zeros((batch,), jnp.int32), caps=jnp.asarray(caps),
                     floors=jnp.asarray(floors), running=jnp.asarray(running),
                     seen=jnp.asarray(seen), history=jnp.asarray(history),
                     keys=_row_keys(seed_value(seed), jnp.asarray(key_pairs)),
                     logprobs=jnp.zeros((batch, steps), jnp.float32),
                     top_ids=jnp.zeros((batch, steps, logprobs or 0), jnp.int32),
                     top_logprobs=jnp.zeros((batch, steps, logprobs or 0), jnp.float32))

    # ------------------------------------------------------------------------ generation
    def generate(self, params: PyTree, prompts: str | Sequence[str | Sequence[int]], *,
                 seed: int = 0, logprobs: int | None = None, adapter: Any = None,
                 **options: Any) -> list[Generation]:
        """``num_return_sequences`` (n) ``Generation`` per prompt (a string, or token ids; one
        string is one prompt), in the prompts' order: prompt i's results at i * n .. i * n +
        n - 1. ``options`` replace ``GenerationConfig`` fields for this call. ``logprobs``
        (greedy and sampling): None (none), 0 (each generated id's log-probability) or k (and
        its k best alternatives at each step). ``seed``: sampling's seed; sequence j of
        prompt i draws from its own key (``textkit.decoding.draws``), so its tokens do not
        depend on the prompts batched with it. ``adapter``: a LoRA
        ``textkit.adapters.Adapter`` merged into ``params`` for this call (one base, several
        adapters switched per call; the merge compiles once per adapter shape)."""
        if adapter is not None:
            params = adapter.merge(params)
        results = dict(self._run(params, prompts, seed, options, pieces=False,
                                 logprobs=logprobs))
        return [results[i] for i in range(len(results))]

    def chat(self, params: PyTree, conversations: Sequence[Any], *, seed: int = 0,
             logprobs: int | None = None, adapter: Any = None,
             **options: Any) -> list[Generation]:
        """The assistant's next turn in each conversation (``chat_prompts``), as ``generate``
        returns it."""
        return self.generate(params, self.chat_prompts(conversations), seed=seed,
                             logprobs=logprobs, adapter=adapter, **options)

    def generate_stream(self, params: PyTree, prompts: str | Sequence[str | Sequence[int]], *,
                        chunk_size: int = 8, seed: int = 0, results: bool = False,
                        adapter: Any = None, **options: Any) -> Iterator[tuple[int, Any]]:
        """``(result index, text piece)`` as tokens are produced (result indices as
        ``generate``), ``chunk_size`` tokens per compiled call (1: a host round trip per
        token). Joining a result's pieces gives its ``generate`` text. Greedy and sampling
        only, unless ``results``: then each result's ``(index, Generation)`` comes too, as
        soon as it is complete (after its pieces; beam search: the whole batch's results, no
        pieces). ``adapter``: as ``generate``'s."""
        if adapter is not None:
            params = adapter.merge(params)
        yield from self._run(params, prompts, seed, {**options, "_chunk": chunk_size},
                             pieces=True, logprobs=None, results=results)

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

    def _run(self, params: PyTree, prompts: str | Sequence[str | Sequence[int]], seed: int,
             options: dict[str, Any], *, pieces: bool, logprobs: int | None,
             results: bool = True) -> Iterator[tuple[int, Any]]:
        """``(result index, text piece)`` with ``pieces``, ``(result index, Generation)`` with
        ``results``, as they come."""
        params = self._weights(params)
        chunk = options.pop("_chunk", None)
        config = dataclasses.replace(self.config, **options) if options else self.config
        if isinstance(prompts, str):
            prompts = [prompts]
        beams, n = config.num_beams > 1, config.num_return_sequences
        if beams and pieces and not results:
            raise ValueError("generate_stream streams greedy or sampled output; "
                             "beam search returns whole hypotheses (use generate)")
        if beams and logprobs is not None:
            raise ValueError("logprobs are reported for greedy and sampled output, not for "
                             "beam search")
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                     or logprobs < 0):
            raise ValueError(f"logprobs={logprobs!r}: expected None or an int >= 0")
        if beams and n > config.num_beams:
            raise ValueError(f"num_return_sequences={n} exceeds num_beams={config.num_beams}: "
                             f"beam search returns at most its beams")
        prompt_ids = self._prompt_ids(prompts, config)
        copies = 1 if beams else n     # beam search returns n hypotheses of one row
        rows = [ids for ids in prompt_ids for _ in range(copies)]
        pairs = [(i, j) for i in range(len(prompt_ids)) for j in range(copies)]
        budget = max(config.new_tokens(len(ids)) for ids in rows) if rows else 1
        step = chunk or (8 if config.stop_strings else budget)

        def dispatch(batch: tuple[int, list[int]]) -> Any:    # (batch number, row indices)
            _, indices = batch
            return self._dispatch_batch(params, [rows[i] for i in indices],
                                        [pairs[i] for i in indices], config, seed, step,
                                        budget, logprobs)

        for (_, indices), started in one_ahead(enumerate(self._batches(rows)), dispatch):
            yield from self._collect_batch(params, indices, [len(rows[i]) for i in indices],
                                           started, config, step, pieces, results)

    def _dispatch_batch(self, params: PyTree, rows: list[list[int]],
                        pairs: list[tuple[int, int]], config: GenerationConfig, seed: int,
                        step: int, budget: int, logprobs: int | None) -> Any:
        """Start one batch of prompts on the device, not waiting for it: beam search's
        ``DecodeOutput``, or the greedy / sampling loop state after its first ``step`` tokens
        (at most ``budget``)."""
        state = self._start(params, rows, pairs, config, seed, budget, logprobs)
        if config.num_beams > 1:
            step_fn = model_step_fn(self.model)
            if config.banned_ids:
                step_fn = ExcludeTokensStep(step_fn, config.banned_ids, renormalize=False)
            return beam_search(step_fn, params, state.cache, state.last,
                               beam_size=config.num_beams, max_length=budget,
                               max_lengths=state.caps, eos_id=config.eos_ids,
                               alpha=config.length_penalty, length_offset=0.0,
                               pad_id=self.pad_id, min_length=state.floors, hf_finish=True,
                               early_stopping=config.early_stopping,
                               n_best=config.num_return_sequences)
        no_stop = jnp.zeros(self.batch_size, bool)
        return _advance(self.model, params, state, no_stop, jnp.int32(min(step, budget)),
                        config=config, pad_id=self.pad_id)

    def _finish_reason(self, ids: list[int], config: GenerationConfig) -> str:
        return "eos" if ids and ids[-1] in config.eos_ids else "length"

    def _collect_batch(self, params: PyTree, indices: list[int], prompt_lengths: list[int],
                       started: Any, config: GenerationConfig, step: int, pieces: bool,
                       results: bool) -> Iterator[tuple[int, Any]]:
        """Read a dispatched batch (``_dispatch_batch``) of the rows ``indices`` (prompts of
        ``prompt_lengths`` tokens) back: ``(result index, Generation or text piece)``."""
        if config.num_beams > 1:
            n = config.num_return_sequences
            tokens, lengths = np.asarray(started.tokens), np.asarray(started.lengths)
            for r, i in enumerate(indices):
                for j in range(n):
                    ids = tokens[r, j, :lengths[r, j]].tolist()
                    yield i * n + j, Generation(self.tokenizer.decode(ids), ids,
                                                self._finish_reason(ids, config),
                                                prompt_lengths[r])
            return
        yield from self._sample_rows(params, indices, prompt_lengths, started, config, step,
                                     pieces, results)

    def _sample_rows(self, params: PyTree, indices: list[int], prompt_lengths: list[int],
                     state: _Rows, config: GenerationConfig, step: int, pieces: bool,
                     results: bool) -> Iterator[tuple[int, Any]]:
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
            finished = []
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
                if pieces and piece:
                    yield indices[r], piece
                if done_at[r] is not None:
                    finished.append(r)
            if results and finished:
                yield from self._results(state, indices, prompt_lengths, finished, tokens,
                                         texts, done_at, stopped, config)
            if all(d is not None for d in done_at):
                break
            until = min(int(state.step) + step, budget)
            state = _advance(self.model, params, state, jnp.asarray(stopped),
                             jnp.int32(until), config=config, pad_id=self.pad_id)

    def _results(self, state: _Rows, indices: list[int], prompt_lengths: list[int],
                 rows: list[int], tokens: np.ndarray, texts: list[str], done_at: list[Any],
                 stopped: np.ndarray, config: GenerationConfig) -> Iterator[tuple[int, Any]]:
        """``(result index, Generation)`` of the finished ``rows`` of ``state``."""
        asked = state.logprobs.shape[1] > 0
        if asked:
            logprobs = np.asarray(state.logprobs)
            top_ids, top_logprobs = np.asarray(state.top_ids), np.asarray(state.top_logprobs)
        for r in rows:
            end = done_at[r]
            ids = tokens[r, :end].tolist()
            reason = "stop" if stopped[r] else self._finish_reason(ids, config)
            chosen = logprobs[r, :end].tolist() if asked else None
            alternatives = [list(zip(top_ids[r, t].tolist(), top_logprobs[r, t].tolist()))
                            for t in range(end)] if asked else None
            yield indices[r], Generation(texts[r], ids, reason, prompt_lengths[r], chosen,
                                         alternatives)


def _stop(text: str, stop_strings: tuple[str, ...]) -> int | None:
    """The end of the first stop string in ``text`` (None: none there)."""
    ends = [text.find(s) + len(s) for s in stop_strings if s in text]
    return min(ends) if ends else None
