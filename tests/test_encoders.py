"""Encoder checkpoints (BERT, RoBERTa, XLM-R, ELECTRA, DistilBERT, DeBERTa-v3, ModernBERT):
outputs, precision, load / save, tokenizers (no network, no torch).

The fixtures in ``tests/fixtures/encoders`` were made by ``tools/make_tiny_encoders.py`` with
transformers: one random checkpoint per family and head, its ``reference.npz`` (transformers'
fp32 outputs on a padded batch of sentences and of sentence pairs) and, in ``tokenizers/``,
transformers' fast-tokenizer ids, type ids and offsets on the generated texts of
``tokenizers/texts.json``. That script's ``--check`` (run by hand, with torch) loads textkit's
exports with transformers; here the exports are checked tensor by tensor against the fixtures.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from textkit.models import EncoderConfig, get_model, list_models
from textkit.pretrained import (
    EncoderTokenizer,
    MissingFileError,
    Pretrained,
    PretrainedError,
    UnsupportedArchitectureError,
    load_pretrained,
    save_pretrained,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "encoders"
REAL = ROOT.parent / "shared" / "data" / "tokenizers"
NAMES = sorted(d.name for d in FIXTURES.iterdir() if (d / "config.json").is_file())
MODEL_TYPE = {"bert": "bert", "roberta": "roberta", "xlm_roberta": "xlm-roberta",
              "electra": "electra", "distilbert": "distilbert", "deberta_v3": "deberta-v2",
              "deberta_v2": "deberta-v2", "modernbert": "modernbert"}
ATOL = 1e-5
# The fast tier (-m "not slow") runs the per-fixture checks of forward outputs and of mixed
# precision on one family with every head (BERT), ELECTRA's discriminator head and the base
# model of each other family; every other fixture is the slow tier's (the first fixture of a
# family costs seconds of op compiles on 2 cores). Tokenizers and exports are fast everywhere.
FAST_OUTPUTS = {"bert_model", "bert_mlm", "bert_qa", "bert_seqcls", "bert_tokcls",
                "electra_pretraining", "roberta_model", "distilbert_model", "deberta_v3_model",
                "modernbert_model"}
FAST_PRECISION = {"bert_mlm", "bert_qa", "bert_seqcls", "bert_tokcls", "electra_pretraining"}


def tiered(names, fast: set[str]) -> list:
    return [n if n in fast else pytest.param(n, marks=pytest.mark.slow) for n in names]


def reference(name: str) -> dict[str, dict[str, np.ndarray]]:
    """{batch: {name: array}} of a fixture's reference.npz."""
    out: dict[str, dict[str, np.ndarray]] = {}
    with np.load(FIXTURES / name / "reference.npz") as data:
        for key in data.files:
            batch, field = key.split("/")
            out.setdefault(batch, {})[field] = data[key]
    return out


def split(arrays: dict[str, np.ndarray]) -> tuple[dict, dict]:
    inputs = {k: v for k, v in arrays.items() if k.endswith("_ids") or k == "attention_mask"}
    return inputs, {k: v for k, v in arrays.items() if k not in inputs}


_LOADED: dict[str, Pretrained] = {}


def loaded(name: str) -> Pretrained:
    if name not in _LOADED:
        _LOADED[name] = load_pretrained(FIXTURES / name)
    return _LOADED[name]


def run(model, params, inputs, **kwargs) -> dict:
    out = model.apply({"params": params}, **{k: jnp.asarray(v) for k, v in inputs.items()},
                      **kwargs)
    if "hidden_states" in out:
        out = {**out, "hidden_states": jnp.stack(out["hidden_states"])}
    return {k: np.asarray(v) for k, v in out.items()}


# ------------------------------------------------------------------------------- fixtures
def test_fixtures_are_small():
    size = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert size < 8_000_000
    assert len(NAMES) == 37


def test_every_family_and_head_has_a_fixture():
    heads = {name.rsplit("_", 1)[1] for name in NAMES}
    assert heads == {"model", "mlm", "pretraining", "seqcls", "tokcls", "qa"}
    assert {name.rsplit("_", 1)[0] for name in NAMES} == set(MODEL_TYPE)


