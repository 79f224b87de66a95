"""``LMTokenizer``: decoder-only checkpoints' tokenizers and chat templates (no torch, no
transformers).

``tests/fixtures/lm_tokenizers/reference.json`` was made by
``tools/make_lm_tokenizer_references.py`` with transformers 5: for the real tokenizer files of
``../shared/data/tokenizers`` (gpt2, smollm2, qwen2.5, llama-2, mistral-7b-v0.1, llama-3), laid
out as a checkpoint directory (the files and tokenizer_config.json the JSON records), the ids of
~40 texts with and without special tokens, their decodes and Qwen2.5's chat templates. Those
tests skip without ``../shared`` (a fresh clone); the others build tiny tokenizers here (a
byte-level BPE alphabet, SentencePiece models trained on a few lines).
"""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path

import pytest

from textkit.pretrained.errors import (
    MissingFileError,
    PretrainedError,
    UnsupportedArchitectureError,
)
from textkit.pretrained.lm_tokenizer import ChatTemplateError, LMTokenizer

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "tokenizers"
REFERENCE = json.loads((ROOT / "tests" / "fixtures" / "lm_tokenizers" / "reference.json")
                       .read_text("utf-8"))
TEXTS = REFERENCE["texts"]
NAMES = sorted(REFERENCE["tokenizers"])


def shared(name: str) -> Path:
    source = REAL / name
    if not source.is_dir():
        pytest.skip(f"{source} is absent (the real tokenizer files of ../shared/data)")
    return source


def reference_directory(name: str, parent: Path) -> Path:
    """The checkpoint directory the reference was made from: the shared files and the
    recorded tokenizer_config.json."""
    entry = REFERENCE["tokenizers"][name]
    source = shared(name)
    target = parent / name
    target.mkdir()
    for file in entry["files"]:
        shutil.copyfile(source / file, target / file)
    if entry["tokenizer_config"] is not None:
        (target / "tokenizer_config.json").write_text(json.dumps(entry["tokenizer_config"]))
    return target


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """name -> LMTokenizer of the reference directory (each loaded once per module)."""
    cache: dict[str, LMTokenizer] = {}

    def get(name: str) -> LMTokenizer:
        if name not in cache:
            parent = tmp_path_factory.mktemp(name)
            cache[name] = LMTokenizer.from_directory(reference_directory(name, parent))
        return cache[name]

    return get


# --------------------------------------------------------------------- transformers' ids
@pytest.mark.parametrize("name", NAMES)
def test_ids_and_decodes_match_transformers(name, real):
    entry = REFERENCE["tokenizers"][name]
    tokenizer = real(name)
    assert len(TEXTS) >= 40
    assert len(tokenizer) == entry["len"]
    assert tokenizer.bos_id == entry["bos_id"]
    assert tokenizer.eos_ids == (entry["eos_id"],)
    assert tokenizer.pad_id == entry["pad_id"]
    for i, text in enumerate(TEXTS):
        assert tokenizer.encode(text) == entry["ids"][i], repr(text)
        assert tokenizer.encode(text, add_special_tokens=False) == entry["ids_plain"][i], \
            repr(text)
        assert tokenizer.decode(entry["ids"][i]) == entry["decoded"][i], repr(text)
        assert tokenizer.decode(entry["ids"][i], skip_special_tokens=False) == \
            entry["decoded_special"][i], repr(text)
    assert tokenizer.encode_batch(TEXTS) == entry["ids"]
    assert tokenizer.encode_batch(TEXTS, add_special_tokens=False) == entry["ids_plain"]


def test_chat_templates_match_transformers(real):
    tokenizer = real("qwen2.5")
    chats = REFERENCE["tokenizers"]["qwen2.5"]["chats"]
    assert {c["add_generation_prompt"] for c in chats} == {True, False}
    assert any("tools" in c for c in chats)
    for chat in chats:
        text = tokenizer.apply_chat_template(chat["messages"], chat["add_generation_prompt"],
                                             tools=chat.get("tools"))
        assert text == chat["text"]
        assert tokenizer.encode(text, add_special_tokens=False) == chat["ids"]
    assert tokenizer.apply_chat_template(chats[0]["messages"]).endswith(
        "<|im_start|>assistant\n")                  # add_generation_prompt defaults to True


