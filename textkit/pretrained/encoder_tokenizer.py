"""``EncoderTokenizer``: the tokenizers of the encoder checkpoints (BERT WordPiece, RoBERTa and
ModernBERT byte-level BPE, XLM-R and DeBERTa-v3 SentencePiece Unigram) through the
``tokenizers`` library, giving what transformers' fast tokenizers give.

``EncoderTokenizer.from_directory(dir, model_type)`` reads ``tokenizer.json`` when the directory
has one; otherwise it builds the tokenizer as transformers does from ``vocab.txt`` (WordPiece;
``do_lower_case``, ``strip_accents``, ``tokenize_chinese_chars`` from
``tokenizer_config.json``), ``vocab.json`` + ``merges.txt`` (byte-level BPE,
``add_prefix_space`` and ``trim_offsets`` from ``tokenizer_config.json``) or a SentencePiece
Unigram model: DeBERTa-v2/v3's ``spm.model`` (``do_lower_case``, ``split_by_punct``,
``add_prefix_space``) and XLM-R's ``sentencepiece.bpe.model`` (fairseq's ids: ``<s> <pad> </s>
<unk>`` first, the pieces after them, ``<mask>`` last; the model's own normalization map). The
model file is read by a small protobuf reader of its own (``sentencepiece_pieces``), without
the sentencepiece or protobuf packages.

``encode_batch(texts, pairs=None, max_length=None)`` encodes in Rust over the whole batch (no
Python per text, the GIL released) and returns int32 numpy arrays under transformers' names,
padded to the longest row (or to a multiple of ``pad_to_multiple_of``, for bucket shapes):
``input_ids``, ``token_type_ids`` (families with token types) and ``attention_mask``;
``return_offsets=True`` adds ``offset_mapping`` int32[B, T, 2] (character spans in the row's
own text; (0, 0) for special tokens and padding) and ``sequence_ids`` int32[B, T] (0 / 1 for the
first / second text, -1 for special tokens and padding), what extractive QA needs. Those two
are not model inputs: drop them before ``model.apply(..., **batch)``. ``max_length`` truncates
as transformers' ``truncation=True`` does (longest_first).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from textkit.data.datasets import read_text
from textkit.pretrained.errors import MissingFileError, PretrainedError
from textkit.pretrained.files import TOKENIZER_TYPES, read_json_object, read_settings

__all__ = ["EncoderTokenizer", "TOKENIZER_FILES"]

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt", "vocab.json", "merges.txt", "sentencepiece.bpe.model",
                   "spm.model")
"""Files a checkpoint's tokenizer may have (``save`` copies those present)."""

_WITH_TYPES = {"bert", "electra", "deberta-v2"}
"""model_types whose tokenizers return ``token_type_ids`` (transformers' model_input_names)."""

_BERT_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                  "cls_token": "[CLS]", "mask_token": "[MASK]"}
_ROBERTA_SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>",
                     "cls_token": "<s>", "unk_token": "<unk>", "pad_token": "<pad>",
                     "mask_token": "<mask>"}
_DEBERTA_SPECIALS = {"pad_token": "[PAD]", "unk_token": "[UNK]", "bos_token": "[CLS]",
                     "eos_token": "[SEP]", "sep_token": "[SEP]", "cls_token": "[CLS]",
                     "mask_token": "[MASK]"}
_SPECIALS = {"roberta": _ROBERTA_SPECIALS, "xlm-roberta": _ROBERTA_SPECIALS,
             "deberta-v2": _DEBERTA_SPECIALS}
"""Special tokens by model_type (the others: BERT's)."""
_SPM_FILES = {"deberta-v2": "spm.model", "xlm-roberta": "sentencepiece.bpe.model"}


def _token(value: Any, default: str) -> str:
    """A special token of tokenizer_config.json (a string or an AddedToken dict)."""
    if isinstance(value, dict):
        return str(value.get("content", default))
    return default if value is None else str(value)


