"""LoRA (``textkit.adapters``, ``pretrained.peft``, ``tasks.lora``): peft's adapters loaded with
peft's logits, textkit's adapter files under peft's names, merge / unmerge, the adapters on the
activations equal to the merged model, training that changes the adapters only, the recipe
flags, a resumed LoRA run, and bad input refused by name.

``tests/fixtures/peft`` holds adapters peft 0.21.2 wrote over the tiny checkpoints and peft's
outputs (``tools/make_peft_adapters.py``); no torch or peft is imported here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from textkit.adapters import Adapter, LoraConfig, lora_on_activations, unnested
from textkit.errors import ConfigError
from textkit.pretrained import PretrainedError, load_pretrained
from textkit.pretrained.lora_sites import lora_for
from textkit.pretrained.peft import load_adapter, save_adapter
from textkit.tasks.causal_lm import CausalLMConfig
from textkit.tasks.lora import LoraSettings
from textkit.training import create_train_state, make_train_step

ROOT = Path(__file__).resolve().parents[1]
PEFT = ROOT / "tests" / "fixtures" / "peft"
NAMES = sorted(d.name for d in PEFT.iterdir() if (d / "adapter_config.json").is_file())
FAST = {"gpt2", "llama", "roberta_seqcls", "marian"}
_BASES: dict[Path, object] = {}


def base_path(name: str) -> Path:
    """The base checkpoint a fixture's adapter_config.json names."""
    return ROOT / json.loads((PEFT / name / "adapter_config.json").read_text())[
        "base_model_name_or_path"]


def base_of(name: str):
    """The fixture's base checkpoint, loaded once."""
    path = base_path(name)
    if path not in _BASES:
        _BASES[path] = load_pretrained(path)
    return _BASES[path]


def reference(name: str) -> tuple[dict, dict]:
    with np.load(PEFT / name / "reference.npz") as data:
        arrays = dict(data)
    inputs = {k: arrays.pop(k) for k in list(arrays)
              if k.endswith("_ids") or k == "attention_mask"}
    return inputs, arrays


def outputs(loaded, params, inputs) -> dict[str, np.ndarray]:
    ids = jnp.asarray(inputs["input_ids"], jnp.int32)
    mask = jnp.asarray(inputs["attention_mask"], jnp.int32)
    if loaded.kind == "causal_lm":
        return {"logits": loaded.model.apply({"params": params}, ids, mask.astype(bool))}
    if loaded.kind == "translation":
        return {"logits": loaded.model.apply(
            {"params": params}, ids, jnp.asarray(inputs["decoder_input_ids"], jnp.int32))}
    return loaded.model.apply({"params": params}, input_ids=ids, attention_mask=mask)


def assert_close(got, want, inputs):
    """Equal within float32 rounding: 1e-5 of the outputs' scale (the padding rows of the
    encoders' second input excluded)."""
    got, want = np.asarray(got), np.asarray(want)
    mask = inputs["attention_mask"].astype(bool)
    if got.ndim >= 2 and got.shape[:2] == mask.shape and "decoder_input_ids" not in inputs:
        got, want = got[mask], want[mask]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in NAMES])
def test_a_peft_adapter_gives_peft_outputs(name):
    base = base_of(name)
    loaded = load_pretrained(base_path(name), adapter=PEFT / name)
    inputs, want = reference(name)
    run = jax.jit(lambda params: outputs(loaded, params, inputs))
    got = run(loaded.params)
    for key, value in want.items():
        assert_close(got[key], value, inputs)
    if name not in FAST:
        return
    # the adapter beside the base kernels gives the same outputs as the merged model
    adapter = loaded.adapter
    _, base_params = load_adapter(PEFT / name, base.model, base.params)
    with lora_on_activations(adapter.lora, adapter.weights):
        beside = jax.jit(lambda params: outputs(loaded, params, inputs))(base_params)
    for key, value in want.items():
        assert_close(beside[key], value, inputs)


