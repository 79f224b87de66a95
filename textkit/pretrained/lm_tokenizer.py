"""``LMTokenizer``: the tokenizers and chat templates of decoder-only checkpoints (Hugging Face
layouts) through the ``tokenizers`` library, giving transformers 5's ids.

``LMTokenizer.from_directory(dir, config)`` reads the first of these that the directory has:

- ``tokenizer.json``: used as written (``tokenizers.Tokenizer.from_file``), as transformers 4 and
  the Rust servers do. (transformers 5 rebuilds the pre-tokenizer of some classes, such as
  ``LlamaTokenizer``, from the class's code; that differs only right after a special token.)
- ``vocab.json`` + ``merges.txt``: byte-level BPE as ``tokenizer_config.json``'s
  ``tokenizer_class`` builds it: ``GPT2Tokenizer`` (and ``CodeGenTokenizer``) GPT-2's
  ``ByteLevel`` pre-tokenizer; ``Qwen2Tokenizer`` NFC, Qwen2's split regex (digits one by one),
  then ``ByteLevel`` without its own regex. Without a class: Qwen2's for a config.json
  ``model_type`` in ``QWEN_MODEL_TYPES``, else GPT-2's.
- ``tokenizer.model``, told apart by its first line. ``base64 rank`` lines are Meta's tiktoken
  format (Llama 3): byte-level BPE over the ranks with Llama 3's regex, the merges derived as
  transformers' ``TikTokenConverter`` derives them, then the special tokens of
  ``added_tokens_decoder`` (ids missing between them filled with ``<|reserved_token_N|>``, as
  transformers does) or, when there are none, Llama 3's 256 after the ranks. Anything else is
  read as a SentencePiece model, which must be BPE (Llama 2, Mistral, TinyLlama, ...), built as
  transformers' ``LlamaTokenizer`` builds it: the pieces in id order, merges ordered by the
  merged piece's id, byte fallback, control pieces special, a ``Metaspace`` "▁" prepended to
  the start of the text only (``legacy: true``: also after each special token;
  ``add_prefix_space: false``: never) and stripped again by ``decode``.

Special tokens: ``added_tokens_decoder`` (the ids are checked), the named ones (``bos_token``,
``eos_token``, ``unk_token``, ``pad_token``, ...; where not given, the defaults of the class, as
in transformers) and ``additional_special_tokens``. ``special_tokens_map.json`` and
``added_tokens.json`` count only when ``tokenizer_config.json`` has no ``added_tokens_decoder``
(transformers' legacy layout). ``add_bos_token`` / ``add_eos_token`` (absent: False) decide what
``encode`` adds, except with tokenizer.json, whose own post-processor decides (transformers 5
drops the two keys then). A directory without ``tokenizer_config.json`` gets its family's
documented behaviour: SentencePiece and tiktoken files add their BOS (every published Llama
checkpoint says ``add_bos_token: true``; transformers 5 adds none without the key). ``config``
(the checkpoint's config.json) supplies ``bos_token_id`` / ``eos_token_id`` (an int or a list)
/ ``pad_token_id`` where the tokenizer has none; ``eos_ids`` holds the tokenizer's EOS and all
of config.json's.

``decode`` is the tokenizer's own (transformers 5 ignores ``clean_up_tokenization_spaces`` for
BPE, the model of every layout above). ``stream()`` turns ids into text as they are generated.
The chat template (``chat_template.jinja``, else tokenizer_config.json's ``chat_template``: one
template or a list of named ones) is rendered as transformers renders it, with jinja2 (imported
when first used). ``save(dir)`` copies the files read, plus a ``tokenizer_config.json`` stating
the defaults used when the directory had none, so that transformers loads the same tokenizer.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import operator
import re
import shutil
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from textkit._io import atomic_path, write_text_atomic
from textkit.pretrained.encoder_tokenizer import _fields
from textkit.pretrained.errors import (
    MissingFileError,
    PretrainedError,
    UnsupportedArchitectureError,
)

__all__ = ["LM_TOKENIZER_FILES", "QWEN_MODEL_TYPES", "ChatTemplateError", "LMTokenizer",
           "TextStream"]

LM_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model",
                      "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                      "chat_template.jinja")
"""The files ``from_directory`` may read (``save`` copies those it read)."""

QWEN_MODEL_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
"""config.json model_types whose vocab.json + merges.txt take Qwen2's pre-tokenizer."""

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = (
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
    "<|image|>", *(f"<|reserved_special_token_{i}|>" for i in range(2, 246)))
