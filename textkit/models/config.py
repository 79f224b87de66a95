"""``ModelConfig``: the one shape of a model's hyper-parameters, and ``parse_overrides``.

Every model config is a frozen dataclass deriving from ``ModelConfig``. The base owns ``pad_id``
and ``policy`` (keyword-only, so they follow the model's own fields; a ``policy`` string such as
``"mixed_bfloat16"`` is parsed with ``Policy.parse``) and checks what a subclass declares::

    @dataclasses.dataclass(frozen=True)
    class MyConfig(ModelConfig):
        _rates = ("dropout",)                       # 0 <= value < 1
        _choices = {"positions": ("sinusoidal", "learned")}
        dropout: float = 0.1
        positions: str = "sinusoidal"

        def _validate(self) -> None:                # any other check; raise ValueError
            ...

What a model accepts is on its config: ``max_positions`` (tokens per row, None: unlimited),
``input_vocab_size`` / ``output_vocab_size`` (ids must lie in ``[0, size)``);
``max_positions(model)`` reads the first for any model. Model entry points refuse a static
length above ``max_positions`` with a ``ValueError`` at trace time (``check_length``); ids are
data, checked where they are concrete (see ``textkit.models.layers.lookup``).
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from textkit.precision import Policy

__all__ = ["ModelConfig", "max_positions", "parse_overrides"]


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Base of the model configs: ``pad_id``, ``policy`` and declared checks (see above)."""

    tiny: ClassVar[Mapping[str, Any]] = {}
    """Overrides that make any preset of this config class a model of a few thousand
    parameters (sizes only): for conformance tests and smoke runs."""

    _rates: ClassVar[tuple[str, ...]] = ()
    _choices: ClassVar[dict[str, tuple[Any, ...]]] = {}

    pad_id: int = dataclasses.field(default=1, kw_only=True)
    policy: Policy = dataclasses.field(default=Policy(), kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", Policy.parse(self.policy))
        name = type(self).__name__
        for field in self._rates:
            value = getattr(self, field)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name}.{field}={value!r}; expected 0 <= {field} < 1")
        for field, allowed in self._choices.items():
            value = getattr(self, field)
            if value not in allowed:
                raise ValueError(f"{name}.{field}={value!r}; expected one of {allowed}")
        self._validate()

    def _validate(self) -> None:
        """Checks beyond rates and choices (a subclass overrides it; raise ValueError)."""

    @property
    def max_positions(self) -> int | None:
        """Most tokens per row an input or a decoding cache may hold; None: no limit."""
        return None

    @property
    def input_vocab_size(self) -> int | None:
        """Ids the (source) input accepts are ``0 <= id < input_vocab_size``."""
        return _first_field(self, "src_vocab_size", "vocab_size")

    @property
    def output_vocab_size(self) -> int | None:
        """Size of the predicted distribution over (target) tokens; decoder inputs are target
        ids in the same range. None for a model that predicts no tokens."""
        return _first_field(self, "tgt_vocab_size", "vocab_size")

    def check_length(self, length: int, what: str) -> None:
        """Raise ``ValueError`` if ``length`` (a static size) exceeds ``max_positions``."""
        limit = self.max_positions
        if limit is not None and length > limit:
            raise ValueError(
                f"{what} has {length} positions but {type(self).__name__} accepts at most "
                f"max_len={limit}: shorten the input (e.g. a smaller --max-length) or build "
                f"the model with a larger max_len")


def _first_field(config: ModelConfig, *names: str) -> int | None:
    for name in names:
        if hasattr(config, name):
            return int(getattr(config, name))
    return None


def max_positions(model: Any) -> int | None:
    """Most tokens per row ``model`` (or its config) accepts, source and target alike;
    None when unlimited (recurrent models). Recipes refuse a ``--max-length`` above it."""
    config = getattr(model, "config", model)
    limit = getattr(config, "max_positions", None)
    return None if limit is None else int(limit)


def _split_top_level(text: str) -> list[str]:
    """Split ``text`` at commas outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def parse_overrides(text: str | Iterable[str]) -> dict[str, Any]:
    """``"a=1,b=0.1,c=x,w=(3,4)"`` (or a list of such strings, e.g. a repeated flag) ->
    ``{"a": 1, "b": 0.1, "c": "x", "w": (3, 4)}``.

    Values are Python literals where ``ast.literal_eval`` reads them, else strings; quote a
    string that holds a comma. A later key wins. Raises ``ValueError`` for an item that is not
    ``name=value``.
    """
    texts = [text] if isinstance(text, str) else list(text)
    overrides: dict[str, Any] = {}
    for item in (p.strip() for t in texts for p in _split_top_level(t)):
        if not item:
            continue
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key.isidentifier():
            raise ValueError(f"model override {item!r}: expected name=value "
                             "(e.g. 'dropout=0.2,num_layers=3')")
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[key] = value
    return overrides
