"""The pretraining task and recipe on generated text: ELECTRA's labels, the schedules and
optimizers, the export reloaded with equal logits (masked LM, ELECTRA's discriminator and
generator; transformers' logits where /tmp/hfenv has it), bad settings refused at start-up,
and the recipe's run, exact resume and fine-tuning of its export."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from textkit.errors import ConfigError
from textkit.pretrained import EncoderTokenizer, load_pretrained
from textkit.tasks.pretraining import (
    PretrainingConfig,
    PretrainingTask,
    special_ids,
)
from textkit.tasks.pretraining_objectives import generator_params, replaced_tokens
from textkit.training import RunDir
from textkit.training.schedules import scale_by_budget_schedule

ROOT = Path(__file__).resolve().parent.parent
HF_PYTHON = Path("/tmp/hfenv/bin/python")
TINY = "hidden_size=16,num_layers=1,num_heads=2,intermediate_size=32"
ELECTRA = f"{TINY},embedding_size=8"
TEXTS = ["the big horse sang today .", "six doctors sleep under the tree ."]


def prepared(tmp_path: Path, **fields) -> tuple[PretrainingTask, dict, object]:
    config = PretrainingConfig(**{**PretrainingConfig.tiny, "model": "bert_tiny",
                                  "model_overrides": TINY, "save_dir": str(tmp_path),
                                  **fields})
    task = PretrainingTask(config, RunDir(tmp_path), log=lambda message: None)
    data = {split: task.read_split(split) for split in task.splits}
    task.prepare(data)
    return task, data, task.build_model()


def test_electra_labels_are_token_differs_from_the_original():
    targets = jnp.array([[2, 10, 11, 12, 13, 3, 0]])
    positions = jnp.array([[1, 2, 3, 0]])
    weights = jnp.array([[1, 1, 1, 0]], jnp.float32)
    real = jnp.array([[1, 1, 1, 1, 1, 1, 0]], jnp.float32)
    # the generator is sure of the original at position 1 and of other tokens at 2 and 3
    logits = jnp.where(jax.nn.one_hot(jnp.array([[10, 20, 21, 5]]), 30) > 0, 50.0, -50.0)
    fake, labels = replaced_tokens(logits, targets, positions, weights, real, jax.random.key(0))
    assert fake.tolist() == [[2, 10, 20, 21, 13, 3, 0]]          # the unused slot writes none
    assert labels.tolist() == [[0, 0, 1, 1, 0, 0, 0]]
    many = jax.random.normal(jax.random.key(1), (64, 4, 30))
    fake, labels = replaced_tokens(many, jnp.tile(targets, (64, 1)), jnp.tile(positions, (64, 1)),
                                   weights, real, jax.random.key(2))
    assert (labels == ((fake != targets) * real)).all() and (fake[:, 4:] == targets[:, 4:]).all()
    assert (fake[:, 0] == 2).all() and 0 < float(labels.mean()) < 3 / 7


def test_schedule_warms_up_then_decays_to_zero_with_its_power():
    """Pretraining's schedule (the shared budget schedule): warm-up over 10% of the steps to
    the peak, then ``--decay-power`` of the remaining fraction down to 0 at the end."""
    for power in (1.0, 0.5):
        tx = scale_by_budget_schedule(1.0, 0, 100, decay_fraction=1.0, warmup_fraction=0.1,
                                      power=power)
        state = tx.init({"w": jnp.zeros(())})
        rates = []
        for _ in range(101):
            update, state = tx.update({"w": jnp.ones(())}, state)
            rates.append(-float(update["w"]))
        assert rates[0] == 0 and rates[5] == pytest.approx(0.5) and rates[10] == 1.0
        assert rates[55] == pytest.approx(0.5 ** power) and rates[100] == 0


@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_optimizers_decay_matrices_only_and_lamb_scales_by_trust_ratio(tmp_path, optimizer):
    task, _, _ = prepared(tmp_path, optimizer=optimizer, weight_decay=0.5, clip_norm=0.0)
    tx, _ = task.optimizer(100)                        # 6 warm-up steps: lr 1e-3 / 6 next
    params = {"w": jnp.full((4, 4), 2.0), "b": jnp.full((4,), 3.0)}
    state = tx.init(params)
    for grads in ({"w": jnp.zeros((4, 4)), "b": jnp.zeros(4)},) * 2:
        updates, state = tx.update(grads, state, params)
    lr = 1e-3 / 6
    if optimizer == "adamw":                           # zero gradients: the decay alone
        np.testing.assert_allclose(updates["w"], -lr * 0.5 * params["w"], rtol=1e-5)
        assert not np.asarray(updates["b"]).any()
    else:                                              # |update| = lr * |param| per leaf
        assert float(jnp.linalg.norm(updates["w"])) == pytest.approx(lr * 8.0, rel=1e-5)


def test_masked_lm_with_sentence_order_evaluates(tmp_path):
    task, data, model = prepared(tmp_path / "sop", pairs="sop")
    scores = task.evaluate(model, task.init_params(model, jax.random.key(0)), data["valid"])
    assert 0 <= scores["pair_accuracy"] <= 1 and scores["masked_tokens"] > 0
    assert 0 <= scores["mlm_accuracy"] < 0.5 and math.isfinite(scores["mlm_loss"])


def test_the_head_at_the_prediction_slots_gives_the_full_logits_there(tmp_path):
    task, data, model = prepared(tmp_path, objective="mlm")
    params = task.init_params(model, jax.random.key(5))
    batch = next(iter(task.make_loader(data["valid"], train=False)))
    loss, (masked, metrics) = jax.jit(task.make_loss(model))(params, batch, None)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    full = jax.jit(lambda p: model.encoder.apply({"params": p}, **inputs)["logits"])(
        params["encoder"])                                               # [B, T, V]
    picked = np.zeros(batch["input_ids"].shape, bool)
    np.put_along_axis(picked, batch["mlm_positions"], batch["mlm_weights"] > 0, axis=1)
    log_p = jax.nn.log_softmax(full)[picked]
    want = -np.take_along_axis(np.asarray(log_p), batch["targets"][picked][:, None], 1).sum()
    assert float(masked) == picked.sum() > 0
    assert float(loss) == pytest.approx(want, rel=1e-5) == float(metrics["mlm_nll"])


def outputs(network, params, tokenizer: EncoderTokenizer) -> tuple[dict, np.ndarray]:
    batch = tokenizer.encode_batch(TEXTS)
    logits = jax.jit(lambda p, b: network.apply({"params": p}, **b)["logits"])(params, batch)
    return batch, np.asarray(logits)


def write_reference(directory: Path, batch: dict, logits: np.ndarray) -> None:
    """What tools/check_pretraining_exports.py compares transformers' outputs with."""
    np.savez(directory / "textkit_outputs.npz", **batch, logits=logits)
    (directory / "textkit_texts.json").write_text(json.dumps(TEXTS))