"""Llama 3's special tokens, numbered from the end of the ranks (Meta's tokenizer.py)."""

_NAMED = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
          "mask_token")
_DEFAULTS: dict[str, dict[str, str]] = {
    # family: transformers' class defaults of the named special tokens
    "gpt2": {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>",
             "eos_token": "<|endoftext|>"},
    "qwen2": {"unk_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
              "pad_token": "<|endoftext|>"},
    "llama": {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
    "tiktoken": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
}
_CLASSES = {"GPT2Tokenizer": "gpt2", "CodeGenTokenizer": "gpt2", "Qwen2Tokenizer": "qwen2",
            "LlamaTokenizer": "llama"}
"""tokenizer_config.json's tokenizer_class (less a "Fast" suffix) -> family."""
_SAVED_CLASS = {"gpt2": "GPT2Tokenizer", "qwen2": "Qwen2Tokenizer", "llama": "LlamaTokenizer",
                "tiktoken": "PreTrainedTokenizerFast", "json": "PreTrainedTokenizerFast"}
_TIKTOKEN_LINE = re.compile(rb"[A-Za-z0-9+/]+=* \d+\r?\n")
_BAD_PROTO = (ValueError, IndexError, TypeError, AttributeError, UnicodeDecodeError,
              struct.error)


class ChatTemplateError(PretrainedError):
    """The checkpoint has no chat template, or its template failed on the messages (with the
    template's own message, e.g. roles that do not alternate)."""


# ------------------------------------------------------------------------------- helpers
def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PretrainedError(f"{path}: not readable as JSON ({err})") from None
    if not isinstance(value, dict):
        raise PretrainedError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def _content(value: Any) -> str | None:
    """A token of tokenizer_config.json (a string, an AddedToken object or null)."""
    if isinstance(value, dict):
        value = value.get("content")
    return None if value is None else str(value)


def _added_token(entry: Any, where: str) -> Any:
    """An ``added_tokens_decoder`` entry (an AddedToken object) as a ``tokenizers.AddedToken``."""
    from tokenizers import AddedToken

    if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
        raise PretrainedError(f"{where}: expected an AddedToken object with a content string, "
                              f"got {entry!r}")
    special = bool(entry.get("special", False))
    return AddedToken(entry["content"], single_word=bool(entry.get("single_word", False)),
                      lstrip=bool(entry.get("lstrip", False)),
                      rstrip=bool(entry.get("rstrip", False)),
                      normalized=bool(entry.get("normalized", not special)), special=special)


def _special(content: str) -> Any:
    from tokenizers import AddedToken

    return AddedToken(content, normalized=False, special=True)


def _config_ids(config: Mapping[str, Any], key: str) -> tuple[int, ...]:
    """config.json's ``key`` (a token id, a list of them, or null) as a tuple."""
    value = config.get(key)
    values = value if isinstance(value, list) else [] if value is None else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise PretrainedError(f"config.json: {key}={value!r}, expected a token id or a list "
                              f"of token ids")
    return tuple(values)


def _as_ids(ids: int | Iterable[int], size: int) -> list[int]:
    """``ids`` (one id or an iterable of integers, numpy's included) as a list, each checked
    to be an id below ``size``."""
    values = [operator.index(ids)] if not isinstance(ids, Iterable) else [
        operator.index(i) for i in ids]
    for index, value in enumerate(values):
        if not 0 <= value < size:
            raise ValueError(f"ids[{index}] = {value} is not a token id of this tokenizer "
                             f"(0..{size - 1})")
    return values


# ------------------------------------------------------------------------------ builders
def _byte_level(vocab: Path, merges: Path, family: str, prefix_space: bool) -> Any:
    """GPT-2's or Qwen2's tokenizer from vocab.json + merges.txt, as transformers'
    ``GPT2Tokenizer`` / ``Qwen2Tokenizer`` build it."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    try:
        model = BPE.from_file(str(vocab), str(merges), dropout=None,
                              continuing_subword_prefix="", end_of_word_suffix="",
                              fuse_unk=False)
    except Exception as err:  # tokenizers raises plain Exceptions
        bad = merges
        try:
            json.loads(vocab.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            bad = vocab
        raise PretrainedError(f"{bad}: not the {bad.name} of a byte-level BPE ({err})") from None
    tokenizer = Tokenizer(model)
    if family == "qwen2":
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=prefix_space, use_regex=False)])
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map of the 256 bytes to printable characters (byte-level BPE's alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in keep}
    for n, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + n)
    return chars


def _tiktoken(path: Path, data: bytes, decoder: Mapping[int, Any]) -> tuple[Any, list[Any]]:
    """Llama 3's tokenizer from tiktoken ranks (``data``), as transformers'
    ``TikTokenConverter`` builds it, and its special tokens (module docstring)."""
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    ranks: dict[bytes, int] = {}
    for number, line in enumerate(data.splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            raise PretrainedError(f"{path}, line {number}: expected 'base64-token rank' (the "
                                  f"tiktoken format), got {line[:60]!r}") from None
    table = str.maketrans(_bytes_to_unicode())
    texts = {token: token.decode("latin-1").translate(table) for token in ranks}
    merges = []
    for token, rank in ranks.items():
        parts = [(token[:i], token[i:], rank) for i in range(1, len(token))
                 if token[:i] in ranks and token[i:] in ranks]
        merges.extend(sorted(parts, key=lambda m: (ranks[m[0]], ranks[m[1]])))
    merges.sort(key=lambda m: m[2])
    tokenizer = Tokenizer(BPE({texts[t]: r for t, r in ranks.items()},
                              [(texts[a], texts[b]) for a, b, _ in merges], fuse_unk=False,
                              ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    base = len(ranks)
    if not decoder:
        return tokenizer, [_special(name) for name in LLAMA3_SPECIALS]
    return tokenizer, [decoder[i] if i in decoder else _special(f"<|reserved_token_{i}|>")
                       for i in range(base, max(decoder) + 1)]


def _sentencepiece(path: Path, data: bytes, prefix_scheme: str) -> tuple[Any, list[Any]]:
    """Llama's tokenizer from a SentencePiece BPE model, as transformers' ``LlamaTokenizer``
    builds it, and its control (special) and user-defined pieces as added tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    pieces: list[tuple[str, int]] = []
    model_type = 1
    try:
        for number, value in _fields(data):
            if number == 1:
                piece = dict(_fields(value))
                pieces.append((piece.get(1, b"").decode("utf-8"), int(piece.get(3, 1))))
            elif number == 2:
                model_type = dict(_fields(value)).get(3, 1)
    except _BAD_PROTO as err:
        raise PretrainedError(f"{path}: neither a SentencePiece model nor tiktoken ranks "
                              f"({err!r})") from None
    vocab = {piece: index for index, (piece, _) in enumerate(pieces)}
    if not pieces or len(vocab) != len(pieces):
        raise PretrainedError(f"{path}: not a SentencePiece model (no pieces, or pieces twice)")
    if model_type != 2:
        raise UnsupportedArchitectureError(
            f"{path}: a SentencePiece model of type {model_type} (1 is Unigram); textkit builds "
            f"decoder tokenizers from BPE models (type 2) only")
    merges = []
    for piece, index in vocab.items():
        parts = [(piece[:i], piece[i:], index) for i in range(1, len(piece))
                 if piece[:i] in vocab and piece[i:] in vocab]
        merges.extend(sorted(parts, key=lambda m: (vocab[m[0]], vocab[m[1]])))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])))
    tokenizer = Tokenizer(BPE(vocab, [(a, b) for a, b, _ in merges], fuse_unk=True,
                              byte_fallback=True, dropout=None))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁",
                                                       prepend_scheme=prefix_scheme, split=False)
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix_scheme != "never":
        steps.append(decoders.Strip(content=" ", left=1))
    tokenizer.decoder = decoders.Sequence(steps)
    added = [AddedToken(piece, normalized=False, special=kind == 3)
             for piece, kind in pieces if kind in (3, 4)]
    return tokenizer, added


