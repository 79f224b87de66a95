"""textkit: a JAX-based, functional NLP toolkit.

Importing ``textkit`` is cheap: the subpackages are imported on first use, and
``textkit.data``, ``textkit.batchify`` and ``textkit.vocab`` never import jax or flax.
``textkit.TextkitError`` is the base class of every error textkit raises on purpose.
"""

import importlib

from textkit.errors import ConfigError, TextkitError

__version__ = "0.2.0.dev0"

_SUBMODULES = (
    "batchify",
    "cli",
    "data",
    "decoding",
    "embedding",
    "errors",
    "models",
    "parallel",
    "precision",
    "pretrained",
    "settings",
    "tasks",
    "training",
    "vocab",
)


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"textkit.{name}")
    raise AttributeError(f"module 'textkit' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES))


__all__ = ["ConfigError", "TextkitError", "__version__", *_SUBMODULES]
