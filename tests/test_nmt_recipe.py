"""Translation recipe end to end on a small toy split: pipeline, summary, resume, translate.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import sacrebleu
import subprocesses

from textkit.batchify import BatchShape
from textkit.data import toy_translation
from textkit.errors import TextkitError
from textkit.tasks import translation
from textkit.tasks.translation import (
    Seq2SeqBatchify,
    bleu_scores,
    init_seq2seq_params,
    seq2seq_preset,
)
from textkit.training import CheckpointManager

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "nmt"
TOY = "300,24,24"
# a small, fast configuration: 2 bucket shapes, a narrow Transformer, beam 2
FAST = ["--toy-sizes", TOY, "--spm-vocab-size", "200", "--batch-tokens", "512",
        "--batch-rows-multiple", "1", "--num-buckets", "2", "--eval-every", "4",
        "--beam-size", "2",
        "--decode-batch-size", "32", "--warmup-steps", "4", "--log-every", "2",
        "--model-overrides", "d_model=32,d_ff=64,num_encoder_layers=1,num_decoder_layers=1"]


def load_script(name: str):
    return subprocesses.load_script(EXAMPLES / f"{name}.py", f"nmt_{name}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An uninterrupted 8-step run, and a run cut short by its time budget (at its first
    logged step, 2) resumed to 8 steps."""
    train = load_script("train")
    root = tmp_path_factory.mktemp("nmt")
    whole = train.main([*FAST, "--max-steps", "8", "--average-last", "2",
                        "--save-dir", str(root / "whole")])
    first = train.main([*FAST, "--max-steps", "8", "--average-last", "2",
                        "--time-budget-min", "1e-6", "--save-dir", str(root / "resumed")])
    resumed = train.main([*FAST, "--max-steps", "8", "--average-last", "2", "--resume",
                          "--save-dir", str(root / "resumed")])
    return {"root": root, "whole": whole, "first": first, "resumed": resumed, "train": train}


def restore_latest(save_dir: Path):
    """(state as a dict of arrays, extra) of the latest checkpoint."""
    with CheckpointManager(save_dir / "checkpoints") as manager:
        return manager.restore("latest")


def test_batchify_builds_shifted_targets_and_dummy_rows():
    batchify = Seq2SeqBatchify(pad_id=1, bos_id=2, eos_id=3)
    batch = batchify([([5, 6, 7], [8, 9]), ([10], [11, 12, 13])], BatchShape(3, (8, 8)))
    assert batch["src_tokens"].shape == (3, 8) and batch["tgt_input"].shape == (3, 8)
    np.testing.assert_array_equal(batch["src_tokens"][0, :4], [5, 6, 7, 1])
    np.testing.assert_array_equal(batch["tgt_input"][1, :5], [2, 11, 12, 13, 1])
    np.testing.assert_array_equal(batch["tgt_output"][1, :5], [11, 12, 13, 3, 1])
    np.testing.assert_array_equal(batch["src_lengths"], [3, 1, 0])
    np.testing.assert_array_equal(batch["tgt_lengths"], [3, 4, 0])
    assert (batch["tgt_input"][2] == 1).all() and batch["tgt_output"].dtype == np.int32


def test_loader_shapes_are_the_bucket_shapes():
    samples = [(list(range(4, 4 + n)), list(range(4, 4 + m)))
               for n, m in zip(range(1, 41), range(40, 0, -1))]
    loader = translation.seq2seq_loader(samples, 256, pad_id=1, bos_id=2, eos_id=3, num_buckets=3)
    allowed = {(s.rows, *s.lengths) for s in loader.batch_sampler.bucket_shapes}
    batches = list(loader)
    seen = {(b["src_tokens"].shape[0], b["src_tokens"].shape[1], b["tgt_input"].shape[1])
            for b in batches}
    assert seen <= allowed
    assert sum(int((b["src_lengths"] > 0).sum()) for b in batches) == len(samples)


def test_seq2seq_preset_rejects_unknown_fields():
    with pytest.raises(ValueError, match="no config field"):
        seq2seq_preset("transformer_tiny", src_vocab_size=50, tgt_vocab_size=50,
                                pad_id=1, not_a_field=3)
    model = seq2seq_preset("transformer_tiny", src_vocab_size=50, tgt_vocab_size=60,
                                    pad_id=1, precision="mixed_bfloat16")
    assert not model.config.share_embeddings
    assert str(model.config.policy) == "params=float32,compute=bfloat16,output=float32"