# ------------------------------------------------------------------------ SOURCE.md's ids
KNOWN = {
    # name: (the ids SOURCE.md gives, without special tokens, for "Hello world" and the
    # quick-brown-fox sentence; None where it gives none)
    "gpt2": ([15496, 995], [15496, 995, 0, 383, 2068, 7586, 21831, 18045, 625, 262, 16931,
                            3290, 13]),
    "llama-2": ([15043, 3186], [15043, 3186, 29991, 450, 4996, 17354, 1701, 29916, 432, 17204,
                                975, 278, 17366, 11203, 29889]),
    "mistral-7b-v0.1": ([22557, 1526], [22557, 1526, 28808, 415, 2936, 9060, 285, 1142, 461,
                                        10575, 754, 272, 17898, 3914, 28723]),
    "llama-3": ([9906, 1917], [9906, 1917, 0, 578, 4062, 14198, 39935, 35308, 927, 279, 16053,
                               5679, 13]),
    "qwen2.5": ([9707, 1879], None),
    "smollm2": ([19556, 905], [19556, 905, 17, 378, 2365, 6354, 16438, 27003, 690, 260, 23790,
                               2767, 30]),
}
FOX = "Hello world! The quick brown fox jumps over the lazy dog."
ACCENTS = "Größe naïve café 日本語 😀"


@pytest.mark.parametrize("name", NAMES)
def test_known_ids_of_the_bare_shared_folders(name, real):
    """The shared folders as they are (llama-2, mistral, llama-3 and gpt2 without any
    tokenizer_config.json): the ids each SOURCE.md lists, and the family defaults."""
    hello, fox = KNOWN[name]
    bare = real(name) if name == "qwen2.5" else LMTokenizer.from_directory(shared(name))
    assert bare.encode("Hello world", add_special_tokens=False) == hello
    if fox is not None:
        assert bare.encode(FOX, add_special_tokens=False) == fox
    assert bare.decode(bare.encode(ACCENTS)) == ACCENTS
    assert bare.encode("Hello world") == [bare.bos_id] * (name in (
        "llama-2", "mistral-7b-v0.1", "llama-3")) + hello         # their BOS, by default
    if name == "llama-2":
        assert bare.encode(ACCENTS, add_special_tokens=False)[-4:] == [243, 162, 155, 131]
    if name == "llama-3":
        assert bare.encode(ACCENTS, add_special_tokens=False) == [
            6600, 80040, 95980, 588, 53050, 105180, 102158, 91416]
        assert len(bare) == 128256 and bare.eos_ids == (128001,)
        for token, index in [("<|begin_of_text|>", 128000), ("<|end_of_text|>", 128001),
                             ("<|finetune_right_pad_id|>", 128004),
                             ("<|start_header_id|>", 128006), ("<|eot_id|>", 128009),
                             ("<|image|>", 128011), ("<|reserved_special_token_2|>", 128012),
                             ("<|reserved_special_token_245|>", 128255)]:
            assert bare.token_to_id(token) == index
    if name == "qwen2.5":
        assert bare.encode("hello world") == [14990, 1879]
        assert [bare.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                              "<|file_sep|>")] == [
            151643, 151644, 151645, 151664]
        assert bare.id_to_token(151657) == "<tool_call>"
    if name == "smollm2":
        assert bare.encode("hello world") == [28120, 905]
        assert [bare.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                              "<empty_output>")] == [0, 1, 2, 16]
        assert len(bare) == 49152
    if name == "gpt2":
        assert bare.encode("hello world") == [31373, 995]
        assert bare.token_to_id("<|endoftext|>") == 50256 and len(bare) == 50257


def test_qwen_pre_tokenizer_from_the_model_type(tmp_path, real):
    """vocab.json + merges.txt without tokenizer_config.json: config.json's model_type picks
    Qwen2's normalizer and pre-tokenizer (transformers' ids but for Qwen's added tokens, which
    only tokenizer_config.json declares), else GPT-2's."""
    source = shared("qwen2.5")
    for file in ("vocab.json", "merges.txt"):
        shutil.copyfile(source / file, tmp_path / file)
    qwen = LMTokenizer.from_directory(tmp_path, {"model_type": "qwen2"})
    gpt2 = LMTokenizer.from_directory(tmp_path)
    for text, ids in zip(TEXTS, REFERENCE["tokenizers"]["qwen2.5"]["ids_plain"]):
        if "<|im_" not in text and "<tool_call>" not in text:
            assert qwen.encode(text) == ids, repr(text)
    combining = next(t for t in TEXTS if t.startswith("Combining"))       # NFC in Qwen2's
    assert gpt2.encode(combining) != qwen.encode(combining)


