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
are read as transformers reads them (``GenerationConfig.from_dict``); options textkit does not
apply at a non-neutral value are named in a ``UserWarning``.
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
from textkit.decoding.filters import NEG_INF, top_k_top_p
from textkit.lookahead import one_ahead

__all__ = ["Generation", "GenerationConfig", "Generator"]

_KEYS = {"max_new_tokens", "num_beams", "do_sample", "temperature", "top_k", "top_p", "min_p",
         "repetition_penalty", "no_repeat_ngram_size", "min_new_tokens", "length_penalty",
         "eos_token_id", "stop_strings"}
_IGNORED = {"bos_token_id", "pad_token_id", "transformers_version", "_from_model_config",
            "use_cache", "output_attentions", "output_hidden_states", "return_dict_in_generate",
            "output_scores", "output_logits", "max_length", "early_stopping",
            "num_return_sequences", "cache_implementation"}


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    """What to generate (frozen, hashable): the options of transformers' ``generate`` that
    textkit implements, with its defaults. ``eos_ids`` empty: the tokenizer's."""

    max_new_tokens: int = 20
    num_beams: int = 1
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    min_new_tokens: int = 0
    length_penalty: float = 1.0
    eos_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        checks = [("max_new_tokens", self.max_new_tokens >= 1, ">= 1"),
                  ("num_beams", self.num_beams >= 1, ">= 1"),
                  ("temperature", self.temperature > 0, "> 0 (greedy: do_sample=False)"),
                  ("top_k", self.top_k >= 0, ">= 0 (0: no top-k)"),
                  ("top_p", 0.0 < self.top_p <= 1.0, "in (0, 1]"),
                  ("min_p", 0.0 <= self.min_p < 1.0, "in [0, 1)"),
                  ("repetition_penalty", self.repetition_penalty > 0, "> 0 (1: none)"),
                  ("no_repeat_ngram_size", self.no_repeat_ngram_size >= 0, ">= 0"),
                  ("min_new_tokens", self.min_new_tokens >= 0, ">= 0"),
                  ("stop_strings", all(isinstance(t, str) and t for t in self.stop_strings),
                   "non-empty strings")]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"generation option {name}={getattr(self, name)!r}: expected "
                                 f"{expected}")
        if self.do_sample and self.num_beams > 1:
            raise ValueError("generation: sampling with beams (do_sample with num_beams > 1) "
                             "is not implemented; choose one")

    @classmethod
    def from_dict(cls, options: Mapping[str, Any], source: str = "generation config",
                  **overrides: Any) -> GenerationConfig:
        """The options of a ``generation_config.json`` dict (transformers' key names; an
        ``eos_token_id`` int or list becomes ``eos_ids``), then ``overrides`` (field names).
        Keys textkit does not apply, at a non-neutral value, are named in a warning."""
        fields = {k: v for k, v in options.items() if k in _KEYS}
        eos = fields.pop("eos_token_id", None)
        if eos is not None:
            fields["eos_ids"] = tuple(eos) if isinstance(eos, list) else (int(eos),)
        if isinstance(fields.get("stop_strings"), str):
            fields["stop_strings"] = (fields["stop_strings"],)
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
        neutral = {"num_beam_groups": 1, "diversity_penalty": 0.0, "typical_p": 1.0,
                   "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "bad_words_ids": None,
                   "forced_bos_token_id": None, "forced_eos_token_id": None,
                   "encoder_repetition_penalty": 1.0, "renormalize_logits": False,
                   "min_length": 0, "suppress_tokens": None, "begin_suppress_tokens": None}
        ignored = {k: v for k, v in options.items()
                   if k not in _KEYS and k not in _IGNORED and neutral.get(k, object()) != v
                   and v is not None}
        if ignored:
            warnings.warn(f"{source}: generation options textkit does not apply: {ignored}",
                          UserWarning, stacklevel=2)
        return cls(**{**fields, **overrides})


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
        logits = jnp.where(_banned_ngrams(state.history, n, logits.shape[-1]),
                           NEG_INF, logits)
    if config.min_new_tokens:
        eos = jnp.zeros(logits.shape[-1], bool).at[jnp.asarray(config.eos_ids)].set(True)
        logits = jnp.where(eos & (state.step < config.min_new_tokens), NEG_INF, logits)
    return logits