def test_adapter_files_keep_peft_names_both_ways(tmp_path):
    name = "roberta_seqcls"
    base = base_of(name)
    adapter, params = load_adapter(PEFT / name, base.model, base.params)
    assert adapter.lora.heads == ("classifier_dense", "classifier")
    save_adapter(base.model, adapter, params, tmp_path / "out")
    from safetensors.numpy import load_file

    theirs = load_file(PEFT / name / "adapter_model.safetensors")
    ours = load_file(tmp_path / "out" / "adapter_model.safetensors")
    assert sorted(ours) == sorted(theirs)                # lora_A / lora_B and the saved head
    for key, value in theirs.items():
        np.testing.assert_array_equal(ours[key], value)
    settings = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
    peft_settings = json.loads((PEFT / name / "adapter_config.json").read_text())
    for key in ("peft_type", "task_type", "r", "lora_alpha", "modules_to_save", "use_rslora"):
        assert settings[key] == peft_settings[key], key
    assert sorted(settings["target_modules"]) == sorted(peft_settings["target_modules"])
    again, params_again = load_adapter(tmp_path / "out", base.model, base.params)
    assert again.lora == adapter.lora
    jax.tree_util.tree_map(np.testing.assert_array_equal, params_again, params)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", [
    "decoders/gemma", "decoders/mistral", "encoders/bert_qa", "encoders/electra_tokcls",
    "encoders/xlm_roberta_seqcls", "tiny_bart", "tiny_m2m100", "tiny_mbart50"])
def test_the_other_families_take_their_default_targets_both_ways(fixture, tmp_path):
    base = load_pretrained(ROOT / "tests" / "fixtures" / fixture)
    lora = lora_for(base.model, base.params, rank=2)
    assert lora.sites and all(s.name.endswith(lora.config.targets) for s in lora.sites)
    assert bool(lora.heads) == (base.kind == "encoder")   # the task head is trained
    weights = jax.tree_util.tree_map(lambda w: w + 0.5, lora.init(jax.random.PRNGKey(0)))
    save_adapter(base.model, Adapter(lora, weights), base.params, tmp_path / "a")
    again, params = load_adapter(tmp_path / "a", base.model, base.params)
    assert again.lora == lora
    jax.tree_util.tree_map(np.testing.assert_array_equal, again.weights, weights)
    jax.tree_util.tree_map(np.testing.assert_array_equal, params, base.params)


def test_merge_and_unmerge():
    base = base_of("llama")
    lora = lora_for(base.model, base.params, rank=2, targets=["k_proj", "up_proj", "o_proj"])
    assert [s.name.rsplit(".", 1)[1] for s in lora.sites[:3]] == ["k_proj", "o_proj", "up_proj"]
    fresh = Adapter(lora, lora.init(jax.random.PRNGKey(1)))
    jax.tree_util.tree_map(np.testing.assert_array_equal, fresh.merge(base.params),
                           base.params)                  # B = 0: the base exactly
    rng = np.random.default_rng(0)
    adapter = Adapter(lora, jax.tree_util.tree_map(
        lambda w: jnp.asarray(rng.normal(0, 0.3, w.shape), jnp.float32), fresh.weights))
    merged = adapter.merge(base.params)
    qkv = ("layer_0", "attention", "qkv", "kernel")
    changed = np.asarray(merged["layer_0"]["attention"]["qkv"]["kernel"]) != \
        base.params["layer_0"]["attention"]["qkv"]["kernel"]
    heads = base.model.config.num_heads
    assert not changed[:, :heads].any() and changed[:, heads:heads + 2].all()   # k only
    assert not changed[:, heads + 2:].any(), qkv
    restored = adapter.unmerge(merged)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                           restored, base.params)


def _lm_loss(model):
    def loss_fn(params, batch, rng):
        logits = model.apply({"params": params}, batch["tokens"][:, :-1])
        nll = -jnp.take_along_axis(jax.nn.log_softmax(logits),
                                   batch["tokens"][:, 1:, None], -1)[..., 0]
        return nll.sum(), (jnp.float32(nll.size), {})
    return loss_fn


