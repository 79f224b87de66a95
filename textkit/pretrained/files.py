"""Reading the files every Hugging Face checkpoint directory shares: ``config.json``, the
weights (``model.safetensors``, or ``pytorch_model.bin`` when torch is installed) and the JSON
settings files whose keys are checked by type (``check_types``: ``tokenizer_config.json``,
``generation_config.json``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from textkit._io import write_bytes_atomic
from textkit.pretrained.errors import (
    MissingFileError,
    NotCheckpointError,
    PretrainedError,
    UnsupportedArchitectureError,
)

__all__ = ["CONFIG_TYPES", "GENERATION_TYPES", "TOKENIZER_TYPES", "Expected", "check_types",
           "read_config", "read_json_object", "read_settings", "read_tensors", "unsupported",
           "write_tensors_file"]

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
    return read_json_object(path)


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (``NotCheckpointError`` naming the file when it is not
    valid JSON or not an object)."""
    try:
        value = json.loads(path.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise NotCheckpointError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(value, dict):
        raise NotCheckpointError(f"{path}: expected a JSON object, got "
                                 f"{type(value).__name__}")
    return value


class Expected(NamedTuple):
    """What a settings key holds: ``check`` says whether a value fits ``what`` (for messages)."""

    check: Callable[[Any], bool]
    what: str


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


INT = Expected(_is_int, "an integer")
NUMBER = Expected(lambda v: _is_int(v) or isinstance(v, float), "a number")
BOOL = Expected(lambda v: isinstance(v, bool), "true or false")
TOKEN = Expected(lambda v: isinstance(v, str) or (isinstance(v, dict)
                                                  and isinstance(v.get("content"), str)),
                 "a string or an object with a string content")
IDS = Expected(lambda v: _is_int(v) or (isinstance(v, list) and all(map(_is_int, v))),
               "an integer or a list of integers")

TOKENIZER_TYPES: dict[str, Expected] = {
    **dict.fromkeys(("pad_token", "unk_token", "cls_token", "sep_token", "mask_token",
                     "bos_token", "eos_token"), TOKEN),
    **dict.fromkeys(("do_lower_case", "add_prefix_space", "trim_offsets",
                     "tokenize_chinese_chars", "strip_accents"), BOOL),
    "model_max_length": NUMBER,
}
"""The ``tokenizer_config.json`` keys textkit reads, by what they hold (null: not set)."""

GENERATION_TYPES: dict[str, Expected] = {
    **dict.fromkeys(("max_new_tokens", "max_length", "num_beams", "top_k", "min_length",
                     "no_repeat_ngram_size", "min_new_tokens", "pad_token_id", "bos_token_id",
                     "decoder_start_token_id", "forced_bos_token_id"), INT),
    **dict.fromkeys(("temperature", "top_p", "min_p", "repetition_penalty",
                     "length_penalty"), NUMBER),
    "do_sample": BOOL,
    "early_stopping": Expected(lambda v: isinstance(v, bool) or v == "never",
                               'true, false or "never"'),
    "bad_words_ids": Expected(lambda v: isinstance(v, list) and all(
        isinstance(ids, list) and ids and all(map(_is_int, ids)) for ids in v),
        "a list of lists of integers"),
    **dict.fromkeys(("eos_token_id", "forced_eos_token_id"), IDS),
}
"""The ``generation_config.json`` keys textkit reads, by what they hold (null: not set)."""


CONFIG_TYPES: dict[str, Expected] = {
    **dict.fromkeys(("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "intermediate_size", "max_position_embeddings",
                     "type_vocab_size", "head_dim", "dim", "n_layers", "n_heads", "hidden_dim",
                     "n_embd", "n_layer", "n_head", "n_positions", "n_inner",
                     "sliding_window"), INT),
    **dict.fromkeys(("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps", "rope_theta",
                     "hidden_dropout_prob", "attention_probs_dropout_prob", "dropout",
                     "attention_dropout"), NUMBER),
}
"""The sizes and rates of a model ``config.json`` that textkit reads, by what they hold."""


def check_types(path: Path, settings: Mapping[str, Any], types: Mapping[str, Expected]) -> None:
    """Refuse (``PretrainedError`` naming ``path`` and the key) a key of ``types`` whose value
    in ``settings`` is neither null nor what ``types`` expects."""
    for key, expected in types.items():
        value = settings.get(key)
        if value is not None and not expected.check(value):
            raise PretrainedError(f"{path}: {key} is {json.dumps(value)}, expected "
                                  f"{expected.what}")


def read_settings(path: Path, types: Mapping[str, Expected]) -> dict[str, Any]:
    """The JSON object in ``path`` with its keys checked against ``types`` (``check_types``);
    {} when there is no such file."""
    if not path.is_file():
        return {}
    settings = read_json_object(path)
    check_types(path, settings, types)
    return settings


def unsupported(root: Path, key: str, value: Any, why: str) -> UnsupportedArchitectureError:
    """The error for ``config.json``'s ``key`` = ``value``, which textkit cannot load (``why``)."""
    return UnsupportedArchitectureError(f"{root / 'config.json'}: {key}={value!r} is not "
                                        f"supported: {why}")


def _checked_safetensors(path: Path, shard_of: Path | None = None) -> Any:
    """An open safetensors file (``safe_open``, numpy), its header checked first: a length
    field that does not fit the file, a header that is not JSON, or tensor offsets past the end
    (a file cut short) are ``PretrainedError``s naming the file (and the index naming it)."""
    import ml_dtypes  # noqa: F401  (numpy learns bfloat16 here, whatever was imported before)
    from safetensors import safe_open

    where = f"{path}" + (f" (a shard named by {shard_of.name})" if shard_of else "")
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if length < 2 or 8 + length > size:
            raise PretrainedError(f"{where}: not a safetensors file, or cut short: its header "
                                  f"length field says {length:,} bytes but the file has "
                                  f"{size:,} (a damaged or partial download?)")
        try:
            header = json.loads(handle.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise PretrainedError(f"{where}: the safetensors header is not valid JSON "
                                  f"({err})") from None
    if not isinstance(header, dict):
        raise PretrainedError(f"{where}: the safetensors header is not a JSON object")
    end = max((int(entry["data_offsets"][1]) for name, entry in header.items()
               if name != "__metadata__" and isinstance(entry, dict)
               and "data_offsets" in entry), default=0)
    if 8 + length + end > size:
        raise PretrainedError(f"{where}: cut short: its tensors need {8 + length + end:,} bytes "
                              f"but the file has {size:,} (a partial download?)")
    try:
        return safe_open(str(path), framework="numpy")
    except Exception as err:  # safetensors raises its own SafetensorError and OSError
        raise PretrainedError(f"{where}: unreadable safetensors file ({err})") from None


class Tensors(Mapping[str, np.ndarray]):
    """A checkpoint's tensors by name, each read from its safetensors file when asked for, in
    the file's dtype (float32, float16 or bfloat16), so that a loader converts one tensor at a
    time into its params' dtype: host memory holds the params and one tensor, not a float32
    copy of the whole checkpoint."""

    def __init__(self, files: Mapping[Path, Any]) -> None:
        self._files = dict(files)
        self._where = {name: path for path, handle in self._files.items()
                       for name in handle.keys()}

    def __getitem__(self, name: str) -> np.ndarray:
        path = self._where[name]
        try:
            return self._files[path].get_tensor(name)
        except Exception as err:
            raise PretrainedError(f"{path}: tensor {name} is unreadable ({err})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def read_tensors(root: Path) -> Mapping[str, np.ndarray]:
    """The checkpoint's tensors by name: ``model.safetensors``, sharded safetensors
    (``model.safetensors.index.json`` and the shards its ``weight_map`` names), each read when
    asked for (``Tensors``), else torch's ``pytorch_model.bin`` (only when torch is installed;
    float32). A damaged file is a ``PretrainedError`` naming it."""
    index = root / "model.safetensors.index.json"
    if not (root / "model.safetensors").is_file() and index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text("utf-8"))["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError) as err:
            raise NotCheckpointError(f"{index}: not a safetensors index with a weight_map "
                                     f"({err!r})") from None
        missing = [name for name in shards if not (root / name).is_file()]
        if missing:
            raise MissingFileError(f"{root} is missing the shards {', '.join(missing)} named "
                                   f"by {index.name}")
        return Tensors({root / name: _checked_safetensors(root / name, index)
                        for name in shards})
    path = root / "model.safetensors"
    if path.is_file():
        return Tensors({path: _checked_safetensors(path)})
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


def write_tensors_file(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """``tensors`` as a safetensors file (transformers' ``{"format": "pt"}`` metadata), written
    atomically with the mode the umask gives (safetensors' own ``save_file`` makes it 0600, which
    a colleague's account cannot read)."""
    from safetensors.numpy import save

    write_bytes_atomic(path, save(tensors, metadata={"format": "pt"}))
