"""Tokenizers: whitespace splitting and SentencePiece (train, save/load, batched encode/decode).

SentencePiece models trained here use the textkit special ids ``<unk>``=0, ``<pad>``=1,
``<bos>``=2, ``<eos>``=3, so ``tokenizer.vocab`` is a ``Vocab`` with the same ids as the model.
Batched encoding and decoding run in sentencepiece's own C++ thread pool.
"""

from __future__ import annotations

import io
import itertools
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from textkit._io import write_bytes_atomic
from textkit.vocab import Vocab

__all__ = ["SentencePieceTokenizer", "WhitespaceTokenizer"]

SPECIAL_PIECES = {"unk": "<unk>", "pad": "<pad>", "bos": "<bos>", "eos": "<eos>"}
SPECIAL_IDS = {"unk": 0, "pad": 1, "bos": 2, "eos": 3}


class WhitespaceTokenizer:
    """Split on runs of whitespace; ``decode`` joins with single spaces."""

    def encode(self, text: str | Sequence[str]) -> list[str] | list[list[str]]:
        """Tokens of one string, or a list of token lists for a list of strings."""
        if isinstance(text, str):
            return text.split()
        return [line.split() for line in text]

    def decode(self, tokens: Sequence[str] | Sequence[Sequence[str]]) -> str | list[str]:
        """Inverse of ``encode`` up to whitespace normalisation."""
        if len(tokens) == 0 or isinstance(tokens[0], str):
            return " ".join(tokens)
        return [" ".join(line) for line in tokens]

    def __repr__(self) -> str:
        return "WhitespaceTokenizer()"


def _special_id(name: str) -> property:
    """A ``SentencePieceTokenizer`` property: the ``<name>`` piece's id, None if it has none."""

    def get(self: SentencePieceTokenizer) -> int | None:
        special = getattr(self._sp, f"{name}_id")()
        return None if special < 0 else special

    return property(get, doc=f"Id of the {name} piece, or None where the model has none.")


def _model_path(model_prefix_or_path: str | os.PathLike) -> Path:
    path = Path(model_prefix_or_path)
    return path if path.suffix == ".model" else path.with_name(path.name + ".model")