# ------------------------------------------------------------------------------ streaming
def streamed(tokenizer: LMTokenizer, ids: list[int], chunks: list[int],
             skip_special_tokens: bool = True) -> list[str]:
    stream = tokenizer.stream(skip_special_tokens)
    pieces, start = [], 0
    for size in chunks:
        pieces.append(stream.push(ids[start:start + size]))
        start += size
    return pieces + [stream.flush()]


@pytest.mark.parametrize("name", NAMES)
def test_stream_pieces_concatenate_to_decode(name, real):
    tokenizer = real(name)
    rng = random.Random(0)
    for text in TEXTS + ["😀", " 日本語", "  two spaces", "é"]:
        ids = tokenizer.encode(text)
        for skip in (True, False):
            whole = tokenizer.decode(ids, skip_special_tokens=skip)
            assert "".join(streamed(tokenizer, ids, [1] * len(ids), skip)) == whole, repr(text)
            chunks = []
            while sum(chunks) < len(ids):
                chunks.append(rng.randint(1, 4))
            assert "".join(streamed(tokenizer, ids, chunks, skip)) == whole, repr(text)


@pytest.mark.parametrize("name", ["gpt2", "llama-2"])
def test_stream_holds_back_split_characters(name, real):
    """An emoji over several ids (byte-level BPE bytes, SentencePiece byte fallback) comes out
    whole; SentencePiece's "▁" before it turns into a space only once text follows it."""
    tokenizer = real(name)
    ids = tokenizer.encode("Hi 😀", add_special_tokens=False)
    pieces = streamed(tokenizer, ids, [1] * len(ids))
    assert pieces[0] == "Hi"
    assert "".join(pieces) == "Hi 😀"
    assert all("\ufffd" not in p for p in pieces)
    assert "😀" in pieces or " 😀" in pieces
    stream = tokenizer.stream()
    assert stream.push(ids[0]) == "Hi"                  # a single id works too
    assert stream.flush() == ""


# --------------------------------------------------------------------------------- saving
@pytest.mark.parametrize("name", NAMES)
def test_save_and_load_again_gives_the_same_ids(name, real, tmp_path):
    tokenizer = real(name)
    tokenizer.save(tmp_path / "saved")
    saved = sorted(p.name for p in (tmp_path / "saved").iterdir())
    assert saved == sorted(p.name for p in tokenizer.files)
    again = LMTokenizer.from_directory(tmp_path / "saved")
    assert again.encode_batch(TEXTS) == tokenizer.encode_batch(TEXTS)
    assert (again.bos_id, again.eos_ids, again.pad_id, len(again)) == (
        tokenizer.bos_id, tokenizer.eos_ids, tokenizer.pad_id, len(tokenizer))
    assert again.chat_template == tokenizer.chat_template


@pytest.mark.parametrize("name", ["llama-2", "gpt2"])
def test_save_of_a_bare_folder_states_its_defaults(name, tmp_path):
    """Saving a folder without tokenizer_config.json writes one (what transformers needs to
    load the same tokenizer: the class, the BOS rule, the special tokens)."""
    bare = LMTokenizer.from_directory(shared(name))
    bare.save(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text("utf-8"))
    assert config["tokenizer_class"] == {"llama-2": "LlamaTokenizer",
                                         "gpt2": "GPT2Tokenizer"}[name]
    assert config["add_bos_token"] is (name == "llama-2")
    again = LMTokenizer.from_directory(tmp_path)
    assert again.encode_batch(TEXTS) == bare.encode_batch(TEXTS)
    assert again.bos_id == bare.bos_id and again.eos_ids == bare.eos_ids


# ----------------------------------------------------- tiny tokenizers (no ../shared needed)
def _alphabet() -> list[str]:
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in keep}
    for n, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + n)
    return [chars[b] for b in range(256)]