@pytest.mark.slow
def test_summary_has_the_documented_keys(runs):
    summary = runs["whole"]
    saved = json.loads((runs["root"] / "whole" / "summary.json").read_text())
    for key in ("task", "config", "test_bleu", "test_bleu_lowercase", "signature", "wall_s",
                "tokens_per_s", "num_compiles", "history", "stopped_by"):
        assert key in saved, key
    assert saved["test_bleu"] == summary["test_bleu"]
    assert saved["signature"].startswith("nrefs:1|case:mixed|")
    assert saved["signature_lowercase"].startswith("nrefs:1|case:lc|")
    assert saved["steps"] == 8 and saved["tokens_per_s"] > 0
    # at most one train-step program per bucket shape
    assert 1 <= saved["num_compiles"] <= saved["num_bucket_shapes"] == 2


@pytest.mark.slow
def test_checkpoints_record_validation_and_data_position(runs):
    extra = restore_latest(runs["root"] / "whole")[1]
    assert [h["step"] for h in extra["progress"]["history"]] == [4, 8]
    assert all("valid_bleu" in h for h in extra["progress"]["history"])
    assert extra["progress"]["tokens"] > 0
    assert extra["sampler"]["position"] + extra["sampler"]["epoch"] * extra["sampler"][
        "num_steps"] == 8


@pytest.mark.slow
def test_time_budget_stops_training_and_still_tests(runs):
    first = runs["first"]
    assert first["steps"] == 2 and "test_bleu" in first
    assert first["stopped_by"] == "time_budget"
    extra = restore_latest(runs["root"] / "resumed")[1]
    assert [h["step"] for h in extra["progress"]["history"]] == [2, 4, 8]


@pytest.mark.slow
def test_resume_with_gradient_accumulation_equals_uninterrupted_run(runs, tmp_path):
    train, accum = runs["train"], ["--accum-steps", "2", "--max-steps", "6", "--eval-every",
                                   "3", "--average-last", "1"]
    whole = train.main([*FAST, *accum, "--save-dir", str(tmp_path / "whole")])
    train.main([*FAST, *accum, "--time-budget-min", "1e-6", "--save-dir", str(tmp_path / "cut")])
    resumed = train.main([*FAST, *accum, "--resume", "--save-dir", str(tmp_path / "cut")])
    whole_state, whole_extra = restore_latest(tmp_path / "whole")
    resumed_state, resumed_extra = restore_latest(tmp_path / "cut")
    assert int(whole_state["step"]) == int(resumed_state["step"]) == 6
    assert whole_extra["progress"]["data_crc32"] == resumed_extra["progress"]["data_crc32"]
    for a, b in zip(jax.tree_util.tree_leaves(whole_state["params"]),
                    jax.tree_util.tree_leaves(resumed_state["params"])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=0)
    assert resumed["test_bleu"] == pytest.approx(whole["test_bleu"], abs=1e-6)
    with pytest.raises(TextkitError, match="accum_steps"):
        train.main([*FAST, "--accum-steps", "3", "--max-steps", "8", "--resume",
                    "--save-dir", str(tmp_path / "cut")])


@pytest.mark.slow
def test_resume_equals_uninterrupted_run(runs):
    root = runs["root"]
    whole_state, whole_extra = restore_latest(root / "whole")
    resumed_state, resumed_extra = restore_latest(root / "resumed")
    assert int(whole_state["step"]) == int(resumed_state["step"]) == 8
    # same batches in the same order, same data position
    assert whole_extra["progress"]["data_crc32"] == resumed_extra["progress"]["data_crc32"]
    assert whole_extra["sampler"] == resumed_extra["sampler"]
    flat_whole = jax.tree_util.tree_leaves(whole_state["params"])
    flat_resumed = jax.tree_util.tree_leaves(resumed_state["params"])
    assert len(flat_whole) == len(flat_resumed) > 0
    for a, b in zip(flat_whole, flat_resumed):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=0)
    assert runs["resumed"]["test_bleu"] == pytest.approx(runs["whole"]["test_bleu"], abs=1e-6)


@pytest.mark.slow
def test_fresh_run_refuses_a_used_save_dir(runs):
    with pytest.raises(TextkitError, match="--resume"):
        runs["train"].main([*FAST, "--max-steps", "2", "--save-dir",
                            str(runs["root"] / "whole")])
    with pytest.raises(TextkitError, match="different"):
        runs["train"].main([*FAST, "--max-steps", "2", "--seed", "1", "--resume",
                            "--save-dir", str(runs["root"] / "whole")])


