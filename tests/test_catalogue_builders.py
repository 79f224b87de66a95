"""The catalogue's builders (``textkit.data.catalogue``) on small generated files in each
corpus's published layout: what a user with the real download gets, without ``../shared``.
Entries whose files carry a published checksum are built through ``DatasetInfo.build`` (a
generated file cannot match it); unverified entries go through ``get_dataset(root=...)``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from textkit.data import get_dataset
from textkit.data.registry import get_dataset_info


@pytest.fixture(autouse=True)
def private_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTKIT_HOME", str(tmp_path / "home"))


def build(name: str, root: Path, **files: Path):
    return get_dataset_info(name).build(root, files)


def test_mr_reads_latin1_and_utf8(tmp_path):
    (tmp_path / "rt-polarity.neg").write_bytes("a dull caf\xe9 film\nflat\n".encode("latin-1"))
    (tmp_path / "rt-polarity.pos").write_text("a joy\n", encoding="utf-8")
    data = get_dataset("mr", "all", root=tmp_path, progress=False)
    assert data.texts == ["a dull café film", "flat", "a joy"]
    assert data.labels.tolist() == [0, 0, 1] and data.label_names == ("neg", "pos")


def test_sst2_train_and_hidden_test_labels(tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\ngood fun \t1\nbad \t0\n")
    test = tmp_path / "test.tsv"
    test.write_text("index\tsentence\n0\tunseen one\n1\tunseen two\n")
    data = build("sst2", tmp_path, tsv=train)
    assert data.texts == ["good fun ", "bad "] and data.labels.tolist() == [1, 0]
    hidden = build("sst2", tmp_path, tsv=test)
    assert hidden.texts == ["unseen one", "unseen two"] and hidden.labels.tolist() == [-1, -1]


def test_imdb_folders_in_name_order(tmp_path):
    for role, reviews in (("neg", {"2_1.txt": "worst", "1_3.txt": "poor"}),
                          ("pos", {"0_9.txt": "great"})):
        folder = tmp_path / "aclImdb" / "train" / role
        folder.mkdir(parents=True)
        for name, text in reviews.items():
            (folder / name).write_text(text, encoding="utf-8")
    data = build("imdb", tmp_path, neg=tmp_path / "aclImdb/train/neg",
                 pos=tmp_path / "aclImdb/train/pos")
    assert data.texts == ["poor", "worst", "great"] and data.labels.tolist() == [0, 0, 1]


def test_glue_cola_numbered_columns_without_header(tmp_path):
    folder = tmp_path / "glue-cola"
    folder.mkdir()
    (folder / "train.tsv").write_text("gj04\t1\t\tThe cat sat.\ngj04\t0\t*\tCat the sat.\n")
    data = get_dataset("glue_cola", "train", root=folder, progress=False)
    assert data.texts == ["The cat sat.", "Cat the sat."] and data.pairs is None
    assert data.labels.tolist() == [1, 0] and data.label_names == ("0", "1")


def test_glue_stsb_pairs_and_regression_scores(tmp_path):
    (tmp_path / "dev.tsv").write_text(
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\t"
        "score\n0\tmain\tx\t2012\t1\tnone\tnone\tA man plays.\tA man is playing.\t4.750\n")
    data = get_dataset("glue_stsb", "dev", root=tmp_path, progress=False)
    assert data.texts == ["A man plays."] and data.pairs == ["A man is playing."]
    np.testing.assert_allclose(data.labels, [4.75])


def test_glue_mrpc_dev_is_split_from_train_by_ids(tmp_path):
    pairs = tmp_path / "msr_paraphrase_train.txt"
    pairs.write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                     "1\t10\t11\tA.\tA too.\n0\t20\t21\tB.\tNot B.\n1\t30\t31\tC.\tC too.\n")
    ids = tmp_path / "dev_ids.tsv"
    ids.write_text("20\t21\n")
    dev = build("glue_mrpc", tmp_path, pairs=pairs, keep_ids=ids)
    train = build("glue_mrpc", tmp_path, pairs=pairs, drop_ids=ids)
    whole = build("glue_mrpc", tmp_path, pairs=pairs)
    assert dev.texts == ["B."] and dev.pairs == ["Not B."] and dev.labels.tolist() == [0]
    assert train.texts == ["A.", "C."] and train.labels.tolist() == [1, 1]
    assert len(whole.texts) == 3


def test_squad2_with_an_unanswerable_question(tmp_path):
    context = "Paris is the capital of France."
    (tmp_path / "dev-v2.0.json").write_text(json.dumps({"version": "v2.0", "data": [{
        "title": "Paris", "paragraphs": [{"context": context, "qas": [
            {"id": "q1", "question": "Capital of France?", "is_impossible": False,
             "answers": [{"text": "Paris", "answer_start": 0}]},
            {"id": "q2", "question": "Capital of Mars?", "is_impossible": True,
             "answers": []}]}]}]}))
    questions = get_dataset("squad2.0", "dev", root=tmp_path, progress=False)
    assert [q.id for q in questions] == ["q1", "q2"]
    assert questions[0].answers[0].text == "Paris" and not questions[0].impossible
    assert questions[1].impossible and questions[1].answers == ()


def test_conll2003_sentences_and_tags(tmp_path):
    (tmp_path / "train.txt").write_text(
        "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n"
        "Peter NNP B-NP B-PER\n")
    sentences = get_dataset("conll2003", "train", root=tmp_path, progress=False)
    assert [s.tokens for s in sentences][-2:] == [["EU", "rejects"], ["Peter"]]
    assert sentences[-2].tags == ["B-ORG", "O"]


def test_parallel_and_lm_builders(tmp_path):
    (tmp_path / "a.en").write_text("a cat\na dog\n")
    (tmp_path / "a.de").write_text("eine Katze\nein Hund\n")
    pairs = build("multi30k", tmp_path, en=tmp_path / "a.en", de=tmp_path / "a.de")
    assert len(pairs) == 2
    with pytest.raises(ValueError, match="language 'fr' not available"):
        get_dataset_info("multi30k").build(tmp_path, {"en": tmp_path / "a.en"}, src_lang="fr")
    (tmp_path / "ptb.txt").write_text(" the cat \n\n a dog \n")
    corpus = build("ptb", tmp_path, text=tmp_path / "ptb.txt")
    wiki = build("wikitext2", tmp_path, text=tmp_path / "ptb.txt")
    assert len(corpus) < len(wiki), "PTB skips the blank line, WikiText keeps it"
