"""The precision Policy: parsing, string form, casting helpers, mask values."""

import jax.numpy as jnp
import numpy as np
import pytest

from textkit.precision import Policy, cast_floating, mask_value


@pytest.mark.parametrize(
    "name, dtypes",
    [
        ("float32", (jnp.float32, jnp.float32, jnp.float32)),
        ("mixed_bfloat16", (jnp.float32, jnp.bfloat16, jnp.float32)),
        ("mixed_float16", (jnp.float32, jnp.float16, jnp.float32)),
        ("bfloat16", (jnp.bfloat16, jnp.bfloat16, jnp.bfloat16)),
    ],
)
def test_short_names(name, dtypes):
    policy = Policy.parse(name)
    assert (policy.param_dtype, policy.compute_dtype, policy.output_dtype) == dtypes


def test_string_grammar_round_trips():
    text = "params=float32,compute=bfloat16,output=float32"
    policy = Policy.parse(text)
    assert policy == Policy.parse("mixed_bfloat16")
    assert str(policy) == text
    assert Policy.parse(str(policy)) == policy
    assert Policy.parse(str(Policy.parse("mixed_float16"))) == Policy.parse("mixed_float16")
    assert Policy.parse(" Params = f32 , compute=fp16 ") == Policy(jnp.float32, jnp.float16)
    assert Policy.parse(policy) is policy
    assert hash(policy) == hash(Policy.parse(text))   # usable as a static jit argument


def test_activations_follow_the_backend_unless_named(monkeypatch):
    from textkit.precision import policy as policy_module

    mixed = Policy.parse("mixed_bfloat16")
    assert mixed.activation_dtype is None and Policy().activations == jnp.float32
    assert mixed.activations == jnp.float32                    # the CPU backend's rule
    monkeypatch.setattr(policy_module, "SIXTEEN_BIT_ACTIVATION_BACKENDS", ("cpu",))
    assert mixed.activations == jnp.bfloat16                    # as on a GPU
    assert Policy.parse("mixed_float16").activations == jnp.float16
    kept = Policy.parse("mixed_bfloat16,activations=float32")
    assert (kept.param_dtype, kept.compute_dtype, kept.output_dtype, kept.activations) == (
        jnp.float32, jnp.bfloat16, jnp.float32, jnp.float32)
    assert Policy.parse(str(kept)) == kept and kept != mixed
    assert Policy.parse("mixed_bfloat16, a=f32") == kept
    assert Policy.parse("mixed_bfloat16,activations=bfloat16").activations == jnp.bfloat16


@pytest.mark.parametrize("bad", ["float64", "mixed", "params=float32,compute=int8",
                                 "weights=float32", "mixed_bfloat16,float32",
                                 "activations=float32,mixed_bfloat16"])
def test_bad_specs_name_what_was_expected(bad):
    with pytest.raises(ValueError, match="expected"):
        Policy.parse(bad)


def test_needs_loss_scaling_only_for_float16_compute():
    assert Policy.parse("mixed_float16").needs_loss_scaling
    assert not Policy.parse("mixed_bfloat16").needs_loss_scaling
    assert not Policy.parse("float32").needs_loss_scaling


def test_casting_helpers_touch_only_floating_leaves():
    tree = {"w": jnp.ones(2, jnp.float32), "ids": jnp.arange(3), "h": np.ones(1, np.float16)}
    policy = Policy.parse("mixed_bfloat16")
    compute = policy.cast_to_compute(tree)
    assert compute["w"].dtype == jnp.bfloat16 and compute["h"].dtype == jnp.bfloat16
    assert compute["ids"].dtype == tree["ids"].dtype
    assert policy.cast_to_param(compute)["w"].dtype == jnp.float32
    assert cast_floating(tree, jnp.float16)["w"].dtype == jnp.float16


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, jnp.float32])
def test_mask_value_is_finite_with_headroom(dtype):
    fill = jnp.asarray(mask_value(dtype), dtype)
    assert np.isfinite(np.asarray(fill, np.float32))
    assert np.isfinite(np.asarray(fill + fill * 0.5 + jnp.asarray(-100, dtype), np.float32))
    softmax = np.asarray(
        jnp.exp(jnp.asarray([0.0, mask_value(dtype)], jnp.float32)), np.float32)
    assert softmax[1] == 0.0


@pytest.mark.parametrize("spec, activations", [("mixed_bfloat16,activations=bfloat16",
                                                jnp.bfloat16),
                                               ("mixed_float16,activations=float16",
                                                jnp.float16),
                                               ("mixed_bfloat16", jnp.float32)])
def test_mixed_policies_carry_16_bit_activations_and_float32_logits(spec, activations):
    """Between layers (the residual stream, norms, feed-forward) the activation dtype (on this
    CPU backend float32 unless named); the logits and the model's outputs float32."""
    import jax

    from textkit.models import get_model
    from textkit.models.transformer import TransformerLayer

    policy = Policy.parse(spec)
    layer = TransformerLayer(d_model=16, num_heads=2, d_ff=32, policy=policy)
    x = jnp.ones((2, 5, 16), activations)
    params = layer.init(jax.random.PRNGKey(0), x, None)
    assert layer.apply(params, x, None).dtype == activations
    model = get_model("bert_tiny", head="sequence_classification", vocab_size=50,
                      policy=policy, num_layers=1)
    ids = jnp.ones((2, 6), jnp.int32)
    variables = model.init(jax.random.PRNGKey(0), ids)
    hidden = model.apply(variables, ids, output_hidden_states=True)
    assert hidden["logits"].dtype == jnp.float32
    _, state = model.apply(variables, ids, capture_intermediates=True,
                           mutable=["intermediates"])
    inner = state["intermediates"]["layer_0"]["feed_forward"]["wi"]["__call__"][0]
    assert inner.dtype == activations
