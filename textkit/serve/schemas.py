"""The JSON bodies the server takes (pydantic models, OpenAI's field names) and its error
object.

A body that is not JSON, a field of the wrong type or out of range, or a field this server does
not take answers 400 with OpenAI's error object naming the field (``error_body``); fields
OpenAI defines but this server does not implement (``ignored``: e.g. ``presence_penalty``,
``user``) are accepted and ignored only at their neutral value. Ranges follow OpenAI's API:
``temperature`` in [0, 2], ``top_p`` in (0, 1], ``n`` 1..``MAX_N``, at most 4 ``stop``
strings, completions' ``logprobs`` 0..5, chat's ``top_logprobs`` 0..20.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = ["MAX_N", "ChatRequest", "CompletionRequest", "EmbeddingRequest", "Message",
           "RequestError", "TranslateRequest", "error_body"]

MAX_N = 16
"""Most choices one request may ask for."""

_NEUTRAL = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "best_of": 1, "user": None,
            "suffix": None, "logit_bias": None, "stream_options": None, "service_tier": None,
            "store": None, "metadata": None, "parallel_tool_calls": None,
            "response_format": None, "encoding_format": "float", "dimensions": None}
"""OpenAI's fields this server does not implement, at the value that asks for nothing."""


def error_body(message: str, param: str | None = None,
               kind: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class RequestError(Exception):
    """A request the server refuses: ``status`` (4xx), the ``param`` it names, ``kind``
    (OpenAI's error type)."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind

    def body(self) -> dict[str, Any]:
        """The error object of the response."""
        return error_body(str(self), self.param, self.kind)


def _field(loc: tuple[Any, ...]) -> str | None:
    """The field path of a pydantic error location, without its union members' tags
    ("str", "list[int]", ...)."""
    parts = [str(part) for part in loc
             if isinstance(part, int) or ("[" not in part and part not in _TYPE_TAGS)]
    return ".".join(parts) or None


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


def _refusal(errors: list[dict[str, Any]]) -> RequestError:
    """One ``RequestError`` for pydantic's errors: the first field, and what each form of it
    (a union's members) expected."""
    param = _field(errors[0]["loc"])
    top = errors[0]["loc"][:1]
    messages = list(dict.fromkeys(e["msg"] for e in errors if e["loc"][:1] == top))
    text = "; or ".join(messages[:3])
    return RequestError(f"{param}: {text}" if param else text, param)


class _Body(BaseModel):
    """Unknown fields are refused; OpenAI's unimplemented ones pass at their neutral value
    (``parse``)."""

    model_config = ConfigDict(extra="allow", strict=True)   # "12" is not an int here

    @classmethod
    def parse(cls, data: Any) -> Any:
        """The validated body of JSON ``data``, or a ``RequestError`` naming the field."""
        if not isinstance(data, dict):
            raise RequestError(f"the body must be a JSON object, not {type(data).__name__}")
        try:
            body = cls.model_validate(data)
        except ValidationError as err:
            raise _refusal(err.errors()) from None
        for name, value in (body.model_extra or {}).items():
            if name not in _NEUTRAL:
                raise RequestError(f"unknown field {name!r}", name)
            if value != _NEUTRAL[name] and not (name == "stream_options"
                                                and isinstance(value, dict)):
                raise RequestError(f"{name}={value!r} is not implemented by this server "
                                   f"(only {_NEUTRAL[name]!r})", name)
        body.check()
        return body

    def check(self) -> None:
        """Checks across fields (``RequestError``)."""


Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
Stop = str | Annotated[list[str], Field(max_length=4)]


class _Sampling(_Body):
    """The sampling fields both generation endpoints take (None: the checkpoint's default,
    else OpenAI's; ``docs/serving.md``)."""

    model: str | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None
    stop: Stop | None = None
    seed: int | None = None
    n: Annotated[int, Field(ge=1, le=MAX_N)] = 1
    stream: bool = False

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, value: Any) -> Any:
        strings = [value] if isinstance(value, str) else value or []
        if any(not s for s in strings):
            raise ValueError("stop strings must not be empty")
        return value

    def stop_strings(self) -> tuple[str, ...]:
        """``stop`` as a tuple."""
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: ``prompt`` a string, a list of strings, token ids or a list of
    token-id lists."""

    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("prompt is an empty list")
        return value


class Message(BaseModel):
    """A chat message: ``role`` and ``content`` (a string, or text parts)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[dict[str, Any]]

    def text(self) -> str:
        """The content as one string (text parts joined; other parts refused)."""
        if isinstance(self.content, str):
            return self.content
        texts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError("only text content parts ({'type': 'text', 'text': ...}) "
                                 "are supported")
            texts.append(part["text"])
        return "".join(texts)


class ChatRequest(_Sampling):
    """``POST /v1/chat/completions``: ``messages`` through the checkpoint's chat template."""

    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None

    def check(self) -> None:
        if self.top_logprobs and not self.logprobs:
            raise RequestError("top_logprobs needs logprobs: true", "top_logprobs")


class EmbeddingRequest(_Body):
    """``POST /v1/embeddings``: ``input`` a string or a list of strings."""

    model: str | None = None
    input: str | Annotated[list[str], Field(min_length=1)]


class TranslateRequest(_Body):
    """``POST /v1/translate``: ``text`` a list of sources; ``src_lang`` / ``tgt_lang`` for a
    multilingual checkpoint; ``beam_size`` (default the checkpoint's)."""

    model: str | None = None
    text: Annotated[list[str], Field(min_length=1)]
    src_lang: str | None = None
    tgt_lang: str | None = None
    beam_size: Annotated[int, Field(ge=1, le=16)] | None = None
