"""``textkit.models.kernels``: CPU feature detection and the choice of native bfloat16 dots it
drives, int8 weights for CPU inference (``quantize_int8``, ``Translator(quantize="int8")``), and
the Translator's batches without dummy rows."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_attention import dot_generals

from textkit.decoding import Translator
from textkit.models import get_model, kernels
from textkit.models.kernels import int8_matmul, quantize_int8, symmetric_int8
from textkit.models.layers import Dense, Embed, lookup

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC Test
flags\t\t: fpu sse2 avx2 avx512f {extra}

processor\t: 1
model name\t: AMD EPYC Test
flags\t\t: fpu sse2
"""


@pytest.fixture
def fake_cpuinfo(tmp_path, monkeypatch):
    def write(extra: str):
        path = tmp_path / "cpuinfo"
        path.write_text(CPUINFO.format(extra=extra))
        monkeypatch.setattr(kernels, "CPUINFO", path)
        kernels.model_and_flags.cache_clear()

    yield write
    kernels.model_and_flags.cache_clear()


def test_model_and_flags_of_the_first_processor(fake_cpuinfo):
    fake_cpuinfo("avx512_vnni")
    model, flags = kernels.model_and_flags()
    assert model == "AMD EPYC Test"
    assert {"avx2", "avx512f", "avx512_vnni"} <= flags and "avx512_bf16" not in flags
    assert not kernels.has_bf16_dots()


@pytest.mark.parametrize("flag", ["avx512_bf16", "amx_bf16"])
def test_bf16_dot_instructions_are_detected(fake_cpuinfo, flag):
    fake_cpuinfo(flag)
    assert kernels.has_bf16_dots()


def test_no_cpuinfo_means_no_features(tmp_path, monkeypatch):
    monkeypatch.setattr(kernels, "CPUINFO", tmp_path / "missing")
    kernels.model_and_flags.cache_clear()
    try:
        assert kernels.model_and_flags() == (None, frozenset())
        assert not kernels.has_bf16_dots()
    finally:
        kernels.model_and_flags.cache_clear()


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU backend's rule")
@pytest.mark.parametrize("bf16_dots", [True, False])
def test_native_dots_on_cpu_only_for_bfloat16_with_bf16_instructions(monkeypatch, bf16_dots):
    monkeypatch.setattr(kernels, "has_bf16_dots", lambda: bf16_dots)
    assert kernels.native_low_precision_dots(jnp.bfloat16) is bf16_dots
    assert kernels.native_low_precision_dots(jnp.float16) is False
    x = jnp.ones((4, 8), jnp.float32)
    w = jnp.ones((8, 3), jnp.float32)
    dots = dot_generals(lambda x, w: kernels.mixed_einsum("nd,df->nf", x, w, jnp.bfloat16),
                        x, w, native=None)
    operand = jnp.bfloat16 if bf16_dots else jnp.float32
    assert len(dots) == 1 and [v.aval.dtype for v in dots[0].invars] == [operand, operand]
    result = kernels.mixed_einsum("nd,df->nf", x, w, jnp.bfloat16)
    assert result.dtype == jnp.float32
    np.testing.assert_array_equal(result, np.full((4, 3), 8.0, np.float32))


PAD_ID, BOS_ID, EOS_ID = 1, 2, 3


class IdTokenizer:
    pad_id, bos_id, eos_id = PAD_ID, BOS_ID, EOS_ID


@pytest.fixture(scope="module")
def transformer():
    model = get_model("transformer_tiny", src_vocab_size=40, tgt_vocab_size=40, dropout=0.0,
                      pad_id=PAD_ID)
    dummy = jnp.full((1, 8), BOS_ID, jnp.int32)
    return model, model.init(jax.random.key(0), dummy, dummy)["params"]


