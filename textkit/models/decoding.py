"""Deprecated: moved to ``textkit.decoding.contract`` (this path goes in the next release)."""

import warnings

from textkit.decoding.contract import (
    DecodeOutput,
    ModelStep,
    StepFn,
    length_penalty,
    model_step_fn,
    prefill,
)

__all__ = ["DecodeOutput", "ModelStep", "StepFn", "length_penalty", "model_step_fn", "prefill"]

warnings.warn("textkit.models.decoding moved to textkit.decoding.contract",
              DeprecationWarning, stacklevel=2)
