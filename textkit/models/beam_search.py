"""Deprecated: moved to ``textkit.decoding.beam_search`` (this path goes in the next release)."""

import sys
import types
import warnings

from textkit.decoding.beam_search import beam_search

__all__ = ["beam_search"]

warnings.warn("textkit.models.beam_search moved to textkit.decoding.beam_search",
              DeprecationWarning, stacklevel=2)


class _CallableModule(types.ModuleType):
    """Once imported, this submodule shadows ``textkit.models.beam_search`` (the function), so
    ``from textkit.models import beam_search`` finds the module: calling it runs the function."""

    def __call__(self, *args, **kwargs):
        return beam_search(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
