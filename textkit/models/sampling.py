"""Deprecated: moved to ``textkit.decoding.sampling`` (this path goes in the next release)."""

import warnings

from textkit.decoding.sampling import greedy_search, sample

__all__ = ["greedy_search", "sample"]

warnings.warn("textkit.models.sampling moved to textkit.decoding.sampling",
              DeprecationWarning, stacklevel=2)
