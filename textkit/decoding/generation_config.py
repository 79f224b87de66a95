"""``GenerationConfig``: the one reader of ``generation_config.json`` for the ``Translator`` and
the ``Generator``.

Every key transformers writes is in one of three tables, so none is dropped without a word:

* ``OPTIONS``: the keys textkit reads, each to a ``GenerationConfig`` field (a few change form:
  ``eos_token_id`` an int or a list -> ``eos_ids``; single-token ``bad_words_ids`` ->
  ``banned_ids``; ``forced_eos_token_id`` -> ``forced_eos_id``);
* ``METADATA``: keys that carry no search option (versions, output switches) or whose value
  textkit takes from the tokenizer or the model config (``pad_token_id``, ``bos_token_id``);
* any other key is an option textkit does not implement: at a value other than transformers'
  neutral one (``NEUTRAL``) it is named in a ``UserWarning``, then ignored.

A consumer applies the fields it implements and names the others it was given
(``GenerationConfig.unapplied``, ``warn_unapplied``): the ``Generator`` has no forced
first token, the ``Translator`` no sampling.

Lengths follow transformers: ``max_new_tokens`` (generated tokens) wins over ``max_length``,
which counts the prompt for a decoder-only model and the decoder start token for a seq2seq one
(``new_tokens``); with neither, ``DEFAULT_NEW_TOKENS``. ``min_length`` and ``min_new_tokens``
likewise (``min_tokens``). ``early_stopping`` is transformers' beam finishing rule: ``False``
(a row stops when its best alive hypothesis, scored at the current length, cannot beat its
worst finished one), ``True`` (a row stops once ``num_beams`` hypotheses finished) or
``"never"`` (the best alive one is scored at the row's maximum length when ``length_penalty``
> 0).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any

__all__ = ["DEFAULT_NEW_TOKENS", "EARLY_STOPPING", "METADATA", "NEUTRAL", "OPTIONS",
           "GenerationConfig", "given_fields", "warn_unapplied"]

DEFAULT_NEW_TOKENS = 20
"""Tokens generated when neither ``max_new_tokens`` nor ``max_length`` is given."""
EARLY_STOPPING = (False, True, "never")


def _ids(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value) if isinstance(value, list | tuple) else (int(value),)


def _single_tokens(value: Any) -> tuple[int, ...]:
    return tuple(int(ids[0]) for ids in value or [] if len(ids) == 1)


def _first(value: Any) -> int | None:
    ids = _ids(value)
    return ids[0] if ids else None


def _strings(value: Any) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


OPTIONS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    **{key: (key, lambda v: v) for key in (
        "max_new_tokens", "max_length", "min_new_tokens", "min_length", "num_beams",
        "early_stopping", "do_sample", "temperature", "top_k", "top_p", "min_p",
        "repetition_penalty", "no_repeat_ngram_size", "length_penalty",
        "num_return_sequences")},
    "eos_token_id": ("eos_ids", _ids),
    "stop_strings": ("stop_strings", _strings),
    "bad_words_ids": ("banned_ids", _single_tokens),
    "forced_bos_token_id": ("forced_bos_id", int),
    "forced_eos_token_id": ("forced_eos_id", _first),
    "decoder_start_token_id": ("decoder_start_id", int),
}
"""``generation_config.json`` key -> (``GenerationConfig`` field, how its value converts)."""

METADATA = frozenset({
    "transformers_version", "_from_model_config", "use_cache", "output_attentions",
    "output_hidden_states", "output_scores", "output_logits", "return_dict_in_generate",
    "cache_implementation", "bos_token_id", "pad_token_id"})
"""Keys that are no search option (or whose ids the tokenizer / model config give)."""

NEUTRAL: dict[str, Any] = {
    "num_beam_groups": 1, "diversity_penalty": 0.0,
    "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
    "encoder_repetition_penalty": 1.0, "encoder_no_repeat_ngram_size": 0,
    "renormalize_logits": False, "suppress_tokens": None, "begin_suppress_tokens": None,
    "exponential_decay_length_penalty": None, "sequence_bias": None, "guidance_scale": None,
    "low_memory": None, "penalty_alpha": None, "constraints": None, "force_words_ids": None,
    "remove_invalid_values": False, "max_time": None, "num_assistant_tokens": None}
"""Options textkit does not implement, at the value that means "off" (not warned)."""


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    """What to generate (frozen, hashable): transformers' ``generate`` options that textkit
    implements, under its defaults. ``eos_ids`` empty: the tokenizer's. ``banned_ids``: ids
    never generated. ``forced_bos_id``: the first generated token (a target language);
    ``forced_eos_id``: the token at the length cap. ``decoder_start_id``: a seq2seq model's
    first decoder input (None: the model config's)."""

    max_new_tokens: int | None = None
    max_length: int | None = None
    min_new_tokens: int = 0
    min_length: int = 0
    num_beams: int = 1
    early_stopping: bool | str = False
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    length_penalty: float = 1.0
    eos_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    banned_ids: tuple[int, ...] = ()
    forced_bos_id: int | None = None
    forced_eos_id: int | None = None
    decoder_start_id: int | None = None
    num_return_sequences: int = 1

    def __post_init__(self) -> None:
        optional_positive = lambda v: v is None or v >= 1  # noqa: E731
        checks = [("max_new_tokens", optional_positive(self.max_new_tokens), ">= 1"),
                  ("max_length", optional_positive(self.max_length), ">= 1"),
                  ("num_beams", self.num_beams >= 1, ">= 1"),
                  ("num_return_sequences", self.num_return_sequences >= 1, ">= 1"),
                  ("early_stopping", any(self.early_stopping is v or self.early_stopping == v
                                         and isinstance(v, str) for v in EARLY_STOPPING),
                   'true, false or "never"'),
                  ("temperature", self.temperature > 0, "> 0 (greedy: do_sample=False)"),
                  ("top_k", self.top_k >= 0, ">= 0 (0: no top-k)"),
                  ("top_p", 0.0 < self.top_p <= 1.0, "in (0, 1]"),
                  ("min_p", 0.0 <= self.min_p < 1.0, "in [0, 1)"),
                  ("repetition_penalty", self.repetition_penalty > 0, "> 0 (1: none)"),
                  ("no_repeat_ngram_size", self.no_repeat_ngram_size >= 0, ">= 0"),
                  ("min_new_tokens", self.min_new_tokens >= 0, ">= 0"),
                  ("min_length", self.min_length >= 0, ">= 0"),
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
        """The options of a ``generation_config.json`` dict (transformers' key names, the
        tables of the module docstring), then ``overrides`` (field names). Keys textkit does
        not implement, at a non-neutral value, are named in one ``UserWarning`` naming
        ``source``; so are ``bad_words_ids`` of several tokens."""
        fields: dict[str, Any] = {}
        ignored: dict[str, Any] = {}
        for key, value in options.items():
            if value is None or key in METADATA:
                continue
            if key in OPTIONS:
                field, convert = OPTIONS[key]
                fields[field] = convert(value)
            elif NEUTRAL.get(key, object()) != value:
                ignored[key] = value
        if len(fields.get("banned_ids", ())) < len(options.get("bad_words_ids") or ()):
            ignored["bad_words_ids"] = [ids for ids in options["bad_words_ids"] if len(ids) > 1]
        if ignored:
            warnings.warn(f"{source}: generation options textkit does not apply: {ignored}",
                          UserWarning, stacklevel=2)
        return cls(**{**fields, **overrides})

    def new_tokens(self, prefix_length: int) -> int:
        """Tokens to generate after a prefix of ``prefix_length`` (the prompt of a decoder-only
        model; 1, the start token, for a seq2seq one): ``max_new_tokens``, else ``max_length``
        less the prefix (at least 1), else ``DEFAULT_NEW_TOKENS``."""
        if self.max_new_tokens is not None:
            return self.max_new_tokens
        if self.max_length is not None:
            return max(1, self.max_length - prefix_length)
        return DEFAULT_NEW_TOKENS

    def min_tokens(self, prefix_length: int) -> int:
        """Tokens generated before EOS may end: the larger of ``min_new_tokens`` and
        ``min_length`` less the prefix."""
        return max(self.min_new_tokens, self.min_length - prefix_length, 0)

    def unapplied(self, applied: Collection[str]) -> dict[str, Any]:
        """The fields outside ``applied`` that differ from their defaults."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in applied and getattr(self, f.name) != f.default}


def given_fields(options: Mapping[str, Any]) -> frozenset[str]:
    """The ``GenerationConfig`` fields a ``generation_config.json`` dict sets (a key of
    ``OPTIONS`` with a value), so a consumer can tell a checkpoint's choice from a default."""
    return frozenset(OPTIONS[key][0] for key, value in options.items()
                     if key in OPTIONS and value is not None)


def warn_unapplied(config: GenerationConfig, applied: Collection[str], who: str) -> None:
    """One ``UserWarning`` naming the options of ``config`` that ``who`` does not apply."""
    unapplied = config.unapplied(applied)
    if unapplied:
        warnings.warn(f"{who} does not apply these generation options: {unapplied}",
                      UserWarning, stacklevel=3)
