"""textkit: a JAX-based, functional NLP toolkit.

Importing ``textkit`` is cheap: the subpackages are imported on first use, and
``textkit.data``, ``textkit.batchify`` and ``textkit.vocab`` never import jax or flax.
``textkit.TextkitError`` is the base class of every error textkit raises on purpose.
Importing it also keeps freed host memory for reuse (``textkit.host_memory``; opt out with
``TEXTKIT_KEEP_FREED_MEMORY=0``), which saves XLA:CPU from faulting every call's buffers in.
"""

import importlib

from textkit.errors import ConfigError, TextkitError
from textkit.host_memory import keep_freed_memory

keep_freed_memory()

__version__ = "0.2.0.dev0"

_SUBMODULES = (
    "batchify",
    "cli",
    "data",
    "decoding",
    "embedding",
    "errors",
    "host_memory",
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
