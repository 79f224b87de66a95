"""Encoder-decoder checkpoints (Hugging Face layout) in and out of textkit's one ``Transformer``:
one generic ``load`` and ``save_pretrained``; a family is a ``Seq2SeqFamily``, declared as
data (a config map each way, a weight map, its tokenizer settings), as CTranslate2's converter
specs are.

``load(family, dir, config)`` checks ``config.json``'s ``model_type`` and the family's
tokenizer files, reads the tensors (one at a time: ``files.read_tensors``), maps
``config.json`` to a ``TransformerConfig`` (``architecture`` = the family's), loads the
tokenizers, checks both vocabularies against the embeddings and walks the weight map
(``weights.read_params``). ``save_pretrained(family, model, params, tokenizers, dir)`` is the
inverse, written atomically. ``textkit.pretrained.load_pretrained`` / ``save_pretrained`` pick
the family by ``model_type`` / by ``TransformerConfig.architecture``.

A family's tokenizers follow ``Seq2SeqTokenizer``: the decoder's first input is
``decoder_start_id`` (named as such, not ``bos_id``), and every change of setting returns a
configured copy (``configured``, ``for_languages``); nothing is mutated after loading.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from textkit._io import atomic_dir, write_json_atomic
from textkit.models.layers import ACTIVATIONS
from textkit.models.transformer import Transformer, TransformerConfig
from textkit.pretrained.errors import (
    MissingFileError,
    PretrainedError,
    UnsupportedArchitectureError,
    VocabSizeMismatchError,
    WrongFamilyError,
)
from textkit.pretrained.files import read_tensors, unsupported, write_tensors_file
from textkit.pretrained.result import Pretrained
from textkit.pretrained.weights import (
    SAME,
    Entry,
    check_vocab_size,
    expected_params,
    heads_bias,
    linear,
    out_proj,
    read_params,
    write_tensors,
)

__all__ = ["Seq2SeqFamily", "Seq2SeqTokenizer", "fairseq_options", "embedding_layout",
           "fairseq_hf_config", "fairseq_weight_map",
           "load", "save_pretrained", "tied_names"]

Tensors = Mapping[str, np.ndarray]


class Seq2SeqTokenizer(Protocol):
    """One side (source or target) of an encoder-decoder checkpoint's tokenizer."""

    pad_id: int
    eos_id: int
    decoder_start_id: int | None
    """The decoder's first input (the target side's; None where the model config says)."""

    def __len__(self) -> int:
        """The vocabulary size (largest id + 1)."""

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of every text."""

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Text of every id list, special ids skipped."""

    def configured(self, **settings: Any) -> Seq2SeqTokenizer:
        """A copy with ``settings`` changed (e.g. ``add_eos=False`` for training targets)."""

    def for_languages(self, src_lang: str | None,
                      tgt_lang: str | None) -> Seq2SeqTokenizer:
        """A copy that encodes ``src_lang`` text for ``tgt_lang`` output (a family without
        language codes refuses any code by name)."""