# --------------------------------------------------------------------------------- outputs
@pytest.mark.parametrize("name", tiered(NAMES, FAST_OUTPUTS))
def test_outputs_match_transformers(name):
    pretrained = loaded(name)
    model, params = pretrained.model, pretrained.params
    assert isinstance(model.config, EncoderConfig)
    for batch, arrays in reference(name).items():
        inputs, expected = split(arrays)
        out = run(model, params, inputs, output_hidden_states="hidden_states" in expected)
        assert set(expected) <= set(out), (batch, sorted(out))
        for key, want in expected.items():
            assert out[key].shape == want.shape, (batch, key)
            assert out[key].dtype == np.float32
            np.testing.assert_allclose(out[key], want, rtol=0, atol=ATOL, err_msg=f"{batch}/{key}")


@pytest.mark.parametrize("name", NAMES)
def test_tokenizer_gives_the_reference_batch(name):
    tokenizer = loaded(name).tokenizer
    meta = json.loads((FIXTURES / name / "reference.json").read_text("utf-8"))
    for batch, arrays in reference(name).items():
        texts, pairs = ((meta["single"], None) if batch == "single" else
                        ([a for a, _ in meta["pairs"]], [b for _, b in meta["pairs"]]))
        got = tokenizer.encode_batch(texts, pairs)
        inputs, _ = split(arrays)
        assert list(got) == [k for k in ("input_ids", "token_type_ids", "attention_mask")
                             if k in inputs]
        for key, want in inputs.items():
            assert got[key].dtype == np.int32
            np.testing.assert_array_equal(got[key], want, err_msg=f"{name} {batch}/{key}")


PRECISION_TOLERANCE = {"mixed_bfloat16": 0.03, "mixed_float16": 0.005,
                       "mixed_bfloat16,activations=bfloat16": 0.03,
                       "mixed_float16,activations=float16": 0.005}
"""Max abs difference of the logits from float32, as a fraction of the largest float32 |logit|
of that output (with 16-bit activations named: the GPU backends' default)."""


