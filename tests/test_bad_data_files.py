"""Malformed data files are refused by line (issue 44): CoNLL and TSV/CSV files whose column
count changes, empty texts, tags outside IOB1/IOB2/IOBES and bytes that are not UTF-8. Each
error names the file, the line and what was expected; a recipe refuses before it trains."""

from __future__ import annotations

import pytest

from textkit.data.conll import ConllError, read_conll
from textkit.data.labelled_text import TableError, read_labelled
from textkit.errors import DataFileError

GOOD_CONLL = "John NNP B-PER\nlives VBZ O\n\nin IN O\nRome NNP B-LOC\n"


@pytest.mark.parametrize("text,line,expected", [
    (GOOD_CONLL + "now RB\n", 6, r"2 columns, expected 3 as on line 1"),
    (GOOD_CONLL.replace("lives VBZ O", "lives VBZ extra O"), 2, "4 columns, expected 3"),
    (GOOD_CONLL.replace("B-LOC", "I-"), 5, r"tag 'I-' is not O or one of B-/I-/E-/S- followed "
     r"by an entity type"),
    (GOOD_CONLL.replace("B-PER", "X-PER"), 1, r"tag 'X-PER' is not O"),
    (GOOD_CONLL.replace("B-PER", "PER"), 1, r"tag 'PER' is not O"),
    (GOOD_CONLL.replace("B-LOC", "B-"), 5, r"tag 'B-' is not O"),
])
def test_conll_refuses_a_bad_line(tmp_path, text, line, expected):
    path = tmp_path / "train.conll"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConllError, match=rf"train\.conll:{line}: {expected}"):
        read_conll(path)


def test_conll_keeps_every_scheme_and_docstart_lines(tmp_path):
    path = tmp_path / "ok.conll"
    path.write_text("-DOCSTART- -X- O\n\nA x S-ORG\nB x B-creative-work\nC x E-creative-work\n"
                    "D x I-PER\n", encoding="utf-8")
    assert read_conll(path)[0].tags == ["S-ORG", "B-creative-work", "E-creative-work", "I-PER"]


def test_conll_and_tsv_name_the_line_of_invalid_utf8(tmp_path):
    conll = tmp_path / "a.conll"
    conll.write_bytes(GOOD_CONLL.encode() + b"caf\xe9 NN O\n")
    with pytest.raises(ConllError, match=r"a\.conll, line 6: invalid utf-8 .* at byte 3"):
        read_conll(conll)
    tsv = tmp_path / "a.tsv"
    tsv.write_bytes(b"sentence\tlabel\ngood\t1\n\xff bad\t0\n")
    with pytest.raises(TableError, match=r"a\.tsv, line 3: invalid utf-8"):
        read_labelled(tsv, text="sentence", label="label", label_names=["0", "1"])


@pytest.mark.parametrize("suffix,text,line,expected", [
    (".tsv", "sentence\tlabel\ngood\t1\nbad\t0\textra\n", 3,
     r"3 columns, expected 2 as on line 1 \(the header\)"),
    (".tsv", "sentence\tlabel\ngood\t1\nno label here\n", 3, "1 columns, expected 2"),
    (".csv", 'sentence,label\n"a, b",1\nc,0,d\n', 3, "3 columns, expected 2"),
    (".tsv", "sentence\tlabel\ngood\t1\n \t0\n", 3, r"the text in column 'sentence' is empty"),
])
def test_tables_refuse_a_bad_row(tmp_path, suffix, text, line, expected):
    path = tmp_path / f"train{suffix}"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TableError, match=rf"train\{suffix}:{line}: {expected}"):
        read_labelled(path, text="sentence", label="label", label_names=["0", "1"])


def test_an_empty_second_text_is_named(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("a\tb\tlabel\nx\ty\t1\nx\t\t0\n", encoding="utf-8")
    with pytest.raises(TableError, match=r"pairs\.tsv:3: the text in column 'b' is empty"):
        read_labelled(path, text="a", pair="b", label="label", label_names=["0", "1"])


def test_the_ner_recipe_refuses_a_bad_file_before_training(tmp_path):
    from textkit.cli.finetune import finetune
    from textkit.tasks import TokenClassificationTask

    good, bad = tmp_path / "good.conll", tmp_path / "bad.conll"
    good.write_text(GOOD_CONLL, encoding="utf-8")
    bad.write_text(GOOD_CONLL + "\nParis NNP\n", encoding="utf-8")
    run = tmp_path / "run"
    with pytest.raises(DataFileError, match=rf"{bad}:7: 2 columns, expected 3"):
        finetune(TokenClassificationTask, [
            "--train-file", str(good), "--valid-file", str(bad), "--save-dir", str(run)],
            "test")
    assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()
