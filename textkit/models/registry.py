"""Model registry: ``get_model(name, **overrides)`` and ``list_models()``.

Each model file registers its presets with ``register_model(name, family)``: the decorated
function takes keyword overrides and returns a flax ``nn.Module`` whose config is a frozen
dataclass. Example::

    @register_model("transformer_base", family="translation")
    def transformer_base(**overrides):
        return Transformer(dataclasses.replace(TransformerConfig(...), **overrides))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_REGISTRY: dict[str, tuple[str, Callable[..., Any]]] = {}


def register_model(name: str, family: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering a preset builder under ``name`` in ``family``
    ("translation", "language_model" or "classification")."""

    def wrap(builder: Callable[..., Any]) -> Callable[..., Any]:
        if name in _REGISTRY:
            raise ValueError(f"model {name!r} is registered twice")
        _REGISTRY[name] = (family, builder)
        return builder

    return wrap


def get_model(name: str, **overrides: Any) -> Any:
    """Build the registered model ``name`` with config fields replaced by ``overrides``."""
    try:
        _, builder = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; available: {', '.join(sorted(_REGISTRY))}") from None
    return builder(**overrides)


def list_models(family: str | None = None) -> list[str]:
    """Sorted names of the registered models, optionally of one family only."""
    return sorted(n for n, (f, _) in _REGISTRY.items() if family is None or f == family)