def test_training_changes_the_adapters_only():
    base = base_of("llama")
    lora = lora_for(base.model, base.params, rank=2, dropout=0.2)
    frozen = jax.tree_util.tree_map(jnp.asarray, base.params)
    before = jax.tree_util.tree_map(np.array, frozen)
    loss = _lm_loss(base.model)

    def lora_loss(params, batch, rng):
        trained, base_params = params
        with lora_on_activations(lora, trained, rng):
            return loss(base_params, batch, rng)

    tx = optax.adam(1e-2)
    weights = lora.init(jax.random.PRNGKey(0))
    state = create_train_state(weights, tx, jax.random.PRNGKey(1), frozen=frozen)
    step = make_train_step(lora_loss, tx)
    batch = {"tokens": np.random.default_rng(0).integers(3, 300, (2, 9)).astype(np.int32)}
    for _ in range(3):
        state, metrics = step(state, batch)
    assert np.isfinite(metrics["loss"])
    assert state.frozen is frozen                        # the same arrays, never donated
    jax.tree_util.tree_map(np.testing.assert_array_equal, state.frozen, before)
    shapes = {x.shape for x in jax.tree_util.tree_leaves(weights)}
    held = [x.shape for x in jax.tree_util.tree_leaves(state.opt_state) if x.ndim]
    assert held and set(held) <= shapes                  # moments of the adapters only
    trained = unnested(state.params)
    assert all(np.abs(np.asarray(v)).max() > 0 for k, v in trained.items()
               if k.endswith("lora_B"))                  # B left zero: the adapters trained


def test_checkpoints_hold_the_trained_part_only(tmp_path):
    from textkit.training.checkpoint import CheckpointManager

    tx = optax.adam(1e-3)
    trained = {"lora_A": jnp.ones((2, 3))}
    state = create_train_state(trained, tx, jax.random.PRNGKey(0),
                               frozen={"kernel": jnp.full((64, 64), 2.0)})
    with CheckpointManager(tmp_path / "ckpt") as manager:
        manager.save(1, state)
        manager.wait_until_finished()
        other = state.replace(params={"lora_A": jnp.zeros((2, 3))},
                              frozen={"kernel": jnp.full((64, 64), 3.0)})
        restored, _ = manager.restore(1, other)
    np.testing.assert_array_equal(restored.params["lora_A"], 1.0)     # from the step
    assert restored.frozen is other.frozen                             # from the target
    saved = sum(p.stat().st_size for p in (tmp_path / "ckpt").rglob("*") if p.is_file())
    assert saved < 64 * 64 * 4                                         # no base inside


@pytest.mark.slow
def test_adapters_over_an_int8_base_get_the_gradients_of_the_float_base():
    from textkit.models.kernels import quantize_int8

    base = base_of("llama")
    lora = lora_for(base.model, base.params, rank=2, targets=["q_proj", "up_proj"])
    weights = jax.tree_util.tree_map(lambda w: w + 0.1, lora.init(jax.random.PRNGKey(0)))
    int8 = quantize_int8(base.model, base.params, jnp.zeros((1, 8), jnp.int32))
    assert int8["layer_0"]["attention"]["qkv"]["kernel"].dtype == jnp.int8
    loss = _lm_loss(base.model)
    batch = {"tokens": np.random.default_rng(0).integers(3, 300, (2, 9)).astype(np.int32)}

    def grads(frozen):
        def of(w):
            with lora_on_activations(lora, w):
                total, (count, _) = loss(frozen, batch, None)
            return total / count
        return unnested(jax.jit(jax.grad(of))(weights))

    want, got = grads(base.params), grads(int8)
    for name, value in want.items():                # the first layer's too: through int8
        error = np.abs(np.asarray(got[name]) - value).max() / np.abs(value).max()
        assert 0 < np.abs(got[name]).max() and error < 0.2, name


