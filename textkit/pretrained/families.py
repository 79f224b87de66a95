"""Which weight map describes a textkit model: ``SEQ2SEQ_FAMILIES`` (the encoder-decoder
checkpoint families by ``TransformerConfig.architecture``) and ``weight_map_of(model)``, the
shared walker's entries of any model ``load_pretrained`` returns."""

from __future__ import annotations

from typing import Any

from textkit.models.decoder_lm import DecoderLM
from textkit.models.encoder import Encoder
from textkit.models.transformer import Transformer
from textkit.pretrained import bart, decoders, encoders, m2m100, marian, seq2seq, t5
from textkit.pretrained.errors import UnsupportedArchitectureError
from textkit.pretrained.weights import Entry

__all__ = ["SEQ2SEQ_FAMILIES", "model_type_of", "weight_map_of"]

SEQ2SEQ_FAMILIES: dict[str, seq2seq.Seq2SeqFamily] = {
    family.architecture: family
    for family in (marian.FAMILY, bart.FAMILY, bart.MBART, m2m100.FAMILY, t5.FAMILY, t5.MT5)}
"""``TransformerConfig.architecture`` -> its encoder-decoder checkpoint family."""


def weight_map_of(model: Any) -> list[Entry]:
    """The ``Entry``s (textkit path, transformers names, transform) of ``model``: a
    ``DecoderLM``, an ``Encoder`` or a ``Transformer`` of a checkpoint family;
    ``UnsupportedArchitectureError`` for any other."""
    if isinstance(model, DecoderLM):
        return decoders.weight_map(model.config)
    if isinstance(model, Encoder):
        return [Entry(*entry) for entry in encoders.weight_map(model.config)]
    if isinstance(model, Transformer) and model.config.architecture in SEQ2SEQ_FAMILIES:
        return SEQ2SEQ_FAMILIES[model.config.architecture].weight_map(model.config)
    raise UnsupportedArchitectureError(
        f"{type(model).__name__} (architecture {getattr(model.config, 'architecture', None)!r})"
        f" has no Hugging Face layout, so no transformers module names; load a checkpoint "
        f"with load_pretrained")


def model_type_of(model: Any) -> str:
    """``config.json``'s ``model_type`` of ``model`` (``weight_map_of``'s models)."""
    if isinstance(model, Transformer):
        return SEQ2SEQ_FAMILIES[model.config.architecture].model_type
    return model.config.architecture
