"""``Translator``: strings in, strings out, through fixed-shape batches and one jit per shape.

Sources are tokenized, sorted by length and cut into groups (``batch_groups``): at most
``batch_size`` sentences and, with ``batch_tokens``, at most that many padded source tokens, the
number of rows always a power of two or ``batch_size`` itself, so that the last sentences fill
smaller groups instead of riding with dummy rows that would be decoded in full. Each group is
padded to a source length rounded up to a multiple of ``bucket_round_to``. Encoding, cache
set-up and beam search run as one compiled program per (rows, source length, output length)
shape, so a whole test set compiles a handful of programs. Results come back in input order,
detokenized by the target tokenizer.

``quantize="int8"`` decodes with int8 weights (``textkit.models.kernels.quantize_int8``; CPU
inference): the parameters given to ``translate`` are quantized once and kept for the next call
with the same parameters object. Each batch multiplies the int8 values in the carrier that is
faster for its rows x beams (``int8_carrier``: int8, always on a CPU with AMX int8 tiles; for
many rows the VNNI product on a CPU with VNNI, or bfloat16 on one with bf16 dot instructions;
the same results), each carrier's copy made once.

What the model accepts is read from its config where it says (``max_positions``,
``input_vocab_size``): a source id outside the source vocabulary is a ``ValueError`` naming
the line (1-based) and the id; a source longer than ``max_positions`` (or ``max_source_length``,
for models without a limit) is truncated to it with one ``LongSourceWarning`` naming the lines
(``on_long_source="truncate"``, the default) or refused with a ``ValueError`` naming the first
such line (``"error"``); output caps never exceed ``max_positions`` either.

Pretrained checkpoints (``textkit.pretrained.load_translator``, Marian / OPUS-MT) are searched as
Hugging Face ``generate`` searches them: ``banned_ids`` (``bad_words_ids``: log-probs set to
-inf, not renormalised), ``forced_eos`` (the token at the output cap is EOS) and
``hf_compatible`` (beam size 1 is greedy search; beam search finishes hypotheses and stops rows
as transformers does, see ``beam_search``), with ``length_offset=0`` so that the length penalty
is ``n ** alpha`` (transformers' ``length_penalty``) rather than GNMT's ``((5 + n) / 6) ** alpha``.
The first decoder input is the model config's ``decoder_start_id`` when it has one (Marian:
the pad id), else the target tokenizer's ``bos_id``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from textkit.decoding.beam_search import beam_search
from textkit.decoding.contract import (
    DecodeOutput,
    PyTree,
    Seq2SeqModel,
    StepWrapper,
    model_step_fn,
)
from textkit.decoding.filters import ExcludeTokensStep
from textkit.decoding.generation_config import GenerationConfig, warn_unapplied
from textkit.decoding.sampling import greedy_search
from textkit.lookahead import one_ahead

MaxLength = int | Callable[[int], int]
LONG_SOURCE_POLICIES = ("truncate", "error")
QUANTIZE_MODES = (None, "int8")


class LongSourceWarning(UserWarning):
    """Sources longer than the model accepts were truncated (the message names the lines)."""


class Tokenizer(Protocol):
    """What the Translator needs of a tokenizer (``SentencePieceTokenizer`` has it): batch
    ``encode`` / ``decode`` and special ids (None where the tokenizer has none)."""

    @property
    def pad_id(self) -> int | None: ...

    @property
    def bos_id(self) -> int | None: ...

    @property
    def eos_id(self) -> int | None: ...

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of every text."""

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Text of every id list."""


def default_max_length(src_length: int) -> int:
    """Output cap for a source of ``src_length`` tokens: ``2 * src_length + 10``."""
    return 2 * src_length + 10


@functools.partial(jax.jit, static_argnames=(
    "model", "max_length", "beam_size", "n_best", "bos_id", "eos_id", "pad_id", "banned_ids",
    "forced_eos", "forced_bos", "no_repeat_ngram", "hf_compatible", "early_stopping",
    "grow_cache"))
def encode_and_search(model: Seq2SeqModel, params: PyTree, src_tokens: jax.Array,
                      caps: jax.Array, alpha: jax.Array, length_offset: jax.Array,
                      min_length: jax.Array | int = 0, *, max_length: int,
                      beam_size: int, n_best: int, bos_id: int, eos_id: int,
                      pad_id: int, banned_ids: tuple[int, ...] = (), forced_eos: bool = False,
                      forced_bos: int | None = None, no_repeat_ngram: int = 0,
                      hf_compatible: bool = False, early_stopping: bool | str = False,
                      grow_cache: bool = True) -> DecodeOutput:
    """Encode src_tokens int32[B, S] and beam-search at most caps int32[B] tokens per row, EOS
    allowed from ``min_length`` int32[] tokens on (``hf_compatible`` with ``beam_size`` 1:
    greedy search; ``early_stopping``: ``beam_search``'s; see the module docstring).

    One compiled program per (model, shapes, static options). Returns DecodeOutput with
    tokens int32[B, n_best, max_length].
    """
    variables = {"params": params}
    encoded = model.apply(variables, src_tokens, method="encode")
    cache = model.apply(variables, encoded, src_tokens, max_length, method="init_cache")
    step = model_step_fn(model)
    if banned_ids:
        step = ExcludeTokensStep(step, banned_ids, renormalize=False)
    if not grow_cache:
        step = OneSegmentStep(step)
    if hf_compatible and beam_size == 1:
        return greedy_search(step, params, cache, bos_id, max_length=max_length, eos_id=eos_id,
                             max_lengths=caps, pad_id=pad_id, min_length=min_length,
                             forced_eos=forced_eos, forced_bos=forced_bos,
                             no_repeat_ngram=no_repeat_ngram)
    return beam_search(step, params, cache, bos_id, beam_size=beam_size,
                       max_length=max_length, eos_id=eos_id, alpha=alpha,
                       length_offset=length_offset, n_best=n_best,
                       max_lengths=caps, pad_id=pad_id, min_length=min_length,
                       forced_eos=forced_eos, forced_bos=forced_bos,
                       no_repeat_ngram=no_repeat_ngram, hf_finish=hf_compatible,
                       early_stopping=early_stopping)


@dataclasses.dataclass(frozen=True)
class OneSegmentStep(StepWrapper):
    """``step_fn`` without its ``resize_cache`` hook: the search keeps the cache at its full
    length from the first step (one segment, one compiled copy of the step) instead of growing
    it (``contract.segment_lengths``). The other hooks pass through (``StepWrapper``)."""

    def resize_cache(self, params: PyTree, cache: PyTree, length: int) -> None:
        """Not supported: the cache stays at its full length."""
        return None


class Translator:
    """Beam-search translation of lists of strings with a seq2seq model.

    The parameters are an argument of every call (``translate(params, texts)``), so one
    Translator serves every checkpoint of a model and shares its compiled programs.

    Args:
      model: a ``Seq2SeqModel`` (Transformer, GNMT); its ``config.pad_id``, if it has one, must
        equal the source tokenizer's ``pad_id``.
      src_tokenizer: ``encode(list[str]) -> list[list[int]]`` (``SentencePieceTokenizer``);
        provides ``pad_id``.
      tgt_tokenizer: ``decode(list[list[int]]) -> list[str]``; provides ``bos_id`` /
        ``eos_id`` / ``pad_id``.
      beam_size: beams per sentence.
      alpha: GNMT length penalty ``((length_offset + n) / (length_offset + 1)) ** alpha``.
      length_offset: the penalty's offset.
      max_length: cap on output tokens (EOS included): an int, or a function of the source
        length; the static output size of a batch is that function of its padded length.
      batch_size: most sentences per batch.
      batch_tokens: optional cap on padded source tokens per batch (rows x source length).
      bucket_round_to: source lengths are padded up to a multiple of this.
      src_append_eos: append the source tokenizer's EOS to every source (for models trained
        on sources ending in EOS; textkit's batch convention has none).
      on_long_source: "truncate" (keep the first ``source_limit`` tokens, EOS included, and
        warn naming the lines) or "error" (``ValueError`` naming the first long line).
      max_source_length: optional cap on source tokens for models without a position limit
        (GNMT); ``source_limit`` is the smaller of it and the model's ``max_positions``.
      banned_ids: target ids never generated (log-probs -inf, not renormalised).
      forced_eos: the token that reaches the output cap is EOS.
      forced_bos: the first output token of every sentence (a target language code; log-prob
        0, counted in the length penalty, as transformers' ``forced_bos_token_id``); it is
        removed from the returned ids and text.
      min_length: output tokens before EOS may end a hypothesis.
      no_repeat_ngram: n > 0: no output repeats one of its own n-grams (transformers'
        ``no_repeat_ngram_size``).
      hf_compatible: search as transformers' ``generate`` (see the module docstring).
      early_stopping: with ``hf_compatible``, transformers' beam finishing rule (False, True
        or "never"; ``textkit.decoding.generation_config``).
      quantize: None, or "int8" (int8 weights, see the module docstring).
      grow_cache: False keeps the decoding cache at its full length from the first step (one
        segment, ``OneSegmentStep``) instead of growing it in segments.
    """

    def __init__(self, model: Seq2SeqModel, src_tokenizer: Tokenizer,
                 tgt_tokenizer: Tokenizer, *, beam_size: int = 4, alpha: float = 0.6,
                 length_offset: float = 5.0, max_length: MaxLength = default_max_length,
                 batch_size: int = 32, batch_tokens: int | None = None,
                 bucket_round_to: int = 8,
                 src_append_eos: bool = False, on_long_source: str = "truncate",
                 max_source_length: int | None = None, banned_ids: Sequence[int] = (),
                 forced_eos: bool = False, forced_bos: int | None = None,
                 min_length: int = 0, no_repeat_ngram: int = 0, hf_compatible: bool = False,
                 early_stopping: bool | str = False, quantize: str | None = None,
                 grow_cache: bool = True) -> None:
        if batch_size < 1 or bucket_round_to < 1 or beam_size < 1:
            raise ValueError(f"batch_size, bucket_round_to and beam_size must be >= 1; got "
                             f"{batch_size}, {bucket_round_to}, {beam_size}")
        if batch_tokens is not None and batch_tokens < 1:
            raise ValueError(f"batch_tokens must be >= 1 or None; got {batch_tokens}")
        if quantize not in QUANTIZE_MODES:
            raise ValueError(f"quantize={quantize!r}; expected one of {QUANTIZE_MODES}")
        if quantize == "int8":
            from textkit.models.kernels import require_int8_backend
            require_int8_backend()
        if on_long_source not in LONG_SOURCE_POLICIES:
            raise ValueError(f"on_long_source={on_long_source!r}; expected one of "
                             f"{LONG_SOURCE_POLICIES}")
        if not callable(max_length) and int(max_length) < 1:
            raise ValueError(f"max_length must be >= 1 or a function; got {max_length!r}")
        self.on_long_source = on_long_source
        config = getattr(model, "config", None)
        self.max_positions: int | None = getattr(config, "max_positions", None)
        """Longest source and output the model accepts (None: unlimited)."""
        self.src_vocab_size: int | None = getattr(config, "input_vocab_size", None)
        limits = [n for n in (self.max_positions, max_source_length) if n is not None]
        self.source_limit: int | None = min(limits) if limits else None
        """Most source tokens (EOS included) a batch row gets (None: unlimited)."""
        if self.source_limit is not None and self.source_limit < 1 + src_append_eos:
            raise ValueError(f"max_source_length={max_source_length} leaves no room for a "
                             f"source token")
        self.model = model
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        self.beam_size, self.alpha, self.length_offset = beam_size, alpha, length_offset
        self.max_length = max_length
        self.batch_size, self.bucket_round_to = batch_size, bucket_round_to
        self.batch_tokens = batch_tokens
        self.quantize = quantize
        self.grow_cache = bool(grow_cache)
        self._quantized: tuple[PyTree, dict[Any, PyTree]] | None = None
        """(params given, {carrier: their int8 values in it})"""
        self.src_append_eos = src_append_eos
        self.banned_ids = tuple(sorted({int(i) for i in banned_ids}))
        self.forced_eos, self.hf_compatible = bool(forced_eos), bool(hf_compatible)
        self.min_length, self.early_stopping = int(min_length), early_stopping
        self.forced_bos = None if forced_bos is None else int(forced_bos)
        self.no_repeat_ngram = int(no_repeat_ngram)
        self.src_pad_id = _special(src_tokenizer, "pad_id", "source")
        start = getattr(config, "decoder_start_id", None)
        self.bos_id = _special(tgt_tokenizer, "bos_id", "target") if start is None else start
        self.eos_id = _special(tgt_tokenizer, "eos_id", "target")
        self.pad_id = _special(tgt_tokenizer, "pad_id", "target")
        model_pad = getattr(getattr(model, "config", None), "pad_id", self.src_pad_id)
        if model_pad != self.src_pad_id:
            raise ValueError(f"the model pads with id {model_pad} but the source tokenizer's "
                             f"pad_id is {self.src_pad_id}")
        self.compiled_shapes: set[tuple[int, int, int]] = set()
        """(rows, source length, output length) of every batch shape run so far."""

    def translate(self, params: PyTree, texts: Sequence[str], *,
                  progress: bool = False) -> list[str]:
        """Translate ``texts`` with ``params``; returns detokenized strings in input order, one
        per text. An empty (or all-whitespace) text translates to ``""`` without decoding."""
        texts = list(texts)
        kept = [i for i, text in enumerate(texts) if text.strip()]
        results = [""] * len(texts)
        if not kept:
            return results
        sources = self.src_tokenizer.encode([texts[i] for i in kept])
        ids = self.translate_ids(params, sources, progress=progress)
        for index, text in zip(kept, self.tgt_tokenizer.decode(ids)):
            results[index] = text
        return results

    def translate_ids(self, params: PyTree, sources: Sequence[Sequence[int]], *,
                      progress: bool = False) -> list[list[int]]:
        """Best hypothesis (ids, final EOS removed) for every source id list, in input order.

        Sources are checked first (``check_sources``): ids in the source vocabulary, lengths
        within ``source_limit`` by the ``on_long_source`` policy."""
        sources = self.check_sources(sources)
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        results: list[list[int]] = [[] for _ in sources]
        groups = self.batch_groups([len(sources[i]) for i in order])
        groups = [order[start:stop] for start, stop in groups]
        bar = tqdm(groups, desc="translating", unit="batch", disable=not progress)
        # Batch n+1 is prepared and dispatched before batch n's output is read back.
        for group, out in one_ahead(bar, lambda group: self._dispatch_group(
                self._decoding_params(params, len(group)), [sources[i] for i in group])):
            self._collect(group, out, results)
        if progress:
            print(f"translated {len(sources)} sentences in {len(groups)} batches, "
                  f"{len(self.compiled_shapes)} batch shapes")
        return results

    def warm_up(self, params: PyTree, max_source_length: int,
                rows: Sequence[int] = (1,)) -> int:
        """Compile now what requests of up to ``max_source_length`` tokens will run.

        The first batch of a new (rows, padded source length) shape compiles its program,
        which takes seconds; a server calls this once at start-up, with the row counts it
        batches requests into (``rows``; 1 for one sentence at a time), so that no request
        pays for it. Every padded source length up to ``max_source_length`` runs once with a
        dummy source. Returns the number of batch shapes compiled so far."""
        eos = self.src_eos_id
        extra = 1 if self.src_append_eos else 0
        lengths = sorted({self._padded_length(n) for n in range(1, max_source_length + 1)})
        for length in lengths:
            for count in rows:
                self.translate_ids(params, [[eos] * max(1, length - extra)] * count)
        return len(self.compiled_shapes)

    def batch_groups(self, lengths: Sequence[int]) -> list[tuple[int, int]]:
        """(start, stop) of each batch over sources of ``lengths`` sorted ascending.

        Each batch takes as many sentences as its row count allows: ``batch_size``, or the
        largest power of two within the ``batch_tokens`` budget at the padded length of its
        longest sentence and within the sentences left. No batch has dummy rows."""
        groups, start = [], 0
        while start < len(lengths):
            rows = self._rows(lengths[start], len(lengths) - start)
            while rows > 1 and self._rows(lengths[start + rows - 1], rows) < rows:
                rows = 1 << ((rows - 1).bit_length() - 1)   # the next power of two down
            groups.append((start, start + rows))
            start += rows
        return groups

    def _rows(self, length: int, available: int) -> int:
        """Rows of a batch whose longest source has ``length`` tokens, ``available`` left."""
        padded = self._padded_length(length)
        limit = min(self.batch_size, available)
        if self.batch_tokens is not None:
            limit = min(limit, max(1, self.batch_tokens // padded))
        return limit if limit == self.batch_size else 1 << (limit.bit_length() - 1)

    def _padded_length(self, length: int) -> int:
        """Source length of a batch whose longest source has ``length`` tokens."""
        padded = math.ceil(max(1, length) / self.bucket_round_to) * self.bucket_round_to
        return padded if self.source_limit is None else min(padded, self.source_limit)

    def _decoding_params(self, params: PyTree, rows: int) -> PyTree:
        """``params`` as a batch of ``rows`` sentences decodes with them: with
        ``quantize="int8"``, int8 values in the carrier for ``rows`` x ``beam_size`` product rows
        (kept for the same params object)."""
        if self.quantize is None:
            return params
        from textkit.models.kernels import int8_carrier, quantize_int8

        if self._quantized is None or self._quantized[0] is not params:
            self._quantized = (params, {jnp.dtype(jnp.int8): quantize_int8(self.model, params)})
        copies = self._quantized[1]
        carrier = jnp.dtype(int8_carrier(rows * self.beam_size))
        if carrier not in copies:
            copies[carrier] = quantize_int8(self.model, copies[jnp.dtype(jnp.int8)],
                                            carrier=carrier)
        return copies[carrier]

    def check_sources(self, sources: Sequence[Sequence[int]]) -> list[list[int]]:
        """Source id lists as the model gets them (EOS appended if asked), each checked.

        An id outside ``[0, src vocab)`` is a ``ValueError`` naming the line (1-based); a
        source over ``source_limit`` tokens is truncated, keeping its final EOS as transformers
        does (one ``LongSourceWarning`` naming the lines), or refused (``ValueError``) by
        ``on_long_source``."""
        eos = [self.src_eos_id] if self.src_append_eos else []
        source_eos = getattr(self.src_tokenizer, "eos_id", None)
        limit, long_lines, checked = self.source_limit, [], []
        for number, source in enumerate(sources, start=1):
            ids = [int(i) for i in source]
            bad = [i for i in ids if i < 0 or (self.src_vocab_size is not None
                                                and i >= self.src_vocab_size)]
            if bad:
                raise ValueError(f"line {number}: source id {bad[0]} is outside the model's "
                                 f"source vocabulary (expected 0 <= id < {self.src_vocab_size}"
                                 f"); do the tokenizer and the model belong together?")
            ids += eos
            if limit is not None and len(ids) > limit:
                if self.on_long_source == "error":
                    raise ValueError(f"line {number}: the source has {len(ids)} tokens but the "
                                     f"model accepts at most {limit} (on_long_source='error')")
                long_lines.append((number, len(ids)))
                end = ids[-1:] if ids[-1] == source_eos else []   # a final EOS is kept
                ids = ids[:limit - len(end)] + end
            checked.append(ids)
        if long_lines:
            shown = ", ".join(f"{n} ({length} tokens)" for n, length in long_lines[:20])
            more = f" and {len(long_lines) - 20} more" if len(long_lines) > 20 else ""
            warnings.warn(f"{len(long_lines)} source line(s) longer than the {limit} tokens the "
                          f"model accepts were truncated to {limit} tokens: line {shown}{more}",
                          LongSourceWarning, stacklevel=3)
        return checked

    @property
    def src_eos_id(self) -> int:
        return _special(self.src_tokenizer, "eos_id", "source")

    def _output_length(self, src_length: int) -> int:
        """Output cap for a source of ``src_length`` tokens, within ``max_positions``."""
        if callable(self.max_length):
            length = max(1, int(self.max_length(src_length)))
        else:
            length = int(self.max_length)
        return length if self.max_positions is None else min(length, self.max_positions)

    def _dispatch_group(self, params: PyTree, group: list[list[int]]) -> Any:
        """Start decoding one group of sources (``batch_groups``) as one batch of
        ``len(group)`` rows; returns the search output on the device (not waited for)."""
        src_length = self._padded_length(max(len(s) for s in group))
        max_length = self._output_length(src_length)
        src_tokens = np.full((len(group), src_length), self.src_pad_id, np.int32)
        caps = np.ones((len(group),), np.int32)
        for row, source in enumerate(group):
            src_tokens[row, :len(source)] = source
            caps[row] = min(self._output_length(len(source)), max_length)
        self.compiled_shapes.add((len(group), src_length, max_length))
        return encode_and_search(
            self.model, params, jnp.asarray(src_tokens), jnp.asarray(caps),
            jnp.float32(self.alpha), jnp.float32(self.length_offset),
            jnp.int32(self.min_length), max_length=max_length,
            beam_size=self.beam_size, n_best=1, bos_id=self.bos_id, eos_id=self.eos_id,
            pad_id=self.pad_id, banned_ids=self.banned_ids, forced_eos=self.forced_eos,
            forced_bos=self.forced_bos, no_repeat_ngram=self.no_repeat_ngram,
            hf_compatible=self.hf_compatible,
            early_stopping=self.early_stopping, grow_cache=self.grow_cache)

    def _collect(self, group: list[int], out: Any, results: list[list[int]]) -> None:
        """Read one dispatched group's best hypotheses back into ``results`` (final EOS
        removed) at the sources' indices ``group``."""
        tokens, lengths = np.asarray(out.tokens[:, 0]), np.asarray(out.lengths[:, 0])
        skip = self.forced_bos is not None
        for row, index in enumerate(group):
            ids = tokens[row, skip:lengths[row]].tolist()
            results[index] = ids[:-1] if ids and ids[-1] == self.eos_id else ids