def _banned_ngrams(history: jax.Array, n: int, vocab: int) -> jax.Array:
    """bool[N, V]: ids that would repeat an n-gram of ``history`` int32[N, H] (each row's
    prompt then its generated ids, -1 after them)."""
    rows, width = history.shape
    filled = _filled(history)                                                   # int32[N]
    index = jnp.arange(width)
    if n == 1:
        valid = history >= 0
        return jnp.zeros((rows, vocab), bool).at[
            jnp.arange(rows)[:, None], jnp.where(valid, history, 0)].max(valid)
    # the last n - 1 ids of each row, then every earlier window of n - 1 that equals them
    tail = jnp.take_along_axis(history, (filled[:, None] - (n - 1) + jnp.arange(n - 1)) % width,
                               axis=1)                                          # [N, n-1]
    starts = index[: width - n + 1]                                             # [J]
    windows = jnp.stack([history[:, starts + i] for i in range(n - 1)], -1)     # [N, J, n-1]
    match = jnp.all(windows == tail[:, None, :], -1)                            # [N, J]
    match &= (starts[None, :] + n - 1 < filled[:, None]) & (filled[:, None] >= n - 1)
    match &= jnp.all(windows >= 0, -1)
    following = history[:, starts + n - 1]                                      # [N, J]
    return jnp.zeros((rows, vocab), bool).at[
        jnp.arange(rows)[:, None], jnp.where(match, following, 0)].max(match)