@dataclasses.dataclass(frozen=True)
class Seq2SeqFamily:
    """One encoder-decoder checkpoint family, as data.

    ``model_type`` / ``hf_class``: ``config.json``'s ``model_type`` and the transformers class
    written in ``architectures``; ``architecture``: ``TransformerConfig.architecture``.
    ``config(hf, root, **fields)`` -> ``TransformerConfig`` (``fields``: ``layout(tensors)``
    then the caller's overrides); ``hf_config(config, target)`` its inverse.
    ``weight_map(config)``: the ``Entry``s of the shared walker; ``vocab_paths``: params whose
    shape follows a vocabulary. ``layout(tensors)``: config fields the tensors decide (shared
    or tied embeddings); ``named(tensors, config)``: the tensors under every name transformers
    expects (tied copies). Tokenizers: ``tokenizer_files`` (each must be there),
    ``load_tokenizers(root, config)`` -> (source, target), ``save_tokenizers(source,
    target, dir, config)``, ``tokenizer_type`` (what ``save_pretrained`` accepts).
    ``generation(config, target)``: the ``generation_config.json`` written by default.
    ``wrong_family``: the error for a checkpoint of another ``model_type``;
    ``checks(tensors, root, config)``: the family's own checks of the tensors against the
    config (raising a ``PretrainedError`` that names both), before the walk.
    """

    model_type: str
    hf_class: str
    architecture: str
    config: Callable[..., TransformerConfig]
    hf_config: Callable[[TransformerConfig, Any], dict[str, Any]]
    weight_map: Callable[[TransformerConfig], list[Entry]]
    vocab_paths: tuple[str, ...]
    tokenizer_files: tuple[str, ...]
    load_tokenizers: Callable[[Path, TransformerConfig], tuple[Any, Any]]
    save_tokenizers: Callable[[Any, Any, Path, TransformerConfig], None]
    tokenizer_type: type
    generation: Callable[[TransformerConfig, Any], dict[str, Any]]
    layout: Callable[[Tensors], dict[str, Any]] = lambda tensors: {}
    named: Callable[[dict[str, np.ndarray], TransformerConfig],
                    dict[str, np.ndarray]] = lambda tensors, config: tensors
    wrong_family: type[WrongFamilyError] = WrongFamilyError
    checks: Callable[[Tensors, Path, TransformerConfig], None] = lambda tensors, root, c: None


# ------------------------------------------------------------- the fairseq-descended layout
def _layer_entries(side: str, i: int, heads: int, cross: bool) -> Iterator[tuple]:
    """(textkit path, [hf keys], transform) of layer ``i`` of the ``side`` stack ("encoder" or
    "decoder", ``cross``: with cross-attention)."""
    hf, tk = f"model.{side}.layers.{i}", f"{side}_{i}"
    qkv = [f"{hf}.self_attn.{n}_proj" for n in "qkv"]
    yield (tk, "self_attention", "qkv", "kernel"), [f"{k}.weight" for k in qkv], linear(heads)
    yield (tk, "self_attention", "qkv", "bias"), [f"{k}.bias" for k in qkv], heads_bias(heads)
    yield (tk, "self_attention", "out", "kernel"), [f"{hf}.self_attn.out_proj.weight"], \
        out_proj(heads)
    yield (tk, "self_attention", "out", "bias"), [f"{hf}.self_attn.out_proj.bias"], SAME
    norms = [("self_norm", "self_attn_layer_norm"), ("ff_norm", "final_layer_norm")]
    if cross:
        ea = f"{hf}.encoder_attn"
        yield (tk, "cross_attention", "query", "kernel"), [f"{ea}.q_proj.weight"], linear(heads)
        yield (tk, "cross_attention", "query", "bias"), [f"{ea}.q_proj.bias"], heads_bias(heads)
        kv = [f"{ea}.{n}_proj" for n in "kv"]
        yield (tk, "cross_attention", "key_value", "kernel"), [f"{k}.weight" for k in kv], \
            linear(heads)
        yield (tk, "cross_attention", "key_value", "bias"), [f"{k}.bias" for k in kv], \
            heads_bias(heads)
        yield (tk, "cross_attention", "out", "kernel"), [f"{ea}.out_proj.weight"], \
            out_proj(heads)
        yield (tk, "cross_attention", "out", "bias"), [f"{ea}.out_proj.bias"], SAME
        norms.append(("cross_norm", "encoder_attn_layer_norm"))
    for name, fc in (("wi", "fc1"), ("wo", "fc2")):
        yield (tk, "feed_forward", name, "kernel"), [f"{hf}.{fc}.weight"], linear(None)
        yield (tk, "feed_forward", name, "bias"), [f"{hf}.{fc}.bias"], SAME
    for name, hf_name in norms:
        yield (tk, name, "norm", "scale"), [f"{hf}.{hf_name}.weight"], SAME
        yield (tk, name, "norm", "bias"), [f"{hf}.{hf_name}.bias"], SAME



