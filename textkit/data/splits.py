"""K-fold cross-validation splits (for corpora without a test split, e.g. MR).

Deterministic from a seed; optionally stratified so each fold keeps the label proportions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["kfold_indices"]


def kfold_indices(n: int, folds: int = 10, seed: int = 0,
                  labels: Sequence[int] | np.ndarray | None = None,
                  ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``folds`` pairs ``(train_idx, test_idx)`` of int64 index arrays over ``range(n)``.

    The test parts are disjoint, cover every index once and differ in size by at most one
    (per label when ``labels`` (length ``n``) is given: stratified). Each train part is the
    complement of its test part, sorted.
    """
    if folds < 2 or folds > n:
        raise ValueError(f"folds must be between 2 and n={n}, got {folds}")
    rng = np.random.default_rng(seed)
    fold_of = np.empty(n, dtype=np.int64)
    if labels is None:
        fold_of[rng.permutation(n)] = np.arange(n) % folds
    else:
        labels = np.asarray(labels)
        if labels.shape != (n,):
            raise ValueError(f"labels must have shape ({n},), got {labels.shape}")
        offset = 0
        for value in np.unique(labels):
            members = rng.permutation(np.flatnonzero(labels == value))
            # deal members round-robin, continuing where the previous label stopped
            fold_of[members] = (np.arange(len(members)) + offset) % folds
            offset += len(members)
    return [(np.flatnonzero(fold_of != k), np.flatnonzero(fold_of == k)) for k in range(folds)]
