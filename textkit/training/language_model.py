"""Deprecated: moved to ``textkit.tasks.language_model`` and ``textkit.training.optim``."""

import warnings
from typing import Any

from textkit.decoding.filters import ExcludeTokensStep
from textkit.tasks.language_model import make_eval_step as make_lm_eval_step
from textkit.tasks.language_model import make_loss as lm_loss_fn
from textkit.tasks.language_model import make_train_step as make_lm_train_step
from textkit.tasks.language_model import (
    next_learning_rate,
    stream_nll,
    stream_windows,
    unigram_perplexity,
)
from textkit.tasks.language_model import optimizer as lm_optimizer
from textkit.tasks.language_model import train_step_shardings as lm_train_step_shardings
from textkit.training.optim import learning_rate_of, with_learning_rate

warnings.warn("textkit.training.language_model moved to textkit.tasks.language_model "
              "(make_train_step, make_eval_step, optimizer, ...) and textkit.training.optim; "
              "this module goes in the next release", DeprecationWarning, stacklevel=2)

__all__ = ["ExcludeTokensStep", "initial_carry", "learning_rate_of", "lm_loss_fn",
           "lm_optimizer", "lm_train_step_shardings", "make_lm_eval_step",
           "make_lm_train_step", "next_learning_rate", "stream_nll", "stream_windows",
           "unigram_perplexity", "with_learning_rate"]


def initial_carry(model: Any, batch_size: int) -> Any:
    """``model.initial_state(batch_size)``."""
    return model.initial_state(batch_size)