def random_batch(config: EncoderConfig, rows: int = 256, length: int = 24,
                 seed: int = 0) -> dict[str, np.ndarray]:
    """Rows of distinct random token ids (no repeated token, whose hidden states would be near
    ties by construction) with random lengths from length / 3 to length, padded."""
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.choice(np.arange(5, config.vocab_size), length, replace=False)
                    for _ in range(rows)])
    lengths = rng.integers(length // 3, length + 1, rows)
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
    return {"input_ids": np.where(mask == 1, ids, config.pad_id).astype(np.int32),
            "attention_mask": mask}


def _decisions(key: str, logits: np.ndarray, mask: np.ndarray, name: str) -> np.ndarray:
    """The decision at every real position (or row) of one output."""
    if "pretraining" in name:                      # replaced-token scores: the sign decides
        return (logits > 0)[mask]
    if key in ("start_logits", "end_logits"):      # a span position over the real tokens
        return np.where(mask, logits, -np.inf).argmax(-1)
    choice = logits.argmax(-1)
    return choice[mask] if logits.ndim == 3 else choice   # per token: real positions only


@pytest.mark.parametrize("policy", sorted(PRECISION_TOLERANCE))
@pytest.mark.parametrize("name", tiered([n for n in NAMES if not n.endswith("_model")],
                                        FAST_PRECISION))
def test_mixed_precision_agrees_with_float32(name, policy):
    """On a random batch (``random_batch``): logits within the stated tolerance, and the same
    argmax (ELECTRA's discriminator: the same sign) on >= 99 % of all the real positions
    (sequence heads: rows). The fixtures' output rows are drawn with clear margins
    (tools/make_tiny_encoders.py), as a trained model has them."""
    pretrained = loaded(name)
    model32, params = pretrained.model, pretrained.params
    model = type(model32)(dataclasses.replace(model32.config, policy=policy))
    batch = random_batch(model32.config)
    full, low = run(model32, params, batch), run(model, params, batch)
    mask = batch["attention_mask"].astype(bool)
    agree = []
    for key in full:
        assert low[key].dtype == np.float32
        error = np.abs(full[key] - low[key]).max()
        assert error <= PRECISION_TOLERANCE[policy] * np.abs(full[key]).max(), key
        agree.append(_decisions(key, full[key], mask, name)
                     == _decisions(key, low[key], mask, name))
    assert np.concatenate(agree).mean() >= 0.99


@pytest.mark.slow
def test_training_mode_dropout_and_gradient_checkpointing():
    pretrained = loaded("bert_seqcls")
    model, params, tokenizer = pretrained.model, pretrained.params, pretrained.tokenizer
    batch = tokenizer.encode_batch(["a short text", "and another one here"])
    inputs = {k: jnp.asarray(v) for k, v in batch.items()}
    rngs = {"dropout": jax.random.PRNGKey(0)}
    eval_out = model.apply({"params": params}, **inputs)["logits"]
    train_out = model.apply({"params": params}, **inputs, deterministic=False, rngs=rngs)
    assert not np.allclose(eval_out, train_out["logits"])
    remat = type(model)(dataclasses.replace(model.config, gradient_checkpointing=True))

    def loss(m, p):
        return m.apply({"params": p}, **inputs, deterministic=False, rngs=rngs)["logits"].sum()

    g1 = jax.jit(jax.grad(lambda p: loss(model, p)))(params)    # jitted: half the time of
    g2 = jax.jit(jax.grad(lambda p: loss(remat, p)))(params)    # op by op; remat is kept
    for a, b in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g2)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_inputs_are_checked():
    pretrained = loaded("distilbert_model")
    model, params = pretrained.model, pretrained.params
    ids = jnp.ones((1, 4), jnp.int32)
    with pytest.raises(ValueError, match="no token types"):
        model.apply({"params": params}, ids, token_type_ids=jnp.zeros_like(ids))
    with pytest.raises(ValueError, match="max_len"):
        model.apply({"params": params}, jnp.ones((1, 65), jnp.int32))
    pretrained = loaded("roberta_model")
    model, params = pretrained.model, pretrained.params
    assert model.config.max_positions == 64            # 66 - (pad_id 1) - 1
    with pytest.raises(ValueError, match="outside"):
        model.apply({"params": params}, jnp.full((1, 3), 10_000, jnp.int32))


def test_presets():
    names = list_models("encoder")
    assert {"bert_base_uncased", "bert_mini", "roberta_base", "xlm_roberta_base",
            "electra_base_discriminator", "distilbert_base_uncased", "deberta_v3_base",
            "deberta_v3_small", "modernbert_base"} <= set(names)
    ids = jnp.ones((2, 8), jnp.int32)
    for name in names:
        model = get_model(name, **EncoderConfig.tiny)
        shapes = jax.eval_shape(lambda k, m=model: m.init(k, ids), jax.random.PRNGKey(0))
        assert shapes["params"]
    mini = get_model("bert_mini").config
    assert (mini.num_layers, mini.hidden_size, mini.num_heads) == (4, 256, 4)
    base = get_model("modernbert_base").config
    assert [base.layer_options(i)["window"] for i in range(4)] == [None, 64, 64, None]
    assert get_model("deberta_v3_base").config.relative.span == 256


@pytest.mark.parametrize("name", [pytest.param("deberta_v3_small", marks=pytest.mark.slow),
                                  "modernbert_base"])       # the fast tier's remat check
def test_new_families_train_with_dropout_and_remat(name):
    """A tiny preset of each family runs forward with dropout and gives the same gradients with
    gradient checkpointing."""
    model = get_model(name, **{**EncoderConfig.tiny, "num_layers": 2},
                      head="sequence_classification", dropout=0.1)
    ids = jnp.arange(2, 18, dtype=jnp.int32).reshape(2, 8)
    mask = jnp.array([[1] * 8, [1] * 5 + [0] * 3])
    params = model.init(jax.random.PRNGKey(0), ids, mask)["params"]
    rngs = {"dropout": jax.random.PRNGKey(1)}
    remat = type(model)(dataclasses.replace(model.config, gradient_checkpointing=True))

    def loss(m, p):
        return m.apply({"params": p}, ids, mask, deterministic=False, rngs=rngs)["logits"].sum()

    g1 = jax.jit(jax.grad(lambda p: loss(model, p)))(params)
    g2 = jax.jit(jax.grad(lambda p: loss(remat, p)))(params)
    for a, b in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g2)):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------ load / save
