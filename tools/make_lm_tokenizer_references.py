"""Build ``tests/fixtures/lm_tokenizers/reference.json``: transformers' ids, decodes and chat
templates for the real decoder-only tokenizer files of ``../shared/data/tokenizers``, which
``tests/test_lm_tokenizer.py`` compares ``textkit.pretrained.lm_tokenizer.LMTokenizer`` with.

Needs transformers (5.x), tokenizers, sentencepiece, protobuf, tiktoken and jinja2 (not textkit's
dependencies); run it by hand in a separate environment and commit what it writes::

    /tmp/hfenv/bin/python tools/make_lm_tokenizer_references.py [--out tests/fixtures/lm_tokenizers]

Each tokenizer is loaded with ``AutoTokenizer.from_pretrained`` from a temporary checkpoint
directory holding the shared files and, where the shared folder has no ``tokenizer_config.json``,
a small one as the published checkpoints have it (recorded in the JSON, so that the test builds
the same directory): ``GPT2Tokenizer`` for gpt2 and smollm2; ``LlamaTokenizer`` with
``add_bos_token`` for llama-2 (transformers 5's default ``legacy=False``) and mistral-7b-v0.1
(``legacy=True``, the other prefix rule after special tokens); for llama-3 (Meta's tiktoken
``tokenizer.model``) a ``PreTrainedTokenizerFast`` config with the 256 special tokens from id
128000, ``<|begin_of_text|>`` / ``<|end_of_text|>`` and ``add_bos_token``, which transformers
converts with its ``TikTokenConverter``; qwen2.5 keeps its own ``tokenizer_config.json`` (and
its chat template). For every text of ``TEXTS`` the JSON holds ``encode(text)`` with and without
special tokens and the decodes of the first (special tokens skipped and kept); for qwen2.5 the
rendered chat templates of a few conversations (system + user, default system, multi-turn,
tools and tool calls, with and without the generation prompt) and their ids.

``--check DIR`` loads, with transformers, the directories that textkit's ``LMTokenizer.save``
wrote with ``--export DIR`` in textkit's environment (NAME: the reference's directory; NAME-bare:
the shared folder as it is, for which ``save`` writes the tokenizer_config.json of textkit's
defaults) and compares transformers' ids with textkit's (which for NAME are the reference's) and
the chat templates with the reference's::

    .venv/bin/python tools/make_lm_tokenizer_references.py --export /tmp/lm_saves
    /tmp/hfenv/bin/python tools/make_lm_tokenizer_references.py --check /tmp/lm_saves

``--hf-saves DIR`` (building) also writes transformers' own ``save_pretrained`` of each
tokenizer (tokenizer.json, tokenizer_config.json, chat_template.jinja) into DIR/NAME, and
``--load-hf DIR`` (textkit's environment) reads those with ``LMTokenizer`` and compares them
with the reference: the tokenizer.json path on files transformers wrote::

    /tmp/hfenv/bin/python tools/make_lm_tokenizer_references.py --hf-saves /tmp/lm_hf
    .venv/bin/python tools/make_lm_tokenizer_references.py --load-hf /tmp/lm_hf
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "tokenizers"
OUT = ROOT / "tests" / "fixtures" / "lm_tokenizers"

TEXTS = [
    "Hello world",
    "hello world",
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "Größe naïve café 日本語 😀",
    "",
    " ",
    "   Hello",
    "  leading spaces and trailing spaces   ",
    "\n",
    "line one\nline two\n\nline four\n",
    "x\r\ny\r\n",
    "\ttab\tseparated\tvalues",
    "   \n\n   \t  ",
    "1234567890",
    "3.14159 and 2,718 and 1e-10 and 007",
    "Price: $1,299.99 (-15%) on 2024-06-01",
    "中文测试，简体字。繁體字測試。",
    "日本語のテキストです。カタカナとひらがな。",
    "한국어 텍스트입니다",
    "Emoji: 👍🏽 👨‍👩‍👧‍👦 🇩🇪 ❤️ 🙂🙂🙂",
    "Ünïcödé äöü ß ÆØÅ œ",
    "Привет, мир! Καλημέρα κόσμε",
    "مرحبا بالعالم and नमस्ते दुनिया",
    "Combining: e\u0301 vs \u00e9, A\u030a vs \u00c5",
    "Zero width: a\u200bb, nbsp: a\u00a0b, soft\u00adhyphen",
    "Control: \x00 \x07 \x1b[31mred\x1b[0m",
    "def f(x):\n    return x ** 2  # square\n",
    '{"key": [1, 2, 3], "nested": {"a": null}}',
    "https://example.com/path?query=1&b=2#frag user@example.org",
    "I'm, you're, it's, we've, they'll, he'd, I'D",
    "ALL CAPS AND MiXeD cAsE",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "word\u2581with\u2581metaspace and \u0120byte \u010a chars",
    "<|endoftext|>",
    "Hello<|endoftext|>world <|endoftext|> again",
    "<s>Hello</s> world",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "Mixed: English, français, español, 中文, and 😀 emoji.",
]

LLAMA3_SPECIALS = (
    ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
     "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
     "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
     "<|image|>"] + [f"<|reserved_special_token_{i}|>" for i in range(2, 246)])


def added(content: str) -> dict:
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True}


LLAMA_CONFIG = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True,
                "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                "unk_token": "<unk>", "clean_up_tokenization_spaces": False}
SETUPS = {
    # name: (shared files copied, tokenizer_config.json written (None: the shared one))
    "gpt2": (["vocab.json", "merges.txt"], {"tokenizer_class": "GPT2Tokenizer"}),
    "smollm2": (["vocab.json", "merges.txt"], {"tokenizer_class": "GPT2Tokenizer"}),
    "qwen2.5": (["vocab.json", "merges.txt", "tokenizer_config.json"], None),
    "llama-2": (["tokenizer.model"], LLAMA_CONFIG),
    "mistral-7b-v0.1": (["tokenizer.model"], {**LLAMA_CONFIG, "legacy": True}),
    "llama-3": (["tokenizer.model"], {
        "tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": True,
        "bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
        "added_tokens_decoder": {str(128000 + i): added(t)
                                 for i, t in enumerate(LLAMA3_SPECIALS)}}),
}

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Das Wetter für eine Stadt (°C) — 天气",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "Name der Stadt"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
CHATS = [
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "What is 2+2?"}]},
    {"messages": [{"role": "user", "content": "Bonjour ! Ça va ? 你好"}]},
    {"messages": [{"role": "system", "content": "Be kind."},
                  {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello! How can I help?"},
                  {"role": "user", "content": "Tell me a joke.\nA short one."}]},
    {"messages": [{"role": "user", "content": "Weather in Zürich?"}],
     "tools": [WEATHER_TOOL]},
    {"messages": [{"role": "user", "content": "Weather in Zürich?"},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"type": "function", "function": {
                          "name": "get_weather",
                          "arguments": {"city": "Zürich", "unit": "celsius"}}}]},
                  {"role": "tool", "content": "{\"temperature\": 21}"},
                  {"role": "tool", "content": "{\"sky\": \"klar\"}"}],
     "tools": [WEATHER_TOOL]},
]


def directory(name: str, parent: Path) -> Path:
    """The checkpoint directory of ``name``: its shared files and tokenizer_config.json."""
    files, config = SETUPS[name]
    target = parent / name
    target.mkdir()
    for file in files:
        shutil.copyfile(REAL / name / file, target / file)
    if config is not None:
        (target / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    return target


def record(tokenizer) -> dict:
    """transformers' ids and decodes of every text of TEXTS."""
    with_special = [tokenizer.encode(t) for t in TEXTS]
    return {
        "len": len(tokenizer), "bos_id": tokenizer.bos_token_id, "eos_id": tokenizer.eos_token_id,
        "pad_id": tokenizer.pad_token_id,
        "ids": with_special,
        "ids_plain": [tokenizer.encode(t, add_special_tokens=False) for t in TEXTS],
        "decoded": [tokenizer.decode(ids, skip_special_tokens=True) for ids in with_special],
        "decoded_special": [tokenizer.decode(ids, skip_special_tokens=False)
                            for ids in with_special],
    }


