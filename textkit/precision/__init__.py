"""Precision policies and loss scaling (see ``policy`` and ``loss_scale``)."""

from textkit.precision.policy import Policy, cast_floating, mask_value

__all__ = ["Policy", "cast_floating", "mask_value"]