@pytest.mark.slow
def test_a_lora_task_trains_adapters_and_head_only(tmp_path):
    from textkit.tasks.lora import with_lora
    from textkit.tasks.sequence_classification import (
        SequenceClassificationConfig,
        SequenceClassificationTask,
    )
    from textkit.training import RunDir

    config = SequenceClassificationConfig(
        pretrained=str(ROOT / "tests" / "fixtures" / "encoders" / "roberta_seqcls"),
        save_dir=str(tmp_path), **SequenceClassificationConfig.tiny,
        lora=LoraSettings(lora_rank=2, lora_dropout=0.1))
    task = with_lora(SequenceClassificationTask(config, RunDir(tmp_path),
                                                log=lambda message: None))
    data = {split: task.read_split(split) for split in task.splits}
    task.prepare(data)
    model = task.build_model()
    tx, _ = task.optimizer(4)
    state = create_train_state(task.init_params(model, jax.random.PRNGKey(0)), tx,
                               jax.random.PRNGKey(1), frozen=task.frozen_params())
    assert set(state.params["heads"]) == {"classifier_dense", "classifier"}
    assert not set(state.frozen) & set(state.params["heads"])
    trained = {x.shape for x in jax.tree_util.tree_leaves(state.params)}
    assert {x.shape for x in jax.tree_util.tree_leaves(state.opt_state) if x.ndim} <= trained
    frozen = jax.tree_util.tree_map(np.array, state.frozen)
    before = jax.tree_util.tree_map(np.array, state.params)
    step = task.make_train_step(model, tx)
    batch = next(iter(task.make_loader(data["train"], train=True)))
    for _ in range(2):                                   # the first step's warm-up rate is 0
        state, metrics = step(state, batch)
    assert np.isfinite(metrics["loss"])
    jax.tree_util.tree_map(np.testing.assert_array_equal, state.frozen, frozen)
    moved = jax.tree_util.tree_map(lambda a, b: bool((np.asarray(a) != b).any()),
                                   state.params, before)
    assert all(jax.tree_util.tree_leaves(moved["heads"]))
    assert any(jax.tree_util.tree_leaves(moved["lora"]))
    assert task.evaluate(model, state.params, data["valid"])["accuracy"] >= 0.0


def test_bad_targets_and_ranks_are_refused():
    base = base_of("gpt2")
    with pytest.raises(ValueError, match=r"'q_proj' matches no module.*c_attn"):
        lora_for(base.model, base.params, targets=["q_proj"])
    with pytest.raises(ValueError, match=r"rank 64 is larger than .*c_attn \(32 in, 96 out\)"):
        lora_for(base.model, base.params, rank=64)
    with pytest.raises(ValueError, match="rank must be >= 1"):
        LoraConfig(rank=0, targets=("c_attn",))


def _copy(name: str, tmp_path: Path, **settings) -> Path:
    target = tmp_path / name
    shutil.copytree(PEFT / name, target)
    path = target / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **settings}))
    return target


@pytest.mark.parametrize("settings, message", [
    ({"peft_type": "IA3"}, "peft_type 'IA3'; textkit reads LORA adapters only"),
    ({"use_dora": True}, "use_dora True is not implemented"),
    ({"r": 3}, r"embed_tokens.lora_embedding_A has shape \(2, 320\) but the base model's "
               r"model.embed_tokens needs \(3, 320\)"),
    ({"target_modules": ["wq"]}, "'wq' matches no module"),
])
def test_bad_adapters_are_refused_by_name(tmp_path, settings, message):
    base = base_of("llama")
    with pytest.raises(PretrainedError, match=message):
        load_adapter(_copy("llama", tmp_path, **settings), base.model, base.params)


def test_a_peft_target_list_may_name_modules_the_base_lacks(tmp_path):
    base = base_of("llama")                              # as peft: unmatched names skipped
    names = json.loads((PEFT / "llama" / "adapter_config.json").read_text())["target_modules"]
    adapter, _ = load_adapter(_copy("llama", tmp_path, target_modules=[*names, "c_attn"]),
                              base.model, base.params)
    assert sorted(adapter.lora.config.targets) == sorted(names)


def test_an_adapter_of_another_base_names_the_shapes():
    base = base_of("llama")                              # qwen3's adapter over llama
    with pytest.raises(PretrainedError, match=r"q_proj.lora_B.weight has shape \(64, 4\) but "
                                              r"the base model's model.layers.0.self_attn."
                                              r"q_proj needs \(32, 4\).*another base model"):
        load_adapter(PEFT / "qwen3", base.model, base.params)