def test_symmetric_int8_round_trip():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(6, 50)), jnp.float32)
    values, scale = symmetric_int8(x, axis=1)
    assert values.dtype == jnp.int8 and scale.shape == (6, 1)
    assert int(jnp.max(jnp.abs(values))) == 127
    np.testing.assert_allclose(values * scale, x, atol=float(jnp.max(scale)) / 2 + 1e-7)
    zeros, zero_scale = symmetric_int8(jnp.zeros((2, 3)), axis=1)
    assert not np.any(np.asarray(zeros)) and np.all(np.asarray(zero_scale) == 1)


def test_int8_matmul_is_an_integer_dot_close_to_float():
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(5, 64)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(64, 32)), jnp.float32)
    wq, w_scale = symmetric_int8(w, axis=0)
    out = int8_matmul(x, wq, w_scale[0])
    np.testing.assert_allclose(out, x @ w, rtol=0.05, atol=0.3)
    hlo = jax.jit(lambda a: int8_matmul(a, wq, w_scale[0])).lower(x).as_text()
    assert "xi8>, tensor<64x32xi8>) -> tensor<5x32xi32>" in hlo, "not an s8 x s8 -> s32 dot"
    transposed = int8_matmul(x, wq.T, w_scale[0], transposed=True)
    np.testing.assert_array_equal(out, transposed)


def test_int8_matmul_of_one_row_is_the_two_row_dot_row():
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.normal(size=(2, 64)), jnp.float32)
    wq, w_scale = symmetric_int8(jnp.asarray(rng.normal(size=(64, 32)), jnp.float32), axis=0)
    one = int8_matmul(x[:1], wq, w_scale[0])
    assert one.shape == (1, 32)
    np.testing.assert_array_equal(one, int8_matmul(x, wq, w_scale[0])[:1])
    hlo = jax.jit(lambda a: int8_matmul(a, wq, w_scale[0])).lower(x[:1]).as_text()
    assert "tensor<2x64xi8>, tensor<64x32xi8>) -> tensor<2x32xi32>" in hlo, \
        "a one-row int8 dot is XLA:CPU's slow path"


@pytest.mark.slow
def test_quantized_model_keeps_its_outputs(transformer):
    model, params = transformer
    qparams = quantize_int8(model, params)
    kernels = [leaf for path, leaf in jax.tree_util.tree_leaves_with_path(qparams)
               if jax.tree_util.keystr(path).endswith("['kernel']")]
    assert kernels and all(k.dtype == jnp.int8 for k in kernels)
    assert qparams["src_embed"]["embedding"].dtype == jnp.int8
    assert qparams["src_embed"]["embedding_scale"].shape == (40,)
    assert params["src_embed"]["embedding"].dtype == jnp.float32, "the input was modified"
    src = jnp.asarray(np.random.default_rng(2).integers(4, 40, size=(3, 9)), jnp.int32)
    tgt = jnp.asarray(np.random.default_rng(3).integers(4, 40, size=(3, 7)), jnp.int32)
    full = jax.nn.log_softmax(model.apply({"params": params}, src, tgt))
    quant = jax.nn.log_softmax(model.apply({"params": qparams}, src, tgt))
    assert float(jnp.max(jnp.abs(jnp.exp(full) - jnp.exp(quant)))) < 0.02
    assert quantize_int8(model, qparams)["src_embed"]["embedding"].dtype == jnp.int8


