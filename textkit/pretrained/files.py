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
    """The checkpoint's tensors as float32 numpy arrays: ``model.safetensors``, sharded
    safetensors (``model.safetensors.index.json`` and the shards its ``weight_map`` names),
    else torch's ``pytorch_model.bin`` (only when torch is installed)."""
    index = root / "model.safetensors.index.json"
    if not (root / "model.safetensors").is_file() and index.is_file():
        from safetensors.numpy import load_file

        try:
            shards = sorted(set(json.loads(index.read_text("utf-8"))["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError) as err:
            raise NotCheckpointError(f"{index}: not a safetensors index with a weight_map "
                                     f"({err!r})") from None
        missing = [name for name in shards if not (root / name).is_file()]
        if missing:
            raise MissingFileError(f"{root} is missing the shards {', '.join(missing)} named "
                                   f"by {index.name}")
        tensors: dict[str, np.ndarray] = {}
        for name in shards:
            tensors.update({k: v.astype(np.float32)
                            for k, v in load_file(str(root / name)).items()})
        return tensors
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