def test_recipe_flags_are_checked_before_a_run():
    base = str(ROOT / "tests" / "fixtures" / "decoders" / "llama")
    with pytest.raises(ConfigError, match="--no-export --merge"):
        CausalLMConfig(init_from=base, export=False,
                       lora=LoraSettings(lora_rank=2, merge=True))
    with pytest.raises(ConfigError, match="--merge needs --lora-rank"):
        LoraSettings(merge=True)
    with pytest.raises(ConfigError, match="--lora-rank needs --init-from"):
        CausalLMConfig(lora=LoraSettings(lora_rank=2))
    assert LoraSettings(lora_targets="q_proj, v_proj").targets == ("q_proj", "v_proj")
    with pytest.raises(ConfigError, match="--quantize-base needs --lora-rank"):
        LoraSettings(quantize_base="int8")
    with pytest.raises(ConfigError, match="--quantize-base int8 --merge"):
        LoraSettings(lora_rank=2, quantize_base="int8", merge=True)
    from textkit.tasks.sequence_classification import SequenceClassificationConfig

    with pytest.raises(ConfigError, match="--quantize-base int8 is the causal-LM recipe's"):
        SequenceClassificationConfig(pretrained=str(base), lora=LoraSettings(
            lora_rank=2, quantize_base="int8"))


@pytest.mark.slow
def test_generator_and_the_generate_command_take_an_adapter(capsys):
    from textkit.cli.generate import main
    from textkit.decoding import Generator

    llama = ROOT / "tests" / "fixtures" / "decoders" / "llama"
    loaded = load_pretrained(llama, adapter=PEFT / "llama")
    base = loaded.adapter.unmerge(loaded.params)
    generator = Generator.from_pretrained(loaded, batch_size=1, max_new_tokens=4)
    with_adapter = generator.generate(base, [[5, 17, 42]], adapter=loaded.adapter)
    merged = generator.generate(loaded.params, [[5, 17, 42]])
    plain = generator.generate(base, [[5, 17, 42]])
    assert with_adapter[0].token_ids == merged[0].token_ids != plain[0].token_ids
    assert main(["--pretrained", str(llama), "--adapter", str(PEFT / "llama"), "--jsonl",
                 "--max-new-tokens", "4", "--batch-size", "1", "--prompt", "5 17 42"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["token_ids"] == generator.generate(loaded.params, ["5 17 42"])[0].token_ids


@pytest.mark.slow
def test_a_lora_run_resumes_and_exports_peft_files_and_a_merged_model(tmp_path):
    from subprocesses import load_script

    recipe = load_script(ROOT / "examples" / "language_model" / "train.py", "lm_lora_recipe")
    text = tmp_path / "train.txt"
    text.write_text("the cat sat on the mat\na dog runs in the park today\n" * 8)
    base = str(ROOT / "tests" / "fixtures" / "decoders" / "llama")
    common = ["--init-from", base, "--train-file", str(text), "--max-length", "16",
              "--batch-size", "4", "--lr", "3e-2", "--no-tensorboard", "--no-progress",
              "--lora-rank", "2", "--lora-dropout", "0.1", "--lora-targets",
              "q_proj,v_proj,up_proj", "--merge", "--save-dir", str(tmp_path / "run")]
    first = recipe.main([*common, "--max-steps", "2"])
    halfway = load_pretrained(base, adapter=first["export"]).adapter
    resumed = recipe.main([*common, "--max-steps", "4", "--resume"])
    assert resumed["steps"] == 4
    assert "resumed from epoch 0, step 2" in (tmp_path / "run" / "train.log").read_text()
    loaded = load_pretrained(base, adapter=resumed["export"])
    assert loaded.adapter.lora == halfway.lora
    moved = [np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in zip(
        jax.tree_util.tree_leaves(loaded.adapter.weights),
        jax.tree_util.tree_leaves(halfway.weights))]
    assert min(moved) > 0                                 # it went on from step 2
    merged = load_pretrained(tmp_path / "run" / "merged")  # a plain checkpoint
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                           merged.params, loaded.params)
    frozen = loaded.adapter.unmerge(loaded.params)         # the base, untouched
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                           frozen, base_of("llama").params)