@pytest.mark.parametrize("contraction", [64, 2048])
def test_bfloat16_carrier_gives_the_int32_dot_exactly(contraction):
    rng = np.random.default_rng(6)
    x = jnp.asarray(rng.normal(size=(5, contraction)), jnp.float32)
    wq, w_scale = symmetric_int8(jnp.asarray(rng.normal(size=(contraction, 24)), jnp.float32),
                                 axis=0)
    wb = wq.astype(jnp.bfloat16)
    for rows in (x, x[:1]):
        np.testing.assert_array_equal(int8_matmul(rows, wb, w_scale[0]),
                                      int8_matmul(rows, wq, w_scale[0]))
        np.testing.assert_array_equal(
            int8_matmul(rows, wb.T, w_scale[0], transposed=True, columns=True),
            int8_matmul(rows, wq.T, w_scale[0], transposed=True, columns=True))
    hlo = jax.jit(lambda a: int8_matmul(a, wb, w_scale[0])).lower(x).as_text()
    assert f"bf16>, tensor<{contraction}x24xbf16>) -> tensor<5x24xf32>" in hlo


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU backend's rule")
def test_int8_carrier_by_rows_and_cpu(fake_cpuinfo):
    fake_cpuinfo("")
    assert {kernels.int8_carrier(rows) for rows in (1, 48, 4096)} == {jnp.int8}
    fake_cpuinfo("avx512_bf16")
    assert kernels.int8_carrier(kernels.BF16_CARRIER_MIN_ROWS - 1) == jnp.int8
    assert kernels.int8_carrier(kernels.BF16_CARRIER_MIN_ROWS) == jnp.bfloat16
    fake_cpuinfo("avx512_vnni avx512_bf16")
    assert kernels.int8_carrier(kernels.VNNI_CARRIER_MIN_ROWS) == jnp.uint8
    assert kernels.int8_carrier(4096) == jnp.uint8
    fake_cpuinfo("avx_vnni")
    assert kernels.has_vnni() and kernels.int8_carrier(4096) == jnp.uint8
    fake_cpuinfo("avx512_vnni avx512_bf16 amx_bf16 amx_int8")   # AMX: the int8 dot is fastest
    assert kernels.has_amx_int8()
    assert {kernels.int8_carrier(rows) for rows in (1, 48, 4096)} == {jnp.int8}


@pytest.mark.parametrize("rows", [1, 2, 16, 33])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("columns", [False, True])
def test_vnni_product_equals_the_int8_dot(rows, transposed, columns):
    """The uint8 carrier (shifted input bytes x int8 weight, ``128 * sum`` subtracted) gives
    the int8 x int8 product's result bit for bit, in every form the layers use."""
    rng = np.random.default_rng(rows)
    x = jnp.asarray(rng.normal(size=(rows, 1100)), jnp.float32)   # sums beyond 2**24 / 127**2
    w, scale = symmetric_int8(jnp.asarray(rng.normal(size=(1100, 24)), jnp.float32), axis=0)
    weight = w.T if transposed else w
    total = w.astype(jnp.int32).sum(0)
    product = jax.jit(lambda x, weight, total: int8_matmul(
        x, weight, scale[0], weight_sum=total, transposed=transposed, columns=columns))
    reference = jax.jit(lambda x, weight: int8_matmul(
        x, weight, scale[0], transposed=transposed, columns=columns))
    np.testing.assert_array_equal(product(x, weight, total), reference(x, weight))


@pytest.mark.slow
def test_quantize_int8_moves_values_between_carriers(transformer):
    model, params = transformer
    qparams = quantize_int8(model, params)
    carried = quantize_int8(model, params, carrier=jnp.bfloat16)
    moved = quantize_int8(model, qparams, carrier=jnp.bfloat16)
    back = quantize_int8(model, moved)
    for tree in (carried, moved):
        assert tree["src_embed"]["embedding"].dtype == jnp.bfloat16
    assert qparams["src_embed"]["embedding"].dtype == jnp.int8, "the input was modified"
    same_values = jax.tree_util.tree_map(lambda a, b: bool(np.array_equal(
        np.asarray(a, np.float32), np.asarray(b, np.float32))), qparams, moved)
    assert all(jax.tree_util.tree_leaves(same_values))
    assert jax.tree_util.tree_map(lambda a: a.dtype, back) == \
        jax.tree_util.tree_map(lambda a: a.dtype, qparams)
    src = jnp.asarray(np.random.default_rng(7).integers(4, 40, size=(3, 9)), jnp.int32)
    tgt = jnp.asarray(np.random.default_rng(8).integers(4, 40, size=(3, 7)), jnp.int32)
    np.testing.assert_array_equal(model.apply({"params": carried}, src, tgt),
                                  model.apply({"params": qparams}, src, tgt))
    vnni = quantize_int8(model, moved, carrier=jnp.uint8)
    assert vnni["src_embed"]["embedding"].dtype == jnp.int8
    np.testing.assert_array_equal(vnni["src_embed"]["embedding_sum"], np.asarray(
        qparams["src_embed"]["embedding"], np.int32).sum(1))
    assert "embedding_sum" not in quantize_int8(model, vnni)["src_embed"]
    forward = jax.jit(lambda p: model.apply({"params": p}, src, tgt))
    np.testing.assert_array_equal(forward(vnni), forward(qparams))
    with pytest.raises(ValueError, match="carrier"):
        quantize_int8(model, params, carrier=jnp.float16)