class EncoderTokenizer:
    """A ``tokenizers.Tokenizer`` with transformers' batch names (module docstring).

    ``pad_id`` / ``pad_token`` pad the batches; ``with_token_types`` says whether batches carry
    ``token_type_ids``; ``source`` is the directory read (``save`` copies its files)."""

    def __init__(self, tokenizer: Any, *, pad_token: str, with_token_types: bool,
                 source: Path | None = None):
        self.tokenizer = tokenizer
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.pad_token = pad_token
        pad_id = tokenizer.token_to_id(pad_token)
        if pad_id is None:
            raise PretrainedError(f"{source or 'the tokenizer'}: the pad token {pad_token!r} "
                                  f"is not in the vocabulary")
        self.pad_id = int(pad_id)
        self.with_token_types = with_token_types
        self.source = source

    # ------------------------------------------------------------------------------ reading
    @classmethod
    def from_directory(cls, root: str | Path, model_type: str) -> EncoderTokenizer:
        """The tokenizer of the checkpoint directory ``root`` of ``model_type`` ("bert",
        "roberta", "xlm-roberta", "electra", "distilbert", "deberta-v2", "modernbert");
        ``MissingFileError`` when it has none of tokenizer.json and the family's vocabulary
        files (vocab.txt, vocab.json + merges.txt, sentencepiece.bpe.model, spm.model)."""

        root = Path(root)
        settings = read_settings(root / "tokenizer_config.json", TOKENIZER_TYPES)
        specials = _SPECIALS.get(model_type, _BERT_SPECIALS)
        pad_token = _token(settings.get("pad_token"), specials["pad_token"])
        spm = root / _SPM_FILES.get(model_type, "-")
        if (root / "tokenizer.json").is_file():
            tokenizer = read_tokenizer_json(root / "tokenizer.json")
        elif model_type == "deberta-v2" and spm.is_file():
            tokenizer = _deberta_unigram(spm, settings)
        elif model_type == "xlm-roberta" and spm.is_file():
            tokenizer = _xlm_roberta_unigram(spm, settings)
        elif (root / "vocab.txt").is_file() and model_type in ("bert", "electra", "distilbert"):
            tokenizer = _wordpiece(root / "vocab.txt", settings)
        elif ((root / "vocab.json").is_file() and (root / "merges.txt").is_file()
              and model_type == "roberta"):
            tokenizer = _byte_level_bpe(root / "vocab.json", root / "merges.txt", settings)
        else:
            files = {"roberta": "vocab.json + merges.txt", "modernbert": "nothing else"}.get(
                model_type, _SPM_FILES.get(model_type, "vocab.txt"))
            raise MissingFileError(f"{root} has no tokenizer files for model_type "
                                   f"{model_type!r}: expected tokenizer.json or {files}")
        return cls(tokenizer, pad_token=pad_token, with_token_types=model_type in _WITH_TYPES,
                   source=root)

    # ----------------------------------------------------------------------------- encoding
    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def id_to_token(self, index: int) -> str | None:
        return self.tokenizer.id_to_token(index)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids`` (padding and, by default, special tokens dropped)."""
        return self.tokenizer.decode([int(i) for i in ids],
                                     skip_special_tokens=skip_special_tokens)

    def encodings(self, texts: Sequence[str] | Sequence[Sequence[str]],
                  pairs: Sequence[str] | None = None, max_length: int | None = None, *,
                  truncation: str = "longest_first", stride: int = 0,
                  is_pretokenized: bool = False) -> list[Any]:
        """The ``tokenizers.Encoding`` of every text (pair), special tokens added, truncated to
        ``max_length`` tokens when given: ``truncation`` is ``longest_first``, ``only_first``
        or ``only_second``; the cut-off tokens are in each encoding's ``overflowing`` list, as
        further windows sharing ``stride`` tokens with the previous one (question answering:
        ``only_second`` windows over the context). ``is_pretokenized``: each text is a list of
        words (token classification; ``Encoding.word_ids`` maps tokens to words)."""
        texts = list(texts)
        kind = list if is_pretokenized else str
        for i, text in enumerate(texts):
            if not isinstance(text, kind):
                raise TypeError(f"texts[{i}] is a {type(text).__name__}, expected "
                                f"{kind.__name__}")
        inputs: list[Any] = texts
        if pairs is not None:
            pairs = list(pairs)
            if len(pairs) != len(texts):
                raise ValueError(f"pairs has {len(pairs)} texts but texts has {len(texts)}")
            for i, text in enumerate(pairs):
                if not isinstance(text, str):
                    raise TypeError(f"pairs[{i}] is a {type(text).__name__}, expected str")
            inputs = list(zip(texts, pairs))
        if max_length is not None:
            special = self.tokenizer.num_special_tokens_to_add(pairs is not None)
            if max_length <= special:
                raise ValueError(f"max_length={max_length} leaves no room for text: the "
                                 f"special tokens alone take {special}")
            self.tokenizer.enable_truncation(max_length, stride=stride, strategy=truncation)
        try:
            return self.tokenizer.encode_batch(inputs, add_special_tokens=True,
                                               is_pretokenized=is_pretokenized)
        finally:
            self.tokenizer.no_truncation()

    def encode_batch(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
                     max_length: int | None = None, *, return_offsets: bool = False,
                     pad_to_multiple_of: int | None = None) -> dict[str, np.ndarray]:
        """Texts (and second texts ``pairs``) -> dict of int32 numpy arrays [B, T] padded to
        the longest row (module docstring for the names)."""
        encodings = self.encodings(texts, pairs, max_length)
        rows = len(encodings)
        width = max((len(e.ids) for e in encodings), default=0)
        if pad_to_multiple_of:
            width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
        ids = np.full((rows, width), self.pad_id, np.int32)
        mask = np.zeros((rows, width), np.int32)
        types = np.zeros((rows, width), np.int32)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            mask[row, :n] = 1
            types[row, :n] = enc.type_ids
        batch = {"input_ids": ids}
        if self.with_token_types:
            batch["token_type_ids"] = types
        batch["attention_mask"] = mask
        if return_offsets:
            offsets = np.zeros((rows, width, 2), np.int32)
            sequence = np.full((rows, width), -1, np.int32)
            for row, enc in enumerate(encodings):
                n = len(enc.ids)
                if n:
                    offsets[row, :n] = np.asarray(enc.offsets, np.int32).reshape(n, 2)
                    sequence[row, :n] = [-1 if s is None else s for s in enc.sequence_ids]
            batch["offset_mapping"] = offsets
            batch["sequence_ids"] = sequence
        return batch

    # ------------------------------------------------------------------------------ writing
    def save(self, directory: str | Path, model_type: str) -> None:
        """Write the tokenizer's files into ``directory``: the source directory's tokenizer
        files when it had any, else ``tokenizer.json`` and a ``tokenizer_config.json``."""
        directory = Path(directory)
        copied = False
        if self.source is not None:
            for name in TOKENIZER_FILES:
                if (self.source / name).is_file():
                    shutil.copyfile(self.source / name, directory / name)
                    copied = True
        if copied:
            return
        self.tokenizer.save(str(directory / "tokenizer.json"))
        classes = {"bert": "BertTokenizer", "electra": "ElectraTokenizer",
                   "distilbert": "DistilBertTokenizer", "roberta": "RobertaTokenizer",
                   "xlm-roberta": "XLMRobertaTokenizer", "deberta-v2": "DebertaV2Tokenizer",
                   "modernbert": "PreTrainedTokenizerFast"}
        specials = _SPECIALS.get(model_type, _BERT_SPECIALS)
        config = {"tokenizer_class": classes[model_type], **specials,
                  "pad_token": self.pad_token}
        (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


# ------------------------------------------------------------------------------- builders
def _added(tokenizer: Any, settings: dict[str, Any], specials: dict[str, str]) -> None:
    """Add the special tokens (as transformers does: special, not normalized), each once."""
    from tokenizers import AddedToken

    tokens = dict.fromkeys(_token(settings.get(key), value) for key, value in specials.items())
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                  for t in tokens])


def read_tokenizer_json(path: Path) -> Any:
    """The ``tokenizers.Tokenizer`` of a ``tokenizer.json`` file; a ``PretrainedError`` naming
    the file when it is not one (or is damaged)."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception
        raise PretrainedError(f"{path}: not a tokenizers file, or damaged ({err})") from None


