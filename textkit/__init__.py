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

_DISTRIBUTION = "textkit-jax"   # the name on the package index; the import name is textkit

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
    if name == "__version__":     # the installed metadata's: pyproject.toml is its one source
        metadata = importlib.import_module("importlib.metadata")
        try:
            return metadata.version(_DISTRIBUTION)
        except metadata.PackageNotFoundError:
            return "0+unknown"    # a source tree on sys.path, never installed
    if name in _SUBMODULES:
        return importlib.import_module(f"textkit.{name}")
    raise AttributeError(f"module 'textkit' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), "__version__", *_SUBMODULES])


__all__ = ["ConfigError", "TextkitError", "__version__", *_SUBMODULES]