# ------------------------------------------------------------------------------ settings
def _settings(root: Path) -> tuple[dict[str, Any], dict[int, Any], list[Path]]:
    """tokenizer_config.json (``{}`` when absent) with the legacy files merged in, its added
    tokens by id (``tokenizers.AddedToken``), and the paths read."""
    settings: dict[str, Any] = {}
    read: list[Path] = []
    path = root / "tokenizer_config.json"
    if path.is_file():
        settings = _read_json(path)
        read.append(path)
    raw = settings.get("added_tokens_decoder")
    decoder: dict[int, Any] = {}
    if raw is not None:
        if not isinstance(raw, dict):
            raise PretrainedError(f"{path}: added_tokens_decoder is a {type(raw).__name__}, "
                                  f"expected an object of id: AddedToken")
        for key, entry in raw.items():
            if not str(key).isdigit():
                raise PretrainedError(f"{path}: added_tokens_decoder key {key!r} is not an id")
            decoder[int(key)] = _added_token(entry, f"{path}: added_tokens_decoder[{key}]")
    legacy = root / "special_tokens_map.json"
    if legacy.is_file():
        read.append(legacy)
        if raw is None:
            settings.update(_read_json(legacy))
    legacy = root / "added_tokens.json"
    if legacy.is_file():
        read.append(legacy)
        if raw is None:
            specials = {_content(settings.get(key)) for key in _NAMED}
            specials.update(_content(t) for t in settings.get("additional_special_tokens") or [])
            for token, index in _read_json(legacy).items():
                if not isinstance(index, int):
                    raise PretrainedError(f"{legacy}: {token!r} has id {index!r}, expected int")
                decoder[index] = _added_token(
                    {"content": token, "special": token in specials}, str(legacy))
    jinja = root / "chat_template.jinja"
    if jinja.is_file():
        read.append(jinja)
    return settings, decoder, read