@pytest.mark.slow
def test_translator_int8_uses_each_batchs_carrier(transformer, monkeypatch):
    model, params = transformer
    rng = np.random.default_rng(9)
    sources = [rng.integers(4, 40, size=n).tolist() for n in rng.integers(3, 13, 9)]
    translator = Translator(model, IdTokenizer(), IdTokenizer(), beam_size=2, max_length=8,
                            batch_size=8, quantize="int8")
    monkeypatch.setattr(kernels, "int8_carrier", lambda rows: jnp.int8)
    expected = translator.translate_ids(params, sources)
    monkeypatch.setattr(kernels, "int8_carrier",
                        lambda rows: jnp.bfloat16 if rows >= 16 else jnp.uint8)
    assert translator.translate_ids(params, sources) == expected   # batches of 8 and 1 rows
    copies = translator._quantized[1]
    assert set(copies) == {jnp.dtype(jnp.int8), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.uint8)}
    assert copies[jnp.dtype(jnp.bfloat16)]["src_embed"]["embedding"].dtype == jnp.bfloat16
    assert "embedding_sum" in copies[jnp.dtype(jnp.uint8)]["src_embed"]


def test_embed_reads_a_bfloat16_table_row_by_row():
    embed = Embed(num_embeddings=10, features=4, scale_by_sqrt_dim=False)
    ids = jnp.asarray([[1, 9, 0]], jnp.int32)
    table = jnp.asarray(np.random.default_rng(10).normal(size=(10, 4)), jnp.bfloat16)
    rows = embed.apply({"params": {"embedding": table}}, ids)
    assert rows.dtype == jnp.float32
    np.testing.assert_array_equal(rows, np.asarray(table, np.float32)[np.asarray(ids)])
    hlo = jax.jit(lambda t, i: embed.apply({"params": {"embedding": t}}, i)).lower(
        table, ids).compile().as_text()
    assert "f32[10,4]" not in hlo, "the whole table was widened before the gather"
    outside = jax.jit(lambda t, i: embed.apply({"params": {"embedding": t}}, i))(
        table, jnp.asarray([[10]], jnp.int32))
    assert np.isnan(np.asarray(outside)).all(), "an id outside the table must read NaN"
    half = table.astype(jnp.float16)
    rows = jax.jit(lookup)(half, jnp.asarray([2, 10], jnp.int32))
    assert rows.dtype == jnp.float16 and np.isnan(np.asarray(rows[1], np.float32)).all()
    np.testing.assert_array_equal(rows[0], half[2])


def test_dense_reads_an_int8_kernel():
    dense = Dense(4)
    x = jnp.ones((2, 3))
    params = dense.init(jax.random.key(0), x)["params"]
    values, scale = symmetric_int8(params["kernel"], axis=0)
    q = {"kernel": values, "kernel_scale": scale[0], "bias": params["bias"] + 1.0}
    np.testing.assert_allclose(dense.apply({"params": q}, x), dense.apply(
        {"params": {**params, "bias": params["bias"] + 1.0}}, x), atol=0.05)