class SentencePieceTokenizer:
    """A SentencePiece model: ``encode``/``decode`` single strings or batches.

    Args:
      model: path to a ``.model`` file, its serialized bytes, or a ``SentencePieceProcessor``.
      num_threads: threads for batched calls (-1: sentencepiece's default, all cores).
    """

    def __init__(self, model: str | os.PathLike | bytes | spm.SentencePieceProcessor,
                 num_threads: int = -1):
        if isinstance(model, spm.SentencePieceProcessor):
            self._sp = model
        elif isinstance(model, bytes):
            self._sp = spm.SentencePieceProcessor(model_proto=model)
        else:
            path = Path(model)
            if not path.is_file():
                raise FileNotFoundError(f"SentencePiece model {path} does not exist")
            try:
                self._sp = spm.SentencePieceProcessor(model_file=os.fspath(path))
            except (OSError, RuntimeError) as err:
                raise ValueError(f"{path}: not a SentencePiece model ({err})") from err
        self.num_threads = num_threads
        self._vocab: Vocab | None = None

    @classmethod
    def train(cls, sentences_or_files: str | os.PathLike | Iterable[Any],
              model_prefix_or_path: str | os.PathLike, vocab_size: int,
              model_type: str = "unigram", character_coverage: float = 1.0,
              user_defined_symbols: Sequence[str] = (), input_sentence_size: int = 0,
              shuffle_input_sentence: bool = True, seed: int | None = None,
              num_threads: int | None = None, verbose: bool = True,
              **trainer_options: Any) -> SentencePieceTokenizer:
        """Train a model and write it to ``<prefix>.model`` (or the given ``.model`` path).

        ``sentences_or_files``: a file path (str or ``PathLike``), a list of ``PathLike`` files,
        or an iterable of sentences (``str``). ``model_type``: ``"unigram"`` or ``"bpe"`` (also
        ``"char"``, ``"word"``). Extra ``trainer_options`` go to ``SentencePieceTrainer``.
        The model file is written atomically. Text without a non-blank sentence raises
        ``ValueError`` (naming the files when given files) before SentencePiece runs.
        """
        if model_type not in ("unigram", "bpe", "char", "word"):
            raise ValueError(f"model_type must be unigram, bpe, char or word, got {model_type!r}")
        options: dict[str, Any] = dict(
            vocab_size=vocab_size, model_type=model_type, character_coverage=character_coverage,
            user_defined_symbols=list(user_defined_symbols),
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=shuffle_input_sentence, minloglevel=1,
            **{f"{name}_id": SPECIAL_IDS[name] for name in SPECIAL_IDS},
            **{f"{name}_piece": SPECIAL_PIECES[name] for name in SPECIAL_PIECES},
        )
        if num_threads is not None:
            options["num_threads"] = num_threads
        if seed is not None:  # sentencepiece's seed is process-global
            spm.set_random_generator_seed(seed)
        options.update(trainer_options)
        if isinstance(sentences_or_files, str | os.PathLike):
            files = [sentences_or_files]
        elif isinstance(sentences_or_files, list | tuple) and sentences_or_files and all(
                isinstance(f, os.PathLike) for f in sentences_or_files):
            files = list(sentences_or_files)
        else:
            files = None
        if files is not None:
            for f in files:
                if not Path(f).is_file():
                    raise FileNotFoundError(f"training file {f} does not exist")
            if not any(map(_has_text, files)):
                raise ValueError(f"SentencePiece training files {[os.fspath(f) for f in files]} "
                                 "hold no non-blank line; check the train split")
            options["input"] = ",".join(os.fspath(f) for f in files)
        else:
            options["sentence_iterator"] = _require_text(sentences_or_files)
        start = time.perf_counter()
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(model_writer=model, **options)
        except RuntimeError as err:
            raise ValueError(f"SentencePiece training failed: {err}") from err
        path = _model_path(model_prefix_or_path)
        write_bytes_atomic(path, model.getvalue())
        tokenizer = cls(path, num_threads=-1 if num_threads is None else num_threads)
        if verbose:
            print(f"trained SentencePiece {model_type} model: {len(tokenizer)} pieces in "
                  f"{time.perf_counter() - start:.1f}s -> {path}", file=sys.stderr)
        return tokenizer

    @classmethod
    def load(cls, path: str | os.PathLike, num_threads: int = -1) -> SentencePieceTokenizer:
        """Load a ``.model`` file."""
        return cls(path, num_threads=num_threads)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the model to ``path`` (``.model`` added if missing) atomically."""
        path = _model_path(path)
        write_bytes_atomic(path, self._sp.serialized_model_proto())
        return path

    def __getstate__(self) -> dict:
        return {"model": self._sp.serialized_model_proto(), "num_threads": self.num_threads}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["model"], num_threads=state["num_threads"])

    def __len__(self) -> int:
        return self._sp.get_piece_size()

    def __repr__(self) -> str:
        return f"SentencePieceTokenizer(size={len(self)})"

    @property
    def processor(self) -> spm.SentencePieceProcessor:
        """The underlying ``SentencePieceProcessor``."""
        return self._sp

    @property
    def vocab(self) -> Vocab:
        """The model's pieces as a ``Vocab`` with the same ids (specials included)."""
        if self._vocab is None:
            self._vocab = Vocab.from_sentencepiece(self._sp)
        return self._vocab

    unk_id = _special_id("unk")
    pad_id = _special_id("pad")
    bos_id = _special_id("bos")
    eos_id = _special_id("eos")

    def encode(self, text: str | Sequence[str], out_type: type = int, add_bos: bool = False,
               add_eos: bool = False, enable_sampling: bool = False, nbest_size: int = -1,
               alpha: float = 0.1) -> list:
        """Ids (``out_type=int``) or pieces (``out_type=str``) of one string or a batch.

        With ``enable_sampling`` each call samples a segmentation (subword regularisation):
        unigram models draw from the ``nbest_size``-best lattice (-1: all) with smoothing
        ``alpha``; BPE models use BPE-dropout with probability ``alpha``.
        """
        if out_type not in (int, str):
            raise ValueError(f"out_type must be int or str, got {out_type!r}")
        if not isinstance(text, str):
            text = list(text)
        return self._sp.encode(text, out_type=out_type, add_bos=add_bos, add_eos=add_eos,
                               enable_sampling=enable_sampling, nbest_size=nbest_size,
                               alpha=alpha, num_threads=self.num_threads)

    def decode(self, ids_or_pieces: Sequence[Any]) -> str | list[str]:
        """Text of one id/piece sequence, or a list of texts for a batch (numpy arrays ok)."""
        if hasattr(ids_or_pieces, "tolist"):
            ids_or_pieces = ids_or_pieces.tolist()
        else:
            ids_or_pieces = [row.tolist() if hasattr(row, "tolist") else row
                             for row in ids_or_pieces]
        return self._sp.decode(ids_or_pieces, num_threads=self.num_threads)


def _has_text(path: str | os.PathLike) -> bool:
    """Whether the file holds a byte other than whitespace."""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return True
    return False


def _require_text(sentences: Iterable[Any]) -> Iterator[Any]:
    """``sentences`` unchanged, after checking that one of them is not blank."""
    iterator = iter(sentences)
    head = []
    for sentence in iterator:
        head.append(sentence)
        if sentence.strip() if isinstance(sentence, str | bytes) else sentence:
            return itertools.chain(head, iterator)
    raise ValueError(f"SentencePiece training text is empty ({len(head)} sentences, none with a "
                     "non-blank character); check the train split")
