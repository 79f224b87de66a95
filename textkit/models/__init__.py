"""Pure-function (flax.linen init/apply) models and their registry.

Importing this package registers every preset (``list_models()`` shows them). Decoding lives in
``textkit.decoding``; its names are still importable from here for one release, with a
``DeprecationWarning`` (imported lazily: ``textkit.models`` never imports ``textkit.decoding``).
"""

import importlib
import warnings

from textkit.models.classifier import RNNClassifier, RNNClassifierConfig, TextCNN, TextCNNConfig
from textkit.models.config import ModelConfig, max_positions, parse_overrides
from textkit.models.gnmt import GNMT, GNMTConfig
from textkit.models.lstm_lm import AWDLSTMLM, LSTMLM, AWDLSTMLMConfig, LSTMLMConfig
from textkit.models.marian import (
    MissingFileError,
    NotMarianCheckpointError,
    Pretrained,
    PretrainedError,
    UnsupportedArchitectureError,
    VocabSizeMismatchError,
    generation_options,
    load_pretrained,
    save_pretrained,
)
from textkit.models.registry import (
    config_class,
    get_model,
    list_models,
    register_model,
    register_preset,
)
from textkit.models.transformer import Transformer, TransformerConfig
from textkit.models.transformer_lm import TransformerLM, TransformerLMConfig

__all__ = [
    "AWDLSTMLM", "AWDLSTMLMConfig", "DecodeOutput", "GNMT", "GNMTConfig", "LSTMLM", "LSTMLMConfig",
    "MissingFileError", "ModelConfig", "NotMarianCheckpointError", "Pretrained",
    "PretrainedError", "RNNClassifier", "RNNClassifierConfig", "TextCNN", "TextCNNConfig",
    "Transformer", "TransformerConfig", "TransformerLM", "TransformerLMConfig", "Translator",
    "UnsupportedArchitectureError", "VocabSizeMismatchError", "beam_search", "config_class",
    "generation_options", "get_model", "greedy_search", "length_penalty", "list_models",
    "load_pretrained", "max_positions", "model_step_fn", "parse_overrides", "prefill",
    "register_model", "register_preset", "sample", "save_pretrained",
]

_MOVED_TO_DECODING = ("DecodeOutput", "Translator", "beam_search", "greedy_search",
                      "length_penalty", "model_step_fn", "prefill", "sample")


def __getattr__(name: str):
    if name in _MOVED_TO_DECODING:
        warnings.warn(f"textkit.models.{name} moved to textkit.decoding.{name}; the old name "
                      f"goes away in the next release", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module("textkit.decoding"), name)
    raise AttributeError(f"module 'textkit.models' has no attribute {name!r}")