@pytest.mark.parametrize("name", NAMES)
def test_export_matches_the_fixture_tensor_by_tensor(name, tmp_path):
    pretrained = loaded(name)
    model, params, tokenizer = pretrained.model, pretrained.params, pretrained.tokenizer
    out = save_pretrained(model, params, tokenizer, tmp_path / name)
    original, exported = (load_file(str(d / "model.safetensors")) for d in (FIXTURES / name, out))
    assert sorted(exported) == sorted(original)
    for key, want in original.items():
        assert exported[key].shape == want.shape, key
        np.testing.assert_array_equal(exported[key], want, err_msg=key)
    config, ours = (json.loads((d / "config.json").read_text()) for d in (FIXTURES / name, out))
    for key, value in ours.items():
        if key in config and key not in ("classifier_dropout",):
            assert config[key] == value, key
    again = load_pretrained(out)
    assert again.model.config == model.config
    leaves = zip(jax.tree_util.tree_leaves_with_path(again.params),
                 jax.tree_util.tree_leaves_with_path(params))
    for (path, a), (path_b, b) in leaves:
        assert path == path_b
        np.testing.assert_array_equal(a, b)
    texts = ["Hello world!", "naïve café 中文 😀"]
    assert {k: v.tolist() for k, v in again.tokenizer.encode_batch(texts).items()} == \
        {k: v.tolist() for k, v in tokenizer.encode_batch(texts).items()}