TRANSLATOR_APPLIES = frozenset({
    "max_new_tokens", "max_length", "min_new_tokens", "min_length", "num_beams",
    "early_stopping", "length_penalty", "eos_ids", "banned_ids", "forced_eos_id",
    "forced_bos_id", "decoder_start_id", "no_repeat_ngram_size"})
"""The ``GenerationConfig`` fields ``translator_options`` maps (others are warned about)."""


def translator_options(config: GenerationConfig, eos_id: int | None = None,
                       who: str = "the Translator") -> dict[str, Any]:
    """``Translator`` arguments that search as transformers' ``generate`` does with
    ``config``: ``beam_size``, ``alpha`` with ``length_offset=0`` (``n ** alpha``), the output
    cap (``max_length`` counts the decoder start token), ``min_length`` likewise,
    ``early_stopping``, ``forced_bos``, ``banned_ids``, ``forced_eos`` (when
    ``forced_eos_token_id`` is the
    target EOS ``eos_id``) and ``hf_compatible=True``. The options it does not map are named
    in one ``UserWarning`` (``who`` does not apply them); so is a forced EOS other than
    ``eos_id``. Keys at their defaults are left out."""
    applied = set(TRANSLATOR_APPLIES)
    forced = config.forced_eos_id
    if forced is not None and eos_id is not None and forced != eos_id:
        applied.discard("forced_eos_id")
    warn_unapplied(config, applied, who)
    options: dict[str, Any] = {
        "beam_size": config.num_beams, "alpha": float(config.length_penalty),
        "length_offset": 0.0, "max_length": config.new_tokens(1),
        "banned_ids": tuple(config.banned_ids), "hf_compatible": True,
        "forced_eos": forced is not None and "forced_eos_id" in applied}
    if config.min_tokens(1):
        options["min_length"] = config.min_tokens(1)
    if config.forced_bos_id is not None:
        options["forced_bos"] = config.forced_bos_id
    if config.no_repeat_ngram_size:
        options["no_repeat_ngram"] = config.no_repeat_ngram_size
    if config.early_stopping is not False:
        options["early_stopping"] = config.early_stopping
    return options


def _special(tokenizer: Tokenizer, name: str, side: str) -> int:
    value = getattr(tokenizer, name, None)
    if value is None:
        raise ValueError(f"the {side} tokenizer {tokenizer!r} has no {name}; the Translator "
                         f"needs it")
    return int(value)
