"""T5's tokenizer (T5, T5 v1.1, Flan-T5, mT5) as a ``seq2seq.Seq2SeqTokenizer``, with the ids
transformers' ``T5Tokenizer`` gives.

A checkpoint holds ``tokenizer.json`` (what transformers 5 saves), else ``spiece.model`` (the
SentencePiece Unigram model of the published T5 files), read as transformers builds it: the
pieces in their order (pad 0, EOS 1, unk 2 in T5's), ``extra_ids`` sentinels
``<extra_id_N>`` after them (the last first: ``<extra_id_0>`` is the largest id), the model's
normalisation map, whitespace split and Metaspace. Every text is encoded ``... </s>`` (no
BOS); a ``prefix`` (T5's task prefix, "translate English to German: ") is put before every
text first.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from textkit._io import write_json_atomic
from textkit.pretrained.encoder_tokenizer import read_tokenizer_json, sentencepiece_pieces
from textkit.pretrained.errors import MissingFileError, PretrainedError, refuse_language_codes
from textkit.pretrained.files import read_json_object

__all__ = ["T5Tokenizer", "spiece_tokenizer"]

SPECIALS = ("<pad>", "</s>", "<unk>")


def spiece_tokenizer(path: Path, extra_ids: int) -> Any:
    """A ``tokenizers.Tokenizer`` of T5's ``spiece.model`` at ``path`` with ``extra_ids``
    sentinels, as transformers' ``T5Tokenizer`` converts it."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import Unigram

    pieces, options = sentencepiece_pieces(path)
    vocab = [(piece, score) for piece, score, _ in pieces]
    vocab += [(f"<extra_id_{i}>", 0.0) for i in reversed(range(extra_ids))]
    names = [piece for piece, _ in vocab]
    missing = [token for token in SPECIALS if token not in names]
    if missing:
        raise PretrainedError(f"{path}: T5's special pieces {missing} are not in the model")
    tokenizer = Tokenizer(Unigram(vocab, unk_id=names.index("<unk>"), byte_fallback=False))
    if options["precompiled_charsmap"]:
        tokenizer.normalizer = normalizers.Precompiled(options["precompiled_charsmap"])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)])
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.add_special_tokens([AddedToken(name, special=True, normalized=False)
                                  for name in (*SPECIALS, *names[len(pieces):])])
    return tokenizer


@dataclasses.dataclass(frozen=True)
class T5Tokenizer:
    """One ``tokenizers.Tokenizer`` serving both sides (module docstring).

    ``decoder_start_id``: the decoder's first input (T5's is the pad id, 0); ``bos_id`` is the
    same id (what the translation batches put first in every target). ``prefix``: put before
    every text encoded; ``add_eos=False`` leaves the final ``</s>`` out (training targets, to
    which the translation loader adds it). ``source``: the directory read."""

    tokenizer: Any
    decoder_start_id: int
    prefix: str = ""
    add_eos: bool = True
    source: Path | None = None

    @classmethod
    def from_directory(cls, root: Path, decoder_start_id: int) -> T5Tokenizer:
        """The tokenizer of the checkpoint directory ``root``: its ``tokenizer.json``, else its
        ``spiece.model`` (``extra_ids`` from ``tokenizer_config.json``, default 100)."""
        settings_path = root / "tokenizer_config.json"
        settings = read_json_object(settings_path) if settings_path.is_file() else {}
        if (root / "tokenizer.json").is_file():
            tokenizer = read_tokenizer_json(root / "tokenizer.json")
        elif (root / "spiece.model").is_file():
            tokenizer = spiece_tokenizer(root / "spiece.model",
                                         int(settings.get("extra_ids", 100)))
        else:
            raise MissingFileError(f"{root} has neither tokenizer.json nor spiece.model (a T5 "
                                   f"checkpoint's tokenizer)")
        tokenizer.no_truncation()
        tokenizer.no_padding()
        missing = [t for t in SPECIALS if tokenizer.token_to_id(t) is None]
        if missing:
            raise PretrainedError(f"{root}: T5's special tokens {missing} are not in the "
                                  f"tokenizer's vocabulary")
        return cls(tokenizer, int(decoder_start_id), source=root)

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.token_to_id("<pad>"))

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.token_to_id("</s>"))

    @property
    def unk_id(self) -> int:
        return int(self.tokenizer.token_to_id("<unk>"))

    @property
    def bos_id(self) -> int:
        """The decoder start id (see the class docstring)."""
        return self.decoder_start_id

    def __len__(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    def __repr__(self) -> str:
        prefix = f", prefix {self.prefix!r}" if self.prefix else ""
        return f"T5Tokenizer({self.source}, {len(self)} ids{prefix})"

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """``prefix + text`` ids of every text, then ``</s>`` (left out when ``add_eos`` is
        False)."""
        encodings = self.tokenizer.encode_batch([self.prefix + t for t in texts],
                                                add_special_tokens=False)
        end = [self.eos_id] if self.add_eos else []
        return [[*e.ids, *end] for e in encodings]

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Text of every id list, special tokens (pad, EOS, sentinels) skipped."""
        return self.tokenizer.decode_batch([list(map(int, row)) for row in ids],
                                           skip_special_tokens=True)

    def configured(self, *, add_eos: bool | None = None,
                   prefix: str | None = None) -> T5Tokenizer:
        """A copy with ``add_eos`` and / or ``prefix`` changed (this one is left as it is)."""
        return dataclasses.replace(self, add_eos=self.add_eos if add_eos is None else add_eos,
                                   prefix=self.prefix if prefix is None else prefix)

    def for_languages(self, src_lang: str | None, tgt_lang: str | None) -> T5Tokenizer:
        """This tokenizer when both codes are None; a ``LanguageError`` naming them otherwise
        (T5 names the task in a text prefix: ``prefix``)."""
        refuse_language_codes("T5", src_lang, tgt_lang, "T5 reads the task from a prefix "
                              "such as 'translate English to German: '")
        return self

    def save(self, directory: Path, max_len: int) -> None:
        """``tokenizer.json`` and the ``tokenizer_config.json`` transformers' ``T5Tokenizer``
        reads, in ``directory`` (and ``spiece.model`` when this one was read from one)."""
        self.tokenizer.save(str(directory / "tokenizer.json"))
        sentinels = sorted((t for t in self.tokenizer.get_vocab(with_added_tokens=True)
                            if t.startswith("<extra_id_")), key=lambda t: int(t[10:-1]))
        write_json_atomic(directory / "tokenizer_config.json", {
            "tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "pad_token": "<pad>",
            "unk_token": "<unk>", "extra_ids": len(sentinels),
            "additional_special_tokens": sentinels, "model_max_length": max_len})
        if self.source is not None and (self.source / "spiece.model").is_file():
            shutil.copyfile(self.source / "spiece.model", directory / "spiece.model")
