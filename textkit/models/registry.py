"""Model registry: ``get_model(name, **overrides)`` and ``list_models()``.

A preset is a model class, its config class and the config fields that differ from the
defaults, registered once in the model's file::

    register_preset("transformer_base", "translation", Transformer, TransformerConfig,
                    d_model=512, num_heads=8)

``register_model(name, family)`` registers any other builder (a function taking keyword
overrides and returning a flax ``nn.Module``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["config_class", "get_model", "list_models", "register_model", "register_preset"]

_REGISTRY: dict[str, tuple[str, Callable[..., Any]]] = {}


def register_model(name: str, family: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering a builder under ``name`` in ``family`` ("translation",
    "language_model" or "classification")."""

    def wrap(builder: Callable[..., Any]) -> Callable[..., Any]:
        if name in _REGISTRY:
            raise ValueError(f"model {name!r} is registered twice")
        _REGISTRY[name] = (family, builder)
        return builder

    return wrap


def register_preset(name: str, family: str, model_cls: type, config_cls: type,
                    **fields: Any) -> None:
    """Register ``model_cls(config_cls(**fields, **overrides))`` as ``name`` in ``family``.

    ``get_model(name, **overrides)`` refuses an override that is no field of ``config_cls``,
    naming the model and its fields.
    """
    known = [f.name for f in dataclasses.fields(config_cls)]

    def build(**overrides: Any) -> Any:
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise ValueError(f"model {name!r} ({config_cls.__name__}) has no field(s) "
                             f"{', '.join(unknown)}; its fields: {', '.join(known)}")
        return model_cls(config_cls(**{**fields, **overrides}))

    build.__doc__ = f"``{name}``: {model_cls.__name__} with {fields} (overridable)."
    build.config_class = config_cls
    register_model(name, family)(build)


def get_model(name: str, **overrides: Any) -> Any:
    """Build the registered model ``name`` with config fields replaced by ``overrides``."""
    try:
        _, builder = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; available: {', '.join(sorted(_REGISTRY))}") from None
    return builder(**overrides)


def config_class(name: str) -> type | None:
    """The config dataclass of the registered preset ``name`` (None for a custom builder)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return getattr(_REGISTRY[name][1], "config_class", None)


def list_models(family: str | None = None) -> list[str]:
    """Sorted names of the registered models, optionally of one family only."""
    return sorted(n for n, (f, _) in _REGISTRY.items() if family is None or f == family)