@pytest.mark.slow
def test_translator_int8_decodes_and_reuses_the_quantized_params(transformer):
    model, params = transformer
    rng = np.random.default_rng(4)
    sources = [rng.integers(4, 40, size=n).tolist() for n in rng.integers(3, 13, 16)]
    exact = Translator(model, IdTokenizer(), IdTokenizer(), beam_size=2, max_length=8)
    int8 = Translator(model, IdTokenizer(), IdTokenizer(), beam_size=2, max_length=8,
                      quantize="int8")
    out = int8.translate_ids(params, sources)
    assert len(out) == 16 and all(len(o) <= 8 for o in out)
    first = int8._quantized[1][jnp.dtype(jnp.int8)]
    int8.translate_ids(params, sources[:1])
    assert int8._quantized[1][jnp.dtype(jnp.int8)] is first, \
        "the same params must not be quantized again"
    # exactly the search over quantize_int8's params (the int8 path is the params, not a mode)
    assert out == exact.translate_ids(params=quantize_int8(model, params), sources=sources)
    # and close to float32: at least 15 of 16 outputs identical (94.5 % on the Multi30k model)
    agree = sum(a == b for a, b in zip(out, exact.translate_ids(params, sources)))
    assert agree >= 15, f"{agree} of 16 int8 outputs equal float32's"
    with pytest.raises(ValueError, match="quantize"):
        Translator(model, IdTokenizer(), IdTokenizer(), quantize="int4")


@pytest.mark.slow
def test_translator_batches_have_no_dummy_rows(transformer):
    model, params = transformer
    translator = Translator(model, IdTokenizer(), IdTokenizer(), beam_size=2, max_length=6,
                            batch_size=8, batch_tokens=64)
    lengths = [3] * 13 + [20] * 3
    groups = translator.batch_groups(lengths)
    assert [stop - start for start, stop in groups] == [8, 4, 2, 2]
    assert groups[-1][1] == len(lengths)
    for start, stop in groups:   # within the token budget at the padded length
        assert (stop - start) * translator._padded_length(lengths[stop - 1]) <= 64 \
            or stop - start == 1
    rng = np.random.default_rng(5)
    sources = [rng.integers(4, 40, size=n).tolist() for n in lengths]
    out = translator.translate_ids(params, sources)
    alone = Translator(model, IdTokenizer(), IdTokenizer(), beam_size=2, max_length=6,
                       batch_size=1)
    assert out == alone.translate_ids(params, sources)
    assert {rows for rows, _, _ in translator.compiled_shapes} <= {8, 4, 2, 1}
    with pytest.raises(ValueError, match="batch_tokens"):
        Translator(model, IdTokenizer(), IdTokenizer(), batch_tokens=0)


def test_int8_decoding_is_refused_off_the_cpu(transformer, monkeypatch):
    """On a GPU the message says to use bfloat16; nothing is quantized."""
    model, _ = transformer
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    with pytest.raises(ValueError, match="mixed_bfloat16"):
        Translator(model, IdTokenizer(), IdTokenizer(), quantize="int8")


def test_bfloat16_weight_gradient_is_the_float32_sum_of_the_rounded_products():
    """``mixed_einsum``'s backward of a dense layer in bfloat16: the weight gradient equals
    xᵀ g of the bfloat16-rounded operands summed in float32; on a CPU with bfloat16 dots the
    product keeps bfloat16 operands (no float32 copy of the activation)."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((96, 40)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((40, 24)), jnp.float32)

    def loss(x, w):
        return (kernels.mixed_einsum("za,ab->zb", x, w, jnp.bfloat16) ** 2).sum()

    grad_w = jax.jit(jax.grad(loss, argnums=1))
    y = kernels.mixed_einsum("za,ab->zb", x, w, jnp.bfloat16)
    g = (2 * y).astype(jnp.bfloat16).astype(jnp.float32)
    expected = x.astype(jnp.bfloat16).astype(jnp.float32).T @ g
    np.testing.assert_allclose(grad_w(x, w), expected, rtol=1e-5,
                               atol=1e-5 * float(jnp.abs(expected).max()))
    if jax.default_backend() == "cpu" and kernels.has_bf16_dots():
        hlo = grad_w.lower(x, w).compile().as_text()
        assert not re.search(r"f32\[(96,40|40,96)\]\{[0-9,]+\} fusion", hlo)
