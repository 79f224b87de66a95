"""``Pretrained``: what ``load_pretrained`` returns for every checkpoint family."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

__all__ = ["Kind", "Pretrained"]

Kind = Literal["translation", "encoder", "sentence_encoder", "causal_lm"]


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """A loaded checkpoint, with named fields for every family (not a tuple: families differ
    in what they carry, and a field read by name cannot be mistaken for another).

    ``kind``: "translation" (Marian: a ``Transformer``), "encoder" (an ``Encoder`` with the
    head of ``architectures``), "sentence_encoder" (a ``SentenceEncoder``) or "causal_lm"
    (a ``DecoderLM``). ``model``: the flax module; ``params``: its parameter tree (float32
    numpy arrays as read). ``tokenizer``: the text side a user types into (Marian's source
    ``MarianTokenizer``, an ``EncoderTokenizer``, an ``LMTokenizer``); ``target_tokenizer``:
    Marian's target side (None elsewhere). ``generation``: the checkpoint's
    ``generation_config.json`` as a dict ({} when absent). ``adapter``: the
    ``adapters.Adapter`` of ``load_pretrained(dir, adapter=...)``, already merged into
    ``params`` (``adapter.unmerge(params)`` gives the base back); None without one.
    """

    kind: Kind
    model: Any
    params: Any
    tokenizer: Any
    target_tokenizer: Any = None
    generation: dict[str, Any] = dataclasses.field(default_factory=dict)
    adapter: Any = None

    def replace(self, **fields: Any) -> Pretrained:
        """A copy with ``fields`` replaced (e.g. ``params`` moved to the device)."""
        return dataclasses.replace(self, **fields)