def _templates(root: Path, settings: Mapping[str, Any]) -> dict[str, str]:
    """The chat templates by name ("default" for the one template): chat_template.jinja, else
    tokenizer_config.json's ``chat_template``."""
    jinja = root / "chat_template.jinja"
    if jinja.is_file():
        try:
            return {"default": jinja.read_text("utf-8")}
        except (OSError, UnicodeDecodeError) as err:
            raise PretrainedError(f"{jinja}: not readable as text ({err})") from None
    raw = settings.get("chat_template")
    if raw is None or isinstance(raw, str):
        return {} if raw is None else {"default": raw}
    if isinstance(raw, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                     and isinstance(t.get("template"), str) for t in raw):
        return {t["name"]: t["template"] for t in raw}
    raise PretrainedError(f"{root / 'tokenizer_config.json'}: chat_template is neither a "
                          f"string nor a list of {{name, template}} objects")


def _family(settings: Mapping[str, Any], config: Mapping[str, Any]) -> str | None:
    """The family that tokenizer_config.json's tokenizer_class (else config.json's model_type)
    names: "gpt2", "qwen2", "llama", "other" (a class textkit does not build), or None."""
    name = settings.get("tokenizer_class")
    if isinstance(name, str):
        return _CLASSES.get(name.removesuffix("Fast"), "other")
    if config.get("model_type") in QWEN_MODEL_TYPES:
        return "qwen2"
    return None


