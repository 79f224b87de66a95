"""sentence-transformers directories and ``embed_texts`` (no network, no torch).

The fixtures in ``tests/fixtures/sentence`` were made by ``tools/make_sentence_fixtures.py``
with sentence-transformers: ``bert_mean_normalize`` (its current layout: mean pooling,
Normalize, ``model_max_length`` 24) and ``bert_cls_dense`` (the older layout: the Transformer
in ``0_Transformer/``, CLS pooling booleans, a tanh Dense, ``max_seq_length`` 20), each with
``reference.npy``, ``SentenceTransformer.encode`` of ``texts.json``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from textkit.models import Encoder, SentenceEncoder, SentenceEncoderConfig
from textkit.models.sentence_encoder import SentenceDense
from textkit.pretrained import (
    MissingFileError,
    Pretrained,
    UnsupportedArchitectureError,
    embed_texts,
    length_buckets,
    load_pretrained,
    save_pretrained,
)
from textkit.pretrained.embed import _embed

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sentence"
NAMES = ("bert_mean_normalize", "bert_cls_dense")
TEXTS = json.loads((FIXTURES / "texts.json").read_text("utf-8"))
ATOL = 1e-5

_LOADED: dict[str, Pretrained] = {}


def loaded(name: str) -> Pretrained:
    if name not in _LOADED:
        _LOADED[name] = load_pretrained(FIXTURES / name)
    return _LOADED[name]


def test_fixtures_are_small():
    assert sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file()) < 500_000


def test_the_layout_loads_as_one_typed_result_with_the_modules_on_the_config():
    pretrained = load_pretrained(FIXTURES / "bert_mean_normalize")
    assert pretrained.kind == "sentence_encoder" and pretrained.target_tokenizer is None
    model, params = pretrained.model, pretrained.params
    assert isinstance(model, SentenceEncoder)
    c = model.config
    assert (c.pooling, c.dense, c.normalize, c.max_seq_length) == (("mean",), (), True, 24)
    assert c.encoder.head == "model" and c.encoder.hidden_size == 32
    pretrained = loaded("bert_cls_dense")
    model, params = pretrained.model, pretrained.params
    c = model.config
    assert (c.pooling, c.dense, c.normalize, c.max_seq_length) == (
        ("cls",), (SentenceDense(16, True, "tanh"),), False, 20)
    assert params["dense_0"]["kernel"].shape == (32, 16)
    assert set(params) == {"encoder", "dense_0"}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("batch_size", [32, 3])
def test_vectors_match_sentence_transformers(name, batch_size):
    vectors = embed_texts(loaded(name), TEXTS, batch_size=batch_size)
    want = np.load(FIXTURES / name / "reference.npy")
    assert vectors.dtype == np.float32 and vectors.shape == want.shape
    np.testing.assert_allclose(vectors, want, rtol=0, atol=ATOL)


def test_model_apply_gives_the_same_vectors_unbatched():
    pretrained = loaded("bert_mean_normalize")
    model, params, tokenizer = pretrained.model, pretrained.params, pretrained.tokenizer
    batch = tokenizer.encode_batch(TEXTS[:4], max_length=24)
    out = model.apply({"params": params}, **{k: jnp.asarray(v) for k, v in batch.items()})
    assert out["last_hidden_state"].shape == (4, batch["input_ids"].shape[1], 32)
    want = np.load(FIXTURES / "bert_mean_normalize" / "reference.npy")[:4]
    np.testing.assert_allclose(np.asarray(out["sentence_embedding"]), want, rtol=0, atol=ATOL)


@pytest.mark.slow
def test_compiled_shapes_are_bounded_and_order_is_kept():
    assert length_buckets(128) == (8, 16, 32, 64, 128)
    assert length_buckets(20) == (8, 16, 20)
    assert length_buckets(8) == (8,)
    assert length_buckets(5) == (5,)
    loaded_ = loaded("bert_mean_normalize")
    before = _embed._cache_size()
    texts = TEXTS * 3
    vectors = embed_texts(loaded_, texts, batch_size=4, normalize=False)
    assert _embed._cache_size() - before <= len(length_buckets(24))
    again = embed_texts(loaded_, texts[::-1], batch_size=4, normalize=False)
    np.testing.assert_allclose(again[::-1], vectors, rtol=0, atol=ATOL)
    assert _embed._cache_size() - before <= len(length_buckets(24))
    norms = np.linalg.norm(vectors, axis=1)
    assert not np.allclose(norms, 1.0)        # normalize=False overrode the directory's
    assert embed_texts(loaded_, []).shape == (0, 32)


def test_a_bare_encoder_is_pooled_as_asked():
    pretrained = load_pretrained(FIXTURES / "bert_cls_dense" / "0_Transformer")
    model, params, tokenizer = pretrained.model, pretrained.params, pretrained.tokenizer
    assert isinstance(model, Encoder)
    texts = TEXTS[:5]
    batch = tokenizer.encode_batch(texts)
    hidden = np.asarray(model.apply({"params": params}, **batch)["last_hidden_state"])
    mask = batch["attention_mask"][..., None]
    mean = (hidden * mask).sum(1) / mask.sum(1)
    np.testing.assert_allclose(embed_texts(pretrained, texts), mean,
                               rtol=0, atol=ATOL)
    cls = embed_texts(pretrained, texts, pooling="cls", normalize=True)
    want = hidden[:, 0] / np.linalg.norm(hidden[:, 0], axis=1, keepdims=True)
    np.testing.assert_allclose(cls, want, rtol=0, atol=ATOL)
    both = embed_texts(pretrained, texts, pooling=("cls", "max"))
    assert both.shape == (5, 64)
    np.testing.assert_allclose(both[:, 32:], np.where(mask > 0, hidden, -np.inf).max(1),
                               rtol=0, atol=ATOL)


def test_bad_arguments_are_refused():
    loaded_ = loaded("bert_cls_dense")
    with pytest.raises(TypeError, match="list of texts"):
        embed_texts(loaded_, "one text")
    with pytest.raises(ValueError, match="max_length"):
        embed_texts(loaded_, TEXTS, max_length=65)
    with pytest.raises(ValueError, match="dense layers"):
        embed_texts(loaded_, TEXTS, pooling=("cls", "mean"))
    with pytest.raises(ValueError, match="pooling"):
        SentenceEncoderConfig.for_encoder(loaded_.model.config.encoder, pooling=("median",))


@pytest.mark.parametrize("name", NAMES)
def test_save_and_load_again(name, tmp_path):
    source = loaded(name)
    save_pretrained(source.model, source.params, source.tokenizer, tmp_path / name)
    listing = json.loads((tmp_path / name / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in listing][:2] == ["Transformer", "Pooling"]
    again = load_pretrained(tmp_path / name)
    assert again.model.config == loaded(name).model.config
    np.testing.assert_array_equal(embed_texts(again, TEXTS), embed_texts(loaded(name), TEXTS))


def _copy(tmp_path: Path, name: str = "bert_cls_dense") -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return target


def test_unsupported_modules_are_named(tmp_path):
    root = _copy(tmp_path)
    listing = json.loads((root / "modules.json").read_text())
    listing.insert(2, {"idx": 2, "name": "2", "path": "2_LayerNorm",
                       "type": "sentence_transformers.models.LayerNorm"})
    (root / "modules.json").write_text(json.dumps(listing))
    with pytest.raises(UnsupportedArchitectureError, match="LayerNorm"):
        load_pretrained(root)
    root = _copy(tmp_path / "b")
    config = json.loads((root / "2_Dense" / "config.json").read_text())
    (root / "2_Dense" / "config.json").write_text(json.dumps({**config, "use_residual": True}))
    with pytest.raises(UnsupportedArchitectureError, match="use_residual"):
        load_pretrained(root)
    root = _copy(tmp_path / "c")
    (root / "1_Pooling" / "config.json").unlink()
    with pytest.raises(MissingFileError, match="1_Pooling"):
        load_pretrained(root)


def test_do_lower_case_and_prompts(tmp_path):
    root = _copy(tmp_path)
    (root / "0_Transformer" / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 20, "do_lower_case": True}))
    settings = json.loads((root / "config_sentence_transformers.json").read_text())
    (root / "config_sentence_transformers.json").write_text(
        json.dumps({**settings, "prompts": {"query": "query: "},
                    "default_prompt_name": "query"}))
    with pytest.warns(UserWarning, match="prompt"):
        lowered = load_pretrained(root)
    assert "Lowercase" in repr(lowered.tokenizer.tokenizer.normalizer)
    upper = [text.upper() for text in TEXTS]
    np.testing.assert_allclose(embed_texts(lowered, upper),
                               np.load(FIXTURES / "bert_cls_dense" / "reference.npy"),
                               rtol=0, atol=ATOL)


@pytest.mark.slow
def test_an_encoder_with_a_head_is_pooled_from_its_last_layer():
    pretrained = load_pretrained(FIXTURES.parent / "encoders" / "bert_seqcls")
    model, params, tokenizer = pretrained.model, pretrained.params, pretrained.tokenizer
    batch = tokenizer.encode_batch(TEXTS[:3])
    hidden = model.apply({"params": params}, **batch, output_hidden_states=True)["hidden_states"]
    np.testing.assert_allclose(embed_texts(pretrained, TEXTS[:3], pooling="cls"),
                               np.asarray(hidden[-1][:, 0]), rtol=0, atol=ATOL)
