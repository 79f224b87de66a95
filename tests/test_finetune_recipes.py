"""The encoder fine-tuning recipes end to end (``examples/finetune/``) on the tiny fixture
checkpoints of ``tests/fixtures/encoders`` and generated data: training from the checkpoint and
from random weights, the export (transformers' layout, label names, the same predictions as the
trained parameters), ``--predict``, SQuAD's ``predictions.json`` against the official scorer,
and bad input stopped early with a message naming what is wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from textkit.data.squad import read_squad, squad_scores
from textkit.data.toy_spans import toy_entities, toy_questions
from textkit.errors import TextkitError
from textkit.pretrained import load_pretrained

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "encoders"
sys.path.insert(0, str(ROOT / "examples" / "finetune"))
import classify  # noqa: E402
import ner  # noqa: E402
import squad  # noqa: E402

pytestmark = pytest.mark.slow
FAST = ["--max-steps", "4", "--eval-every", "2", "--no-progress", "--no-tensorboard",
        "--batch-tokens", "256", "--num-buckets", "2", "--max-length", "48"]


def _tsv(path: Path, rows: list[tuple[str, ...]], header: str) -> str:
    path.write_text(header + "\n" + "".join("\t".join(r) + "\n" for r in rows))
    return str(path)


def _pairs(tmp_path: Path, name: str, n: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    words = ["the", "movie", "was", "good", "bad", "plot", "great", "dull", "film", "fun"]
    rows = []
    for _ in range(n):
        a = " ".join(rng.choice(words, 5))
        b = a if rng.random() < 0.5 else " ".join(rng.choice(words, 5))
        rows.append((a, b, "same" if a == b else "other"))
    return _tsv(tmp_path / name, rows, "first\tsecond\tquality")


def _squad_json(path: Path, split: str, n: int) -> str:
    questions = toy_questions(split, n)
    path.write_text(json.dumps({"data": [{"title": "toy", "paragraphs": [
        {"context": q.context, "qas": [{"id": q.id, "question": q.question, "answers": [
            {"text": a.text, "answer_start": a.start} for a in q.answers]}]}
        for q in questions]}]}))
    return str(path)


def _conll(path: Path, split: str, n: int) -> str:
    path.write_text("".join("".join(f"{w}\t{t}\n" for w, t in zip(s.tokens, s.tags)) + "\n"
                            for s in toy_entities(split, n)))
    return str(path)


def test_classify_pairs_from_a_checkpoint_exports_what_it_trained(tmp_path):
    train, valid = _pairs(tmp_path, "train.tsv", 64, 0), _pairs(tmp_path, "dev.tsv", 16, 1)
    summary = classify.main([
        "--pretrained", str(FIXTURES / "bert_seqcls"), "--train-file", train,
        "--valid-file", valid, "--text-column", "first", "--pair-column", "second",
        "--label-column", "quality", "--save-dir", str(tmp_path / "run"), *FAST])
    assert summary["steps"] == 4 and summary["eval_metric"] == "accuracy"
    assert 0.0 <= summary["valid_accuracy"] <= 1.0 and summary["valid_count"] == 16
    assert summary["padding"]["tokens_saved"] > 0.1       # buckets beat padding to 48
    export = Path(summary["export"])
    config = json.loads((export / "config.json").read_text())
    assert config["id2label"] == {"0": "other", "1": "same"}
    assert config["architectures"] == ["BertForSequenceClassification"]
    # the export holds the best checkpoint's parameters: same predictions on the valid split
    pretrained = load_pretrained(export)
    model, params, tokenizer = pretrained.model, pretrained.params, pretrained.tokenizer
    batch = tokenizer.encode_batch(["the movie was good fun"], ["the movie was good fun"])
    logits = model.apply({"params": params}, **batch)["logits"]
    assert logits.shape == (1, 2) and np.isfinite(np.asarray(logits)).all()
    task_scores = _rescore_classify(export, valid)
    assert task_scores == pytest.approx(summary["valid_accuracy"])
    # --predict writes label names for new inputs
    out = classify.main(["--pretrained", str(export), "--predict", valid, "--text-column",
                         "first", "--pair-column", "second", "--save-dir",
                         str(tmp_path / "predict"), "--max-length", "48"])
    lines = Path(out["predictions"]).read_text().splitlines()
    assert len(lines) == 16 and {json.loads(x)["label"] for x in lines} <= {"other", "same"}


def _rescore_classify(export: Path, valid: str) -> float:
    """Accuracy of the exported model on ``valid``, computed here from load_pretrained."""
    pretrained = load_pretrained(export)
    model, params, tokenizer = pretrained.model, pretrained.params, pretrained.tokenizer
    rows = [line.split("\t") for line in Path(valid).read_text().splitlines()[1:]]
    names = json.loads((export / "config.json").read_text())["label2id"]
    logits_of = jax.jit(lambda p, batch: model.apply({"params": p}, **batch)["logits"])
    hits = 0
    for first, second, label in rows:     # one program per length, not one per operation
        batch = tokenizer.encode_batch([first], [second], max_length=48)
        logits = np.asarray(logits_of(params, batch))
        hits += int(logits.argmax(-1)[0] == names[label])
    return hits / len(rows)


def test_classify_from_random_weights_under_float16_loss_scaling(tmp_path):
    data = tmp_path / "d.tsv"
    rows = [(f"text number {i} is {'good' if i % 2 else 'bad'}", str(i % 2)) for i in range(40)]
    _tsv(data, rows, "sentence\tlabel")
    summary = classify.main([
        "--pretrained", str(FIXTURES / "roberta_seqcls"), "--init", "random",
        "--train-file", str(data), "--valid-file", str(data), "--precision", "mixed_float16",
        "--save-dir", str(tmp_path / "run"), "--no-export", *FAST])
    assert summary["steps"] == 4 and np.isfinite(summary["last_loss"])
    assert summary["config"]["lr"] == 5e-4                    # the from-scratch default
    assert summary["export"] is None


def test_ner_from_random_weights_with_a_tokenizer_directory_and_a_preset(tmp_path):
    import shutil
    tokenizer_only = tmp_path / "tokenizer"
    tokenizer_only.mkdir()
    for name in ("vocab.txt", "tokenizer_config.json"):
        shutil.copy(FIXTURES / "bert_tokcls" / name, tokenizer_only / name)
    train = _conll(tmp_path / "train.conll", "train", 24)
    summary = ner.main(["--pretrained", str(tokenizer_only), "--init", "random", "--model",
                        "bert_tiny", "--model-overrides", "num_layers=1,hidden_size=32,"
                        "num_heads=2,intermediate_size=64", "--train-file", train,
                        "--valid-file", train, "--save-dir", str(tmp_path / "run"), *FAST])
    config = json.loads((Path(summary["export"]) / "config.json").read_text())
    vocab = (tokenizer_only / "vocab.txt").read_text().splitlines()
    assert config["vocab_size"] == len(vocab) and config["num_hidden_layers"] == 1
    assert summary["num_params"] < 100_000 and np.isfinite(summary["last_loss"])


def test_squad_writes_official_predictions_scored_as_the_summary(tmp_path):
    train = _squad_json(tmp_path / "train.json", "train", 24)
    valid = _squad_json(tmp_path / "dev.json", "valid", 12)
    summary = squad.main(["--pretrained", str(FIXTURES / "bert_qa"), "--train-file", train,
                          "--valid-file", valid, "--doc-stride", "8", "--max-query-length",
                          "16", "--save-dir", str(tmp_path / "run"), *FAST])
    predictions = json.loads((tmp_path / "run" / "predictions.json").read_text())
    questions = read_squad(valid)
    assert set(predictions) == {q.id for q in questions}
    scores = squad_scores(predictions, questions)
    assert scores["f1"] == pytest.approx(summary["valid_f1"])
    assert scores["exact_match"] == pytest.approx(summary["valid_exact_match"])
    assert all(p in q.context for q in questions for p in [predictions[q.id]])
    assert json.loads((Path(summary["export"]) / "config.json").read_text())[
        "architectures"] == ["BertForQuestionAnswering"]


def test_ner_exports_its_tag_set_and_tags_new_sentences(tmp_path):
    train, valid = _conll(tmp_path / "train.conll", "train", 40), _conll(
        tmp_path / "dev.conll", "valid", 12)
    test = _conll(tmp_path / "test.conll", "test", 12)
    summary = ner.main(["--pretrained", str(FIXTURES / "distilbert_tokcls"), "--train-file",
                        train, "--valid-file", valid, "--test-file", test, "--save-dir",
                        str(tmp_path / "run"), *FAST])
    assert {"valid_f1", "test_f1", "test_precision", "test_recall"} <= set(summary)
    config = json.loads((Path(summary["export"]) / "config.json").read_text())
    tags = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
    assert tags[0] == "O" and set(tags) == {"O", "B-PER", "I-PER", "B-LOC", "B-ORG", "I-ORG"}
    words = tmp_path / "words.txt"
    words.write_text("anna met tom\n\nin\nparis\n")
    out = ner.main(["--pretrained", summary["export"], "--predict", str(words),
                    "--save-dir", str(tmp_path / "predict"), "--max-length", "48"])
    tagged = Path(out["predictions"]).read_text().split("\n\n")
    assert out["count"] == 2 and tagged[1].splitlines()[1].split("\t")[0] == "paris"
    lines = [line.split("\t") for block in tagged for line in block.splitlines()]
    assert all(tag in tags and 0 < float(probability) <= 1 for _, probability, tag in lines)


# ------------------------------------------------------------------------------- bad input
def _fails(main, args, tmp_path, pattern):
    save_dir = tmp_path / f"bad{len(list(tmp_path.glob('bad*')))}"
    with pytest.raises(TextkitError, match=pattern):
        main([*FAST, *args, "--save-dir", str(save_dir)])
    assert not (save_dir / "checkpoints").exists()           # stopped before training


def test_bad_inputs_are_named_before_training(tmp_path):
    good = _pairs(tmp_path, "good.tsv", 8, 0)
    seqcls = ["--pretrained", str(FIXTURES / "bert_seqcls")]
    _fails(classify.main, [*seqcls, "--train-file", good, "--valid-file", good,
                           "--text-column", "first", "--label-column", "missing"],
           tmp_path, r"good.tsv: no column 'missing'; the header has")
    odd = tmp_path / "odd.tsv"
    odd.write_text("first\tsecond\tquality\na\tb\tsame\nc\td\tweird\n")
    _fails(classify.main, [*seqcls, "--train-file", good, "--valid-file", str(odd),
                           "--text-column", "first", "--pair-column", "second",
                           "--label-column", "quality"],
           tmp_path, r"odd.tsv:3: label 'weird' in column 'quality' is not in the label set")
    _fails(classify.main, [*seqcls, "--dataset", "glue_mrpc", "--train-file", good,
                           "--valid-file", good, "--text-column", "first"],
           tmp_path, "glue_mrpc is a sentence-pair task: --train-file needs --pair-column")
    _fails(classify.main, [*seqcls, "--train-file", good, "--valid-file", good,
                           "--text-column", "first", "--label-column", "quality",
                           "--max-length", "4096"],
           tmp_path, "--max-length 4096 is above the model's 64 positions")
    broken = json.loads(Path(_squad_json(tmp_path / "q.json", "train", 3)).read_text())
    broken["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] += 1
    (tmp_path / "q.json").write_text(json.dumps(broken))
    _fails(squad.main, ["--pretrained", str(FIXTURES / "bert_qa"), "--train-file",
                        str(tmp_path / "q.json"), "--valid-file", str(tmp_path / "q.json"),
                        "--doc-stride", "8", "--max-query-length", "16"],
           tmp_path, r"question toy-train-1: answer_start \d+ does not match")


def test_a_tokenizer_larger_than_the_embedding_table_is_refused(tmp_path):
    import shutil
    copy = tmp_path / "ckpt"
    shutil.copytree(FIXTURES / "bert_seqcls", copy)
    config = json.loads((copy / "config.json").read_text())
    config["vocab_size"] -= 10
    (copy / "config.json").write_text(json.dumps(config))
    good = _pairs(tmp_path, "good.tsv", 8, 0)
    _fails(classify.main, ["--pretrained", str(copy), "--train-file", good, "--valid-file",
                           good, "--text-column", "first", "--label-column", "quality"],
           tmp_path, r"the tokenizer has \d+ ids but the model \d+ embeddings")


def test_the_recipe_exits_2_with_the_message(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "finetune" / "classify.py"), "--pretrained",
         str(tmp_path / "nowhere"), "--save-dir", str(tmp_path / "run")],
        capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.startswith("error: ")
    assert "nowhere" in result.stderr