def fairseq_weight_map(config: TransformerConfig) -> list[Entry]:
    """Every ``Entry`` of ``config`` under the names the fairseq-descended families write
    (Marian, BART, mBART, M2M100, NLLB): the shared / separate embeddings, the untied head,
    ``final_logits_bias``, learned positions (``model.{side}.embed_positions``), the embedding
    norms (``layernorm_embedding``), the final norms (``layer_norm``) and every layer; the
    config's axes say which are there."""
    heads = config.num_heads
    shared, enc, dec = (f"model.{n}.weight" for n in
                        ("shared", "encoder.embed_tokens", "decoder.embed_tokens"))
    entries: list[tuple] = [(("src_embed", "embedding"), [[enc, shared]], SAME)]
    if not config.share_embeddings:
        entries.append((("tgt_embed", "embedding"), [[dec, shared]], SAME))
    if not config.tie_output:
        entries.append((("output", "kernel"), [["lm_head.weight"]], linear(None)))
    if config.final_logits_bias:
        entries.append((("final_logits_bias",), ["final_logits_bias"],
                        (lambda b: b.reshape(-1), lambda b: b.reshape(1, -1))))
    for side, tk in (("encoder", "src"), ("decoder", "tgt")):
        if config.positions == "learned":
            entries.append(((f"{tk}_positions", "embedding"),
                            [f"model.{side}.embed_positions.weight"], SAME))
        norms = [(f"{tk}_embed_norm", "layernorm_embedding")] if config.embedding_norm else []
        norms += [(f"{side}_norm", "layer_norm")] if config.has_final_norm else []
        for name, hf_name in norms:
            entries.append(((name, "norm", "scale"), [f"model.{side}.{hf_name}.weight"], SAME))
            if config.norm_bias:
                entries.append(((name, "norm", "bias"), [f"model.{side}.{hf_name}.bias"], SAME))
    for side, count in (("encoder", config.num_encoder_layers),
                        ("decoder", config.num_decoder_layers)):
        for i in range(count):
            entries += _layer_entries(side, i, heads, side == "decoder")
    return [Entry(*entry) for entry in entries]


def fairseq_options(hf: Mapping[str, Any], root: Path, family: str,
                    default_activation: str, fixed: Mapping[str, bool]) -> dict[str, Any]:
    """The ``TransformerConfig`` fields every fairseq-descended ``config.json`` gives the same
    way (one shared vocabulary, sizes, rates, the activation), after its checks: equal encoder
    and decoder heads and feed-forward sizes, a known activation, and each key of ``fixed``
    (when there) at the value the family has; ``UnsupportedArchitectureError`` names the key
    and value."""
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"),
                     ("encoder_ffn_dim", "decoder_ffn_dim")):
        if hf.get(enc) != hf.get(dec):
            raise unsupported(root, dec, hf.get(dec), f"textkit needs {enc} == {dec} "
                                                       f"({hf.get(enc)})")
    activation = hf.get("activation_function", default_activation)
    if activation not in ACTIVATIONS:
        raise unsupported(root, "activation_function", activation,
                          f"expected one of {sorted(ACTIVATIONS)}")
    for key, expected in fixed.items():
        if key in hf and bool(hf[key]) != expected:
            raise unsupported(root, key, hf[key], f"{family} (and textkit's reading of it) "
                                                  f"has {expected}")
    vocab = int(hf["vocab_size"])
    return dict(
        src_vocab_size=vocab, tgt_vocab_size=vocab, share_embeddings=True,
        tie_output=bool(hf.get("tie_word_embeddings", True)), d_model=int(hf["d_model"]),
        num_heads=int(hf["encoder_attention_heads"]), d_ff=int(hf["encoder_ffn_dim"]),
        num_encoder_layers=int(hf["encoder_layers"]),
        num_decoder_layers=int(hf["decoder_layers"]), dropout=float(hf.get("dropout", 0.1)),
        attention_dropout=float(hf.get("attention_dropout", 0.0)),
        max_len=int(hf.get("max_position_embeddings", 1024)), activation=activation,
        decoder_start_id=int(hf.get("decoder_start_token_id", 2)),
        pad_id=int(hf.get("pad_token_id", 1)))


