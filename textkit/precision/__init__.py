"""Precision policies and loss scaling (see ``policy`` and ``loss_scale``)."""

from textkit.precision.loss_scale import (
    DynamicLossScaleState,
    StaticLossScaleState,
    all_finite,
    dynamic_loss_scale,
    loss_scale_of,
    static_loss_scale,
)
from textkit.precision.policy import Policy, cast_floating, mask_value

__all__ = [
    "DynamicLossScaleState",
    "Policy",
    "StaticLossScaleState",
    "all_finite",
    "cast_floating",
    "dynamic_loss_scale",
    "loss_scale_of",
    "mask_value",
    "static_loss_scale",
]
