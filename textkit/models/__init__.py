"""Pure-function (flax.linen init/apply) models and their registry.

Importing this package registers every preset (``list_models()`` shows them). Decoding lives in
``textkit.decoding``, foreign checkpoint formats in ``textkit.pretrained`` (both above this
package: ``textkit.models`` imports neither).
"""

from textkit.models.classifier import RNNClassifier, RNNClassifierConfig, TextCNN, TextCNNConfig
from textkit.models.config import ModelConfig, max_positions, parse_overrides
from textkit.models.decoder_lm import DecoderLM, DecoderLMConfig
from textkit.models.encoder import Encoder, EncoderConfig
from textkit.models.gnmt import GNMT, GNMTConfig
from textkit.models.lstm_lm import AWDLSTMLM, LSTMLM, AWDLSTMLMConfig, LSTMLMConfig
from textkit.models.registry import (
    config_class,
    get_model,
    list_models,
    register_model,
    register_preset,
)
from textkit.models.sentence_encoder import SentenceEncoder, SentenceEncoderConfig
from textkit.models.transformer import Transformer, TransformerConfig
from textkit.models.transformer_lm import TransformerLM, TransformerLMConfig

__all__ = [
    "AWDLSTMLM", "AWDLSTMLMConfig", "DecoderLM", "DecoderLMConfig", "Encoder", "EncoderConfig",
    "GNMT", "GNMTConfig", "LSTMLM", "LSTMLMConfig",
    "ModelConfig", "RNNClassifier", "RNNClassifierConfig", "SentenceEncoder",
    "SentenceEncoderConfig", "TextCNN", "TextCNNConfig",
    "Transformer", "TransformerConfig", "TransformerLM", "TransformerLMConfig", "config_class",
    "get_model", "list_models", "max_positions", "parse_overrides", "register_model",
    "register_preset",
]
