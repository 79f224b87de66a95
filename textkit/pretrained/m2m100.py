"""M2M100 checkpoints (``model_type`` "m2m_100", ``M2M100ForConditionalGeneration``): the
``FAMILY`` that ``textkit.pretrained.seq2seq`` loads and saves generically.

The config map reads ``config.json`` as a ``Transformer`` with ``architecture="m2m_100"``:
pre-norm layers with a final norm after each stack, fairseq's sinusoidal positions offset by 2
(``positions="sinusoidal"``: textkit's table is fairseq's), embeddings scaled by
sqrt(d_model), ReLU, one shared table tied to the output, no logits bias, the decoder starting
from ``</s>``. The tokenizer (``M2M100Tokenizer``) is transformers' slow one:
``sentencepiece.bpe.model`` segments, ``vocab.json`` maps pieces to ids, and the language
tokens ``__xx__`` (``tokenizer_config.json``'s ``additional_special_tokens``, in order) take
the ids after the vocabulary (or, when it lists none, those of its ``language_codes``, as
transformers 5 saves it). A source is ``__src__ ... </s>``, a target ``__tgt__ ... </s>``;
translating forces the target language's token first (``forced_bos_id``).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from textkit._io import write_json_atomic
from textkit.models.transformer import TransformerConfig
from textkit.pretrained import seq2seq
from textkit.pretrained.errors import (
    LanguageError,
    MissingFileError,
    PretrainedError,
    UnsupportedArchitectureError,
)
from textkit.pretrained.files import read_json_object

__all__ = ["FAMILY", "LANGUAGE_CODES", "LanguageTokenizer", "M2M100Tokenizer", "NllbTokenizer",
           "hf_config", "m2m100_config"]

LANGUAGE_CODES = {
    "m2m100": tuple(
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd "
        "gl gu ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg "
        "mk ml mn mr ms my ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw "
        "ta th tl tn tr uk ur uz vi wo xh yi yo zh zu".split()),
    "wmt21": ("en", "ha", "is", "ja", "cs", "ru", "zh", "de"),
}
"""``tokenizer_config.json``'s ``language_codes`` -> the codes in fairseq's order (the published
M2M100 tokenizers give ``__xx__`` the ids after the vocabulary in this order)."""
LAYER_NORM_EPSILON = 1e-5
POSITION_OFFSET = 2          # fairseq's padding_idx + 1
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
class NllbTokenizer(LanguageTokenizer):
    """NLLB-200's tokenizer, as transformers' ``NllbTokenizerFast``: ``tokenizer.json`` (a
    ``tokenizers.Tokenizer``) segments and maps pieces, the language codes (``eng_Latn``, ...)
    are its special added tokens; a text is ``lang ... </s>`` (``legacy``: ``... </s> lang``,
    ``legacy_behaviour`` in ``tokenizer_config.json``)."""

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


# ------------------------------------------------------------------------------------ config
def m2m100_config(hf: Mapping[str, Any], root: str | os.PathLike = ".",
                  **overrides: Any) -> TransformerConfig:
    """``TransformerConfig`` of an M2M100 ``config.json`` dict (``UnsupportedArchitectureError``
    names the first option textkit does not implement); ``overrides`` replace fields."""
    root = Path(root)
    activation = seq2seq.check_fairseq_config(hf, root, "M2M100", "relu", {})
    vocab = int(hf["vocab_size"])
    options = dict(
        src_vocab_size=vocab, tgt_vocab_size=vocab, share_embeddings=True,
        tie_output=bool(hf.get("tie_word_embeddings", True)), d_model=int(hf["d_model"]),
        num_heads=int(hf["encoder_attention_heads"]), d_ff=int(hf["encoder_ffn_dim"]),
        num_encoder_layers=int(hf["encoder_layers"]),
        num_decoder_layers=int(hf["decoder_layers"]), dropout=float(hf.get("dropout", 0.1)),
        attention_dropout=float(hf.get("attention_dropout", 0.0)), pre_norm=True,
        final_norm=True, positions="sinusoidal", position_offset=POSITION_OFFSET,
        max_len=int(hf.get("max_position_embeddings", 1024)), activation=activation,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        scale_embedding=bool(hf.get("scale_embedding", True)), final_logits_bias=False,
        decoder_start_id=int(hf.get("decoder_start_token_id", 2)),
        pad_id=int(hf.get("pad_token_id", 1)), architecture="m2m_100")
    options.update(overrides)
    return TransformerConfig(**options)


def hf_config(config: TransformerConfig, target: M2M100Tokenizer) -> dict[str, Any]:
    """The ``config.json`` dict of an M2M100 ``TransformerConfig`` (inverse of
    ``m2m100_config``)."""
    for field, want in (("pre_norm", True), ("has_final_norm", True), ("positions", "sinusoidal"),
                        ("position_offset", POSITION_OFFSET), ("embedding_norm", False),
                        ("final_logits_bias", False), ("share_embeddings", True),
                        ("layer_norm_epsilon", LAYER_NORM_EPSILON)):
        if getattr(config, field) != want:
            raise UnsupportedArchitectureError(
                f"TransformerConfig.{field}={getattr(config, field)!r} cannot be written as an "
                f"M2M100 checkpoint (M2M100 has {field}={want!r})")
    return {
        "vocab_size": config.src_vocab_size, "d_model": config.d_model,
        "encoder_layers": config.num_encoder_layers, "decoder_layers": config.num_decoder_layers,
        "encoder_attention_heads": config.num_heads, "decoder_attention_heads": config.num_heads,
        "encoder_ffn_dim": config.d_ff, "decoder_ffn_dim": config.d_ff,
        "activation_function": config.activation, "dropout": config.dropout,
        "attention_dropout": config.attention_dropout, "activation_dropout": 0.0,
        "max_position_embeddings": config.max_len, "scale_embedding": config.scale_embedding,
        "tie_word_embeddings": config.tie_output, "pad_token_id": config.pad_id,
        "bos_token_id": target.begin_id, "eos_token_id": target.eos_id,
        "decoder_start_token_id": config.decoder_start_id, "is_encoder_decoder": True,
    }


# ----------------------------------------------------------------------- tokenizer settings
def _languages(root: Path) -> tuple[str, ...]:
    """The language codes of ``root``'s tokenizer: ``tokenizer_config.json``'s
    ``additional_special_tokens`` (``__xx__`` tokens, in order; else those of
    ``special_tokens_map.json``), else its ``language_codes`` list name ("m2m100", the
    default, or "wmt21"), as transformers' ``M2M100Tokenizer`` reads them."""
    settings: dict[str, Any] = {}
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = root / name
        if not path.is_file():
            continue
        found = read_json_object(path)
        settings = settings or found
        tokens = [t.get("content") if isinstance(t, dict) else t
                  for t in found.get("additional_special_tokens") or []]
        codes = tuple(t[2:-2] for t in tokens
                      if isinstance(t, str) and t.startswith("__") and t.endswith("__"))
        if codes:
            return codes
    name = settings.get("language_codes", "m2m100")
    if name not in LANGUAGE_CODES:
        raise UnsupportedArchitectureError(
            f"{root / 'tokenizer_config.json'}: language_codes={name!r} is not supported: "
            f"expected one of {sorted(LANGUAGE_CODES)}")
    return LANGUAGE_CODES[name]