def _model(root: Path, settings: Mapping[str, Any], decoder: Mapping[int, Any],
           family: str | None, read: list[Path]) -> tuple[Any, str, list[Any]]:
    """The tokenizer of the directory's model files, its kind ("json", "gpt2", "qwen2",
    "llama" or "tiktoken") and the added tokens the model file defines; the files read go to
    the front of ``read``."""
    from tokenizers import Tokenizer

    unsupported = (f"{root / 'tokenizer_config.json'}: tokenizer_class="
                   f"{settings.get('tokenizer_class')!r} with %s is not supported (textkit "
                   f"builds %s; a tokenizer.json would be read as written)")
    if (root / "tokenizer.json").is_file():
        path = root / "tokenizer.json"
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as err:  # tokenizers raises plain Exceptions
            raise PretrainedError(f"{path}: not a tokenizers JSON file ({err})") from None
        read.insert(0, path)
        return tokenizer, "json", []
    if (root / "vocab.json").is_file():
        vocab, merges = root / "vocab.json", root / "merges.txt"
        if not merges.is_file():
            raise MissingFileError(f"{root} has vocab.json but no merges.txt (a byte-level BPE "
                                   f"needs both)")
        kind = family or "gpt2"
        if kind not in ("gpt2", "qwen2"):
            raise UnsupportedArchitectureError(unsupported % (
                "vocab.json + merges.txt", "GPT2Tokenizer's and Qwen2Tokenizer's"))
        read[:0] = [vocab, merges]
        prefix_space = bool(settings.get("add_prefix_space", False))
        return _byte_level(vocab, merges, kind, prefix_space), kind, []
    path = root / "tokenizer.model"
    if not path.is_file():
        raise MissingFileError(
            f"{root} has no tokenizer files: expected tokenizer.json, vocab.json + merges.txt "
            f"(byte-level BPE) or tokenizer.model (SentencePiece or tiktoken)")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise PretrainedError(f"{path}: not readable ({err})") from None
    read.insert(0, path)
    if _TIKTOKEN_LINE.match(data):
        tokenizer, added = _tiktoken(path, data, decoder)
        return tokenizer, "tiktoken", added
    if family not in (None, "llama"):
        raise UnsupportedArchitectureError(unsupported % ("a SentencePiece tokenizer.model",
                                                          "LlamaTokenizer's"))
    scheme = "never"
    if settings.get("add_prefix_space") is not False:
        scheme = "always" if settings.get("legacy", False) else "first"
    tokenizer, added = _sentencepiece(path, data, scheme)
    return tokenizer, "llama", added


def _add_tokens(root: Path, tokenizer: Any, first: list[Any], decoder: Mapping[int, Any],
                named: list[str]) -> None:
    """Add the model file's tokens (``first``), the declared ones (``decoder``, whose ids are
    checked) and the named special tokens not added yet, in transformers' order."""
    tokenizer.add_tokens(first + [decoder[i] for i in sorted(decoder)])
    present = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
    tokenizer.add_tokens([_special(t) for t in dict.fromkeys(named) if t not in present])
    for index, token in decoder.items():
        got = tokenizer.token_to_id(token.content)
        if got != index:
            raise PretrainedError(
                f"{root}: the added token {token.content!r} is declared with id {index} "
                f"(tokenizer_config.json's added_tokens_decoder or added_tokens.json), but the "
                f"vocabulary gives it {got}")


def _post_processor(tokenizer: Any, bos: str | None, eos: str | None) -> None:
    """``encode`` adds ``bos`` before and ``eos`` after the text (None: nothing), as
    transformers' ``update_post_processor`` sets it."""
    from tokenizers import processors

    start, end = [f"{bos}:0"] * (bos is not None), [f"{eos}:0"] * (eos is not None)
    single = " ".join([*start, "$A:0", *end])
    pair = " ".join([single, *[f"{bos}:1"] * bool(start), "$B:1", *[f"{eos}:1"] * bool(end)])
    tokens = dict.fromkeys(t for t in (bos, eos) if t is not None)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, tokenizer.token_to_id(t)) for t in tokens])


