"""Pure-function (flax.linen init/apply) models, their registry and decoding.

Importing this package registers every preset (``list_models()`` shows them).
"""

from textkit.decoding.beam_search import beam_search
from textkit.decoding.contract import DecodeOutput, length_penalty, model_step_fn, prefill
from textkit.decoding.sampling import greedy_search, sample
from textkit.decoding.translator import Translator
from textkit.models.classifier import RNNClassifier, RNNClassifierConfig, TextCNN, TextCNNConfig
from textkit.models.gnmt import GNMT, GNMTConfig
from textkit.models.lstm_lm import AWDLSTMLM, LSTMLM, AWDLSTMLMConfig, LSTMLMConfig
from textkit.models.registry import get_model, list_models, register_model
from textkit.models.transformer import Transformer, TransformerConfig
from textkit.models.transformer_lm import TransformerLM, TransformerLMConfig

__all__ = [
    "AWDLSTMLM", "AWDLSTMLMConfig", "DecodeOutput", "GNMT", "GNMTConfig", "LSTMLM",
    "LSTMLMConfig", "RNNClassifier", "RNNClassifierConfig", "TextCNN", "TextCNNConfig",
    "Transformer", "TransformerConfig", "TransformerLM", "TransformerLMConfig", "Translator",
    "beam_search", "get_model", "greedy_search", "length_penalty", "list_models",
    "model_step_fn", "prefill", "register_model", "sample",
]