def _filled(history: jax.Array) -> jax.Array:
    """Columns of ``history`` int32[N, H] in use per row (ids >= 0)."""
    return (history >= 0).sum(axis=1).astype(jnp.int32)


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
            write = jnp.arange(history.shape[1]) == _filled(history)[:, None]   # [N, H]
            history = jnp.where(s.running[:, None] & write, token[:, None], history)
        if config.repetition_penalty != 1.0:
            seen = seen.at[jnp.arange(token.shape[0]), token].max(s.running)
        new_length = s.step + 1
        return _Rows(
            step=new_length, cache=cache, last=token,
            tokens=jnp.where(positions == s.step, token[:, None], s.tokens),
            lengths=jnp.where(s.running, new_length, s.lengths),
            running=s.running & ~jnp.isin(token, eos) & (new_length < config.max_new_tokens),
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
            room = limit - config.max_new_tokens if limit is not None else None
            if room is not None and len(ids) > room:
                if not self.truncate or room < 1:
                    raise ValueError(
                        f"prompt {index} has {len(ids)} tokens, but the model takes "
                        f"{limit} positions and max_new_tokens={config.max_new_tokens} leaves "
                        f"{max(room, 0)} for the prompt (shorten it, lower max_new_tokens, or "
                        f"truncate=True to cut it from the left)")
                warnings.warn(f"prompt {index}: {len(ids)} tokens cut to its last {room} "
                              f"(max_new_tokens={config.max_new_tokens} of {limit} positions)",
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
               seed: int) -> _Rows:
        """Prefilled loop state for up to ``batch_size`` prompts (the batch padded)."""
        batch = self.batch_size
        width = _round_up(max(map(len, rows)), 8)
        tokens = np.full((batch, width), self.pad_id, np.int32)
        mask = np.zeros((batch, width), bool)
        for i, ids in enumerate(rows):
            tokens[i, width - len(ids):], mask[i, width - len(ids):] = ids, True
        tokens[len(rows):, -1], mask[len(rows):, -1] = self.pad_id, True     # empty rows
        vocab = self.model.config.vocab_size
        slots = width + config.max_new_tokens
        cache = _prefill(self.model, params, jnp.asarray(tokens), jnp.asarray(mask),
                         slots=slots)
        seen = np.zeros((batch, vocab), bool)
        history = np.full((batch, width + config.max_new_tokens), -1, np.int32)
        for i, ids in enumerate(rows):
            seen[i, ids] = True
            history[i, :len(ids)] = ids
        running = np.arange(batch) < len(rows)
        return _Rows(step=jnp.zeros((), jnp.int32), cache=cache,
                     last=jnp.asarray(tokens[:, -1]),
                     tokens=jnp.full((batch, config.max_new_tokens), self.pad_id, jnp.int32),
                     lengths=jnp.zeros((batch,), jnp.int32), running=jnp.asarray(running),
                     seen=jnp.asarray(seen), history=jnp.asarray(history),
                     rng=jax.random.key(seed))

    # ------------------------------------------------------------------------ generation
    def generate(self, params: PyTree, prompts: Sequence[str | Sequence[int]], *,
                 seed: int = 0, **options: Any) -> list[Generation]:
        """One ``Generation`` per prompt (a string, or token ids), in the prompts' order.
        ``options`` replace ``GenerationConfig`` fields for this call."""
        results: dict[int, Generation] = {}
        for index, piece in self._run(params, prompts, seed, options, stream=False):
            results[index] = piece
        return [results[i] for i in range(len(prompts))]

    def generate_stream(self, params: PyTree, prompts: Sequence[str | Sequence[int]], *,
                        chunk_size: int = 8, seed: int = 0,
                        **options: Any) -> Iterator[tuple[int, str]]:
        """``(prompt index, text piece)`` as tokens are produced, ``chunk_size`` tokens per
        compiled call (1: a host round trip per token). Joining a prompt's pieces gives its
        ``generate`` text. Greedy and sampling only."""
        yield from self._run(params, prompts, seed, {**options, "_chunk": chunk_size},
                             stream=True)

    def warm_up(self, params: PyTree, prompt_lengths: Sequence[int] = (8,), **options: Any
                ) -> None:
        """Compile the programs of prompts up to each length in ``prompt_lengths`` (rounded
        up to a multiple of 8) with this generator's settings, so a server answers its first
        request without compiling."""
        for length in prompt_lengths:
            self.generate(params, [[self.pad_id] * max(1, length)],
                          **{**options, "max_new_tokens": options.get(
                              "max_new_tokens", self.config.max_new_tokens)})

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
        step = chunk or (8 if config.stop_strings else config.max_new_tokens)

        def dispatch(batch: tuple[int, list[int]]) -> Any:    # (batch number, prompt indices)
            number, indices = batch
            return self._dispatch_batch(params, [rows[i] for i in indices], config,
                                        seed + number, step)

        for (_, indices), started in one_ahead(enumerate(self._batches(rows)), dispatch):
            yield from self._collect_batch(params, indices, started, config, step, stream)

    def _dispatch_batch(self, params: PyTree, rows: list[list[int]], config: GenerationConfig,
                        seed: int, step: int) -> Any:
        """Start one batch of prompts on the device, not waiting for it: beam search's
        ``DecodeOutput``, or the greedy / sampling loop state after its first ``step`` tokens."""
        state = self._start(params, rows, config, seed)
        if config.num_beams > 1:
            return beam_search(model_step_fn(self.model), params, state.cache, state.last,
                               beam_size=config.num_beams, max_length=config.max_new_tokens,
                               eos_id=config.eos_ids, alpha=config.length_penalty,
                               length_offset=0.0, pad_id=self.pad_id,
                               min_length=config.min_new_tokens, hf_finish=True)
        no_stop = jnp.zeros(self.batch_size, bool)
        return _advance(self.model, params, state, no_stop,
                        jnp.int32(min(step, config.max_new_tokens)), config=config,
                        pad_id=self.pad_id)

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
        count = len(indices)
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
                if not bool(state.running[r]) or int(state.step) >= config.max_new_tokens:
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
            until = min(int(state.step) + step, config.max_new_tokens)
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
