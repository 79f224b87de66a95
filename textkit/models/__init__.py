"""Pure-function (flax.linen init/apply) models, their registry and decoding.

Each model module registers its presets on import; add one import line per module here.
"""

from textkit.models.registry import get_model, list_models, register_model

__all__ = ["get_model", "list_models", "register_model"]
from textkit.models.transformer import Transformer, TransformerConfig  # noqa: E402
__all__ += ["Transformer", "TransformerConfig"]
