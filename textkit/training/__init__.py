"""The generic training core: losses, schedules, optax helpers, the jitted train/eval step,
the one ``fit`` loop and ``RunDir``, checkpoints and metrics.

Task glue (batches, losses, evaluation of translation, language modelling, classification)
lives in ``textkit.tasks``.
"""

from textkit.training.checkpoint import CheckpointManager, average_checkpoints
from textkit.training.loop import FitConfig, FitResult, Progress, fit
from textkit.training.losses import cross_entropy, smoothing_entropy
from textkit.training.metrics import corpus_bleu, perplexity
from textkit.training.optim import (
    ema,
    ema_params_of,
    freeze,
    learning_rate_of,
    max_norm,
    with_learning_rate,
    with_loss_scaling,
)
from textkit.training.run_dir import RunDir, find_run, launch
from textkit.training.schedules import inverse_sqrt_schedule, scale_by_budget_schedule
from textkit.training.train_step import (
    CompiledStep,
    TrainState,
    TrainStep,
    create_train_state,
    make_eval_step,
    make_train_step,
)
from textkit.training.writers import MetricWriter, run_writers

__all__ = [
    "CheckpointManager", "CompiledStep", "FitConfig", "FitResult", "MetricWriter", "Progress",
    "RunDir", "TrainState", "TrainStep", "average_checkpoints", "corpus_bleu", "create_train_state",
    "cross_entropy", "ema", "ema_params_of", "find_run", "fit", "freeze", "inverse_sqrt_schedule",
    "launch", "learning_rate_of", "make_eval_step", "make_train_step", "max_norm", "perplexity",
    "run_writers", "scale_by_budget_schedule", "smoothing_entropy", "with_learning_rate",
    "with_loss_scaling",
]
