"""Deprecated: moved to ``textkit.tasks.translation`` (and ``textkit.training.RunDir``)."""

import warnings
from pathlib import Path
from typing import Any

from textkit._io import write_json_atomic, write_text_atomic
from textkit.tasks.translation import (
    Seq2SeqBatchify,
    bleu_scores,
    encode_pairs,
    init_params,
    spm_path,
    tokenizers,
)
from textkit.tasks.translation import build_model as build_translation_model
from textkit.tasks.translation import make_loader as make_seq2seq_loader
from textkit.tasks.translation import make_loss as make_seq2seq_loss
from textkit.training.run_dir import RunDir

warnings.warn("textkit.training.seq2seq moved to textkit.tasks.translation (build_model, "
              "make_loader, make_loss, tokenizers) and textkit.training.RunDir; this module "
              "goes in the next release", DeprecationWarning, stacklevel=2)

__all__ = ["Seq2SeqBatchify", "TranslationDir", "bleu_scores", "build_translation_model",
           "encode_pairs", "init_params", "make_seq2seq_loader", "make_seq2seq_loss",
           "write_json_atomic", "write_text_atomic"]


class TranslationDir(RunDir):
    """``RunDir`` with the SentencePiece helpers of ``textkit.tasks.translation``."""

    def spm_path(self, side: str, joint: bool) -> Path:
        return spm_path(self, side, joint)

    def tokenizers(self, joint: bool, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        return tokenizers(self, joint, *args, **kwargs)
