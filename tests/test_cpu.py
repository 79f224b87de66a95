"""CPU feature detection (textkit.cpu) and the choice of native bfloat16 dots it drives."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_attention import dot_generals

from textkit import cpu
from textkit.models import layers

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
        monkeypatch.setattr(cpu, "CPUINFO", path)
        cpu.model_and_flags.cache_clear()

    yield write
    cpu.model_and_flags.cache_clear()


def test_model_and_flags_of_the_first_processor(fake_cpuinfo):
    fake_cpuinfo("avx512_vnni")
    model, flags = cpu.model_and_flags()
    assert model == "AMD EPYC Test"
    assert {"avx2", "avx512f", "avx512_vnni"} <= flags and "avx512_bf16" not in flags
    assert not cpu.has_bf16_dots()


@pytest.mark.parametrize("flag", ["avx512_bf16", "amx_bf16"])
def test_bf16_dot_instructions_are_detected(fake_cpuinfo, flag):
    fake_cpuinfo(flag)
    assert cpu.has_bf16_dots()


def test_no_cpuinfo_means_no_features(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu, "CPUINFO", tmp_path / "missing")
    cpu.model_and_flags.cache_clear()
    try:
        assert cpu.model_and_flags() == (None, frozenset())
        assert not cpu.has_bf16_dots()
    finally:
        cpu.model_and_flags.cache_clear()


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU backend's rule")
@pytest.mark.parametrize("bf16_dots", [True, False])
def test_native_dots_on_cpu_only_for_bfloat16_with_bf16_instructions(monkeypatch, bf16_dots):
    monkeypatch.setattr(layers, "has_bf16_dots", lambda: bf16_dots)
    assert layers.native_low_precision_dots(jnp.bfloat16) is bf16_dots
    assert layers.native_low_precision_dots(jnp.float16) is False
    x = jnp.ones((4, 8), jnp.float32)
    w = jnp.ones((8, 3), jnp.float32)
    dots = dot_generals(lambda x, w: layers.mixed_einsum("nd,df->nf", x, w, jnp.bfloat16),
                        x, w, native=None)
    operand = jnp.bfloat16 if bf16_dots else jnp.float32
    assert len(dots) == 1 and [v.aval.dtype for v in dots[0].invars] == [operand, operand]
    result = layers.mixed_einsum("nd,df->nf", x, w, jnp.bfloat16)
    assert result.dtype == jnp.float32
    np.testing.assert_array_equal(result, np.full((4, 3), 8.0, np.float32))
