"""``MarianTokenizer``: the tokenizer of Marian / OPUS-MT checkpoints, as Hugging Face's.

A Marian checkpoint directory holds two SentencePiece models (``source.spm``, ``target.spm``)
that only *segment* text, and ``vocab.json``, the model's vocabulary (shared by both sides
unless ``tokenizer_config.json`` says ``separate_vocabs``, then ``target_vocab.json`` is the
target's). Encoding a text: split it at special-token strings (``</s>``, ``<unk>``, ``<pad>``,
...), segment every other part with the side's SentencePiece model (a leading ``>>xx<<``
language code stays one piece), map pieces to ids through the vocabulary (a piece it lacks
becomes ``<unk>``) and append ``</s>``. Decoding drops the special ids, maps ids to pieces and
joins them with a SentencePiece model (as transformers' ``MarianTokenizer.batch_decode(...,
skip_special_tokens=True)``: with a shared vocabulary that is the *source* model, the
transformers 5 default).

It lives in ``textkit.pretrained`` with the rest of the checkpoint format (``marian.py``); it is
jax-free and has the interface of ``SentencePieceTokenizer`` (the data pipeline uses it when a
pretrained model is fine-tuned, the ``Translator`` when it translates).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import sentencepiece as spm

from textkit.pretrained.errors import refuse_language_codes

__all__ = ["MarianTokenizer"]


class MarianTokenizer:
    """One side (source or target) of a Marian checkpoint's tokenizer.

    Args:
      spm_path: the SentencePiece model that segments this side's text.
      vocab: piece -> id (``vocab.json``, or ``target_vocab.json`` for a separate target).
      decode_spm_path: the SentencePiece model that joins pieces when decoding (default
        ``spm_path``).
      eos: the end-of-sentence piece (must be in ``vocab``, as must ``unk`` and ``pad``).
      unk: the unknown piece.
      pad: the padding piece.
      extra_specials: further special pieces (``additional_special_tokens``) in ``vocab``.
      decoder_start_id: the first decoder input (default: the pad id, Marian's).
      add_eos: append ``eos_id`` to every encoding (False for training targets, to which the
        translation loader adds EOS itself; ``configured(add_eos=False)`` gives such a copy).

    ``encode(list[str]) -> list[list[int]]`` (EOS appended), ``decode(list[list[int]]) ->
    list[str]``; ``pad_id``, ``eos_id``, ``unk_id``, ``decoder_start_id``, ``bos_id`` (Marian
    has no BOS token: the decoder start id, which the translation loader puts first in every
    target) and ``len()`` (the vocabulary size: largest id + 1) as the ``Translator`` and the
    translation loader need them. The ``seq2seq.Seq2SeqTokenizer`` protocol: settings change
    only in copies (``configured``); Marian takes no language codes (``for_languages``).
    """

    def __init__(self, spm_path: str | os.PathLike, vocab: Mapping[str, int], *,
                 decode_spm_path: str | os.PathLike | None = None, eos: str = "</s>",
                 unk: str = "<unk>", pad: str = "<pad>", extra_specials: Sequence[str] = (),
                 decoder_start_id: int | None = None, add_eos: bool = True) -> None:
        self.spm_path = Path(spm_path)
        self.decode_spm_path = Path(decode_spm_path or spm_path)
        self.vocab = {str(piece): int(i) for piece, i in vocab.items()}
        for name, piece in (("eos", eos), ("unk", unk), ("pad", pad)):
            if piece not in self.vocab:
                raise ValueError(f"the {name} piece {piece!r} is not in the vocabulary "
                                 f"({len(self.vocab)} pieces)")
        self.pieces = {i: piece for piece, i in self.vocab.items()}
        self.eos_piece, self.unk_piece, self.pad_piece = eos, unk, pad
        self.eos_id, self.unk_id, self.pad_id = self.vocab[eos], self.vocab[unk], self.vocab[pad]
        self.decoder_start_id = self.pad_id if decoder_start_id is None else int(
            decoder_start_id)
        self.add_eos = bool(add_eos)
        self.specials = [eos, unk, pad, *[s for s in extra_specials if s in self.vocab]]
        self.special_ids = frozenset(self.vocab[s] for s in self.specials)
        self._sp = spm.SentencePieceProcessor(model_file=str(self.spm_path))
        self._decode_sp = (self._sp if self.decode_spm_path == self.spm_path else
                           spm.SentencePieceProcessor(model_file=str(self.decode_spm_path)))

    def __getstate__(self) -> dict:
        """Picklable (worker processes): the SentencePiece models travel as bytes."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("_sp", "_decode_sp")}
        state["_protos"] = (self._sp.serialized_model_proto(),
                            self._decode_sp.serialized_model_proto())
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        encode_proto, decode_proto = state.pop("_protos")
        self.__dict__.update(state)
        self._sp = spm.SentencePieceProcessor(model_proto=encode_proto)
        self._decode_sp = (self._sp if self.decode_spm_path == self.spm_path else
                           spm.SentencePieceProcessor(model_proto=decode_proto))

    def __len__(self) -> int:
        return max(self.vocab.values()) + 1

    @property
    def bos_id(self) -> int:
        """The decoder start id (Marian has no BOS token; see the class docstring)."""
        return self.decoder_start_id

    def configured(self, *, add_eos: bool | None = None) -> MarianTokenizer:
        """A copy with ``add_eos`` changed (this tokenizer is left as it is)."""
        copy = object.__new__(MarianTokenizer)
        copy.__dict__.update(self.__dict__)
        if add_eos is not None:
            copy.add_eos = bool(add_eos)
        return copy

    def for_languages(self, src_lang: str | None, tgt_lang: str | None) -> MarianTokenizer:
        """This tokenizer when both codes are None; a ``LanguageError`` naming them otherwise:
        a Marian checkpoint is one language pair (a multilingual OPUS-MT model takes its
        target as a ``>>xx<<`` token at the start of each source text)."""
        refuse_language_codes("Marian", src_lang, tgt_lang,
                              "a multilingual OPUS-MT model takes the target as a >>xx<< "
                              "token at the start of each source text")
        return self

    def __repr__(self) -> str:
        return f"MarianTokenizer({self.spm_path.name}, {len(self)} ids)"

    def _split_specials(self, text: str) -> list[str]:
        """``text`` cut at special-token strings (longest first); specials are kept as parts."""
        parts, start, i = [], 0, 0
        ordered = sorted(self.specials, key=len, reverse=True)
        while i < len(text):
            hit = next((s for s in ordered if text.startswith(s, i)), None)
            if hit is None:
                i += 1
                continue
            parts += [text[start:i], hit]
            i = start = i + len(hit)
        parts.append(text[start:])
        return [p for p in parts if p]

    def tokenize(self, text: str) -> list[str]:
        """Pieces of one text (no EOS): specials kept, other parts segmented."""
        pieces: list[str] = []
        for part in self._split_specials(text):
            if part in self.specials:
                pieces.append(part)
                continue
            if part.startswith(">>") and (end := part.find("<<")) != -1:
                pieces.append(part[:end + 2])
                part = part[end + 2:]
            pieces += self._sp.encode(part, out_type=str)
        return pieces

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of every text, int lists ending with ``eos_id`` unless ``add_eos`` is False
        (unknown pieces: ``unk_id``)."""
        eos = [self.eos_id] if self.add_eos else []
        return [[self.vocab.get(piece, self.unk_id) for piece in self.tokenize(text)] + eos
                for text in texts]

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Text of every id list; special ids (EOS, pad, unk, extras) are skipped."""
        texts = []
        for row in ids:
            pieces = [self._piece(int(i)) for i in row if int(i) not in self.special_ids]
            text = self._decode_sp.decode_pieces(pieces) if pieces else ""
            texts.append(text.replace("\u2581", " ").strip())
        return texts

    def _piece(self, index: int) -> str:
        if index in self.pieces:
            return self.pieces[index]
        piece = self._decode_sp.id_to_piece(index) if index < self._decode_sp.get_piece_size() \
            else ""
        return piece or self.unk_piece

    @classmethod
    def from_directory(cls, path: str | os.PathLike,
                       decoder_start_id: int | None = None) -> tuple[MarianTokenizer,
                                                                       MarianTokenizer]:
        """(source, target) tokenizers of a Marian checkpoint directory (``source.spm``,
        ``target.spm``, ``vocab.json`` [+ ``target_vocab.json``], ``tokenizer_config.json``)."""
        root = Path(path)
        config_path = root / "tokenizer_config.json"
        config = json.loads(config_path.read_text("utf-8")) if config_path.is_file() else {}
        separate = bool(config.get("separate_vocabs", False))
        vocab = _read_json(root / "vocab.json")
        target_vocab = _read_json(root / "target_vocab.json") if separate else vocab
        specials = dict(eos=_token(config, "eos_token", "</s>"),
                        unk=_token(config, "unk_token", "<unk>"),
                        pad=_token(config, "pad_token", "<pad>"),
                        extra_specials=[_token({"t": t}, "t", "") for t in
                                        config.get("additional_special_tokens") or []])
        decode_spm = root / ("target.spm" if separate else "source.spm")
        source = cls(root / "source.spm", vocab, **specials)
        target = cls(root / "target.spm", target_vocab, decode_spm_path=decode_spm,
                     decoder_start_id=decoder_start_id, **specials)
        return source, target


def _token(config: Mapping, key: str, default: str) -> str:
    value = config.get(key, default)
    return value.get("content", default) if isinstance(value, dict) else str(value)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text("utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
