"""Parameter-efficient fine-tuning: LoRA on a params pytree by site (no fork of a model).

``Lora`` (``lora.py``) holds the sites an adapter targets and merges / unmerges adapter
weights into params; ``lora_on_activations`` (``xpath.py``) runs the adapters beside the
frozen kernels while training (LoRA dropout, no full-size update). Which sites a model has,
under transformers' module names, is for ``textkit.pretrained.lora_sites`` to say; PEFT's files are
``textkit.pretrained.peft``'s.
"""

from textkit.adapters.lora import Adapter, Lora, LoraConfig, Site, nested, unnested
from textkit.adapters.xpath import lora_on_activations

__all__ = ["Adapter", "Lora", "LoraConfig", "Site", "lora_on_activations", "nested", "unnested"]
