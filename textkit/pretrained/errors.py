"""The errors of ``textkit.pretrained``: each a ``PretrainedError`` (a ``TextkitError`` and a
``ValueError``) whose message names the directory or file and what was expected."""

from __future__ import annotations

from textkit.errors import TextkitError

__all__ = [
    "LanguageError", "MissingFileError", "NotCheckpointError", "NotMarianCheckpointError",
    "PretrainedError", "UnsupportedArchitectureError", "VocabSizeMismatchError", "WrongFamilyError",
    "refuse_language_codes",
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


def refuse_language_codes(family: str, src_lang: str | None, tgt_lang: str | None,
                          hint: str = "") -> None:
    """The ``for_languages`` check of a family without language codes: a ``LanguageError``
    naming the codes given (and ``hint``, how the family is told instead) when any is."""
    given = {k: v for k, v in (("src_lang", src_lang), ("tgt_lang", tgt_lang)) if v}
    if given:
        raise LanguageError(f"{family} checkpoints take no language codes (given {given})"
                            f"{'; ' + hint if hint else ''}")


class VocabSizeMismatchError(PretrainedError):
    """The tokenizer vocabulary does not fit the embedding matrix (or the config)."""