NLLB_CODE = re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$")
"""What an NLLB language code looks like (``eng_Latn``)."""


def _nllb_tokenizer(root: Path, settings: Mapping[str, Any],
                    start: int) -> NllbTokenizer:
    """The ``NllbTokenizer`` of ``root``'s ``tokenizer.json``; its language codes are the
    settings' ``additional_special_tokens`` (else the added special tokens shaped like
    ``eng_Latn``, by id)."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
    except Exception as err:  # tokenizers raises a bare Exception
        raise PretrainedError(f"{root / 'tokenizer.json'}: not a tokenizers file, or damaged "
                              f"({err})") from None
    listed = [t.get("content") if isinstance(t, dict) else t
              for t in settings.get("additional_special_tokens")
              or settings.get("extra_special_tokens") or []]
    codes = tuple(t for t in listed if isinstance(t, str) and NLLB_CODE.match(t))
    if not codes:
        added = tokenizer.get_added_tokens_decoder()
        codes = tuple(added[i].content for i in sorted(added)
                      if added[i].special and NLLB_CODE.match(added[i].content))
    if not codes:
        raise PretrainedError(f"{root / 'tokenizer.json'}: no language tokens (eng_Latn, ...): "
                              f"not an NLLB tokenizer")
    return NllbTokenizer(where=root, tokenizer=tokenizer, languages=codes,
                         decoder_start_id=start,
                         legacy=bool(settings.get("legacy_behaviour", False)))


def load_tokenizers(root: Path, config: TransformerConfig) -> tuple[LanguageTokenizer,
                                                                     LanguageTokenizer]:
    """(source, target) tokenizers of ``root``, no language chosen yet: NLLB's
    (``tokenizer.json`` with a ``tokenizer_class`` of NLLB) or M2M100's (``vocab.json`` +
    ``sentencepiece.bpe.model``); ``MissingFileError`` naming the files looked for."""
    config_path = root / "tokenizer_config.json"
    settings = read_json_object(config_path) if config_path.is_file() else {}
    nllb = str(settings.get("tokenizer_class", "")).startswith("Nllb")
    if nllb and (root / "tokenizer.json").is_file():
        source: LanguageTokenizer = _nllb_tokenizer(root, settings, config.decoder_start_id)
    elif (root / "vocab.json").is_file() and (root / "sentencepiece.bpe.model").is_file():
        source = M2M100Tokenizer(where=root, spm_path=root / "sentencepiece.bpe.model",
                                 vocab=read_json_object(root / "vocab.json"),
                                 languages=_languages(root),
                                 decoder_start_id=config.decoder_start_id)
    else:
        raise MissingFileError(
            f"{root} has no tokenizer textkit reads for model_type m2m_100: expected "
            f"tokenizer.json with tokenizer_config.json's tokenizer_class NllbTokenizer(Fast) "
            f"(NLLB-200), or vocab.json + sentencepiece.bpe.model (M2M100)")
    return source, dataclasses.replace(source, side="target")


def save_tokenizers(source: LanguageTokenizer, target: LanguageTokenizer, directory: Path,
                    config: TransformerConfig) -> None:
    """The tokenizer's files, as transformers reads them: NLLB's ``tokenizer.json`` and
    ``tokenizer_config.json``; M2M100's ``vocab.json``, ``sentencepiece.bpe.model`` and a
    ``tokenizer_config.json``."""
    if isinstance(source, NllbTokenizer):
        source.tokenizer.save(str(directory / "tokenizer.json"))
        write_json_atomic(directory / "tokenizer_config.json", {
            "tokenizer_class": "NllbTokenizer", "bos_token": "<s>", "eos_token": "</s>",
            "sep_token": "</s>", "cls_token": "<s>", "pad_token": "<pad>",
            "unk_token": "<unk>", "mask_token": "<mask>",
            "additional_special_tokens": list(source.languages),
            "legacy_behaviour": source.legacy, "model_max_length": config.max_len})
        return
    write_json_atomic(directory / "vocab.json", dict(source.vocab))
    shutil.copyfile(source.spm_path, directory / "sentencepiece.bpe.model")
    write_json_atomic(directory / "tokenizer_config.json", {
        "tokenizer_class": "M2M100Tokenizer", "bos_token": "<s>", "eos_token": "</s>",
        "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
        "additional_special_tokens": [f"__{code}__" for code in source.languages],
        "language_codes": next((name for name, codes in LANGUAGE_CODES.items()
                                if codes == source.languages), "m2m100"),
        "model_max_length": config.max_len})


def generation(config: TransformerConfig, target: M2M100Tokenizer) -> dict[str, Any]:
    """The ``generation_config.json`` transformers writes for an M2M100 model."""
    return {"bos_token_id": target.begin_id, "decoder_start_token_id": config.decoder_start_id,
            "eos_token_id": target.eos_id, "pad_token_id": config.pad_id}


FAMILY = seq2seq.Seq2SeqFamily(
    model_type="m2m_100", hf_class="M2M100ForConditionalGeneration", architecture="m2m_100",
    config=m2m100_config, hf_config=hf_config, weight_map=seq2seq.fairseq_weight_map,
    vocab_paths=("src_embed", "tgt_embed", "output"),
    tokenizer_files=(), load_tokenizers=load_tokenizers,
    save_tokenizers=save_tokenizers, tokenizer_type=LanguageTokenizer, generation=generation,
    layout=seq2seq.embedding_layout, named=seq2seq.tied_names)
"""M2M100 as a ``seq2seq.Seq2SeqFamily``."""
