"""Sentiment recipe: fixed-shape classification batches, dummy rows invisible to loss and
accuracy, the k-fold driver, and end-to-end runs of examples/sentiment/train.py."""

import json
from pathlib import Path

import jax
import numpy as np
import pytest
import subprocesses

from textkit.batchify import BatchShape
from textkit.models.classifier import TextCNN, TextCNNConfig, init_classifier
from textkit.tasks.classification import (
    ClassificationBatchify,
    FoldResult,
    accuracy,
    cross_validate,
    make_loader,
    make_loss,
)
from textkit.training import make_eval_step

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "sentiment" / "train.py"
VECTORS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "embeddings" / "vectors"
PAD = 1


def load_script():
    return subprocesses.load_script(SCRIPT, "sentiment_train")


def _samples(n, seed=0, vocab=30, max_len=11):
    rng = np.random.default_rng(seed)
    return [(rng.integers(4, vocab, rng.integers(1, max_len + 1)).astype(np.int32),
             int(rng.integers(0, 2))) for _ in range(n)]


def test_batchify_keeps_the_bucket_shape_with_dummy_rows():
    samples = [(np.array([5, 6, 7], np.int32), 1), (np.array([8], np.int32), 0)]
    batch = ClassificationBatchify(PAD)(samples, BatchShape(4, (8,)))
    assert batch["tokens"].shape == (4, 8) and batch["tokens"].dtype == np.int32
    np.testing.assert_array_equal(batch["tokens"][0], [5, 6, 7] + [PAD] * 5)
    np.testing.assert_array_equal(batch["tokens"][2:], PAD)
    np.testing.assert_array_equal(batch["lengths"], [3, 1, 0, 0])
    np.testing.assert_array_equal(batch["labels"], [1, 0, 0, 0])
    np.testing.assert_array_equal(batch["weights"], [1, 1, 0, 0])
    assert batch["weights"].dtype == np.float32 and batch["labels"].dtype == np.int32


def test_evaluation_counts_every_sample_once_and_ignores_dummy_rows():
    model = TextCNN(TextCNNConfig(30, embed_dim=8, num_filters=4, windows=(2, 3), pad_id=PAD))
    params = init_classifier(model, jax.random.key(0))
    samples = _samples(23)
    eval_step = make_eval_step(make_loss(model))
    # batch size 5 over 23 samples in two buckets: partial batches padded with dummy rows
    loader = make_loader(samples, PAD, 5, [4, 11], shuffle=False)
    shapes = {tuple(b["tokens"].shape) for b in loader}
    assert shapes <= {(5, 4), (5, 11)}
    result = accuracy(eval_step, params, loader)
    assert result["count"] == 23
    # reference: all samples in one batch padded to the longest (no dummy rows, no buckets)
    tokens = np.full((len(samples), 11), PAD, np.int32)
    for row, (ids, _) in enumerate(samples):
        tokens[row, :len(ids)] = ids
    logits = np.asarray(model.apply({"params": params}, tokens))
    labels = np.array([y for _, y in samples])
    assert result["accuracy"] == pytest.approx(np.mean(logits.argmax(-1) == labels))
    nll = -np.asarray(jax.nn.log_softmax(logits))[np.arange(len(labels)), labels]
    assert result["loss"] == pytest.approx(float(nll.mean()), rel=1e-5)


def test_cross_validate_runs_disjoint_covering_folds():
    labels = np.array([0] * 14 + [1] * 9)
    seen = []

    def run_fold(k, train, test):
        seen.append((k, train, test))
        return FoldResult(fold=k, accuracy=k / 10, loss=0.0, train_samples=len(train),
                          test_samples=len(test), history=[], wall_s=0.0)

    cv = cross_validate(labels, 5, run_fold, seed=1)
    assert [k for k, _, _ in seen] == list(range(5))
    tests = np.concatenate([test for _, _, test in seen])
    np.testing.assert_array_equal(np.sort(tests), np.arange(23))   # disjoint and covering
    for _, train, test in seen:
        np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(23))
        assert abs(labels[test].mean() - labels.mean()) < 0.25      # stratified
    assert cv.accuracy_mean == pytest.approx(0.2)
    assert cv.accuracy_std == pytest.approx(np.std([0, 0.1, 0.2, 0.3, 0.4]))

    subset = []
    cross_validate(labels, 5, lambda k, tr, te: subset.append(te) or run_fold(k, tr, te),
                   seed=1, only_folds=[3])
    np.testing.assert_array_equal(subset[0], seen[3][2])            # same split as the full run
    with pytest.raises(ValueError, match="fold 5 out of range"):
        cross_validate(labels, 5, run_fold, only_folds=[5])


def test_toy_run_learns_and_writes_summary(tmp_path):
    script = load_script()
    summary = script.main(["--toy-sentences", "1200", "--epochs", "5", "--embed-dim", "32",
                           "--model-overrides", "num_filters=32", "--optimizer", "adam",
                           "--lr", "1e-2",
                           "--batch-size", "32", "--num-buckets", "2", "--save-dir", str(tmp_path),
                           "--no-progress"])
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary))
    assert {"task", "config", "accuracy_mean", "accuracy_std", "folds", "wall_s",
            "history", "num_compiles"} <= set(written)
    assert written["config"]["dataset"] == "toy" and len(written["folds"]) == 1
    fold = written["folds"][0]
    assert fold["test_samples"] == 150 and fold["train_samples"] == 1200
    assert written["accuracy_mean"] > 0.85          # chance is 0.5
    # one train program per bucket, shared by all epochs
    assert written["num_compiles"] == len(written["bucket_keys"])


@pytest.mark.parametrize("mode,model", [("static", "textcnn"),
                                        ("multichannel", "bilstm_classifier")])
def test_pretrained_modes_run_end_to_end(tmp_path, mode, model, capsys):
    vectors = VECTORS / "pang_lee_polarity_fasttext.vec"
    if not vectors.exists():
        pytest.skip(f"shared vector file {vectors} not found")
    script = load_script()
    summary = script.main(["--toy-sentences", "400", "--epochs", "2", "--mode", mode,
                           "--model", model, "--embedding-path", str(vectors),
                           "--model-overrides",
                           "num_filters=16" if model == "textcnn" else "hidden_size=16",
                           "--optimizer", "adam",
                           "--batch-size", "32", "--num-buckets", "2", "--save-dir", str(tmp_path),
                           "--no-progress"])
    coverage = summary["embedding_coverage"]
    assert coverage["dim"] == 100 and 0 < coverage["found"] <= coverage["vocab"]
    assert f"cover {coverage['found']:,} of {coverage['vocab']:,} vocab tokens" in \
        capsys.readouterr().out
    assert 0.0 <= summary["accuracy_mean"] <= 1.0
    assert (tmp_path / "summary.json").exists()


def test_pretrained_mode_needs_vectors():
    script = load_script()
    with pytest.raises(SystemExit):
        script.main(["--mode", "static"])
    with pytest.raises(SystemExit):
        script.main(["--embedding-path", "x.vec"])   # rand takes none