# ------------------------------------------------------------------------------ tokenizer
class LMTokenizer:
    """A ``tokenizers.Tokenizer`` with a decoder-only checkpoint's special tokens and chat
    templates (module docstring). ``tokenizer`` is the Rust tokenizer, ``source`` the directory
    read, ``files`` the files read there; ``bos_id`` / ``eos_ids`` / ``pad_id`` are the ids
    generation needs."""

    def __init__(self, tokenizer: Any, *, special_tokens: Mapping[str, str | None],
                 config: Mapping[str, Any] | None = None,
                 chat_templates: Mapping[str, str] | None = None,
                 files: Sequence[Path] = (), source: Path | None = None,
                 saved_config: Mapping[str, Any] | None = None):
        """``special_tokens``: named token -> string (``bos_token``, ``eos_token``, ...; the
        chat template sees them); ``config``: config.json (id fallbacks); ``saved_config``: the
        tokenizer_config.json ``save`` writes next to ``files`` (None: one of them is)."""
        self.tokenizer = tokenizer
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.special_tokens = {k: v for k, v in special_tokens.items() if v is not None}
        self.chat_templates = dict(chat_templates or {})
        self.files = tuple(files)
        self.source = source
        self.saved_config = None if saved_config is None else dict(saved_config)
        config = config or {}

        def token_id(key: str) -> int | None:
            token = self.special_tokens.get(key)
            return None if token is None else tokenizer.token_to_id(token)

        bos = token_id("bos_token")
        self.bos_id: int | None = bos if bos is not None else next(
            iter(_config_ids(config, "bos_token_id")), None)
        eos = token_id("eos_token")
        self.eos_ids: tuple[int, ...] = tuple(dict.fromkeys(
            ([] if eos is None else [eos]) + list(_config_ids(config, "eos_token_id"))))
        pad = token_id("pad_token")
        self.pad_id: int | None = pad if pad is not None else next(
            iter(_config_ids(config, "pad_token_id")), None)

    # ------------------------------------------------------------------------------ reading
    @classmethod
    def from_directory(cls, root: str | Path,
                       config: Mapping[str, Any] | None = None) -> LMTokenizer:
        """The tokenizer of the checkpoint directory ``root`` (module docstring for the files
        and the order); ``config``: its config.json as a dict. ``MissingFileError`` when the
        directory has none of tokenizer.json, vocab.json + merges.txt, tokenizer.model."""
        root = Path(root)
        config = config or {}
        if not root.is_dir():
            raise MissingFileError(f"{root} is not a directory (expected a checkpoint directory "
                                   f"with the tokenizer's files)")
        settings, decoder, read = _settings(root)
        has_settings = (root / "tokenizer_config.json").is_file()
        family = _family(settings, config)
        tokenizer, kind, first = _model(root, settings, decoder, family, read)
        defaults = _DEFAULTS.get(family if kind == "json" else kind, {})
        if kind == "tiktoken" and has_settings:
            defaults = {}
        keys = list(_NAMED) + [k for k, v in settings.items() if k.endswith("_token")
                               and k not in _NAMED and isinstance(v, (str, dict))]
        special_tokens = {k: _content(settings[k]) if k in settings else defaults.get(k)
                          for k in keys}
        extras = [_content(t) for t in (settings.get("additional_special_tokens")
                                        or settings.get("extra_special_tokens") or [])]
        _add_tokens(root, tokenizer, first, decoder,
                    [t for t in [*special_tokens.values(), *extras] if t is not None])
        bos, eos = special_tokens["bos_token"], special_tokens["eos_token"]
        add_bos = bos is not None and bool(settings.get(
            "add_bos_token", not has_settings and kind in ("llama", "tiktoken")))
        add_eos = eos is not None and bool(settings.get("add_eos_token", False))
        if kind != "json":
            _post_processor(tokenizer, bos if add_bos else None, eos if add_eos else None)
        saved = None
        if not has_settings:
            saved = {"tokenizer_class": _SAVED_CLASS[kind]}
            if kind != "json":
                saved.update(add_bos_token=add_bos, add_eos_token=add_eos)
            if kind == "llama":
                saved["legacy"] = False
            saved.update({k: v for k, v in special_tokens.items() if v is not None})
            saved["added_tokens_decoder"] = {
                str(i): {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized,
                         "rstrip": t.rstrip, "single_word": t.single_word, "special": t.special}
                for i, t in sorted(tokenizer.get_added_tokens_decoder().items())}
        return cls(tokenizer, special_tokens=special_tokens, config=config,
                   chat_templates=_templates(root, settings), files=read, source=root,
                   saved_config=saved)

    # ----------------------------------------------------------------------------- encoding
    def __len__(self) -> int:
        """The number of ids, added tokens included."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def id_to_token(self, index: int) -> str | None:
        return self.tokenizer.id_to_token(index)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The ids of ``text`` (with the BOS / EOS the checkpoint adds unless
        ``add_special_tokens`` is False); special tokens written in the text become their ids."""
        if not isinstance(text, str):
            raise TypeError(f"text is a {type(text).__name__}, expected str")
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: Sequence[str],
                     add_special_tokens: bool = True) -> list[list[int]]:
        """``encode`` of every text, in Rust over the whole batch (lists of different lengths;
        no padding)."""
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{index}] is a {type(text).__name__}, expected str")
        encodings = self.tokenizer.encode_batch(list(texts),
                                                add_special_tokens=add_special_tokens)
        return [e.ids for e in encodings]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """The text of ``ids`` (ints or a 1-D integer array; special tokens dropped unless
        ``skip_special_tokens`` is False); ``ValueError`` names an id out of range."""
        return self.tokenizer.decode(_as_ids(ids, len(self)),
                                     skip_special_tokens=skip_special_tokens)

    def stream(self, skip_special_tokens: bool = True) -> TextStream:
        """An incremental decoder of generated ids (``TextStream``)."""
        return TextStream(self, skip_special_tokens)

    # ---------------------------------------------------------------------------- templates
    @property
    def chat_template(self) -> str | None:
        """The chat template (the "default" one of named templates), or None."""
        if len(self.chat_templates) == 1:
            return next(iter(self.chat_templates.values()))
        return self.chat_templates.get("default")

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]],
                            add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """The prompt text of ``messages`` (dicts with ``role`` and ``content``), rendered as
        transformers' ``apply_chat_template(..., tokenize=False)`` renders it: the template
        sees ``messages`` (keys whose value is None dropped), ``add_generation_prompt``, the
        special tokens (``bos_token``, ``eos_token``, ...), ``tools`` / ``documents`` (None
        unless given) and the other ``kwargs``. Encode the result with
        ``add_special_tokens=False``: the template writes the BOS itself where it wants one."""
        if not messages:
            raise ValueError("messages is empty: a chat template needs at least one message")
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping):
                raise TypeError(f"messages[{index}] is a {type(message).__name__}, expected a "
                                f"dict with role and content")
        where = self.source or "the tokenizer"
        template = self.chat_template
        if kwargs.get("tools") and "tool_use" in self.chat_templates:
            template = self.chat_templates["tool_use"]
        if template is None:
            named = f" (only named ones: {sorted(self.chat_templates)})" * bool(
                self.chat_templates)
            raise ChatTemplateError(
                f"{where}: the checkpoint has no chat_template{named} (neither in "
                f"tokenizer_config.json nor as chat_template.jinja); base models have none, "
                f"their instruct / chat versions do")
        jinja2 = _jinja()
        variables = {**self.special_tokens, "tools": None, "documents": None, **kwargs}
        try:
            return _compile(template).render(
                messages=[{k: v for k, v in m.items() if v is not None} for m in messages],
                add_generation_prompt=add_generation_prompt, **variables)
        except jinja2.TemplateError as err:
            raise ChatTemplateError(f"{where}: the chat template failed: {err}") from err

    # ------------------------------------------------------------------------------ writing
    def save(self, directory: str | Path) -> None:
        """Write the tokenizer into ``directory`` (made if missing) so that this class and
        transformers' ``AutoTokenizer`` load it again: the files read and ``saved_config`` as
        tokenizer_config.json where there was none; a tokenizer made in memory (no files)
        writes ``tokenizer.json`` and a tokenizer_config.json with its special tokens and chat
        templates. Each file is written whole (through a temporary file) or not at all."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for path in self.files:
            target = directory / path.name
            if not (target.exists() and target.samefile(path)):
                with atomic_path(target) as tmp:
                    shutil.copyfile(path, tmp)
        config = self.saved_config
        if not self.files:
            write_text_atomic(directory / "tokenizer.json", self.tokenizer.to_str())
            config = {"tokenizer_class": "PreTrainedTokenizerFast", **self.special_tokens,
                      **(config or {})}
            if self.chat_templates:
                config["chat_template"] = [{"name": k, "template": v}
                                           for k, v in self.chat_templates.items()]
        if config is not None:
            write_text_atomic(directory / "tokenizer_config.json",
                              json.dumps(config, indent=2, ensure_ascii=False) + "\n")


class TextStream:
    """Text of ids as a model generates them: ``push(ids)`` returns the text that the new ids
    complete, ``flush()`` what is left. Held back: a character whose UTF-8 bytes are split over
    ids not all seen yet (byte-level BPE, SentencePiece byte fallback). The pieces concatenate
    to ``decode(all ids)`` for any ids of valid UTF-8 text, SentencePiece's leading-space rule
    included (each step decodes a window from a point already returned, and returns what
    decoding the new ids added to it)."""

    def __init__(self, tokenizer: LMTokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self._start = 0          # the window decoded each step starts here
        self._done = 0           # the text of ids[:_done] has been returned

    def _step(self, force: bool) -> str:
        decode = functools.partial(self.tokenizer.tokenizer.decode,
                                   skip_special_tokens=self.skip_special_tokens)
        before = decode(self.ids[self._start:self._done])
        text = decode(self.ids[self._start:])
        if not force and (len(text) <= len(before) or text.endswith("\ufffd")):
            return ""
        self._start, self._done = self._done, len(self.ids)
        return text[len(before):]

    def push(self, ids: int | Iterable[int]) -> str:
        """The new text that ``ids`` (one id or several, the next generated ones) complete
        (empty while a character or a leading space waits for more ids)."""
        self.ids.extend(_as_ids(ids, len(self.tokenizer)))
        return self._step(force=False)

    def flush(self) -> str:
        """The text still held back (end of generation)."""
        return self._step(force=True)


def _jinja() -> Any:
    """The jinja2 module (a clear ImportError without it)."""
    try:
        import jinja2
    except ImportError:
        raise ImportError("apply_chat_template needs jinja2: pip install 'jinja2>=3.1.6'"
                          ) from None
    return jinja2


class _TemplateDict:
    """The templates' ``dict``: calls and ``fromkeys`` only (no attribute access to the
    type itself inside the sandbox)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> Any:
    """``template`` compiled as transformers compiles chat templates: a sandbox, trim_blocks
    and lstrip_blocks, loop controls, ``raise_exception``, ``strftime_now``, a ``tojson`` that
    keeps non-ASCII characters and takes ``indent`` / ``separators`` / ``sort_keys``, a safe
    ``dict`` and ``namespace``, and the ``{% generation %}`` block (rendered as its body)."""
    from datetime import datetime

    jinja2 = _jinja()
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import Namespace as JinjaNamespace

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    class SafeNamespace(JinjaNamespace):
        """jinja2's namespace, refusing names that start with "_" (as transformers does)."""

        def __init__(*args: Any, **kwargs: Any):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                SafeNamespace.check(name)
            JinjaNamespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            SafeNamespace.check(name)
            JinjaNamespace.__setitem__(self, name, value)

        @staticmethod
        def check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot set underscore names on a namespace: {name!r}")

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, namespace=SafeNamespace,
                       strftime_now=lambda fmt: datetime.now().strftime(fmt),
                       dict=_TemplateDict())
    return env.from_string(template)
