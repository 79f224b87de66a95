"""Deprecated: moved to ``textkit.tasks.classification`` and ``textkit.training.optim``;
``train_and_evaluate`` is ``textkit.training.fit`` with ``classification.evaluate``."""

import warnings

from textkit.tasks.classification import (
    ClassificationBatchify,
    CrossValidation,
    FoldResult,
    cross_validate,
)
from textkit.tasks.classification import evaluate as evaluate_classifier
from textkit.tasks.classification import make_loader as bucketed_loader
from textkit.tasks.classification import make_loss as ClassificationLoss  # noqa: N812
from textkit.training.optim import max_norm

warnings.warn("textkit.training.classification moved to textkit.tasks.classification "
              "(make_loader, make_loss, evaluate, ...) and textkit.training.optim; this module "
              "goes in the next release", DeprecationWarning, stacklevel=2)

__all__ = ["ClassificationBatchify", "ClassificationLoss", "CrossValidation", "FoldResult",
           "bucketed_loader", "cross_validate", "evaluate_classifier", "max_norm"]
