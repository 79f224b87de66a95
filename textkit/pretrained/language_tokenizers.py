"""The tokenizers of multilingual encoder-decoder checkpoints, as ``seq2seq.Seq2SeqTokenizer``s:
one ``LanguageTokenizer`` holds the language logic (choosing the side's language, its token
first or, in NLLB's legacy template, last; the target's token forced first when translating;
unknown codes named with the nearest ones), ``M2M100Tokenizer`` segments with
``sentencepiece.bpe.model`` and maps with ``vocab.json`` (M2M100), ``JsonLanguageTokenizer``
reads ``tokenizer.json`` (NLLB-200, mBART-50)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from textkit.pretrained.encoder_tokenizer import read_tokenizer_json
from textkit.pretrained.errors import LanguageError, PretrainedError

__all__ = ["JsonLanguageTokenizer", "LanguageTokenizer", "M2M100Tokenizer",
           "json_language_tokenizer"]

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class LanguageTokenizer:
    """One side of a multilingual checkpoint's tokenizer (a ``seq2seq.Seq2SeqTokenizer``): the
    language logic that M2M100's and NLLB's tokenizers share; a subclass gives the pieces.

    ``languages``: the language codes; ``side``: "source" or "target"; ``language``: the code
    every encoding carries (None until ``for_languages`` chooses one), as its first token
    (``legacy=True``: NLLB's old template, after the final ``</s>``). ``decoder_start_id``: the
    decoder's first input (``</s>``); ``bos_id`` is the same id (what the translation batches
    put first in every target); ``forced_bos_id``: the target language's token (target side),
    which translation forces first. ``where``: the directory read, for messages."""

    where: Path
    languages: tuple[str, ...]
    decoder_start_id: int
    side: str = "source"
    language: str | None = None
    add_eos: bool = True
    legacy: bool = False

    pad_id: int = dataclasses.field(init=False)
    eos_id: int = dataclasses.field(init=False)
    unk_id: int = dataclasses.field(init=False)
    begin_id: int = dataclasses.field(init=False)

    def _id(self, token: str) -> int | None:
        """The id of a special or language token (None: absent)."""
        raise NotImplementedError

    def _pieces(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of every text's pieces, no special token added."""
        raise NotImplementedError

    def _language_token(self, code: str) -> str:
        return code

    def _set_specials(self) -> None:
        ids = {token: self._id(token) for token in ("<pad>", "</s>", "<unk>", "<s>")}
        missing = [token for token, i in ids.items() if i is None]
        if missing:
            raise PretrainedError(f"{self.where}: the special tokens {missing} are not in the "
                                  f"vocabulary")
        for name, token in (("pad_id", "<pad>"), ("eos_id", "</s>"), ("unk_id", "<unk>"),
                            ("begin_id", "<s>")):
            object.__setattr__(self, name, ids[token])

    @property
    def bos_id(self) -> int:
        """The decoder start id (see the class docstring)."""
        return self.decoder_start_id

    def language_id(self, code: str) -> int:
        """The id of language ``code``'s token (``LanguageError`` naming the nearest codes)."""
        index = self._id(self._language_token(code)) if code in self.languages else None
        if index is None:
            near = difflib.get_close_matches(code, self.languages, n=5, cutoff=0.3)
            raise LanguageError(f"{self.where}: no language code {code!r} (nearest: "
                                f"{', '.join(near) or 'none'}; {len(self.languages)} codes: "
                                f"{', '.join(self.languages[:12])}, ...)")
        return index

    @property
    def forced_bos_id(self) -> int | None:
        """The target language's token, forced first when translating (None: source side, or
        no language chosen)."""
        if self.side != "target" or self.language is None:
            return None
        return self.language_id(self.language)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """``lang ... </s>`` ids of every text (``legacy``: ``... </s> lang``; without the
        ``</s>`` when ``add_eos`` is False)."""
        if self.language is None:
            raise LanguageError(f"{self.where}: a multilingual tokenizer encodes for a "
                                f"language: choose it with for_languages(src_lang, tgt_lang)")
        code = [self.language_id(self.language)]
        eos = [self.eos_id] if self.add_eos else []
        if self.legacy:
            return [ids + eos + code for ids in self._pieces(texts)]
        return [code + ids + eos for ids in self._pieces(texts)]

    def configured(self, *, add_eos: bool | None = None) -> LanguageTokenizer:
        """A copy with ``add_eos`` changed (this tokenizer is left as it is)."""
        return dataclasses.replace(self, add_eos=self.add_eos if add_eos is None else add_eos)

    def for_languages(self, src_lang: str | None, tgt_lang: str | None) -> LanguageTokenizer:
        """A copy encoding in this side's language of the two (each checked: ``LanguageError``
        naming an unknown code and the nearest ones, or a missing one)."""
        code = src_lang if self.side == "source" else tgt_lang
        if code is None:
            flag = "src_lang" if self.side == "source" else "tgt_lang"
            raise LanguageError(f"{self.where}: a multilingual checkpoint needs {flag} (one of "
                                f"{len(self.languages)} codes: "
                                f"{', '.join(self.languages[:12])}, ...)")
        self.language_id(code)
        return dataclasses.replace(self, language=code)


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class M2M100Tokenizer(LanguageTokenizer):
    """M2M100's tokenizer, as transformers' ``M2M100Tokenizer``: ``sentencepiece.bpe.model``
    segments, ``vocab`` (``vocab.json``) maps pieces to ids (others are ``<unk>``), the token
    of language ``xx`` is ``__xx__`` at id ``len(vocab)`` + the code's index."""

    spm_path: Path
    vocab: Mapping[str, int]

    def __post_init__(self) -> None:
        processor = spm.SentencePieceProcessor(model_file=str(self.spm_path))
        object.__setattr__(self, "_sp", processor)
        object.__setattr__(self, "_names", {i: piece for piece, i in self.vocab.items()})
        self._set_specials()

    def _language_token(self, code: str) -> str:
        return f"__{code}__"

    def _id(self, token: str) -> int | None:
        if token.startswith("__") and token.endswith("__") and token[2:-2] in self.languages:
            return len(self.vocab) + self.languages.index(token[2:-2])
        return self.vocab.get(token)

    def __len__(self) -> int:
        return len(self.vocab) + len(self.languages)

    def __getstate__(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    def _pieces(self, texts: Sequence[str]) -> list[list[int]]:
        return [[self.vocab.get(piece, self.unk_id)
                 for piece in self._sp.encode(text, out_type=str)] for text in texts]

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Text of every id list; special and language tokens skipped."""
        specials = {self.vocab[token] for token in SPECIALS}
        texts = []
        for row in ids:
            pieces = [self._names.get(int(i), "<unk>") for i in row
                      if int(i) not in specials and int(i) < len(self.vocab)]
            texts.append(self._sp.decode_pieces(pieces).strip() if pieces else "")
        return texts


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class JsonLanguageTokenizer(LanguageTokenizer):
    """A multilingual tokenizer in ``tokenizer.json`` (a ``tokenizers.Tokenizer``), as
    transformers' ``NllbTokenizerFast`` and ``MBart50TokenizerFast``: it segments and maps
    pieces, the language codes (``eng_Latn``, ``en_XX``, ...) are its special added tokens; a
    text is ``lang ... </s>`` (``legacy``: ``... </s> lang``, NLLB's ``legacy_behaviour``)."""

    tokenizer: Any

    def __post_init__(self) -> None:
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self._set_specials()

    def _id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def _pieces(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(e.ids) for e in self.tokenizer.encode_batch(list(texts),
                                                                  add_special_tokens=False)]

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Text of every id list; special and language tokens skipped."""
        return [self.tokenizer.decode([int(i) for i in row], skip_special_tokens=True)
                for row in ids]


def json_language_tokenizer(root: Path, settings: Mapping[str, Any], start: int,
                            code: re.Pattern[str], family: str) -> JsonLanguageTokenizer:
    """The ``JsonLanguageTokenizer`` of ``root``'s ``tokenizer.json`` (``settings``: its
    ``tokenizer_config.json``; ``start``: the decoder start id); its language codes are the
    settings' ``additional_special_tokens`` / ``extra_special_tokens`` that match ``code``,
    else its added special tokens that do, by id."""
    tokenizer = read_tokenizer_json(root / "tokenizer.json")
    listed = [t.get("content") if isinstance(t, dict) else t
              for t in settings.get("additional_special_tokens")
              or settings.get("extra_special_tokens") or []]
    codes = tuple(t for t in listed if isinstance(t, str) and code.match(t))
    if not codes:
        added = tokenizer.get_added_tokens_decoder()
        codes = tuple(added[i].content for i in sorted(added)
                      if added[i].special and code.match(added[i].content))
    if not codes:
        raise PretrainedError(f"{root / 'tokenizer.json'}: no language tokens shaped like "
                              f"{code.pattern}: not a {family} tokenizer")
    return JsonLanguageTokenizer(where=root, tokenizer=tokenizer, languages=codes,
                         decoder_start_id=start,
                         legacy=bool(settings.get("legacy_behaviour", False)))