def chats(tokenizer) -> list[dict]:
    rows = []
    for chat in CHATS:
        for prompt in (True, False):
            text = tokenizer.apply_chat_template(chat["messages"], tools=chat.get("tools"),
                                                 add_generation_prompt=prompt, tokenize=False)
            rows.append({**chat, "add_generation_prompt": prompt, "text": text,
                         "ids": tokenizer.encode(text, add_special_tokens=False)})
    return rows


def build(out: Path, hf_saves: Path | None) -> None:
    import tokenizers
    import transformers
    from transformers import AutoTokenizer

    reference = {"versions": {"transformers": transformers.__version__,
                              "tokenizers": tokenizers.__version__},
                 "texts": TEXTS, "tokenizers": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (files, config) in SETUPS.items():
            tokenizer = AutoTokenizer.from_pretrained(directory(name, Path(tmp)))
            entry = {"files": files, "tokenizer_config": config, **record(tokenizer)}
            if tokenizer.chat_template:
                entry["chats"] = chats(tokenizer)
            reference["tokenizers"][name] = entry
            if hf_saves is not None:
                tokenizer.save_pretrained(hf_saves / name)
            print(f"{name}: {type(tokenizer).__name__}, {len(tokenizer)} ids")
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(reference, ensure_ascii=False, indent=1)
    text = re.sub(r"\[\n(\s*-?\d+,\n)*\s*-?\d+\n\s*\]",     # one line per list of ids
                  lambda m: "[" + ",".join(re.findall(r"-?\d+", m.group(0))) + "]", text)
    (out / "reference.json").write_text(text + "\n", encoding="utf-8")
    print(f"wrote {out / 'reference.json'} ({len(text.encode()) // 1024} KB)")


def export(target: Path) -> None:
    """textkit's environment: ``LMTokenizer.save`` of every reference directory into
    target/NAME and of the bare shared folder (no tokenizer_config.json: textkit's defaults)
    into target/NAME-bare, with textkit's ids of both in target/ids.json."""
    from textkit.pretrained.lm_tokenizer import LMTokenizer

    target.mkdir(parents=True, exist_ok=True)
    ids = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in SETUPS:
            for variant, source in ((name, directory(name, Path(tmp))),
                                    (f"{name}-bare", REAL / name)):
                tokenizer = LMTokenizer.from_directory(source)
                tokenizer.save(target / variant)
                ids[variant] = {"ids": tokenizer.encode_batch(TEXTS),
                                "ids_plain": tokenizer.encode_batch(TEXTS, False)}
                print(f"saved {target / variant}")
    (target / "ids.json").write_text(json.dumps(ids))


def check(saved: Path, out: Path) -> int:
    """transformers on textkit's saves: the ids textkit gave (ids.json), which for the
    non-bare directories are the reference's too, and the reference's chat templates."""
    from transformers import AutoTokenizer

    reference = json.loads((out / "reference.json").read_text("utf-8"))
    expected = json.loads((saved / "ids.json").read_text("utf-8"))
    failures = 0
    for variant, entry in expected.items():
        name = variant.removesuffix("-bare")
        tokenizer = AutoTokenizer.from_pretrained(saved / variant)
        bad = [t for t, ids in zip(TEXTS, entry["ids"]) if tokenizer.encode(t) != ids]
        bad += [t for t, ids in zip(TEXTS, entry["ids_plain"])
                if tokenizer.encode(t, add_special_tokens=False) != ids]
        if variant == name:
            bad += ["ids differ from the reference"] * (entry["ids"] != reference[
                "tokenizers"][name]["ids"])
        for chat in reference["tokenizers"][name].get("chats", []):
            text = tokenizer.apply_chat_template(
                chat["messages"], tools=chat.get("tools"), tokenize=False,
                add_generation_prompt=chat["add_generation_prompt"])
            bad += ["chat"] if text != chat["text"] else []
        failures += len(bad)
        print(f"{variant}: {type(tokenizer).__name__}, "
              f"{'ok' if not bad else f'{len(bad)} differ: {bad[:3]!r}'}")
    return 1 if failures else 0


def load_hf(saved: Path, out: Path) -> int:
    """textkit's environment: ``LMTokenizer`` on transformers' ``save_pretrained`` output
    (tokenizer.json, tokenizer_config.json, chat_template.jinja) against the reference."""
    from textkit.pretrained.lm_tokenizer import LMTokenizer

    reference = json.loads((out / "reference.json").read_text("utf-8"))
    failures = 0
    for name, entry in reference["tokenizers"].items():
        tokenizer = LMTokenizer.from_directory(saved / name)
        bad = [t for t, ids in zip(TEXTS, entry["ids"]) if tokenizer.encode(t) != ids]
        bad += [t for t, ids in zip(TEXTS, entry["ids_plain"])
                if tokenizer.encode(t, add_special_tokens=False) != ids]
        bad += [t for t, ids, text in zip(TEXTS, entry["ids"], entry["decoded"])
                if tokenizer.decode(ids) != text]
        for chat in entry.get("chats", []):
            text = tokenizer.apply_chat_template(chat["messages"], chat["add_generation_prompt"],
                                                 tools=chat.get("tools"))
            bad += ["chat"] if text != chat["text"] else []
        failures += len(bad)
        print(f"{name}: {'ok' if not bad else f'{len(bad)} differ: {bad[:3]!r}'}")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--export", type=Path, help="textkit's env: write LMTokenizer saves here")
    parser.add_argument("--check", type=Path, help="load textkit's saves with transformers")
    parser.add_argument("--hf-saves", type=Path,
                        help="building: also save_pretrained each tokenizer here")
    parser.add_argument("--load-hf", type=Path,
                        help="textkit's env: load the --hf-saves directories with textkit")
    args = parser.parse_args()
    if not REAL.is_dir():
        print(f"{REAL} is absent: the real tokenizer files are needed", file=sys.stderr)
        return 1
    if args.export:
        export(args.export)
        return 0
    if args.check:
        return check(args.check, args.out)
    if args.load_hf:
        return load_hf(args.load_hf, args.out)
    build(args.out, args.hf_saves)
    return 0


if __name__ == "__main__":
    sys.exit(main())
