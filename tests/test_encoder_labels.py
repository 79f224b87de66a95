"""Class names of encoder classifiers: ``id2label`` / ``label2id`` in and out of
``EncoderConfig.labels`` (no network, no torch)."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from textkit.models import EncoderConfig
from textkit.pretrained import PretrainedError, load_pretrained, save_pretrained

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "encoders" / "bert_seqcls"


def test_labels_are_written_and_read_back(tmp_path):
    pretrained = load_pretrained(FIXTURE)
    model, params, tokenizer = pretrained.model, pretrained.params, pretrained.tokenizer
    assert model.config.num_labels == 3 and model.config.labels is None   # LABEL_0, ...
    save_pretrained(model, params, tokenizer, tmp_path / "named",
                    labels=["negative", "neutral", "positive"])
    config = json.loads((tmp_path / "named" / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}
    assert config["label2id"] == {"negative": 0, "neutral": 1, "positive": 2}
    again = load_pretrained(tmp_path / "named").model
    assert again.config.labels == ("negative", "neutral", "positive")
    save_pretrained(again, params, tokenizer, tmp_path / "kept")      # from the config
    config = json.loads((tmp_path / "kept" / "config.json").read_text())
    assert config["id2label"]["2"] == "positive"


def test_wrong_labels_are_refused(tmp_path):
    pretrained = load_pretrained(FIXTURE)
    model, params, tokenizer = pretrained.model, pretrained.params, pretrained.tokenizer
    with pytest.raises(PretrainedError, match="3 distinct names"):
        save_pretrained(model, params, tokenizer, tmp_path / "x", labels=["a", "b"])
    with pytest.raises(PretrainedError, match="3 distinct names"):
        save_pretrained(model, params, tokenizer, tmp_path / "x", labels=["a", "a", "b"])
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="labels"):
        EncoderConfig(num_labels=2, labels=("a",))


@pytest.mark.slow
def test_a_new_head_drops_or_takes_the_names(tmp_path):
    root = tmp_path / "bare"
    shutil.copytree(FIXTURE.parent / "bert_model", root)
    config = json.loads((root / "config.json").read_text())
    config["id2label"] = {"0": "a", "1": "b"}
    (root / "config.json").write_text(json.dumps(config))
    assert load_pretrained(root).model.config.labels == ("a", "b")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)      # the head is initialised at random
        three = load_pretrained(root, head="sequence_classification", num_labels=3).model
        named = load_pretrained(root, head="sequence_classification",
                                      labels=("x", "y", "z")).model
    assert three.config.labels is None and three.config.num_labels == 3
    assert named.config.labels == ("x", "y", "z") and named.config.num_labels == 3


@pytest.mark.parametrize("dataset, names", [
    ("glue_sst2", ["negative", "positive"]), ("glue_mrpc", ["not_equivalent", "equivalent"]),
    ("glue_rte", ["entailment", "not_entailment"])])
def test_glue_exports_name_what_the_label_codes_mean(dataset, names, tmp_path):
    """A run on a GLUE dataset exports id2label names, not the files' codes "0" / "1"."""
    from textkit.cli.flags import parse_config
    from textkit.tasks import SequenceClassificationTask
    from textkit.training import RunDir

    config = parse_config(SequenceClassificationTask.config_class, ["--dataset", dataset])
    task = SequenceClassificationTask(config, RunDir(tmp_path))
    task.label_names = ["0", "1"] if dataset != "glue_rte" else names   # as read from its files
    assert task.export_labels() == names
    own_files = [tmp_path / "t.tsv", tmp_path / "v.tsv"]
    for path in own_files:
        path.write_text("a\tb\tlabel\nx\ty\t0\n")
    own = parse_config(SequenceClassificationTask.config_class, [
        "--dataset", dataset, "--train-file", str(own_files[0]), "--valid-file",
        str(own_files[1]), "--pair-column", "b"])
    task = SequenceClassificationTask(own, RunDir(tmp_path))
    task.label_names = ["0", "1"]
    assert task.export_labels() == ["0", "1"]           # a file of one's own keeps its labels
