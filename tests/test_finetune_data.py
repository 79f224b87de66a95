"""The fine-tuning recipes' data pieces (jax-free): SQuAD reading, scoring and span search,
CoNLL reading, entity counting and sub-word label alignment, labelled tables, the GLUE / SQuAD /
NER catalogue entries, and the encoder batches. Real files in ``../shared/data`` are extra
checks (skipped with a reason when absent); generated data covers every path in a plain clone.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from textkit.batchify import BatchShape, EncoderBatchify
from textkit.data import get_dataset, list_datasets
from textkit.data.conll import (
    IGNORE_LABEL,
    ConllError,
    align_labels,
    entities,
    entity_scores,
    read_conll,
    word_labels,
)
from textkit.data.labelled_text import TableError, label_set, read_labelled
from textkit.data.squad import (
    SquadError,
    Window,
    best_answer,
    exact_match,
    f1_score,
    normalize_answer,
    read_squad,
    squad_scores,
)
from textkit.data.toy_spans import toy_entities, toy_questions
from textkit.errors import TextkitError
from textkit.tasks.sequence_classification import (
    SequenceClassificationConfig,
    SequenceClassificationTask,
)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
TOKENIZERS = SHARED / "tokenizers"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is absent")


# ------------------------------------------------------------------------------------- SQuAD
@pytest.mark.parametrize("text,normal", [
    ("The Cat!", "cat"), ("an apple, a pear", "apple pear"), ("  Theatre  of   the Absurd ",
                                                                "theatre of absurd"),
    ("Los Angeles.", "los angeles"), ("it's the 1990s", "its 1990s"), ("A", ""),
    ("Anne's", "annes"),
])
def test_normalize_answer_is_the_official_one(text, normal):
    assert normalize_answer(text) == normal


def test_squad_metrics_on_hand_made_cases():
    assert exact_match("the Denver Broncos", "Denver Broncos.") == 1.0
    assert exact_match("Denver", "Denver Broncos") == 0.0
    # prediction "denver broncos team" vs gold "denver broncos": p 2/3, r 1 -> F1 0.8
    assert f1_score("Denver Broncos team", "Denver Broncos") == pytest.approx(0.8)
    assert f1_score("x y x", "x x z") == pytest.approx(2 / 3)       # counts, not sets
    assert f1_score("", "Denver") == 0.0
    assert f1_score("", "the", version="1.1") == 0.0                 # v1.1: empty scores 0
    assert f1_score("", "the", version="2.0") == 1.0                 # v2.0: both empty
    questions = [_question("q1", ["Denver Broncos", "Broncos"]), _question("q2", ["1990"]),
                 _question("q3", ["Carolina Panthers"])]
    scores = squad_scores({"q1": "the Broncos", "q2": "in 1990", "q4": "x"}, questions)
    # q1: EM 1 (second gold), q2: EM 0, F1 2/3; q3 missing: 0
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    assert scores["missing"] == 1 and scores["count"] == 3


def test_squad_v2_scores_no_answer_questions():
    questions = [_question("a", ["Paris"]), _question("b", [], impossible=True)]
    scores = squad_scores({"a": "Paris", "b": ""}, questions)
    assert scores["exact_match"] == 100.0 and scores["f1"] == 100.0
    assert scores["has_answer_count"] == 1 and scores["no_answer_count"] == 1
    assert squad_scores({"a": "Paris", "b": "Rome"}, questions)["no_answer_f1"] == 0.0


def _question(qid, answers, impossible=False):
    from textkit.data.squad import Answer, Question
    context = " ".join(answers) + " and more"
    spans, start = [], 0
    for text in answers:
        spans.append(Answer(text, context.index(text, start)))
    return Question(qid, "why?", context, tuple(spans), impossible)


def _squad_file(tmp_path, qas, context="Paris is the capital of France."):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": qas}]}]}))
    return path


def test_read_squad_names_the_question_whose_answer_start_is_wrong(tmp_path):
    good = {"id": "q1", "question": "What?", "answers": [{"text": "Paris", "answer_start": 0}]}
    bad = {"id": "q2", "question": "Where?", "answers": [{"text": "France",
                                                          "answer_start": 3}]}
    assert [q.id for q in read_squad(_squad_file(tmp_path, [good]))] == ["q1"]
    with pytest.raises(SquadError, match=r"question q2: answer_start 3 does not match") as err:
        read_squad(_squad_file(tmp_path, [good, bad]))
    assert isinstance(err.value, TextkitError) and "squad.json" in str(err.value)
    with pytest.raises(SquadError, match="q1.*occurs twice"):
        read_squad(_squad_file(tmp_path, [good, good]))
    unanswered = {"id": "q3", "question": "Who?", "answers": []}
    with pytest.raises(SquadError, match="q3 has no answer"):
        read_squad(_squad_file(tmp_path, [unanswered]))
    assert read_squad(_squad_file(tmp_path, [unanswered]), require_answers=False)[0].id == "q3"


def test_best_answer_searches_windows_and_respects_limits():
    context = "alpha beta gamma delta"
    offsets = np.array([[0, 0], [0, 5], [6, 10], [11, 16], [17, 22], [0, 0]], np.int32)
    window = Window(offsets, np.array([0, 1, 1, 1, 1, 0], bool))
    start = np.array([9.0, 0, 5, 0, 0, 8])       # position 5 is not context: never chosen
    end = np.array([9.0, 0, 0, 4, 0, 0])
    assert best_answer(context, [window], [start], [end]) == ("beta gamma", 9.0)
    assert best_answer(context, [window], [start], [end], max_answer_length=1)[0] in (
        "beta", "gamma")
    # a second window with a better span wins
    start2, end2 = np.array([0.0, 7, 0, 0, 0, 0]), np.array([0.0, 0, 0, 0, 7, 0])
    assert best_answer(context, [window, window], [start, start2], [end, end2])[0] == \
        "alpha beta gamma delta"
    # v2.0: the smallest no-answer score over the windows (min(18, 20) = 18) beats the best
    # span (14) by 4: no answer at threshold 0, the span at threshold 5
    start2[0] = end2[0] = 10.0
    assert best_answer(context, [window, window], [start, start2], [end, end2],
                       null_threshold=0.0) == ("", 18.0)
    assert best_answer(context, [window, window], [start, start2], [end, end2],
                       null_threshold=5.0)[0] == "alpha beta gamma delta"


def _tokenizer():
    from textkit.tasks.encoder_task import train_wordpiece
    texts = [q.context for q in toy_questions("train", 200)] + ["what is the of ?"]
    return train_wordpiece(texts, 300, "bert")


def test_gold_spans_of_generated_questions_recover_their_answers():
    from textkit.tasks.question_answering import make_features
    questions = toy_questions("valid", 200, seed=3)
    features = make_features(questions, _tokenizer(), max_length=40, doc_stride=8,
                             max_query_length=12)
    assert len(features) > len(questions)                      # long contexts get windows
    recovered = {}
    for f in features:
        if f.span != (0, 0):
            q = questions[f.question]
            recovered[f.question] = q.context[f.window.offsets[f.span[0], 0]:
                                              f.window.offsets[f.span[1], 1]]
            assert len(f.input_ids) <= 40 and f.window.in_context[f.span[0]]
    assert recovered == {i: q.answers[0].text for i, q in enumerate(questions)}


@needs_shared
def test_squad_dev_gold_spans_recover_gold_answers_and_score_100():
    from textkit.pretrained import EncoderTokenizer
    from textkit.tasks.question_answering import make_features
    questions = read_squad(SHARED / "squad-v1.1" / "dev-v1.1.json")
    assert len(questions) == 10570
    scores = squad_scores({q.id: q.answers[0].text for q in questions}, questions)
    assert scores["exact_match"] == 100.0 and scores["f1"] == 100.0
    tokenizer = EncoderTokenizer.from_directory(TOKENIZERS / "bert-base-uncased", "bert")
    features = make_features(questions, tokenizer, max_length=384, doc_stride=128,
                             max_query_length=64)
    found = {}
    for f in features:
        if f.span != (0, 0) and f.question not in found:
            q = questions[f.question]
            found[f.question] = q.context[f.window.offsets[f.span[0], 0]:
                                          f.window.offsets[f.span[1], 1]] == q.answers[0].text
    assert len(found) == len(questions)
    assert sum(found.values()) / len(questions) >= 0.99


# -------------------------------------------------------------------------------------- NER
@pytest.mark.parametrize("tags,spans", [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),
    (["I-PER", "I-PER", "O", "I-LOC", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3), ("LOC", 4, 4)]),
    (["B-PER", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 1)]),
    (["O", "I-ORG", "I-ORG"], [("ORG", 1, 2)]),
    (["B-creative-work", "I-creative-work", "B-group"],
     [("creative-work", 0, 1), ("group", 2, 2)]),
    (["S-PER", "B-LOC", "E-LOC", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 2), ("LOC", 3, 3)]),
    (["O", "O"], []),
])
def test_entities_are_counted_as_conlleval_does(tags, spans):
    assert entities(tags) == spans


def test_entity_scores_count_exact_spans_and_types():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "O"]]
    scores = entity_scores(gold, predicted)
    assert (scores["correct_entities"], scores["predicted_entities"],
            scores["gold_entities"]) == (2, 3, 3)
    assert scores["precision"] == pytest.approx(2 / 3) and scores["f1"] == pytest.approx(2 / 3)
    assert entity_scores([["O"]], [["O"]])["f1"] == 0.0
    with pytest.raises(ValueError, match="sentence 0"):
        entity_scores([["O", "O"]], [["O"]])


def test_read_conll_and_its_errors(tmp_path):
    path = tmp_path / "a.conll"
    path.write_text("-DOCSTART- O\n\nJohn\tNNP\tB-PER\nlives\tVBZ\tO\n\n"
                    "in NN O\nRome NNP B-LOC\n\n")
    sentences = read_conll(path)
    assert [s.tokens for s in sentences] == [["John", "lives"], ["in", "Rome"]]
    assert sentences[1].tags == ["O", "B-LOC"]
    path.write_text("John B-PER\nlonely\n")
    with pytest.raises(ConllError, match=r"a.conll:2: expected a token and a tag"):
        read_conll(path)


def test_label_alignment_round_trips_on_generated_sentences():
    from textkit.tasks.encoder_task import train_wordpiece
    sentences = toy_entities("train", 100)
    tokenizer = train_wordpiece([" ".join(s.tokens) for s in sentences], 120, "bert")
    _round_trip(tokenizer, sentences)


@needs_shared
@pytest.mark.parametrize("name,kind", [("bert-base-cased", "bert"), ("roberta-base",
                                                                    "roberta")])
def test_label_alignment_round_trips_on_wnut17(name, kind):
    from textkit.pretrained import EncoderTokenizer
    sentences = read_conll(SHARED / "wnut17" / "wnut17train.conll")
    assert len(sentences) == 3394
    tokenizer = EncoderTokenizer.from_directory(TOKENIZERS / name, kind)
    _round_trip(tokenizer, sentences)


def _round_trip(tokenizer, sentences):
    tags = sorted({t for s in sentences for t in s.tags})
    ids = {t: i for i, t in enumerate(tags)}
    encodings = tokenizer.encodings([s.tokens for s in sentences], is_pretokenized=True)
    split_words = 0
    for sentence, encoding in zip(sentences, encodings):
        labels = [ids[t] for t in sentence.tags]
        aligned = align_labels(encoding.word_ids, labels)
        assert (aligned != IGNORE_LABEL).sum() == len(sentence.tokens)  # one per word
        back = word_labels(encoding.word_ids, aligned, len(sentence.tokens))
        assert back.tolist() == labels
        split_words += len(encoding.ids) - 2 > len(sentence.tokens)
    assert split_words > 0            # sub-words occur, so the alignment was exercised


# ------------------------------------------------------------------------------------ tables
def test_read_labelled_tsv_csv_jsonl_and_headerless(tmp_path):
    (tmp_path / "a.tsv").write_text('sentence\tlabel\nit is " good\tpos\nbad one\tneg\n')
    data = read_labelled(tmp_path / "a.tsv", text="sentence", label="label",
                         label_names=["neg", "pos"])
    assert data.texts == ['it is " good', "bad one"] and data.labels.tolist() == [1, 0]
    assert data.label_names == ("neg", "pos") and not data.regression
    (tmp_path / "b.csv").write_text('q,a,score\n"x, y",z,1.5\nu,v,2\n')
    data = read_labelled(tmp_path / "b.csv", text="q", pair="a", label="score",
                         regression=True)
    assert data.pairs == ["z", "v"] and data.labels.dtype == np.float32 and data.regression
    (tmp_path / "c.jsonl").write_text('{"text": "hi", "y": "1"}\n\n{"text": "yo", "y": "0"}\n')
    assert label_set(tmp_path / "c.jsonl", "y") == ["0", "1"]
    assert read_labelled(tmp_path / "c.jsonl", text="text", label="y",
                         label_names=["0", "1"]).labels.tolist() == [1, 0]
    (tmp_path / "d.tsv").write_text("src\t1\t\tgood text\n")
    assert read_labelled(tmp_path / "d.tsv", text=3, label=1, label_names=["0", "1"],
                         header=False).texts == ["good text"]


def test_read_labelled_errors_name_file_line_and_column(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_text("sentence\tlabel\ngood\tpos\nmeh\tmaybe\n")
    with pytest.raises(TableError, match=r"a.tsv:3: label 'maybe' .* not in the label set"):
        read_labelled(path, text="sentence", label="label", label_names=["neg", "pos"])
    with pytest.raises(TableError, match=r"no column 'text'; the header has"):
        read_labelled(path, text="text", label="label", label_names=["neg", "pos"])
    with pytest.raises(TableError, match=r"a.tsv:2: label 'pos' .* not a number"):
        read_labelled(path, text="sentence", label="label", regression=True)
    path.write_text("sentence\tlabel\n")
    with pytest.raises(TableError, match="holds no example"):
        read_labelled(path, text="sentence", label="label", label_names=["a"])


# --------------------------------------------------------------------------------- catalogue
def test_catalogue_has_the_fine_tuning_datasets():
    assert {"glue_sst2", "glue_mrpc", "glue_cola", "glue_stsb", "glue_mnli"} <= set(
        list_datasets(task="sequence_classification"))
    assert list_datasets(task="question_answering") == ["squad1.1", "squad2.0"]
    assert list_datasets(task="token_classification") == ["conll2003", "wnut17"]


@needs_shared
def test_glue_and_ner_entries_read_the_shared_files():
    mrpc = SHARED / "glue-mrpc"
    train, dev = (get_dataset("glue_mrpc", s, root=mrpc, progress=False)
                  for s in ("train", "dev"))
    assert (len(train), len(dev), int(dev.labels.sum())) == (3668, 408, 279)
    assert dev.pairs is not None and not set(dev.texts) & set(train.texts) - set(dev.texts)
    sst2 = get_dataset("glue_sst2", "dev", root=SHARED / "glue-sst2", progress=False)
    assert len(sst2) == 872 and int(sst2.labels.sum()) == 444
    wnut = get_dataset("wnut17", "test", root=SHARED / "wnut17", progress=False)
    assert len(wnut) == 1287


# -------------------------------------------------------------------------------- batchify
def test_encoder_batchify_pads_to_the_bucket_shape():
    samples = [{"input_ids": np.array([5, 6, 7]), "token_type_ids": np.array([0, 0, 1]),
                "labels": np.int32(1), "index": np.int32(4)},
               {"input_ids": np.array([5, 8]), "token_type_ids": np.array([0, 0]),
                "labels": np.int32(0), "index": np.int32(9)}]
    batch = EncoderBatchify(0, with_token_types=True)(samples, BatchShape(3, (4,)))
    assert batch["input_ids"].tolist() == [[5, 6, 7, 0], [5, 8, 0, 0], [0, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    assert batch["token_type_ids"][0].tolist() == [0, 0, 1, 0]
    assert batch["labels"].tolist() == [1, 0, 0] and batch["index"].tolist() == [4, 9, 0]
    assert batch["weights"].tolist() == [1.0, 1.0, 0.0]
    tokens = [{"input_ids": np.array([1, 2]), "labels": np.array([-100, 3])}]
    batch = EncoderBatchify(1, with_token_types=False)(tokens, BatchShape(1, (3,)))
    assert batch["labels"].tolist() == [[-100, 3, -100]] and "token_type_ids" not in batch


def test_classification_scores_on_hand_made_cases():
    from textkit.tasks.sequence_classification import classification_scores
    gold = np.array([1, 1, 1, 0, 0, 0])
    predicted = np.array([1, 1, 0, 1, 0, 0])       # tp 2, fp 1, fn 1, tn 2
    scores = classification_scores(predicted, gold, regression=False, num_labels=2)
    assert scores["accuracy"] == pytest.approx(4 / 6) and scores["f1"] == pytest.approx(2 / 3)
    assert scores["mcc"] == pytest.approx((2 * 2 - 1 * 1) / 9)   # sqrt(3 * 3 * 3 * 3) = 9
    regression = classification_scores(np.array([1.0, 2.0, 2.0, 5.0]),
                                        np.array([2.0, 3.0, 3.0, 4.0]), regression=True,
                                        num_labels=1)
    assert regression["spearman"] == pytest.approx(1.0)            # same order, ties shared
    assert regression["pearson"] == pytest.approx(4 / 18 ** 0.5)  # cov 4, variances 9 and 2
    assert regression["mse"] == pytest.approx((1 + 1 + 1 + 1) / 4)


@pytest.mark.parametrize("cased", [False, True])
def test_a_preset_vocabulary_keeps_case_only_with_cased(tmp_path, cased):
    config = SequenceClassificationConfig(dataset="toy", save_dir=str(tmp_path),
                                          model="bert_tiny", vocab_size=60, cased=cased)
    task = SequenceClassificationTask(config, run=None, log=lambda _: None)
    task.load_checkpoint(["Paris is big", "Berlin is small"] * 20)
    pieces = task.tokenizer.tokenizer.encode("Paris").tokens
    assert pieces[1] == ("Paris" if cased else "paris")
