"""Losses, schedules, the train-step factory, checkpoints and metrics."""

from textkit.training.checkpoint import CheckpointManager, average_checkpoints
from textkit.training.losses import cross_entropy, smoothing_entropy
from textkit.training.metrics import corpus_bleu, perplexity
from textkit.training.schedules import inverse_sqrt_schedule
from textkit.training.train_step import (
    TrainState,
    create_train_state,
    make_eval_step,
    make_train_step,
)

__all__ = [
    "CheckpointManager",
    "TrainState",
    "average_checkpoints",
    "corpus_bleu",
    "create_train_state",
    "cross_entropy",
    "inverse_sqrt_schedule",
    "make_eval_step",
    "make_train_step",
    "perplexity",
    "smoothing_entropy",
]
