"""Sentiment recipe: fixed-shape classification batches, dummy rows invisible to loss and
accuracy, the k-fold driver, and end-to-end runs of examples/sentiment/train.py."""

import json
from pathlib import Path

import jax
import numpy as np
import pytest
import subprocesses

from textkit.batchify import BatchShape
from textkit.data.toy import toy_sentiment
from textkit.models.classifier import FROZEN, TUNED, TextCNN, TextCNNConfig, init_classifier
from textkit.tasks.word_vector_classification import (
    ClassificationBatchify,
    ClassificationConfig,
    ClassificationTask,
    FoldResult,
    accuracy,
    classifier_loader,
    classifier_loss_fn,
    cross_validate,
)
from textkit.training import RunDir, make_eval_step

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
    eval_step = make_eval_step(classifier_loss_fn(model))
    # batch size 5 over 23 samples in two buckets: partial batches padded with dummy rows
    loader = classifier_loader(samples, PAD, 5, [4, 11], shuffle=False)
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


@pytest.mark.slow
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


OMITTED = ("the", ".")      # words of every toy split the generated file leaves out


def write_toy_vectors(path: Path, dim: int = 16) -> dict[str, np.ndarray]:
    """A word2vec-text file of random vectors for every toy-sentiment word but ``OMITTED``."""
    words = sorted({w for seed in (0, 1) for split in ("train", "test")
                    for text, _ in toy_sentiment(split, 2000, seed=seed) for w in text.split()})
    rng = np.random.default_rng(0)
    vectors = {w: rng.normal(0, 0.5, dim).astype(np.float32).round(4)
               for w in words if w not in OMITTED}
    path.write_text(f"{len(vectors)} {dim}\n" + "".join(
        w + " " + " ".join(f"{x:.4f}" for x in v) + "\n" for w, v in vectors.items()))
    return vectors


@pytest.mark.parametrize("mode", ["static", "non-static", "multichannel"])
def test_pretrained_vectors_fill_the_initial_tables(tmp_path, mode):
    """The task puts each found word's vector in its row of every table of the mode; the
    omitted words and the specials start from N(0, std), not from a file row."""
    vectors = write_toy_vectors(tmp_path / "toy.vec")
    config = ClassificationConfig(toy_sentences=200, mode=mode,
                                  embedding_path=str(tmp_path / "toy.vec"))
    task = ClassificationTask(config, RunDir(tmp_path / "run"), log=lambda _: None)
    task.prepare({split: task.read_split(split) for split in task.splits})
    vocab = task.vocab
    present = [w for w in vocab.idx_to_token if w in vectors]
    assert task.coverage == {"found": len(present), "vocab": len(vocab), "dim": 16}
    assert len(present) == len(vocab) - len(OMITTED) - 2          # <unk> and <pad> too
    params = task.init_params(task.build_model(), jax.random.key(0))
    tables = {path[-1].key: np.asarray(leaf) for path, leaf in
              jax.tree_util.tree_leaves_with_path(params) if path[-1].key in (FROZEN, TUNED)}
    assert set(tables) == {"static": {FROZEN}, "non-static": {TUNED},
                           "multichannel": {FROZEN, TUNED}}[mode]
    rows = np.stack([vectors[w] for w in present])
    for table in tables.values():
        np.testing.assert_array_equal(table[vocab[present]], rows)
        assert not np.isin(table[vocab["the"]], rows).all()


@pytest.mark.slow
@pytest.mark.parametrize("mode,model", [("static", "textcnn"),
                                        ("multichannel", "bilstm_classifier")])
def test_pretrained_modes_run_end_to_end(tmp_path, mode, model, capsys):
    vectors = tmp_path / "toy.vec"
    write_toy_vectors(vectors)
    script = load_script()
    summary = script.main(["--toy-sentences", "400", "--epochs", "2", "--mode", mode,
                           "--model", model, "--embedding-path", str(vectors),
                           "--model-overrides",
                           "num_filters=16" if model == "textcnn" else "hidden_size=16",
                           "--optimizer", "adam",
                           "--batch-size", "32", "--num-buckets", "2", "--save-dir",
                           str(tmp_path / "run"), "--no-progress"])
    coverage = summary["embedding_coverage"]
    assert coverage == {"found": summary["vocab_size"] - len(OMITTED) - 2,
                        "vocab": summary["vocab_size"], "dim": 16}
    assert f"cover {coverage['found']:,} of {coverage['vocab']:,} vocab tokens" in \
        capsys.readouterr().out
    fold = summary["folds"][0]
    assert fold["test_samples"] == 50 and fold["train_samples"] == 400
    # the reported accuracy is the last evaluation's, a count of the 50 test sentences
    assert summary["accuracy_mean"] == fold["accuracy"] == fold["history"][-1]["test_accuracy"]
    assert round(50 * fold["accuracy"], 6) == int(round(50 * fold["accuracy"]))
    assert fold["history"][-1]["epoch"] == 2 and summary["accuracy_std"] == 0.0
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["embedding_coverage"] == coverage


@pytest.mark.slow
@pytest.mark.skipif(not (VECTORS / "pang_lee_polarity_fasttext.vec").exists(),
                    reason=f"shared vector file {VECTORS} not found")
def test_static_mode_on_a_real_vector_file(tmp_path):
    summary = load_script().main([
        "--toy-sentences", "200", "--epochs", "1", "--mode", "static", "--embedding-path",
        str(VECTORS / "pang_lee_polarity_fasttext.vec"), "--model-overrides", "num_filters=8",
        "--optimizer", "adam", "--batch-size", "32", "--num-buckets", "2", "--save-dir",
        str(tmp_path), "--no-progress"])
    coverage = summary["embedding_coverage"]
    assert coverage["dim"] == 100 and 0 < coverage["found"] < coverage["vocab"]


def test_pretrained_mode_needs_vectors():
    script = load_script()
    with pytest.raises(SystemExit):
        script.main(["--mode", "static"])
    with pytest.raises(SystemExit):
        script.main(["--embedding-path", "x.vec"])   # rand takes none
