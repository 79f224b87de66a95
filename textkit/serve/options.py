"""What a generation request asks of the engine: its fields, else the checkpoint's
``generation_config.json`` (read by the one reader, ``textkit.decoding.generation_config``),
else OpenAI's defaults.

=================  ============================================  ===========================
field              the checkpoint's, when it sets it              else (OpenAI's)
=================  ============================================  ===========================
``temperature``    ``temperature``; ``do_sample: false``: greedy  1.0 (0: greedy)
``top_p``          ``top_p``                                      1.0
``top_k``          ``top_k``                                      none (0 or -1: none)
``max_tokens``     ``max_new_tokens``, or ``max_length`` less     completions: 16; chat: the
                   the prompt                                     rest of the context
``stop``           ``stop_strings``                               none
``seed``           --                                             a random one per request
=================  ============================================  ===========================

A default ``max_tokens`` is cut to the room the context leaves; a ``max_tokens`` the request
gives that does not fit is refused (``RequestError`` naming it). The checkpoint's EOS ids end
every choice.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping
from typing import Any

from textkit.decoding.generation_config import (
    GenerationConfig,
    given_fields,
    warn_unapplied,
)
from textkit.serve.engine import Sampling
from textkit.serve.schemas import ChatRequest, CompletionRequest, RequestError

__all__ = ["OPENAI_MAX_TOKENS", "SERVER_APPLIES", "Defaults"]

OPENAI_MAX_TOKENS = 16
"""OpenAI's ``max_tokens`` default of ``/v1/completions``."""

SERVER_APPLIES = frozenset({"do_sample", "temperature", "top_k", "top_p", "max_new_tokens",
                            "max_length", "stop_strings", "eos_ids"})
"""The generation options the server follows (a checkpoint's others are warned about)."""


@dataclasses.dataclass(frozen=True)
class Defaults:
    """A checkpoint's generation defaults (None: it sets none, OpenAI's apply)."""

    eos_ids: tuple[int, ...]
    greedy: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    config: GenerationConfig = GenerationConfig()
    sets_length: bool = False
    stop: tuple[str, ...] = ()

    @classmethod
    def from_checkpoint(cls, generation: Mapping[str, Any],
                        tokenizer_eos: tuple[int, ...]) -> Defaults:
        """The defaults of a ``generation_config.json`` dict; EOS ids its own, else the
        tokenizer's. Options the server does not apply are named in a ``UserWarning``."""
        config = GenerationConfig.from_dict(generation, "generation_config.json")
        warn_unapplied(config, SERVER_APPLIES, "the server")
        given = given_fields(generation)
        eos = config.eos_ids or tuple(tokenizer_eos)
        if not eos:
            raise ValueError("the checkpoint names no EOS id (generation_config.json or the "
                             "tokenizer)")
        return cls(
            eos_ids=eos,
            greedy=(not config.do_sample) if "do_sample" in given else None,
            temperature=config.temperature if "temperature" in given else None,
            top_p=config.top_p if "top_p" in given else None,
            top_k=config.top_k if "top_k" in given else None,
            config=config,
            sets_length=bool({"max_new_tokens", "max_length"} & given),
            stop=config.stop_strings)

    def max_new_tokens(self, request: CompletionRequest | ChatRequest, prompt_length: int,
                       context: int) -> int:
        """The choice's new tokens (module docstring), checked against ``context``."""
        room = context - prompt_length
        field = "max_tokens"
        asked = request.max_tokens
        if isinstance(request, ChatRequest) and request.max_completion_tokens is not None:
            field, asked = "max_completion_tokens", request.max_completion_tokens
        prompt_field = "messages" if isinstance(request, ChatRequest) else "prompt"
        if room < 1:
            raise RequestError(f"{prompt_field}: the prompt has {prompt_length} tokens; the "
                               f"context is {context} tokens, leaving none to generate",
                               prompt_field)
        if asked is not None:
            if asked > room:
                raise RequestError(f"{field}={asked}: the prompt has {prompt_length} tokens "
                                   f"and the context is {context}, so at most {room} new "
                                   f"tokens fit", field)
            return asked
        if self.sets_length:
            return min(self.config.new_tokens(prompt_length), room)
        return room if isinstance(request, ChatRequest) else min(OPENAI_MAX_TOKENS, room)

    def sampling(self, request: CompletionRequest | ChatRequest, prompt_length: int,
                 context: int, *, seed: int, prompt_index: int, choice: int) -> Sampling:
        """The engine's ``Sampling`` of one choice."""
        if request.temperature is not None:
            greedy, temperature = request.temperature == 0, request.temperature or 1.0
        else:
            greedy = bool(self.greedy)
            temperature = self.temperature if self.temperature is not None else 1.0
        top_k = request.top_k if request.top_k is not None else self.top_k or 0
        top_p = request.top_p if request.top_p is not None else self.top_p or 1.0
        stop = request.stop_strings() if request.stop is not None else self.stop
        return Sampling(
            max_new_tokens=self.max_new_tokens(request, prompt_length, context),
            eos_ids=self.eos_ids, do_sample=not greedy, temperature=float(temperature),
            top_k=max(int(top_k), 0), top_p=float(top_p), seed=seed,
            prompt_index=prompt_index, choice=choice, stop=stop)


def request_seed(request: CompletionRequest | ChatRequest) -> int:
    """The request's ``seed``, else a random one."""
    return request.seed if request.seed is not None else secrets.randbits(32)
