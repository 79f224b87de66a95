"""Reading the files every Hugging Face checkpoint directory shares: ``config.json`` and the
weights (``model.safetensors``, or ``pytorch_model.bin`` when torch is installed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from textkit.pretrained.errors import (
    MissingFileError,
    NotCheckpointError,
    UnsupportedArchitectureError,
)

__all__ = ["read_config", "read_tensors", "unsupported"]

LAYOUT = "config.json, model.safetensors and the tokenizer's files"


def read_config(root: Path) -> dict[str, Any]:
    """``config.json`` of the checkpoint directory ``root`` as a dict (``NotCheckpointError``
    when ``root`` is not a directory, has no config.json, or it is not a JSON object)."""
    if not root.is_dir():
        raise NotCheckpointError(f"{root} is not a directory (expected a checkpoint directory "
                                 f"with config.json)")
    path = root / "config.json"
    if not path.is_file():
        raise NotCheckpointError(
            f"{root} is not a checkpoint directory: it has no config.json (expected the "
            f"Hugging Face layout: {LAYOUT})")
    try:
        config = json.loads(path.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise NotCheckpointError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(config, dict):
        raise NotCheckpointError(f"{path}: expected a JSON object, got "
                                 f"{type(config).__name__}")
    return config


def unsupported(root: Path, key: str, value: Any, why: str) -> UnsupportedArchitectureError:
    """The error for ``config.json``'s ``key`` = ``value``, which textkit cannot load (``why``)."""
    return UnsupportedArchitectureError(f"{root / 'config.json'}: {key}={value!r} is not "
                                        f"supported: {why}")


def read_tensors(root: Path) -> dict[str, np.ndarray]:
    """The checkpoint's tensors as float32 numpy arrays (safetensors, else torch's .bin)."""
    path = root / "model.safetensors"
    if path.is_file():
        from safetensors.numpy import load_file

        return {k: v.astype(np.float32) for k, v in load_file(str(path)).items()}
    if (root / "pytorch_model.bin").is_file():
        try:
            import torch
        except ImportError:
            raise MissingFileError(
                f"{root} has pytorch_model.bin but no model.safetensors, and torch is not "
                f"installed: install torch, or convert the weights to model.safetensors") from None
        state = torch.load(root / "pytorch_model.bin", map_location="cpu", weights_only=True)
        return {k: v.float().numpy() for k, v in state.items()}
    raise MissingFileError(f"{root} has no model.safetensors (nor pytorch_model.bin): the "
                           f"weights of the checkpoint are missing")