def tiny_bpe(root: Path, config: dict | None = None, merges: str = "Ġ t\nh e\n") -> Path:
    """A byte-level BPE directory: the 256 byte characters, "Ġt", "he", <|endoftext|>."""
    root.mkdir(parents=True, exist_ok=True)
    vocab = {c: i for i, c in enumerate(_alphabet())}
    vocab.update({"Ġt": 256, "he": 257, "<|endoftext|>": 258})
    (root / "vocab.json").write_text(json.dumps(vocab), "utf-8")
    (root / "merges.txt").write_text("#version: 0.2\n" + merges, "utf-8")
    if config is not None:
        (root / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    return root


LINES = ["the quick brown fox jumps over the lazy dog", "hello world, hello there",
         "a tokenizer test with some words"] * 20


def tiny_spm(root: Path, model_type: str = "bpe", vocab_size: int = 300) -> Path:
    import sentencepiece as spm

    root.mkdir(parents=True, exist_ok=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(LINES), model_writer=model, vocab_size=vocab_size,
        model_type=model_type, byte_fallback=model_type == "bpe", unk_id=0, bos_id=1, eos_id=2,
        user_defined_symbols=["<tool>"], hard_vocab_limit=False, minloglevel=2)
    (root / "tokenizer.model").write_bytes(model.getvalue())
    return root


def test_tiny_sentencepiece_bpe_matches_sentencepiece(tmp_path):
    import sentencepiece as spm

    root = tiny_spm(tmp_path / "spm")
    tokenizer = LMTokenizer.from_directory(root)
    processor = spm.SentencePieceProcessor(model_file=str(root / "tokenizer.model"))
    for text in ["hello world the fox", "the lazy dog jumps", "Zürich 😀 quick",
                 "hello <tool> world"]:
        assert tokenizer.encode(text) == [1] + processor.encode(text)
        assert tokenizer.decode(tokenizer.encode(text)) == text
        ids = tokenizer.encode(text)
        assert "".join(streamed(tokenizer, ids, [1] * len(ids))) == text
    assert (tokenizer.bos_id, tokenizer.eos_ids, tokenizer.pad_id) == (1, (2,), None)
    assert tokenizer.decode(tokenizer.encode("hello <tool> world"),
                            skip_special_tokens=True) == "hello <tool> world"  # user-defined
    tokenizer.save(tmp_path / "saved")
    assert LMTokenizer.from_directory(tmp_path / "saved").encode("the fox") == \
        tokenizer.encode("the fox")


def tiny_tiktoken(root: Path, config: dict | None = None) -> Path:
    """Meta's tiktoken format: the 256 bytes, then b"th" (256), b"the" (257), b" the" (258)."""
    import base64

    root.mkdir(parents=True, exist_ok=True)
    tokens = [bytes([b]) for b in range(256)] + [b"th", b"the", b" the"]
    (root / "tokenizer.model").write_bytes(b"".join(
        base64.b64encode(t) + b" %d\n" % rank for rank, t in enumerate(tokens)))
    if config is not None:
        (root / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    return root


def test_tiny_tiktoken(tmp_path):
    """Without tokenizer_config.json: Llama 3's specials after the ranks and the BOS added;
    with an added_tokens_decoder: its tokens, the missing ids filled as transformers fills
    them, and the BOS only when add_bos_token says so."""
    bare = LMTokenizer.from_directory(tiny_tiktoken(tmp_path / "bare"))
    assert len(bare) == 259 + 256 and bare.bos_id == 259 and bare.eos_ids == (260,)
    assert bare.token_to_id("<|eot_id|>") == 268
    assert bare.encode("the the") == [259, 257, 258]
    assert bare.encode("<|eot_id|>x", add_special_tokens=False) == [268, ord("x")]
    assert bare.decode(bare.encode("Grüße the 😀")) == "Grüße the 😀"
    special = {"special": True, "normalized": False}
    configured = LMTokenizer.from_directory(tiny_tiktoken(tmp_path / "config", {
        "bos_token": "<|begin|>", "eos_token": "<|end|>", "added_tokens_decoder": {
            "259": {"content": "<|begin|>", **special}, "261": {"content": "<|end|>", **special}}}))
    assert len(configured) == 262 and configured.id_to_token(260) == "<|reserved_token_260|>"
    assert configured.encode("the") == [257] and configured.eos_ids == (261,)


def test_special_tokens_and_config_fallbacks(tmp_path):
    root = tiny_bpe(tmp_path / "bpe", {
        "tokenizer_class": "GPT2TokenizerFast", "add_bos_token": True, "add_eos_token": True,
        "pad_token": {"content": "<pad>", "special": True},
        "added_tokens_decoder": {"258": {"content": "<|endoftext|>", "special": True},
                                 "259": {"content": "<tool>", "special": False}}})
    tokenizer = LMTokenizer.from_directory(root, {"eos_token_id": [258, 7], "bos_token_id": 9})
    assert tokenizer.bos_id == 258 and tokenizer.eos_ids == (258, 7)   # tokenizer's first
    assert tokenizer.pad_id == 260 == len(tokenizer) - 1               # added after the rest
    assert tokenizer.encode("the<tool>") == [258, 116, 257, 259, 258]
    assert tokenizer.encode("the<tool>", add_special_tokens=False) == [116, 257, 259]
    assert tokenizer.decode([258, 116, 257, 259, 260]) == "the<tool>"
    assert tokenizer.special_tokens["bos_token"] == "<|endoftext|>"    # GPT2Tokenizer's default
    bare = LMTokenizer.from_directory(tiny_bpe(tmp_path / "bare"), {"pad_token_id": 3})
    assert bare.pad_id == 3 and bare.encode(" the") == [256, 257]
    memory = LMTokenizer(tokenizer.tokenizer, special_tokens=tokenizer.special_tokens,
                         chat_templates={"default": "{{ messages[0].content }}"})
    memory.save(tmp_path / "memory")                    # tokenizer.json + tokenizer_config.json
    again = LMTokenizer.from_directory(tmp_path / "memory")
    assert again.encode("the<tool>") == tokenizer.encode("the<tool>")
    assert again.pad_id == 260
    assert again.apply_chat_template([{"role": "user", "content": "x"}]) == "x"


def test_legacy_special_tokens_map_and_added_tokens_json(tmp_path):
    root = tiny_bpe(tmp_path, {"tokenizer_class": "GPT2Tokenizer"})
    (root / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": {"content": "<eot>", "special": True}, "pad_token": "<|endoftext|>"}))
    (root / "added_tokens.json").write_text(json.dumps({"<eot>": 259, "<x>": 260}))
    tokenizer = LMTokenizer.from_directory(root)
    assert tokenizer.eos_ids == (259,) and tokenizer.pad_id == 258
    assert tokenizer.decode(tokenizer.encode("<x><eot>")) == "<x>"     # <eot> is special
    assert {p.name for p in tokenizer.files} >= {"special_tokens_map.json", "added_tokens.json"}


# ---------------------------------------------------------------------------- chat templates
def test_chat_template_rendering_rules(tmp_path):
    template = (
        "{%- for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('no bad role') }}"
        "{% endif %}{% generation %}[{{ m.role }}|{{ m.content | tojson }}]{% endgeneration %}"
        "{% endfor %}\n"
        "  {% if tools %}{{ tools | tojson(indent=1) }}{% endif %}"
        "{% set ns = namespace(n=0) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}"
        "{{ bos_token }}{{ extra }}{{ 'G' if add_generation_prompt }}"
        "{{ dict(a=1) | tojson }}{{ strftime_now('%Y')|length }}")
    root = tiny_bpe(tmp_path, {"tokenizer_class": "GPT2Tokenizer", "chat_template": [
        {"name": "default", "template": template},
        {"name": "tool_use", "template": "tools: {{ tools | length }}"}]})
    tokenizer = LMTokenizer.from_directory(root)
    messages = [{"role": "user", "content": "Grüße \"x\"", "tool_calls": None}]
    assert tokenizer.apply_chat_template(messages, extra="E") == \
        '[user|"Grüße \\"x\\""]1<|endoftext|>EG{"a": 1}4'
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=False) == \
        '[user|"Grüße \\"x\\""]1<|endoftext|>{"a": 1}4'
    assert tokenizer.apply_chat_template(messages, tools=[{"a": 1}]) == "tools: 1"
    with pytest.raises(ChatTemplateError, match="no bad role") as err:
        tokenizer.apply_chat_template([{"role": "bad", "content": ""}])
    assert str(root) in str(err.value)
    sneaky = tiny_bpe(tmp_path / "sneaky", {"chat_template": "{% set ns = namespace(_x=1) %}"})
    with pytest.raises(ChatTemplateError, match="underscore"):
        LMTokenizer.from_directory(sneaky).apply_chat_template([{"role": "user", "content": ""}])
    (sneaky / "chat_template.jinja").write_text("{{ messages | length }}")  # takes priority
    assert LMTokenizer.from_directory(sneaky).apply_chat_template(messages) == "1"
    with pytest.raises(ValueError, match="empty"):
        tokenizer.apply_chat_template([])
    with pytest.raises(TypeError, match=r"messages\[0\]"):
        tokenizer.apply_chat_template(["hi"])


def test_missing_chat_template(tmp_path):
    root = tiny_bpe(tmp_path)
    tokenizer = LMTokenizer.from_directory(root)
    assert tokenizer.chat_template is None
    with pytest.raises(ChatTemplateError, match="has no chat_template") as err:
        tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    assert isinstance(err.value, PretrainedError) and str(root) in str(err.value)


# ------------------------------------------------------------------------------------ errors
def test_errors_name_the_directory_or_file(tmp_path):
    with pytest.raises(MissingFileError, match="not a directory"):
        LMTokenizer.from_directory(tmp_path / "absent")
    with pytest.raises(MissingFileError, match="tokenizer.json, vocab.json") as err:
        LMTokenizer.from_directory(tmp_path)
    assert str(tmp_path) in str(err.value)
    (tmp_path / "vocab.json").write_text("{}")
    with pytest.raises(MissingFileError, match="no merges.txt"):
        LMTokenizer.from_directory(tmp_path)

    bad = tiny_bpe(tmp_path / "config")
    (bad / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(PretrainedError, match="tokenizer_config.json: not readable as JSON"):
        LMTokenizer.from_directory(bad)
    (bad / "tokenizer_config.json").write_text(json.dumps(
        {"added_tokens_decoder": {"300": {"content": "<x>", "special": True}}}))
    with pytest.raises(PretrainedError, match="'<x>' is declared with id 300"):
        LMTokenizer.from_directory(bad)
    (bad / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer"}))
    with pytest.raises(UnsupportedArchitectureError, match="BertTokenizer"):
        LMTokenizer.from_directory(bad)
    (bad / "tokenizer_config.json").unlink()
    with pytest.raises(PretrainedError, match="config.json: eos_token_id"):
        LMTokenizer.from_directory(bad, {"eos_token_id": "2"})
    (bad / "merges.txt").write_text("#version: 0.2\nnot-in-vocab x\n")
    with pytest.raises(PretrainedError, match="merges.txt"):
        LMTokenizer.from_directory(bad)
    (bad / "vocab.json").write_text("[")
    with pytest.raises(PretrainedError, match="vocab.json"):
        LMTokenizer.from_directory(bad)

    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "tokenizer.json").write_text("{}")
    with pytest.raises(PretrainedError, match="tokenizer.json: not a tokenizers JSON"):
        LMTokenizer.from_directory(tmp_path / "json")

    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.model").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(PretrainedError, match="tokenizer.model: neither a SentencePiece"):
        LMTokenizer.from_directory(model)
    (model / "tokenizer.model").write_bytes(b"IQ== 0\nIg== 1\nnot base64! x\n")
    with pytest.raises(PretrainedError, match="tokenizer.model, line 3"):
        LMTokenizer.from_directory(model)
    unigram = tiny_spm(tmp_path / "unigram", "unigram", 40)
    with pytest.raises(UnsupportedArchitectureError, match="type 1"):
        LMTokenizer.from_directory(unigram)


def test_bad_ids_and_texts():
    tokenizer = LMTokenizer(_tiny_tokenizer(), special_tokens={})
    with pytest.raises(ValueError, match=r"ids\[1\] = 999"):
        tokenizer.decode([1, 999])
    with pytest.raises(ValueError, match=r"ids\[0\] = -1"):
        tokenizer.stream().push([-1])
    with pytest.raises(TypeError):
        tokenizer.decode([1.5])
    with pytest.raises(TypeError, match="text is a bytes"):
        tokenizer.encode(b"x")
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        tokenizer.encode_batch(["a", None])


def _tiny_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    return Tokenizer(WordLevel({"a": 0, "b": 1, "<unk>": 2}, unk_token="<unk>"))