def _text(path: Path) -> str:
    """A vocabulary file's text (``PretrainedError`` naming the line of a byte not UTF-8)."""
    return read_text(path, error=PretrainedError)


def _wordpiece(vocab_file: Path, settings: dict[str, Any]) -> Any:
    """BERT's tokenizer from vocab.txt, as transformers' ``BertTokenizer`` builds it."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    lines = _text(vocab_file).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise PretrainedError(f"{vocab_file}: empty (expected one WordPiece token a line)")
    vocab: dict[str, int] = {}
    for index, token in enumerate(lines):
        vocab[token.rstrip("\n")] = index
    unk = _token(settings.get("unk_token"), "[UNK]")
    tokenizer = Tokenizer(WordPiece(vocab, unk_token=unk))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=bool(settings.get("tokenize_chinese_chars", True)),
        strip_accents=settings.get("strip_accents"),
        lowercase=bool(settings.get("do_lower_case", True)))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    _added(tokenizer, settings, _BERT_SPECIALS)
    cls = _token(settings.get("cls_token"), "[CLS]")
    sep = _token(settings.get("sep_token"), "[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))])
    return tokenizer


def _byte_level_bpe(vocab_file: Path, merges_file: Path, settings: dict[str, Any]) -> Any:
    """RoBERTa's tokenizer from vocab.json + merges.txt, as transformers'
    ``RobertaTokenizer`` builds it."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE

    vocab = read_json_object(vocab_file)
    merges = []
    for line in _text(merges_file).split("\n"):
        if line.startswith("#version") or not line.strip():
            continue
        parts = line.split()
        if len(parts) == 2:
            merges.append((parts[0], parts[1]))
    prefix_space = bool(settings.get("add_prefix_space", False))
    trim = bool(settings.get("trim_offsets", True))
    tokenizer = Tokenizer(BPE(vocab=vocab, merges=merges, dropout=None,
                              continuing_subword_prefix="", end_of_word_suffix="",
                              fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tokenizer.decoder = decoders.ByteLevel()
    _added(tokenizer, settings, _ROBERTA_SPECIALS)
    sep = _token(settings.get("sep_token"), "</s>")
    cls = _token(settings.get("cls_token"), "<s>")
    tokenizer.post_processor = processors.RobertaProcessing(
        (sep, tokenizer.token_to_id(sep)), (cls, tokenizer.token_to_id(cls)), trim, prefix_space)
    return tokenizer


# ----------------------------------------------------------------------------- SentencePiece
def _fields(data: bytes) -> list[tuple[int, Any]]:
    """The (field number, value) pairs of one protobuf message: varints as int, fixed32 as
    float (the only fixed32 fields read here are scores), length-delimited as bytes."""
    import struct

    fields, pos = [], 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while pos < len(data):
        tag = varint()
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            fields.append((number, varint()))
        elif wire == 5:
            fields.append((number, struct.unpack_from("<f", data, pos)[0]))
            pos += 4
        elif wire == 1:
            fields.append((number, data[pos:pos + 8]))
            pos += 8
        elif wire == 2:
            size = varint()
            fields.append((number, data[pos:pos + size]))
            pos += size
        else:
            raise ValueError(f"protobuf wire type {wire} at byte {pos}")
    return fields


def sentencepiece_pieces(path: Path) -> tuple[list[tuple[str, float, int]], dict[str, Any]]:
    """A SentencePiece model file's pieces ``(piece, score, type)`` (type 1 normal, 2 unknown,
    3 control, 4 user-defined, 6 byte) and its options: ``model_type`` (1 Unigram, 2 BPE),
    ``unk_id``, ``precompiled_charsmap`` (bytes; empty when the model has none)."""
    try:
        top = _fields(path.read_bytes())
        pieces, options = [], {"model_type": 1, "unk_id": 0, "precompiled_charsmap": b""}
        for number, value in top:
            if number == 1:
                piece = dict(_fields(value))
                pieces.append((piece.get(1, b"").decode("utf-8"), float(piece.get(2, 0.0)),
                               int(piece.get(3, 1))))
            elif number == 2:
                trainer = dict(_fields(value))
                options.update(model_type=trainer.get(3, 1), unk_id=trainer.get(40, 0))
            elif number == 3:
                options["precompiled_charsmap"] = dict(_fields(value)).get(2, b"")
    except (ValueError, IndexError, UnicodeDecodeError) as err:
        raise PretrainedError(f"{path}: not a SentencePiece model ({err})") from None
    if options["model_type"] != 1:
        raise PretrainedError(f"{path}: a SentencePiece model of type {options['model_type']}; "
                              f"textkit reads Unigram models (type 1)")
    return pieces, options


def _unigram(vocab: list[tuple[str, float]], unk_id: int) -> Any:
    from tokenizers import Tokenizer
    from tokenizers.models import Unigram

    return Tokenizer(Unigram(vocab, unk_id=unk_id, byte_fallback=False))


def _template(tokenizer: Any, cls: str, sep: str, pair_types: bool, double_sep: bool) -> None:
    """``cls A sep`` / ``cls A sep [sep] B sep`` with the second text's type ids 1 when
    ``pair_types`` (DeBERTa) and two separators between the texts when ``double_sep`` (XLM-R)."""
    from tokenizers import processors

    second = 1 if pair_types else 0
    middle = f"{sep}:0 {sep}:0" if double_sep else f"{sep}:0"
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {middle} $B:{second} {sep}:{second}",
        special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))])


