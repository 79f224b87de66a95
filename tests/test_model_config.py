import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.models import (
    AWDLSTMLMConfig,
    GNMTConfig,
    LSTMLMConfig,
    ModelConfig,
    RNNClassifierConfig,
    TextCNNConfig,
    TransformerConfig,
    TransformerLMConfig,
    get_model,
    parse_overrides,
)
from textkit.models.layers import dropout
from textkit.precision import Policy

CONFIGS = [TransformerConfig, GNMTConfig, LSTMLMConfig, AWDLSTMLMConfig, TransformerLMConfig,
           lambda **kw: TextCNNConfig(50, **kw), lambda **kw: RNNClassifierConfig(50, **kw)]


@pytest.mark.parametrize("make", CONFIGS)
def test_every_config_is_a_model_config_and_parses_a_policy_string(make):
    config = make(policy="mixed_bfloat16", pad_id=0)
    assert isinstance(config, ModelConfig) and config.pad_id == 0
    assert config.policy == Policy.parse("mixed_bfloat16")
    hash(config)


@pytest.mark.parametrize("make, field", [
    (TransformerConfig, "attention_dropout"), (GNMTConfig, "dropout"),
    (AWDLSTMLMConfig, "weight_drop"), (lambda **kw: TextCNNConfig(50, **kw), "dropout")])
def test_rates_are_checked_naming_the_field(make, field):
    with pytest.raises(ValueError, match=rf"\.{field}=1\.0; expected 0 <= {field} < 1"):
        make(**{field: 1.0})


def test_choices_are_checked_naming_the_field():
    with pytest.raises(ValueError, match=r"TransformerLMConfig\.positions='rotary'; expected"):
        TransformerLMConfig(positions="rotary")
    with pytest.raises(ValueError, match=r"RNNClassifierConfig\.pooling='last'"):
        RNNClassifierConfig(50, pooling="last")


def test_unknown_override_names_the_model_and_its_fields():
    with pytest.raises(ValueError, match=r"'transformer_tiny' \(TransformerConfig\) has no "
                                         r"field\(s\) d_modle; its fields: .*d_model"):
        get_model("transformer_tiny", d_modle=32)
    model = get_model("bilstm_classifier", vocab_size=30, policy="mixed_bfloat16")
    assert model.config.bidirectional and model.config.policy.compute_dtype == jnp.bfloat16


def test_parse_overrides():
    assert parse_overrides("a=1, b=0.1,c=x,w=(3,4),t=True,s='p,q'") == {
        "a": 1, "b": 0.1, "c": "x", "w": (3, 4), "t": True, "s": "p,q"}
    assert parse_overrides(["dropout=0.5", "tie_weights=False"]) == {
        "dropout": 0.5, "tie_weights": False}
    assert parse_overrides("") == {}
    with pytest.raises(ValueError, match="'oops': expected name=value"):
        parse_overrides("a=1,oops")


def test_dropout_broadcast_dims_share_one_decision():
    x = jnp.ones((4, 7, 5), jnp.float32)
    out = np.asarray(dropout(x, 0.5, jax.random.key(0), broadcast_dims=(1,)))
    np.testing.assert_array_equal(out, np.broadcast_to(out[:, :1], out.shape))
    assert set(np.unique(out)) <= {0.0, 2.0} and 0 < (out == 0).mean() < 1


def test_configs_keep_keyword_construction_and_replace():
    config = dataclasses.replace(LSTMLMConfig(vocab_size=10), dropout=0.3, policy="float32")
    assert (config.vocab_size, config.dropout, config.policy) == (10, 0.3, Policy())
