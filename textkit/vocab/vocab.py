"""``Vocab``: a deterministic token <-> id mapping with special tokens.

Order of ids: the special tokens (``<unk>``, ``<pad>``, ``<bos>``, ``<eos>``, skipping any set to
None), then ``reserved_tokens``, then the counted tokens by frequency (descending), ties broken
alphabetically. Lookups of whole batches go through ``map(dict.get, ...)`` into ``np.fromiter``,
so no Python code runs per token.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from textkit._io import write_text_atomic

__all__ = ["Vocab"]

_SPECIAL_NAMES = ("unk", "pad", "bos", "eos")
_MISSING = -1


def _count(counter_or_tokens: Mapping[str, int] | Iterable[Any] | None) -> Mapping[str, int]:
    """Token counts from a Counter/mapping, a token iterable or an iterable of token lists."""
    if counter_or_tokens is None:
        return {}
    if isinstance(counter_or_tokens, str | bytes):
        raise TypeError(f"Vocab takes a Counter, a list of tokens or a list of token lists, got "
                        f"a {type(counter_or_tokens).__name__} ({counter_or_tokens[:40]!r}); "
                        "split the text into tokens first, e.g. Vocab(text.split())")
    if isinstance(counter_or_tokens, Mapping):
        return counter_or_tokens
    counts: collections.Counter = collections.Counter()
    for item in counter_or_tokens:
        if isinstance(item, str):
            counts[item] += 1
        else:
            counts.update(item)
    return counts


def _is_gluonnlp(state: Mapping[str, Any]) -> bool:
    """Whether a parsed vocab JSON was written by GluonNLP (``unknown_token`` etc.)."""
    textkit_keys = {f"{name}_token" for name in _SPECIAL_NAMES} - {"bos_token", "eos_token"}
    return (not textkit_keys & set(state)
            and bool({"unknown_token", "identifiers_to_tokens", "token_to_idx"} & set(state)))


class Vocab:
    """Token <-> id mapping.

    Args:
      counter_or_tokens: a ``collections.Counter`` (or any token -> count mapping), an iterable of
        tokens, or an iterable of token lists (sentences).
      max_size: keep at most this many counted tokens (specials and reserved not included).
      min_freq: drop counted tokens seen fewer times.
      unk_token: the unknown token; each special token may be None.
      pad_token: the padding token.
      bos_token: the begin-of-sentence token.
      eos_token: the end-of-sentence token.
      reserved_tokens: extra tokens placed right after the specials.

    Unknown tokens map to ``unk_id``; without an unk token they raise ``KeyError``.
    """

    def __init__(self, counter_or_tokens: Mapping[str, int] | Iterable[Any] | None = None,
                 max_size: int | None = None, min_freq: int = 1,
                 unk_token: str | None = "<unk>", pad_token: str | None = "<pad>",
                 bos_token: str | None = "<bos>", eos_token: str | None = "<eos>",
                 reserved_tokens: Sequence[str] | None = None):
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        specials = {"unk": unk_token, "pad": pad_token, "bos": bos_token, "eos": eos_token}
        fixed = [t for t in specials.values() if t is not None] + list(reserved_tokens or ())
        taken = set(fixed)
        counts = _count(counter_or_tokens)
        counted = sorted(((token, n) for token, n in counts.items()
                          if n >= min_freq and token not in taken),
                         key=lambda item: (-item[1], item[0]))
        if max_size is not None:
            counted = counted[:max_size]
        self._build(fixed + [token for token, _ in counted], specials, reserved_tokens or ())

    def _build(self, idx_to_token: Sequence[str], specials: Mapping[str, str | None],
               reserved_tokens: Sequence[str]) -> None:
        for name, value in (("idx_to_token", idx_to_token), ("reserved_tokens", reserved_tokens)):
            if isinstance(value, str | bytes):
                raise TypeError(f"{name} must be a list of tokens, got a str ({value[:40]!r})")
        self.idx_to_token: list[str] = list(idx_to_token)
        self.token_to_idx: dict[str, int] = {}
        for index, token in enumerate(self.idx_to_token):
            if not isinstance(token, str):
                raise TypeError(f"token {index} is a {type(token).__name__}, expected str")
            if token in self.token_to_idx:
                raise ValueError(f"token {token!r} appears twice (ids {self.token_to_idx[token]} "
                                 f"and {index}); special and reserved tokens must be distinct")
            self.token_to_idx[token] = index
        self.reserved_tokens: tuple[str, ...] = tuple(reserved_tokens)
        for name in _SPECIAL_NAMES:
            token = specials.get(name)
            if token is not None and token not in self.token_to_idx:
                raise ValueError(f"{name} token {token!r} is not in the vocabulary")
            setattr(self, f"{name}_token", token)
            setattr(self, f"{name}_id", None if token is None else self.token_to_idx[token])
        for token in self.reserved_tokens:
            if token not in self.token_to_idx:
                raise ValueError(f"reserved token {token!r} is not in the vocabulary")

    @classmethod
    def from_tokens(cls, idx_to_token: Sequence[str], *, unk_token: str | None = "<unk>",
                    pad_token: str | None = "<pad>", bos_token: str | None = "<bos>",
                    eos_token: str | None = "<eos>",
                    reserved_tokens: Sequence[str] = ()) -> Vocab:
        """A vocab with exactly this id order; the named specials must occur in it."""
        vocab = cls.__new__(cls)
        specials = {"unk": unk_token, "pad": pad_token, "bos": bos_token, "eos": eos_token}
        vocab._build(idx_to_token, specials, reserved_tokens)
        return vocab

    @classmethod
    def from_sentencepiece(cls, model: Any) -> Vocab:
        """The vocab of a SentencePiece model (a path or a ``SentencePieceProcessor``).

        Ids are the model's own piece ids, so ``vocab.pad_id == sp.pad_id()`` etc.; a special
        the model does not define (id -1) is None.
        """
        import sentencepiece as spm

        if not isinstance(model, spm.SentencePieceProcessor):
            model = spm.SentencePieceProcessor(model_file=os.fspath(model))
        pieces = model.id_to_piece(list(range(model.get_piece_size())))

        def piece(special_id: int) -> str | None:
            return None if special_id < 0 else pieces[special_id]

        return cls.from_tokens(pieces, unk_token=piece(model.unk_id()),
                               pad_token=piece(model.pad_id()), bos_token=piece(model.bos_id()),
                               eos_token=piece(model.eos_id()))

    # ------------------------------------------------------------------ lookups
    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __contains__(self, token: object) -> bool:
        return token in self.token_to_idx

    def __iter__(self):
        return iter(self.idx_to_token)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocab):
            return NotImplemented
        return self._state() == other._state()

    __hash__ = None  # mutable-looking container; compare by value only

    def __repr__(self) -> str:
        specials = ", ".join(f"{name}={getattr(self, name + '_token')!r}"
                             for name in _SPECIAL_NAMES)
        return f"Vocab(size={len(self)}, {specials})"

    def _missing(self, token: str) -> int:
        if self.unk_id is None:
            raise KeyError(f"token {token!r} is not in the vocabulary and it has no unk token")
        return self.unk_id

    def __getitem__(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Id of one token, or a list of ids for a list/tuple of tokens."""
        if isinstance(tokens, str):
            index = self.token_to_idx.get(tokens)
            return self._missing(tokens) if index is None else index
        return self.to_ids(tokens).tolist()

    def to_ids(self, tokens: Iterable[str], count: int = -1) -> np.ndarray:
        """Ids of a flat token iterable as int32 ``[N]`` (``count`` = N if known, for speed)."""
        if self.unk_id is not None:
            return np.fromiter(map(self.token_to_idx.get, tokens, itertools.repeat(self.unk_id)),
                               np.int32, count=count)
        tokens = tokens if isinstance(tokens, Sequence) else list(tokens)
        ids = np.fromiter(map(self.token_to_idx.get, tokens, itertools.repeat(_MISSING)),
                          np.int32, count=count)
        missing = ids == _MISSING
        if missing.any():
            token = tokens[int(np.argmax(missing))]
            raise KeyError(f"token {token!r} is not in the vocabulary and it has no unk token")
        return ids

    def numericalize(self, batch: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Ids for a batch of token lists: a list of int32 ``[len_i]`` arrays.

        All tokens are looked up in one pass; the rows are views into one flat buffer.
        """
        lengths = np.fromiter(map(len, batch), np.int64, count=len(batch))
        ends = np.cumsum(lengths)
        total = int(ends[-1]) if len(batch) else 0
        try:
            flat = self.to_ids(itertools.chain.from_iterable(batch), total)
        except KeyError as err:
            row = next(i for i, sentence in enumerate(batch)
                       if any(token not in self.token_to_idx for token in sentence))
            raise KeyError(f"sample {row}: {err.args[0]}") from None
        return [flat[start:end] for start, end in zip((ends - lengths).tolist(), ends.tolist())]

    def to_tokens(self, ids: int | Iterable[int]) -> str | list[str]:
        """Token of one id, or a list of tokens for a sequence or array of ids."""
        size = len(self.idx_to_token)
        if isinstance(ids, int | np.integer):
            if not 0 <= ids < size:
                raise IndexError(f"id {int(ids)} is out of range for a vocab of size {size}")
            return self.idx_to_token[ids]
        ids = np.asarray(ids).ravel()
        bad = (ids < 0) | (ids >= size)
        if bad.any():
            raise IndexError(f"id {int(ids[np.argmax(bad)])} is out of range for a vocab of "
                             f"size {size}")
        return [self.idx_to_token[i] for i in ids.tolist()]

    # ------------------------------------------------------------------ persistence
    def _state(self) -> dict:
        state = {"idx_to_token": self.idx_to_token, "reserved_tokens": list(self.reserved_tokens)}
        state.update({f"{name}_token": getattr(self, f"{name}_token") for name in _SPECIAL_NAMES})
        return state

    def __getstate__(self) -> dict:
        return self._state()

    def __setstate__(self, state: dict) -> None:
        specials = {name: state[f"{name}_token"] for name in _SPECIAL_NAMES}
        self._build(state["idx_to_token"], specials, state["reserved_tokens"])

    def to_json(self) -> str:
        """The vocab as a JSON string (ids are the list order of ``idx_to_token``)."""
        return json.dumps(self._state(), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Vocab:
        """Inverse of ``to_json``; a GluonNLP vocab JSON is detected and read by
        ``from_gluonnlp_json``."""
        state = json.loads(text)
        if not isinstance(state, dict):
            raise ValueError(f"vocab JSON must be an object, got a {type(state).__name__}")
        if _is_gluonnlp(state):
            return cls.from_gluonnlp_json(state)
        missing = {"idx_to_token", "reserved_tokens"} - set(state)
        if missing:
            raise ValueError(f"vocab JSON lacks the key(s) {sorted(missing)}")
        vocab = cls.__new__(cls)
        vocab.__setstate__({f"{name}_token": None for name in _SPECIAL_NAMES} | state)
        return vocab

    @classmethod
    def from_gluonnlp_json(cls, text: str | Mapping[str, Any]) -> Vocab:
        """A vocab from GluonNLP's ``Vocab.to_json()`` (0.x), keeping ids and special roles.

        ``unknown_token`` becomes ``unk_token``; ``padding_token``, ``bos_token`` and
        ``eos_token`` (in ``identifiers_to_tokens`` or, in older files, top-level keys) become
        ``pad_token``, ``bos_token`` and ``eos_token``. Other special tokens (e.g.
        ``mask_token``) stay reserved tokens. ``token_to_idx`` must agree with ``idx_to_token``.
        """
        state = json.loads(text) if isinstance(text, str) else dict(text)
        idx_to_token = state.get("idx_to_token")
        if not isinstance(idx_to_token, list):
            raise ValueError("GluonNLP vocab JSON lacks the list 'idx_to_token'")
        token_to_idx = state.get("token_to_idx") or {}
        wrong = [(t, i) for t, i in token_to_idx.items()
                 if not (isinstance(i, int) and 0 <= i < len(idx_to_token)
                         and idx_to_token[i] == t)]
        if wrong or len(token_to_idx) not in (0, len(idx_to_token)):
            raise ValueError(f"GluonNLP vocab JSON: token_to_idx disagrees with idx_to_token "
                             f"(first disagreement: {wrong[:1] or 'the sizes'}); the file is "
                             "damaged or from GluonNLP < 0.7 (duplicate special tokens)")
        identifiers = dict(state.get("identifiers_to_tokens") or {})
        for name in ("padding_token", "bos_token", "eos_token"):
            if name in state and name not in identifiers:
                identifiers[name] = state[name]
        specials = {"unk": state.get("unknown_token"), "pad": identifiers.get("padding_token"),
                    "bos": identifiers.get("bos_token"), "eos": identifiers.get("eos_token")}
        roles = {t for t in specials.values() if t is not None}
        reserved = [t for t in state.get("reserved_tokens") or () if t not in roles]
        vocab = cls.__new__(cls)
        vocab._build(idx_to_token, specials, reserved)
        return vocab

    def save(self, path: str | os.PathLike) -> None:
        """Write ``to_json()`` to ``path`` atomically (temp file + rename)."""
        write_text_atomic(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        """Read a vocab written by ``save`` (or by GluonNLP's ``Vocab.to_json``)."""
        try:
            return cls.from_json(Path(path).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, ValueError) as err:
            raise ValueError(f"{path}: not a textkit vocab JSON file ({err})") from err