def fairseq_hf_config(config: TransformerConfig, family: str,
                      fixed: Mapping[str, Any]) -> dict[str, Any]:
    """The ``config.json`` keys every fairseq-descended family writes, after checking that
    ``config`` has each field of ``fixed`` at the value the family has
    (``UnsupportedArchitectureError`` naming the field otherwise)."""
    for field, want in fixed.items():
        if getattr(config, field) != want:
            raise UnsupportedArchitectureError(
                f"TransformerConfig.{field}={getattr(config, field)!r} cannot be written as a "
                f"{family} checkpoint ({family} has {field}={want!r})")
    return {
        "d_model": config.d_model, "encoder_layers": config.num_encoder_layers,
        "decoder_layers": config.num_decoder_layers, "encoder_attention_heads": config.num_heads,
        "decoder_attention_heads": config.num_heads, "encoder_ffn_dim": config.d_ff,
        "decoder_ffn_dim": config.d_ff, "activation_function": config.activation,
        "dropout": config.dropout, "attention_dropout": config.attention_dropout,
        "activation_dropout": 0.0, "max_position_embeddings": config.max_len,
        "scale_embedding": config.scale_embedding, "pad_token_id": config.pad_id,
        "is_encoder_decoder": True}


def embedding_layout(tensors: Tensors) -> dict[str, bool]:
    """``share_embeddings`` / ``tie_output`` as the tensors are (transformers 5 writes separate
    encoder, decoder and output matrices when ``tie_word_embeddings`` is false, even with
    ``share_encoder_decoder_embeddings``): equal matrices are one table."""
    def get(name: str) -> np.ndarray | None:
        return tensors.get(f"{name}.weight")

    enc = get("model.encoder.embed_tokens")
    enc = get("model.shared") if enc is None else enc
    dec = get("model.decoder.embed_tokens")
    dec = enc if dec is None else dec
    head = get("lm_head")
    same = lambda a, b: a is b or (a.shape == b.shape and np.array_equal(a, b))  # noqa: E731
    return {"share_embeddings": enc is not None and same(enc, dec),
            "tie_output": head is None or same(head, dec)}


def tied_names(tensors: dict[str, np.ndarray],
               config: TransformerConfig) -> dict[str, np.ndarray]:
    """The walker's tensors with the embeddings under every name transformers ties
    (transformers 5 ties nothing when ``tie_word_embeddings`` is false: every name gets a
    copy)."""
    enc, dec = tensors["model.encoder.embed_tokens.weight"], tensors.get(
        "model.decoder.embed_tokens.weight", tensors["model.encoder.embed_tokens.weight"])
    if config.share_embeddings and config.tie_output:
        return {"model.shared.weight": tensors.pop("model.encoder.embed_tokens.weight"),
                **tensors}
    tensors.update({"model.shared.weight": enc.copy(), "model.decoder.embed_tokens.weight": dec,
                    "lm_head.weight": tensors.get("lm_head.weight", dec.copy())})
    return tensors


def _pick(tensors: Tensors) -> Callable[[Any], np.ndarray | None]:
    """``pick(key)``: the tensor under ``key`` (or the first present of a list of alternative
    names); None when absent."""
    def pick(key: str | list[str]) -> np.ndarray | None:
        names = [key] if isinstance(key, str) else key
        return next((np.asarray(tensors[n]) for n in names if n in tensors), None)

    return pick


