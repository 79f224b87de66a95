"""The generic training core: losses, schedules, optax helpers, the jitted train/eval step,
the one ``fit`` loop and ``RunDir``, checkpoints and metrics.

Task glue (batches, losses, evaluation of translation, language modelling, classification)
lives in ``textkit.tasks``; the names that used to be here still import, with a
``DeprecationWarning``, for one release.
"""

import importlib
import warnings

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
from textkit.training.run_dir import RunDir, launch
from textkit.training.schedules import inverse_sqrt_schedule, scale_by_budget_schedule
from textkit.training.train_step import (
    CompiledStep,
    TrainState,
    create_train_state,
    make_eval_step,
    make_train_step,
)

__all__ = [
    "CheckpointManager", "CompiledStep", "FitConfig", "FitResult", "Progress", "RunDir",
    "TrainState",
    "average_checkpoints", "corpus_bleu", "create_train_state", "cross_entropy", "ema",
    "ema_params_of", "fit", "freeze", "inverse_sqrt_schedule", "launch", "learning_rate_of",
    "make_eval_step", "make_train_step", "max_norm", "perplexity", "scale_by_budget_schedule",
    "smoothing_entropy", "with_learning_rate", "with_loss_scaling",
]

# old name -> (deprecated module that still provides it)
_MOVED = {
    **dict.fromkeys(("ClassificationBatchify", "ClassificationLoss", "CrossValidation",
                     "FoldResult", "bucketed_loader", "cross_validate", "evaluate_classifier"),
                    "textkit.training.classification"),
    **dict.fromkeys(("lm_loss_fn", "lm_optimizer", "make_lm_eval_step", "make_lm_train_step",
                     "stream_nll", "stream_windows"), "textkit.training.language_model"),
    **dict.fromkeys(("Seq2SeqBatchify", "TranslationDir", "bleu_scores",
                     "build_translation_model", "make_seq2seq_loader", "make_seq2seq_loss"),
                    "textkit.training.seq2seq"),
}


def __getattr__(name: str):
    if name in _MOVED:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            module = importlib.import_module(_MOVED[name])
        warnings.warn(f"textkit.training.{name} moved to textkit.tasks (see {_MOVED[name]}); "
                      "the old name goes in the next release", DeprecationWarning, stacklevel=2)
        return getattr(module, name)
    raise AttributeError(f"module 'textkit.training' has no attribute {name!r}")