@pytest.mark.slow
def test_translate_script_reproduces_the_test_evaluation(runs, tmp_path):
    save_dir = runs["root"] / "whole"
    test_pairs = toy_translation("test", num_sentences=int(TOY.split(",")[2]), seed=0)
    source = "".join(s + "\n" for s, _ in test_pairs)
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "translate.py"), "--checkpoint", str(save_dir)],
        input=source, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    hypotheses = result.stdout.splitlines()
    expected = (save_dir / "test.hyp").read_text(encoding="utf-8").splitlines()
    assert hypotheses == expected
    scores = bleu_scores(hypotheses, [t for _, t in test_pairs])
    assert scores["bleu"] == pytest.approx(runs["whole"]["test_bleu"], abs=1e-9)
    assert scores["signature"] == runs["whole"]["signature"]


@pytest.mark.slow
def test_final_params_load_for_translation(runs):
    trained = translation.load_trained(runs["root"] / "whole")
    target = jax.eval_shape(lambda key: init_seq2seq_params(trained.model, key),
                            jax.random.PRNGKey(0))
    assert trained.source.startswith(runs["whole"]["evaluated"])
    assert jax.tree_util.tree_structure(trained.params) == jax.tree_util.tree_structure(target)
    assert trained.config["model"] == runs["whole"]["config"]["model"]


@pytest.mark.slow
def test_translate_int8_and_the_decode_benchmark_on_a_trained_run(runs, tmp_path):
    """translate.py --quantize int8 end to end, and benchmarks/decode.py's real-model case."""
    save_dir = runs["root"] / "whole"
    test_pairs = toy_translation("test", num_sentences=int(TOY.split(",")[2]), seed=0)
    source, reference = tmp_path / "test.src", tmp_path / "test.ref"
    source.write_text("".join(s + "\n" for s, _ in test_pairs), encoding="utf-8")
    reference.write_text("".join(t + "\n" for _, t in test_pairs), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "translate.py"), "--checkpoint", str(save_dir),
         "--quantize", "int8", "--input", str(source), "--reference", str(reference)],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    int8_out = result.stdout.splitlines()
    assert len(int8_out) == len(test_pairs)
    # the BLEU printed is sacreBLEU's on what was written (cased, then lowercased)
    expected = sacrebleu.corpus_bleu(int8_out, [[t for _, t in test_pairs]])
    lowered = sacrebleu.corpus_bleu(int8_out, [[t for _, t in test_pairs]], lowercase=True)
    printed = [line for line in result.stderr.splitlines() if line.startswith("BLEU ")]
    assert [line.split()[1] for line in printed] == [f"{expected.score:.2f}",
                                                     f"{lowered.score:.2f}"]
    assert "case:mixed" in printed[0] and "case:lc" in printed[1]
    # int8 decodes as float32 does on most sentences (94.5 % on the Multi30k model)
    float_out = (save_dir / "test.hyp").read_text(encoding="utf-8").splitlines()
    same = sum(a == b for a, b in zip(int8_out, float_out))
    assert same >= 0.75 * len(test_pairs), f"{same} of {len(test_pairs)} equal float32's"
    bench = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "decode.py"), "--case", "none",
         "--checkpoint", str(save_dir), "--sentences", str(source), "--rounds", "1",
         "--checkpoint-lines", "8"],
        capture_output=True, text=True, cwd=ROOT / "benchmarks", timeout=600)
    assert bench.returncode == 0, bench.stderr
    summary = json.loads(bench.stdout.splitlines()[-1])
    assert summary["checkpoint_sentences"] == 8
    # float32 and int8 alternate round by round; the ratio is that of the two medians
    assert summary["checkpoint_int8_ratio"] == pytest.approx(
        summary["checkpoint_int8_sent_s"] / summary["checkpoint_sent_s"], rel=0.01)
    assert 0.0 <= summary["checkpoint_int8_same_output"] <= 1.0
    assert round(8 * summary["checkpoint_int8_same_output"], 6) == int(
        round(8 * summary["checkpoint_int8_same_output"]))   # a count of the 8 sentences


@pytest.mark.slow
def test_budget_schedule_ema_and_save_interval(tmp_path):
    summary = load_script("train").main([
        *FAST, "--max-steps", "6", "--eval-every", "3", "--save-every", "2",
        "--lr-schedule", "budget", "--ema-decay", "0.9", "--average-last", "3",
        "--save-dir", str(tmp_path)])
    state, extra = restore_latest(tmp_path)
    assert int(state["step"]) == 6 and [h["step"] for h in summary["history"]] == [3, 6]
    with CheckpointManager(tmp_path / "checkpoints") as manager:
        assert manager.all_steps()[-3:] == [3, 4, 6]        # evaluated and saved-only steps
    assert "average of the last 3" in summary["evaluated"] or "best" in summary["evaluated"]
    # the tested parameters validate at least as well as the best evaluated checkpoint
    assert summary["valid_bleu"] >= max(h["valid_bleu"] for h in summary["history"]) - 1e-9
    assert np.isfinite(summary["test_bleu"])
