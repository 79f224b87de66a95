"""Losses, schedules, the train-step factory, checkpoints, metrics and recipe glue."""

from textkit.training.checkpoint import CheckpointManager, average_checkpoints
from textkit.training.classification import (
    ClassificationBatchify,
    ClassificationLoss,
    CrossValidation,
    FoldResult,
    bucketed_loader,
    cross_validate,
    evaluate_classifier,
    train_and_evaluate,
)
from textkit.training.language_model import (
    lm_loss_fn,
    lm_optimizer,
    make_lm_eval_step,
    make_lm_train_step,
    stream_nll,
    stream_windows,
)
from textkit.training.losses import cross_entropy, smoothing_entropy
from textkit.training.metrics import corpus_bleu, perplexity
from textkit.training.schedules import inverse_sqrt_schedule
from textkit.training.seq2seq import (
    Seq2SeqBatchify,
    TranslationDir,
    bleu_scores,
    build_translation_model,
    make_seq2seq_loader,
    make_seq2seq_loss,
)
from textkit.training.train_step import (
    TrainState,
    create_train_state,
    make_eval_step,
    make_train_step,
)

__all__ = [
    "CheckpointManager", "ClassificationBatchify", "ClassificationLoss", "CrossValidation",
    "FoldResult", "Seq2SeqBatchify", "TrainState", "TranslationDir", "average_checkpoints",
    "bleu_scores", "bucketed_loader", "build_translation_model", "corpus_bleu",
    "create_train_state", "cross_entropy", "cross_validate", "evaluate_classifier",
    "inverse_sqrt_schedule", "lm_loss_fn", "lm_optimizer", "make_eval_step",
    "make_lm_eval_step", "make_lm_train_step", "make_seq2seq_loader", "make_seq2seq_loss",
    "make_train_step", "perplexity", "smoothing_entropy", "stream_nll", "stream_windows",
    "train_and_evaluate",
]