def test_sharded_safetensors(tmp_path):
    source = FIXTURES / "bert_seqcls"
    target = tmp_path / "sharded"
    shutil.copytree(source, target)
    tensors = load_file(str(target / "model.safetensors"))
    (target / "model.safetensors").unlink()
    keys = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": keys[::2],
              "model-00002-of-00002.safetensors": keys[1::2]}
    for file, names in shards.items():
        save_file({k: tensors[k] for k in names}, str(target / file))
    index = {"metadata": {}, "weight_map": {k: f for f, ns in shards.items() for k in ns}}
    (target / "model.safetensors.index.json").write_text(json.dumps(index))
    a, b = load_pretrained(target).params, loaded("bert_seqcls").params
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(x, y)
    (target / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(MissingFileError, match="00002"):
        load_pretrained(target)


def test_new_head_for_fine_tuning():
    with pytest.warns(UserWarning, match="initialised at random"):
        params = load_pretrained(FIXTURES / "bert_model",
                                 head="sequence_classification", num_labels=4).params
    body = loaded("bert_model").params
    np.testing.assert_array_equal(params["layer_1"]["ff_norm"]["norm"]["scale"],
                                  body["layer_1"]["ff_norm"]["norm"]["scale"])
    np.testing.assert_array_equal(params["pooler"]["kernel"], body["pooler"]["kernel"])
    assert params["classifier"]["kernel"].shape == (32, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_pretrained(FIXTURES / "bert_seqcls", policy="mixed_bfloat16")


def _edited(tmp_path: Path, name: str, **changes) -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    config = json.loads((target / "config.json").read_text())
    config.update(changes)
    (target / "config.json").write_text(json.dumps(config))
    return target


@pytest.mark.parametrize("name,changes,key", [
    ("bert_model", {"position_embedding_type": "relative_key"}, "position_embedding_type"),
    ("bert_model", {"architectures": ["BertForNextSentencePrediction"]}, "architectures"),
    ("bert_model", {"hidden_act": "mish"}, "hidden_act"),
    ("distilbert_model", {"sinusoidal_pos_embds": True}, "sinusoidal_pos_embds"),
    ("roberta_mlm", {"tie_word_embeddings": False}, "tie_word_embeddings"),
    ("bert_model", {"architectures": ["BertForPreTraining"]}, "architectures"),
    ("deberta_v3_model", {"relative_attention": False}, "relative_attention"),
    ("deberta_v3_model", {"pos_att_type": ["c2p", "p2p"]}, "pos_att_type"),
    ("deberta_v3_model", {"conv_kernel_size": 3}, "conv_kernel_size"),
    ("deberta_v3_model", {"norm_rel_ebd": "layer_norm|scale"}, "norm_rel_ebd"),
    ("deberta_v3_mlm", {"embedding_size": 16}, "embedding_size"),
    ("modernbert_model", {"layer_types": ["sliding_attention", "full_attention",
                                          "full_attention"]}, "layer_types"),
    ("modernbert_model", {"rope_parameters": {"full_attention": {"rope_type": "yarn"}}},
     "rope_type"),
    ("modernbert_model", {"mlp_dropout": 0.3}, "mlp_dropout"),
])
def test_unsupported_options_are_named_errors(tmp_path, name, changes, key):
    with pytest.raises(UnsupportedArchitectureError, match=key) as info:
        load_pretrained(_edited(tmp_path, name, **changes))
    assert isinstance(info.value, PretrainedError)


def test_missing_files_are_named(tmp_path):
    target = _edited(tmp_path, "bert_seqcls")
    (target / "vocab.txt").unlink()
    with pytest.raises(MissingFileError, match="vocab.txt"):
        load_pretrained(target)
    target = _edited(tmp_path, "roberta_model")
    (target / "model.safetensors").unlink()
    with pytest.raises(MissingFileError, match="model.safetensors"):
        load_pretrained(target)
    target = _edited(tmp_path, "electra_qa", vocab_size=100)
    with pytest.raises(PretrainedError, match="vocab"):
        load_pretrained(target)


# ------------------------------------------------------------------------------ tokenizers
TEXTS = json.loads((FIXTURES / "tokenizers" / "texts.json").read_text("utf-8"))


def cases() -> dict[str, tuple]:
    half = len(TEXTS) // 2
    return {"single": (TEXTS, None, None), "pair": (TEXTS[:half], TEXTS[half:2 * half], None),
            "pair_trunc24": (TEXTS[:half], TEXTS[half:2 * half], 24),
            "single_trunc16": (TEXTS, None, 16)}


def real_directory(name: str, tmp_path: Path) -> Path:
    """The real tokenizer files as tools/make_tiny_encoders.py set them up."""
    source = REAL / name.replace("-vocab", "")
    if not source.is_dir():
        pytest.skip(f"{source} is absent (the real tokenizer files of ../shared/data)")
    target = tmp_path / name
    target.mkdir()
    for f in source.iterdir():
        if not (name.endswith("-vocab") and f.name == "tokenizer.json"):
            shutil.copy(f, target / f.name)
    if name == "bert-base-cased":
        (target / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    return target


TOKENIZERS = {
    # reference file: (fixture directory or real files, model_type)
    "bert": ("bert_model", "bert"), "bert_seqcls": ("bert_seqcls", "bert"),
    "roberta": ("roberta_model", "roberta"), "roberta_seqcls": ("roberta_seqcls", "roberta"),
    "xlm_roberta": ("xlm_roberta_model", "xlm-roberta"),
    "xlm_roberta_seqcls": ("xlm_roberta_seqcls", "xlm-roberta"),   # sentencepiece.bpe.model
    "deberta_v3": ("deberta_v3_model", "deberta-v2"),
    "deberta_v3_seqcls": ("deberta_v3_seqcls", "deberta-v2"),      # spm.model
    "modernbert": ("modernbert_model", "modernbert"),
    "bert-base-uncased": (None, "bert"), "bert-base-cased": (None, "bert"),
    "roberta-base": (None, "roberta"), "roberta-base-vocab": (None, "roberta"),
    "deberta-v3": (None, "deberta-v2"),                             # the real spm.model
}


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_tokenizer_matches_transformers(name, tmp_path):
    fixture, model_type = TOKENIZERS[name]
    directory = FIXTURES / fixture if fixture else real_directory(name, tmp_path)
    tokenizer = EncoderTokenizer.from_directory(directory, model_type)
    assert len(TEXTS) >= 300
    with np.load(FIXTURES / "tokenizers" / f"{name}.npz") as ref:
        for case, (texts, pairs, max_length) in cases().items():
            batch = tokenizer.encode_batch(texts, pairs, max_length, return_offsets=True)
            lengths = ref[f"{case}/lengths"]
            np.testing.assert_array_equal(batch["attention_mask"].sum(1), lengths,
                                          err_msg=case)
            real = batch["attention_mask"].astype(bool)
            np.testing.assert_array_equal(batch["input_ids"][real], ref[f"{case}/input_ids"],
                                          err_msg=case)
            np.testing.assert_array_equal(batch["offset_mapping"][real], ref[f"{case}/offsets"],
                                          err_msg=case)
            types = [e.type_ids for e in tokenizer.encodings(texts, pairs, max_length)]
            np.testing.assert_array_equal(np.concatenate([np.asarray(t, np.int32)
                                                          for t in types]),
                                          ref[f"{case}/token_type_ids"], err_msg=case)
            if "token_type_ids" in batch:
                np.testing.assert_array_equal(batch["token_type_ids"][real],
                                              ref[f"{case}/token_type_ids"], err_msg=case)
            if max_length:
                assert batch["input_ids"].shape[1] <= max_length


def test_encode_batch_shapes_and_names():
    tokenizer = loaded("roberta_qa").tokenizer
    batch = tokenizer.encode_batch(["Who?", "Where is it?"], ["Here.", "It is there, far."],
                                   return_offsets=True, pad_to_multiple_of=8)
    assert set(batch) == {"input_ids", "attention_mask", "offset_mapping", "sequence_ids"}
    assert batch["input_ids"].shape[1] % 8 == 0
    assert all(v.dtype == np.int32 for v in batch.values())
    pads = batch["attention_mask"] == 0
    assert (batch["input_ids"][pads] == tokenizer.pad_id).all()
    assert (batch["sequence_ids"][pads] == -1).all()
    second = batch["sequence_ids"][1] == 1
    starts, ends = batch["offset_mapping"][1][second].T
    assert "It is there, far."[starts[0]:ends[-1]] == "It is there, far."
    assert set(loaded("electra_qa").tokenizer.encode_batch(["x"])) == {
        "input_ids", "token_type_ids", "attention_mask"}
    with pytest.raises(ValueError, match="pairs has 1"):
        tokenizer.encode_batch(["a", "b"], ["c"])
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        tokenizer.encode_batch(["a", None])
    empty = tokenizer.encode_batch([])
    assert empty["input_ids"].shape == (0, 0)


@pytest.mark.parametrize("name", ["bert_seqcls", "distilbert_model", "modernbert_model"])
def test_a_missing_config_key_is_named(name, tmp_path):
    key = "dim" if name.startswith("distilbert") else "hidden_size"
    target = _edited(tmp_path, name)
    config = json.loads((target / "config.json").read_text())
    del config[key]
    (target / "config.json").write_text(json.dumps(config))
    with pytest.raises(PretrainedError, match=f"config.json: missing the key '{key}'"):
        load_pretrained(target)


def test_electra_embeddings_as_wide_as_the_hidden_size_have_no_projection():
    """transformers' ELECTRA projects its embeddings only when embedding_size differs from
    hidden_size (electra-base and -large do not): textkit reads such a config.json without a
    projection, and refuses to build the ambiguous config."""
    from textkit.models import EncoderConfig
    from textkit.pretrained.encoders import encoder_config

    hf = json.loads((FIXTURES / "electra_model" / "config.json").read_text())
    hf["embedding_size"] = hf["hidden_size"]
    assert encoder_config(hf).embedding_size is None
    with pytest.raises(ValueError, match="leave it None"):
        EncoderConfig(architecture="electra", hidden_size=64, embedding_size=64, num_heads=2)
