"""Deprecated: atomic writers moved to ``textkit._io``; this re-export goes in the next release."""

from __future__ import annotations

import warnings

from textkit._io import write_json_atomic, write_text_atomic

__all__ = ["write_json_atomic", "write_text_atomic"]

warnings.warn("textkit.training.files is deprecated; import write_text_atomic / "
              "write_json_atomic from textkit._io", DeprecationWarning, stacklevel=2)