def load(family: Seq2SeqFamily, root: Path, hf: Mapping[str, Any],
         **overrides: Any) -> Pretrained:
    """The checkpoint directory ``root`` of ``family`` whose ``config.json`` is ``hf``:
    ``Pretrained("translation", Transformer, params, source tokenizer, target tokenizer)``,
    params numpy arrays in the params' dtypes. ``overrides`` replace config fields (e.g.
    ``policy="mixed_bfloat16"``, ``dropout=0.1``)."""
    if hf.get("model_type") != family.model_type:
        raise family.wrong_family(
            f"{root / 'config.json'}: model_type is {hf.get('model_type')!r}, not "
            f"{family.model_type!r} (architectures: {hf.get('architectures')})")
    missing = [name for name in family.tokenizer_files if not (root / name).is_file()]
    if missing:
        raise MissingFileError(f"{root} is missing {', '.join(missing)} (a {family.model_type} "
                               f"checkpoint directory holds {', '.join(family.tokenizer_files)} "
                               f"next to config.json and model.safetensors)")
    tensors = read_tensors(root)
    try:
        config = family.config(hf, root, **{**family.layout(tensors), **overrides})
    except (KeyError, TypeError) as err:
        raise PretrainedError(f"{root / 'config.json'}: missing or malformed key {err} of a "
                              f"{family.model_type} config.json") from None
    family.checks(tensors, root, config)
    source, target = family.load_tokenizers(root, config)
    check_vocab_size(root, "the source vocabulary", len(source), config.src_vocab_size)
    check_vocab_size(root, "the target vocabulary", len(target), config.tgt_vocab_size)
    if target.pad_id != config.pad_id:
        raise VocabSizeMismatchError(f"{root}: config.json pad_token_id={config.pad_id} but the "
                                     f"target vocabulary puts its pad token at "
                                     f"{target.pad_id}")
    model = Transformer(config)
    dummy = np.full((1, 8), config.pad_id, np.int32)
    params = read_params(family.weight_map(config), _pick(tensors),
                         expected_params(model, dummy, dummy), root=root,
                         says=f"config.json says {family.model_type}",
                         vocab_paths=family.vocab_paths)
    return Pretrained("translation", model, params, source, target)


def save_pretrained(family: Seq2SeqFamily, model: Transformer, params: Any,
                    tokenizers: tuple[Any, Any], path: str | os.PathLike, *,
                    generation: Mapping[str, Any] | None = None) -> Path:
    """Write ``model`` / ``params`` / ``(source, target)`` tokenizers as a ``family``
    checkpoint directory that transformers loads (replaced atomically). ``generation``:
    ``generation_config.json`` (default: the family's)."""
    config = model.config
    source, target = tokenizers
    kind = family.tokenizer_type
    if not isinstance(source, kind) or not isinstance(target, kind):
        raise TypeError(f"save_pretrained writes {kind.__name__} pairs for {family.model_type} "
                        f"(from load_pretrained); got {type(source).__name__} and "
                        f"{type(target).__name__}")
    if config.architecture != family.architecture:
        raise UnsupportedArchitectureError(
            f"a TransformerConfig of architecture {config.architecture!r} cannot be written as "
            f"a {family.model_type} checkpoint")
    check_vocab_size("save_pretrained", "the source tokenizer", len(source),
                     config.src_vocab_size)
    check_vocab_size("save_pretrained", "the target tokenizer", len(target),
                     config.tgt_vocab_size)
    hf = {"model_type": family.model_type, "architectures": [family.hf_class],
          **family.hf_config(config, target)}
    tensors = family.named(write_tensors(family.weight_map(config), params), config)
    with atomic_dir(path) as staging:
        write_tensors_file(staging / "model.safetensors", tensors)
        write_json_atomic(staging / "config.json", hf)
        write_json_atomic(staging / "generation_config.json",
                          dict(generation or family.generation(config, target)))
        family.save_tokenizers(source, target, staging, config)
    return Path(path)