def test_mlm_export_reloads_with_equal_logits(tmp_path):
    task, _, model = prepared(tmp_path)
    params = task.init_params(model, jax.random.key(3))
    export = task.export(model, params, tmp_path / "export")
    loaded = load_pretrained(export)
    assert json.loads((export / "config.json").read_text())["architectures"] == [
        "BertForMaskedLM"]
    batch, want = outputs(model.encoder, params["encoder"], task.tokenizer)
    _, got = outputs(loaded.model, loaded.params, loaded.tokenizer)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    write_reference(export, batch, want)


def electra_export(tmp_path: Path) -> tuple[Path, list[Path]]:
    task, _, model = prepared(tmp_path, objective="electra",
                                 model="electra_small_discriminator", model_overrides=ELECTRA)
    assert model.generator.config.hidden_size == 4
    assert model.generator.config.embedding_size == model.config.embedding_size == 8
    params = task.init_params(model, jax.random.key(4))
    assert "word_embeddings" not in params["generator"]
    export = task.export(model, params, tmp_path / "export")
    checked = []
    for directory, network, own in ((export, model.encoder, params["encoder"]),
                                    (export / "generator", model.generator,
                                     generator_params(params))):
        loaded = load_pretrained(directory)
        batch, want = outputs(network, own, task.tokenizer)
        _, got = outputs(loaded.model, loaded.params, loaded.tokenizer)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        write_reference(directory, batch, want)
        checked.append(directory)
    return export, checked


