"""Deprecated: moved to ``textkit.decoding.translator`` (this path goes in the next release).

``Translator`` no longer holds parameters: ``Translator(model, src_tokenizer, tgt_tokenizer,
...)`` and ``translate(params, texts)``.
"""

import warnings

from textkit.decoding.translator import Translator, default_max_length, encode_and_search

__all__ = ["Translator", "default_max_length", "encode_and_search"]

warnings.warn("textkit.models.translator moved to textkit.decoding.translator",
              DeprecationWarning, stacklevel=2)