def _deberta_unigram(path: Path, settings: dict[str, Any]) -> Any:
    """DeBERTa-v2/v3's tokenizer from ``spm.model``, as transformers' ``DebertaV2Tokenizer``
    builds it: the pieces in their order, whitespace runs and tabs / newlines -> one space, NFC,
    right strip (no SentencePiece normalization map), Metaspace."""
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers

    pieces, _ = sentencepiece_pieces(path)
    vocab = [(piece, score) for piece, score, _ in pieces]
    unk = _token(settings.get("unk_token"), "[UNK]")
    unk_id = vocab.index((unk, 0.0)) if (unk, 0.0) in vocab else 1
    tokenizer = _unigram(vocab, unk_id)
    steps = [normalizers.Lowercase()] if settings.get("do_lower_case") else []
    steps += [normalizers.Replace(Regex(r"\s{2,}|[\n\r\t]"), " "), normalizers.NFC(),
              normalizers.Strip(left=False, right=True)]
    tokenizer.normalizer = normalizers.Sequence(steps)
    scheme = "always" if settings.get("add_prefix_space", True) else "first"
    splits = ([pre_tokenizers.Punctuation(behavior="isolated")]
              if settings.get("split_by_punct") else [])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme)])
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=scheme)
    _added(tokenizer, settings, _DEBERTA_SPECIALS)
    _template(tokenizer, _token(settings.get("cls_token"), "[CLS]"),
              _token(settings.get("sep_token"), "[SEP]"), pair_types=True, double_sep=False)
    return tokenizer


