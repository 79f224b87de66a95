"""The benchmark scripts still run (tiny settings; the figures themselves are not checked)."""

import json
import subprocess
import sys

import pytest
from subprocesses import ROOT, cpu_env

BENCHMARKS = ROOT / "benchmarks"


def last_json(command: list[str], tmp_path) -> dict:
    out = subprocess.run([sys.executable, *command], cwd=tmp_path, env=cpu_env(1), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_decode_benchmark_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "decode.py"), "--quick", "--no-hf", "--rounds", "1"],
                       tmp_path)
    for key in ("beam4_sent_s", "greedy_sent_s", "greedy_int8_sent_s", "marian_beam4_sent_s",
                "marian_greedy_sent_s", "marian_greedy_int8_sent_s"):
        assert result[key] > 0
    assert "cpu" in result and "beam4_ratio" not in result
    assert result["hf_skipped"] == "--no-hf"
    # CTranslate2 is not installed here: the JSON says why its ratios are missing
    assert "ctranslate2" in result["ct2_skipped"] and "beam4_ct2_ratio" not in result


@pytest.mark.slow
def test_latency_benchmark_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "latency.py"), "--quick", "--no-peers", "--rounds",
                        "2"], tmp_path)
    assert result["source_tokens"] == 20 and result["steps"] == 20
    for mode in ("greedy", "beam4", "greedy_int8", "beam4_int8"):
        assert result[f"latency_{mode}_ms"] > 0
        assert result[f"first_call_{mode}_s"] > result[f"latency_{mode}_ms"] / 1000
    assert result["ct2_skipped"] == result["hf_skipped"] == "--no-peers"


@pytest.mark.slow
def test_large_corpus_benchmark_small(tmp_path):
    result = last_json([str(BENCHMARKS / "large_corpus.py"), "--pairs", "3000", "--workers",
                        "2", "--compare-in-memory"], tmp_path)
    assert result["pairs"] == 3000 and result["store_tokens"] > 3000 * 2
    for key in ("build_s", "build_peak_rss_mib", "epoch_tokens_per_s", "train_peak_rss_mib",
                "in_memory_s"):
        assert result[key] > 0


@pytest.mark.slow
def test_train_step_benchmark_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "train_step.py"), "--quick"], tmp_path)
    for case in ("small_float32", "small_bfloat16"):
        assert result[case]["textkit_tok_s"] > 0 and result[case]["flax_ref_tok_s"] > 0
    assert "cpu" in result


@pytest.mark.slow
def test_encoder_benchmark_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "encoder.py"), "--quick", "--no-peer", "--rounds", "1",
                        "--bfloat16", "on"], tmp_path)
    assert result["infer_sent_s"] > 0 and result["infer_bf16_sent_s"] > 0
    assert result["train_tok_s"] > 0
    assert result["peer_skipped"] == "--no-peer" and "infer_ratio" not in result


@pytest.mark.slow
def test_finetune_benchmark_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "finetune.py"), "--quick", "--no-peer", "--rounds",
                        "1"], tmp_path)
    # the token budget gives about 32 sentences per step: ceil(400 / 32) = 13 steps or fewer
    assert result["sentences"] == 400 and result["textkit_steps"] <= 13
    assert 28 <= result["textkit_rows_per_step"] <= 40
    assert result["textkit_epoch_s"] > 0
    assert result["peer_skipped"] == "--no-peer" and "epoch_ratio" not in result
