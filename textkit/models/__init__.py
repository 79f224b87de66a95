"""Pure-function (flax.linen init/apply) models, their registry and decoding.

Each model module registers its presets on import; add one import line per module here.
"""

from textkit.models.registry import get_model, list_models, register_model

__all__ = ["get_model", "list_models", "register_model"]
from textkit.models.decoding import DecodeOutput, length_penalty, model_step_fn, prefill  # noqa: E402,I001
from textkit.models.beam_search import beam_search  # noqa: E402
from textkit.models.sampling import greedy_search, sample  # noqa: E402
from textkit.models.translator import Translator  # noqa: E402
__all__ += ["DecodeOutput", "Translator", "beam_search", "greedy_search", "length_penalty", "model_step_fn", "prefill", "sample"]  # noqa: E501
from textkit.models.transformer import Transformer, TransformerConfig  # noqa: E402,I001
__all__ += ["Transformer", "TransformerConfig"]
from textkit.models.gnmt import GNMT, GNMTConfig  # noqa: E402,I001
from textkit.models.lstm_lm import AWDLSTMLM, AWDLSTMLMConfig, LSTMLM, LSTMLMConfig  # noqa: E402,I001
__all__ += ["AWDLSTMLM", "AWDLSTMLMConfig", "GNMT", "GNMTConfig", "LSTMLM", "LSTMLMConfig"]
from textkit.models.transformer_lm import TransformerLM, TransformerLMConfig  # noqa: E402,I001
__all__ += ["TransformerLM", "TransformerLMConfig"]
from textkit.models.classifier import RNNClassifier, RNNClassifierConfig, TextCNN, TextCNNConfig  # noqa: E402,I001,E501
__all__ += ["RNNClassifier", "RNNClassifierConfig", "TextCNN", "TextCNNConfig"]
