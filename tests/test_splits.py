"""K-fold splits: disjoint, covering, balanced, deterministic, stratified."""

import numpy as np
import pytest

from textkit.data.splits import kfold_indices


@pytest.mark.parametrize("n,folds", [(10662, 10), (23, 5), (7, 7)])
def test_folds_are_disjoint_and_cover(n, folds):
    splits = kfold_indices(n, folds, seed=3)
    assert len(splits) == folds
    tests = [test for _, test in splits]
    assert np.array_equal(np.sort(np.concatenate(tests)), np.arange(n))
    sizes = [len(t) for t in tests]
    assert max(sizes) - min(sizes) <= 1
    for train, test in splits:
        assert not np.intersect1d(train, test).size
        assert len(train) + len(test) == n
    assert [t.tolist() for t in tests] == [t.tolist() for _, t in kfold_indices(n, folds, 3)]
    if n > folds:
        assert [t.tolist() for t in tests] != [t.tolist() for _, t in kfold_indices(n, folds, 4)]


def test_stratified_folds_keep_label_proportions():
    labels = np.array([0] * 70 + [1] * 30)
    splits = kfold_indices(100, 10, seed=0, labels=labels)
    assert np.array_equal(np.sort(np.concatenate([t for _, t in splits])), np.arange(100))
    for _, test in splits:
        assert labels[test].sum() == 3 and len(test) == 10


def test_bad_arguments():
    with pytest.raises(ValueError, match="folds must be between"):
        kfold_indices(5, 1)
    with pytest.raises(ValueError, match="folds must be between"):
        kfold_indices(3, 4)
    with pytest.raises(ValueError, match="labels must have shape"):
        kfold_indices(5, 2, labels=[0, 1])
