"""``textkit-generate``'s output order and chat options: each prompt's line as soon as it and
those before it are complete (the first unfinished one streamed), ``--jsonl`` line by line,
``--system`` and a multi-turn ``--interactive`` session."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from textkit.cli.generate import _InOrder, main
from textkit.decoding import Generation, Generator
from textkit.pretrained import load_pretrained

CHAT = Path(__file__).resolve().parent / "fixtures" / "decoders" / "qwen2_chat"


def test_results_are_written_in_input_order_as_soon_as_they_can_be():
    out = io.StringIO()
    writer = _InOrder(out, 3, jsonl=False)
    writer.piece(1, "b")                      # not the first unfinished prompt: held
    writer.piece(0, "a")
    assert out.getvalue() == "a"              # the first one streams
    writer.done(1, Generation("b", [2], "length"))
    assert out.getvalue() == "a"
    writer.done(0, Generation("a", [1], "eos"))
    assert out.getvalue() == "a\nb\n"         # 0 ended: 1 (already complete) follows at once
    writer.piece(2, "c\nd")
    assert out.getvalue() == "a\nb\nc\\nd"
    writer.done(2, Generation("c\nd", [3], "eos"))
    assert out.getvalue() == "a\nb\nc\\nd\n"
    lines = io.StringIO()
    jsonl = _InOrder(lines, 2, jsonl=True)
    jsonl.done(0, Generation("x", [5], "eos"))
    assert json.loads(lines.getvalue()) == {"text": "x", "token_ids": [5],
                                            "finish_reason": "eos"}


@pytest.mark.slow
def test_system_and_interactive_chat(monkeypatch, capsys):
    loaded = load_pretrained(CHAT)
    generator = Generator.from_pretrained(loaded, max_new_tokens=4)
    system = {"role": "system", "content": "Be brief."}
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hi\nAnd then?\n"))
    assert main(["--pretrained", str(CHAT), "--interactive", "--system", "Be brief.",
                 "--max-new-tokens", "4"]) == 0
    replies = capsys.readouterr().out.split("\n")
    first = generator.chat(loaded.params, [system, {"role": "user", "content": "Hi"}])[0]
    second = generator.chat(loaded.params, [
        system, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "And then?"}])[0]
    assert replies == [first.text, second.text, ""]
    assert main(["--pretrained", str(CHAT), "--chat", "--system", "Be brief.", "--jsonl",
                 "--max-new-tokens", "4", "--prompt", "Hi"]) == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == first.token_ids