def _xlm_roberta_unigram(path: Path, settings: dict[str, Any]) -> Any:
    """XLM-R's tokenizer from ``sentencepiece.bpe.model``, as transformers'
    ``XLMRobertaTokenizer`` builds it: fairseq's four specials, the pieces after the model's
    own three (ids shifted by one), ``<mask>`` last; the model's normalization map, whitespace
    split, Metaspace."""
    from tokenizers import decoders, normalizers, pre_tokenizers

    pieces, options = sentencepiece_pieces(path)
    names = {k: _token(settings.get(k), v) for k, v in _ROBERTA_SPECIALS.items()}
    vocab = [(names[k], 0.0) for k in ("bos_token", "pad_token", "eos_token", "unk_token")]
    vocab += [(piece, score) for piece, score, _ in pieces[3:]]
    vocab.append((names["mask_token"], 0.0))
    tokenizer = _unigram(vocab, 3)
    if options["precompiled_charsmap"]:
        tokenizer.normalizer = normalizers.Precompiled(options["precompiled_charsmap"])
    scheme = "always" if settings.get("add_prefix_space", True) else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(),
         pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme)])
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=scheme)
    _added(tokenizer, settings, _ROBERTA_SPECIALS)
    _template(tokenizer, names["cls_token"], names["sep_token"], pair_types=False,
              double_sep=True)
    return tokenizer