def test_electra_export_reloads_discriminator_and_generator(tmp_path):
    export, _ = electra_export(tmp_path)
    architectures = [json.loads((d / "config.json").read_text())["architectures"][0]
                     for d in (export, export / "generator")]
    assert architectures == ["ElectraForPreTraining", "ElectraForMaskedLM"]


def test_continuing_from_an_export_starts_from_its_weights(tmp_path):
    export, _ = electra_export(tmp_path / "first")
    task, _, model = prepared(tmp_path / "again", objective="electra", pretrained=str(export),
                              model="electra_small_discriminator", model_overrides="")
    params = task.init_params(model, jax.random.key(9))
    for directory, own in ((export, params["encoder"]),
                           (export / "generator", generator_params(params))):
        saved = load_pretrained(directory).params
        assert jax.tree.structure(saved) == jax.tree.structure(own)
        assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(saved),
                                                        jax.tree.leaves(own)))


@pytest.mark.slow
@pytest.mark.skipif(not HF_PYTHON.is_file(), reason="transformers' environment /tmp/hfenv")
def test_transformers_loads_the_exports_with_equal_logits(tmp_path):
    test_mlm_export_reloads_with_equal_logits(tmp_path / "mlm")
    _, electra = electra_export(tmp_path / "electra")
    exports = [tmp_path / "mlm" / "export", *electra]
    done = subprocess.run([str(HF_PYTHON), str(ROOT / "tools" / "check_pretraining_exports.py"),
                           *map(str, exports)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(done.stdout.splitlines()) == 3


# ------------------------------------------------------------------------------ bad input
def no_mask_tokenizer() -> EncoderTokenizer:
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"])}
    inner = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    inner.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return EncoderTokenizer(inner, pad_token="[PAD]", with_token_types=True)


def test_bad_settings_are_refused_at_start_up(tmp_path):
    with pytest.raises(ConfigError, match="no mask token"):
        special_ids(no_mask_tokenizer(), "DIR")
    with pytest.raises(ConfigError, match="--mask-probability 1.0"):
        PretrainingConfig(mask_probability=1.0)
    with pytest.raises(ConfigError, match="--init random"):
        PretrainingConfig(init="random")
    with pytest.raises(ConfigError, match="ELECTRA has none"):
        PretrainingConfig(objective="electra", pairs="nsp")
    with pytest.raises(ConfigError, match="above the 512 positions of bert_tiny"):
        prepared(tmp_path / "long", max_length=600)
    with pytest.raises(ConfigError, match="electra discriminator; bert_tiny is bert"):
        prepared(tmp_path / "electra", objective="electra")


def test_a_corpus_without_one_full_sequence_is_refused_with_its_counts(tmp_path):
    train = tmp_path / "train.txt"
    train.write_text("a b c\nd\n\ne f g h\n", encoding="utf-8")
    task, data, _ = prepared(tmp_path / "run", train_file=(str(train),), documents="lines",
                             vocab_size=60)
    with pytest.raises(ConfigError, match=r"no full sequence of --max-length 32 tokens \(2 "
                       r"documents, 1 skipped documents, 2 sentences, 7 tokens, 2 sequences"):
        task.make_loader(data["train"], train=True)


# ------------------------------------------------------------------------------ the recipe
def recipe(argv: list[str]) -> dict:
    from subprocesses import load_script

    return load_script(ROOT / "examples" / "pretrain" / "train.py", "pretrain_train").main(argv)


@pytest.mark.slow
def test_recipe_resumes_exactly_and_its_export_fine_tunes(tmp_path):
    text = tmp_path / "train.txt"
    words = "the a big small horse dog sang ran under over today now".split()
    rng = np.random.default_rng(0)
    text.write_text("\n\n".join("\n".join(" ".join(rng.choice(words, 5)) for _ in range(6))
                                for _ in range(60)) + "\n", encoding="utf-8")
    common = ["--train-file", str(text), str(text), "--valid-file", str(text),
              "--model", "bert_tiny", "--model-overrides", TINY, "--vocab-size", "80",
              "--max-length", "32", "--batch-size", "4", "--whole-word-masking",
              "--pairs", "sop", "--optimizer", "lamb",
              "--no-tensorboard", "--no-progress", "--log-every", "2"]
    whole = recipe([*common, "--max-steps", "6", "--save-dir", str(tmp_path / "whole")])
    recipe([*common, "--max-steps", "3", "--save-dir", str(tmp_path / "cut")])
    resumed = recipe([*common, "--max-steps", "6", "--save-dir", str(tmp_path / "cut"),
                      "--resume"])
    assert whole["config"]["train_file"] == [str(text), str(text)]
    assert resumed["steps"] == whole["steps"] == 6
    assert resumed["data_crc32"] == whole["data_crc32"]       # the same batches and masks
    assert 0 <= whole["valid_mlm_accuracy"] <= 1 and whole["corpus"]["documents"] == 120
    export = Path(whole["export"])
    sys.path.insert(0, str(ROOT / "examples" / "finetune"))
    try:
        import classify
    finally:
        sys.path.pop(0)
    tuned = classify.main(["--pretrained", str(export), "--toy-examples", "32",
                           "--max-length", "32", "--batch-tokens", "256", "--max-steps", "2",
                           "--save-dir", str(tmp_path / "tuned"), "--no-tensorboard",
                           "--no-progress"])
    assert tuned["steps"] == 2 and "valid_accuracy" in tuned


@pytest.mark.slow
def test_electra_recipe_trains_both_networks_and_exports_them(tmp_path):
    summary = recipe(["--objective", "electra", "--model", "electra_small_discriminator",
                      "--model-overrides", ELECTRA, "--toy-documents", "40",
                      "--max-length", "32", "--batch-size", "4", "--vocab-size", "200",
                      "--max-steps", "3", "--save-dir", str(tmp_path / "run"),
                      "--no-tensorboard", "--no-progress"])
    assert set(summary["parameters"]) == {"encoder", "generator"}
    assert 0 < summary["valid_rtd_accuracy"] <= 1 and 0 < summary["valid_replaced_fraction"] < 1
    assert math.isfinite(summary["valid_mlm_loss"]) and summary["last_loss"] > 0
    export = Path(summary["export"])
    assert load_pretrained(export / "generator").model.config.head == "masked_lm"


@pytest.mark.slow
def test_benchmark_quick_without_a_peer(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pretrain.py"), "--quick",
                           "--no-peer", "--rounds", "1", "--processes", "2"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["peer_skipped"] == "--no-peer" and result["quick"] is True
    assert result["processes"] == 2
    for key in ("step_s_float32", "step_s_bfloat16", "masking_seq_s"):
        assert len(result[f"{key}_processes"]) == 2
        assert result[key] == pytest.approx(np.median(result[f"{key}_processes"]), abs=1e-4)
    assert result["masking_headroom"] == pytest.approx(
        result["masking_seq_s"] / result["step_seq_s"], rel=0.01)
    assert all(math.isfinite(result[k]) for k in ("eval_loss", "loss_float32", "loss_bfloat16"))


# ------------------------------------------------------------------------------ learning
def chain_text(path: Path, lines: int, seed: int) -> None:
    """Lines that walk a fixed cycle of 24 words (each word fixes the next): a token that
    breaks the walk is replaced, which a discriminator tells from its neighbours."""
    words = [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(24)]
    after = np.random.default_rng(0).permutation(24)
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(lines):
        at, row = int(rng.integers(24)), []
        for _ in range(int(rng.integers(34, 44))):
            row.append(words[at])
            at = int(after[at])
        rows.append(" ".join(row))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


@pytest.mark.slow
def test_electra_discriminator_learns_replaced_token_detection(tmp_path):
    """A tiny ELECTRA with the task's loss and optimizer (weight 50, clipping at 1.0) brings
    the discriminator's cross-entropy clearly below the constant answer's on text whose
    tokens follow from their neighbours; both losses reach the shared embeddings."""
    chain_text(tmp_path / "train.txt", 600, seed=1)
    chain_text(tmp_path / "valid.txt", 40, seed=2)
    task, data, model = prepared(
        tmp_path / "run", objective="electra", model="electra_small_discriminator",
        model_overrides="hidden_size=64,num_layers=2,num_heads=4,intermediate_size=128,"
                        "embedding_size=32",
        train_file=(str(tmp_path / "train.txt"),), valid_file=str(tmp_path / "valid.txt"),
        documents="lines", vocab_size=100, batch_size=16, lr=5e-4)
    params = task.init_params(model, jax.random.key(0))
    loss_fn = task.make_loss(model)
    batch = next(iter(task.make_loader(data["train"], train=True)))
    for source in ("mlm_nll", "rtd_bce"):                            # each part alone
        grads = jax.jit(jax.grad(lambda p, b, source=source: loss_fn(
            p, b, jax.random.key(1))[1][1][source]))(params, batch)
        assert float(jnp.abs(grads["encoder"]["word_embeddings"]["embedding"]).max()) > 0
        if source == "rtd_bce":
            assert not any(np.asarray(g).any() for g in jax.tree.leaves(grads["generator"]))
    steps = 240
    tx, _ = task.optimizer(steps)
    opt = tx.init(params)

    @jax.jit
    def step(params, opt, batch, key):
        def mean(p):
            total, (masked, metrics) = loss_fn(p, batch, key)
            return total / jnp.maximum(masked, 1.0), metrics
        (_, metrics), grads = jax.value_and_grad(mean, has_aux=True)(params)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, metrics

    done = 0
    while done < steps:
        for batch in task.make_loader(data["train"], train=True):
            params, opt, _ = step(params, opt, batch, jax.random.key(done))
            done += 1
            if done == steps:
                break
    scores = task.evaluate(model, params, data["valid"])
    share = scores["replaced_fraction"]
    baseline = -(share * math.log(share) + (1 - share) * math.log(1 - share))
    assert scores["rtd_constant_loss"] == pytest.approx(baseline)
    assert 0.05 < scores["replaced_fraction"] < 0.25
    assert scores["rtd_loss"] < 0.75 * baseline, (scores, baseline)
    assert scores["rtd_accuracy"] > 1 - scores["replaced_fraction"] + 0.02, scores


@pytest.mark.parametrize("cased", [False, True])
def test_the_trained_vocabulary_keeps_case_only_with_cased(tmp_path, cased):
    train = tmp_path / "train.txt"
    train.write_text("\n".join(["Paris is big . Berlin is small ."] * 40) + "\n",
                     encoding="utf-8")
    task, _, _ = prepared(tmp_path / "run", train_file=(str(train),), documents="lines",
                          vocab_size=80, cased=cased)
    pieces = task.tokenizer.tokenizer.encode("Paris paris").tokens
    if cased:   # "paris" never occurs in the text: it splits into pieces
        assert pieces[1] == "Paris" and "paris" not in pieces
    else:
        assert pieces == ["[CLS]", "paris", "paris", "[SEP]"]
    saved = EncoderTokenizer.from_directory(tmp_path / "run" / "tokenizer", "bert")
    assert saved.tokenizer.encode("Paris").tokens == task.tokenizer.tokenizer.encode(
        "Paris").tokens
