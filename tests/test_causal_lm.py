"""The causal-LM task and recipe: documents packed into rows with padding out of the loss,
fine-tuning a tiny decoder checkpoint through ``examples/language_model/train.py --init-from``,
the export reloaded with the perplexity it was scored with, and bad settings refused early."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from textkit.errors import ConfigError
from textkit.pretrained import load_pretrained
from textkit.tasks.causal_lm import CausalLMConfig, CausalLMTask, read_documents
from textkit.training import RunDir

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "decoders" / "qwen2"
TEXT = ["the cat sat on the mat", "a dog runs in the park today",
        "hello world, how are you?", "numbers like 12345 and 678"]


def test_documents_by_layout(tmp_path):
    path = tmp_path / "wiki.txt"
    path.write_text(" \n = One = \n \n first line \n second \n = = Sub = = \n more \n"
                    " = Two = \n\n other \n")
    assert read_documents(path, "wikitext") == ["= One =\nfirst line\nsecond\n= = Sub = =\nmore",
                                                "= Two =\nother"]
    path.write_text("a b\n\nc\nd\n\n\ne\n")
    assert read_documents(path, "paragraphs") == ["a b", "c\nd", "e"]
    assert read_documents(path, "lines") == ["a b", "c", "d", "e"]


def test_rows_pack_documents_and_keep_padding_out_of_the_loss(tmp_path):
    config = CausalLMConfig(init_from=str(FIXTURE), max_length=8, batch_size=3,
                            save_dir=str(tmp_path))
    task = CausalLMTask(config, RunDir(tmp_path), log=lambda message: None)
    task.prepare({"train": TEXT})
    rows, weights = task.rows(TEXT)
    tok = task.tokenizer
    stream = [i for text in TEXT for i in ([tok.bos_id] if tok.bos_id is not None else [])
              + tok.encode(text, add_special_tokens=False) + [tok.eos_ids[0]]]
    assert rows.shape[1] == 9 and weights.shape == (len(rows), 8)
    targets = rows[:, 1:][weights > 0]
    assert targets.tolist() == stream[1:]                   # every token a target once
    assert rows[:, :-1].reshape(-1)[:len(stream) - 1].tolist() == stream[:-1]
    assert weights.sum() == len(stream) - 1
    batches = list(task.make_loader(TEXT, train=False))
    assert all(b["tokens"].shape == (3, 8) for b in batches)
    assert sum(float(b["weights"].sum()) for b in batches) == len(stream) - 1


@pytest.mark.slow
def test_recipe_fine_tunes_and_exports_what_it_scored(tmp_path):
    from subprocesses import load_script

    # under a name of its own: other tests import other recipes named train.py
    recipe = load_script(ROOT / "examples" / "language_model" / "train.py", "lm_train_recipe")
    files = {}
    for split, lines in (("train", TEXT * 6), ("valid", TEXT[::-1]), ("test", TEXT[1:])):
        files[split] = tmp_path / f"{split}.txt"
        files[split].write_text("\n".join(lines) + "\n")
    summary = recipe.main([
        "--init-from", str(FIXTURE), "--train-file", str(files["train"]),
        "--valid-file", str(files["valid"]), "--test-file", str(files["test"]),
        "--max-length", "16", "--batch-size", "4", "--max-steps", "6", "--lr", "3e-3",
        "--save-dir", str(tmp_path / "run"), "--no-tensorboard", "--no-progress"])
    assert summary["steps"] == 6 and math.isfinite(summary["test_ppl"])
    export = Path(summary["export"])
    reloaded = load_pretrained(export)
    assert reloaded.kind == "causal_lm"
    # the export scores what the run reported (the best checkpoint's parameters)
    config = CausalLMConfig(init_from=str(export), max_length=16, batch_size=4,
                            save_dir=str(tmp_path / "rescore"))
    task = CausalLMTask(config, RunDir(tmp_path / "rescore"), log=lambda message: None)
    task.prepare({"train": TEXT})
    again = task.evaluate(reloaded.model, reloaded.params, TEXT[1:])
    assert again["ppl"] == pytest.approx(summary["test_ppl"], rel=1e-5)
    before = task.evaluate(*_original(), TEXT[1:])
    assert before["ppl"] != pytest.approx(again["ppl"], rel=1e-3)      # it trained
    assert json.loads((export / "config.json").read_text())["model_type"] == "qwen2"


def _original():
    original = load_pretrained(FIXTURE)
    return original.model, original.params


def test_bad_settings_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="--documents"):
        CausalLMConfig(documents="pages")
    config = CausalLMConfig(init_from=str(FIXTURE), max_length=4096, save_dir=str(tmp_path))
    task = CausalLMTask(config, RunDir(tmp_path), log=lambda message: None)
    with pytest.raises(ConfigError, match="--max-length 4096 is above the 128 positions"):
        task.prepare({"train": TEXT})
    encoder = ROOT / "tests" / "fixtures" / "encoders" / "bert_seqcls"
    task = CausalLMTask(CausalLMConfig(init_from=str(encoder), save_dir=str(tmp_path)),
                        RunDir(tmp_path), log=lambda message: None)
    with pytest.raises(ConfigError, match="its kind is encoder, not a decoder-only"):
        task.prepare({"train": TEXT})
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    task = CausalLMTask(CausalLMConfig(train_file=str(empty), valid_file=str(empty),
                                       save_dir=str(tmp_path)), RunDir(tmp_path),
                        log=lambda message: None)
    with pytest.raises(ConfigError, match="no document"):
        task.read_split("train")

