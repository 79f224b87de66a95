"""``textkit.cli.finetune`` in the fast tier: ``finetune()`` trains the tiny BERT fixture for
two steps, keeps and exports the best checkpoint, and writes a summary whose validation
accuracy is that of the export; ``--predict`` then writes, for every input, the label the
exported model's logits pick (computed here independently with ``load_pretrained``). The
recipes' own end-to-end runs (``test_finetune_recipes.py``) are in the slow tier."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import jax
import numpy as np
import pytest

from textkit.cli.finetune import RESUME_KEYS, finetune
from textkit.errors import ConfigError
from textkit.pretrained import load_pretrained
from textkit.tasks import SequenceClassificationTask

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "encoders" / "bert_seqcls"


def _rows(n: int, seed: int) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    good, bad = ["good", "great", "fun"], ["bad", "dull", "poor"]
    rows = []
    for _ in range(n):
        label = "pos" if rng.random() < 0.5 else "neg"
        word = rng.choice(good if label == "pos" else bad)
        rows.append((f"the film was {word}", label))
    return rows


def _tsv(path: Path, rows: list[tuple[str, str]]) -> str:
    path.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    return str(path)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_finetune_trains_exports_the_best_and_predicts_what_the_export_computes(tmp_path):
    train = _tsv(tmp_path / "train.tsv", _rows(24, 0))
    valid_rows = _rows(10, 1)
    valid = _tsv(tmp_path / "valid.tsv", valid_rows)
    summary = finetune(SequenceClassificationTask, [
        "--pretrained", str(FIXTURE), "--train-file", train, "--valid-file", valid,
        "--max-steps", "2", "--eval-every", "2", "--batch-tokens", "128", "--num-buckets", "1",
        "--max-length", "16", "--no-progress", "--no-tensorboard",
        "--save-dir", str(tmp_path / "run")], "test")
    assert summary["steps"] == 2 and summary["best_step"] == 2
    assert summary["eval_metric"] == "accuracy" and summary["valid_count"] == 10
    assert summary["num_bucket_shapes"] == 1 and summary["num_params"] > 0
    assert set(summary["padding"]) >= {"bucket_padding", "max_length_padding", "tokens_saved"}
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["valid_accuracy"] == summary["valid_accuracy"]
    assert set(RESUME_KEYS) <= set(saved["config"])      # what --resume compares is recorded
    export = Path(summary["export"])
    config = json.loads((export / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"}    # the training file's sorted labels
    (tmp_path / "probe").write_text("")                      # the modes the umask gives
    (tmp_path / "probe_dir").mkdir()
    for path in (tmp_path / "run" / "config.json", tmp_path / "run" / "summary.json",
                 export / "config.json"):
        assert _mode(path) == _mode(tmp_path / "probe"), path      # not tempfile's 0600
    assert _mode(export) == _mode(tmp_path / "probe_dir")          # not tempfile's 0700

    # the export's own logits, computed here: the reference for --predict and the summary
    pretrained = load_pretrained(export)
    model, params, tokenizer = pretrained.model, pretrained.params, pretrained.tokenizer
    expected, probabilities = [], []
    logits_of = jax.jit(lambda p, batch: model.apply({"params": p}, **batch)["logits"])
    for text, _ in valid_rows:       # one program per length, not one per operation
        batch = tokenizer.encode_batch([text], max_length=16)
        logits = np.asarray(logits_of(params, batch))[0]
        expected.append(config["id2label"][str(int(logits.argmax(-1)))])
        probabilities.append(np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum())
    accuracy = np.mean([label == gold for label, (_, gold) in zip(expected, valid_rows)])
    assert summary["valid_accuracy"] == accuracy

    out = finetune(SequenceClassificationTask, [
        "--pretrained", str(export), "--predict", valid, "--max-length", "16",
        "--save-dir", str(tmp_path / "predict")], "test")
    assert out["count"] == 10
    records = [json.loads(line) for line in Path(out["predictions"]).read_text().splitlines()]
    assert [r["text"] for r in records] == [t for t, _ in valid_rows]
    assert [r["label"] for r in records] == expected
    for record, p in zip(records, probabilities):      # each label with its probability
        np.testing.assert_allclose(record["probability"], p.max(), rtol=1e-5)
        np.testing.assert_allclose([record["probabilities"][k] for k in ("neg", "pos")], p,
                                   rtol=1e-5)

    output = tmp_path / "mine" / "labels.jsonl"
    with pytest.raises(ConfigError, match="--output .*labels.jsonl: its folder does not exist"):
        finetune(SequenceClassificationTask, [
            "--pretrained", str(export), "--predict", valid, "--output", str(output)], "test")
    output.parent.mkdir()
    out = finetune(SequenceClassificationTask, [
        "--pretrained", str(export), "--predict", valid, "--max-length", "16",
        "--output", str(output), "--save-dir", str(tmp_path / "predict2")], "test")
    assert out["predictions"] == str(output) and output.read_text() == Path(
        tmp_path / "predict" / "predictions.jsonl").read_text()
    assert not (tmp_path / "predict2" / "predictions.jsonl").exists()


def test_predict_refuses_a_missing_export_early_and_never_moves_latest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trained = Path("runs/classify_toy/20240101-000000")
    trained.mkdir(parents=True)
    os.symlink(trained.name, "runs/classify_toy/latest")
    inputs = _tsv(tmp_path / "new.tsv", _rows(3, 2))
    with pytest.raises(ConfigError, match=r"runs/classify_toy/latest/export: no checkpoint "
                       r"there .*the export of a finished fine-tuning run"):
        finetune(SequenceClassificationTask, [
            "--pretrained", "runs/classify_toy/latest/export", "--predict", inputs], "test")
    assert sorted(p.name for p in Path("runs/classify_toy").iterdir()) == [
        "20240101-000000", "latest"]                      # nothing written
    with pytest.raises(ConfigError, match="--predict missing.tsv: no such file"):
        finetune(SequenceClassificationTask, [
            "--pretrained", str(FIXTURE), "--predict", "missing.tsv"], "test")

    out = finetune(SequenceClassificationTask, [
        "--pretrained", str(FIXTURE), "--predict", inputs, "--max-length", "16"], "test")
    assert out["count"] == 3
    assert Path(out["predictions"]).resolve().parent.parent == (
        tmp_path / "runs/classify_toy/predictions").resolve()
    assert os.readlink("runs/classify_toy/latest") == trained.name      # not moved


def test_a_training_file_run_is_filed_and_labelled_after_its_file():
    """A --train-file run goes to runs/<recipe>_<file name>, not runs/<recipe>_toy."""
    from textkit.cli.flags import parse_config
    from textkit.tasks import get_task

    config = SequenceClassificationTask.config_class(train_file="data/reviews.csv",
                                                     valid_file="data/dev.csv")
    assert config.data_name == "reviews.csv" and config.runs_folder == "runs/classify_reviews.csv"
    assert parse_config(SequenceClassificationTask.config_class, []).runs_folder == (
        "runs/classify_toy")
    pretraining = get_task("pretraining").config_class(train_file=("a/ptb.txt", "b/wiki.txt"))
    assert pretraining.runs_folder == "runs/pretrain_ptb.txt+wiki.txt"


def test_ner_predictions_carry_each_tags_probability(tmp_path, monkeypatch):
    """predictions.conll: word, probability, tag (last, so CoNLL readers read the tag)."""
    from textkit.tasks import TokenClassificationTask

    monkeypatch.chdir(tmp_path)                   # the prediction run's directory goes here
    words = tmp_path / "words.txt"
    words.write_text("John\nlives\nin\nRome\n\nHello\n")
    output = tmp_path / "tags.conll"
    out = finetune(TokenClassificationTask, [
        "--pretrained", str(FIXTURE.parent / "bert_tokcls"), "--predict", str(words),
        "--max-length", "16", "--output", str(output)], "test")
    assert out["count"] == 2
    sentences = [block.splitlines() for block in output.read_text().split("\n\n") if block]
    assert [[line.split("\t")[0] for line in s] for s in sentences] == [
        ["John", "lives", "in", "Rome"], ["Hello"]]
    labels = json.loads((FIXTURE.parent / "bert_tokcls" / "config.json").read_text())["id2label"]
    for line in (line for s in sentences for line in s):
        _, probability, tag = line.split("\t")
        assert 1 / len(labels) <= float(probability) <= 1 and tag in labels.values()
