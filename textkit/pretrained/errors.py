"""The errors of ``textkit.pretrained``: each a ``PretrainedError`` (a ``TextkitError`` and a
``ValueError``) whose message names the directory or file and what was expected."""

from __future__ import annotations

from textkit.errors import TextkitError

__all__ = [
    "LanguageError", "MissingFileError", "NotCheckpointError", "NotMarianCheckpointError",
    "PretrainedError", "UnsupportedArchitectureError", "VocabSizeMismatchError", "WrongFamilyError",
]


class PretrainedError(TextkitError, ValueError):
    """A pretrained checkpoint directory textkit cannot load (the message says why)."""


class NotCheckpointError(PretrainedError):
    """The path is not a checkpoint directory (not a directory, no config.json, or a
    config.json that is not a JSON object with a ``model_type``)."""


class WrongFamilyError(NotCheckpointError):
    """A family's loader was given a checkpoint of another ``model_type``."""


class NotMarianCheckpointError(WrongFamilyError):
    """The Marian loader was given a checkpoint of another ``model_type``."""


class MissingFileError(PretrainedError, FileNotFoundError):
    """A file the checkpoint layout needs is missing from the directory."""


class UnsupportedArchitectureError(PretrainedError):
    """A config option (file, key and value named) textkit does not implement, including a
    ``model_type`` no loader is registered for."""


class LanguageError(PretrainedError):
    """A language code the checkpoint's tokenizer does not have (the nearest it has named), a
    multilingual checkpoint given none, or codes given to a family that takes none."""


class VocabSizeMismatchError(PretrainedError):
    """The tokenizer vocabulary does not fit the embedding matrix (or the config)."""
