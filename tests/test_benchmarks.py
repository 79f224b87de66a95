"""Every benchmark script runs, in every mode that needs no peer's packages (torch,
transformers, ctranslate2: those modes are run by hand), on tiny settings. The figures
themselves are never checked (tests do not assert on wall time); what is checked is what the
JSON line must hold whatever the machine: the keys of each mode, the counts, and the figures
derived from other figures of the same line."""

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from subprocesses import ROOT, cpu_env

from textkit.data import toy_translation

BENCHMARKS = ROOT / "benchmarks"


def run_benchmark(command: list[str], tmp_path) -> tuple[dict, str]:
    """(the last line's JSON, the whole output) of one benchmark run."""
    out = subprocess.run([sys.executable, *command], cwd=tmp_path, env=cpu_env(1), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stdout


def last_json(command: list[str], tmp_path) -> dict:
    return run_benchmark(command, tmp_path)[0]


def positive_finite(*values):
    return all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in values)


def hf_installed() -> bool:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.slow
def test_decode_benchmark_every_mode_without_a_peer(tmp_path):
    """The synthetic case, float32 and bfloat16 (the rounded path forced), the in-place cache
    against the gathered one, and the HF side: skipped with its reason where torch is absent."""
    result, log = run_benchmark(
        [str(BENCHMARKS / "decode.py"), "--case", "synthetic", "--quick", "--rounds", "2",
         "--bfloat16", "--bf16-dots", "rounded", "--compare-gather", "2"], tmp_path)
    modes = ("beam4", "greedy", "beam4_int8", "greedy_int8")
    for mode in modes:
        assert positive_finite(result[f"{mode}_sent_s"], result[f"{mode}_bfloat16_sent_s"])
    assert not [key for key in result if key.startswith("marian_")]
    assert positive_finite(result["inplace_beam2_sent_s"], result["gather_beam2_sent_s"])
    assert result["bf16_dots"] == "rounded" and result["quick"] is True
    assert (result["batch"], result["src_len"], result["steps"]) == (32, 24, 32)
    # two alternating rounds per measurement: float32 and bfloat16
    assert len(re.findall(r"^  round 2: ", log, re.M)) == 2
    if hf_installed():
        assert "hf_skipped" not in result
        for mode in modes:
            peer = result[f"hf_{mode.removesuffix('_int8')}_sent_s"]
            assert result[f"{mode}_ratio"] == pytest.approx(result[f"{mode}_sent_s"] / peer,
                                                            abs=0.02)
    else:
        assert re.search("torch|transformers", result["hf_skipped"]), result["hf_skipped"]
        assert not [key for key in result if key.endswith("_ratio")]
    # CTranslate2 (not a test dependency): the JSON says why its ratios are missing
    if "ct2_skipped" in result:
        assert "beam4_ct2_ratio" not in result and "greedy_int8_ct2_ratio" not in result


@pytest.mark.slow
def test_decode_benchmark_marian_checkpoint_case(tmp_path):
    """The checkpoint case: a Marian checkpoint written, loaded by ``load_translator`` and
    decoded in every mode, float32 only (the bfloat16 path is the synthetic case's)."""
    result = last_json([str(BENCHMARKS / "decode.py"), "--case", "marian", "--quick",
                        "--rounds", "1"], tmp_path)
    for mode in ("beam4", "greedy", "beam4_int8", "greedy_int8"):
        assert positive_finite(result[f"marian_{mode}_sent_s"])
        assert f"{mode}_sent_s" not in result


@pytest.mark.slow
@pytest.mark.parametrize("options", [["--mode", "beam4_int8"], ["--mode", "greedy", "--gather"],
                                     ["--mode", "greedy_int8", "--case", "marian"]])
def test_decode_profile_quick(tmp_path, options):
    result = last_json([str(BENCHMARKS / "decode_profile.py"), "--quick", "--runs", "1",
                        *options], tmp_path)
    assert result["mode"] == options[1] and result["gather"] == ("--gather" in options)
    assert result["case"] == ("marian" if "marian" in options else "synthetic")
    kinds = result["by_kind"]
    assert "matmul" in kinds and "top-k / argmax" in kinds
    # the groups add up to the traced total; the top list names instructions of those groups
    assert sum(kinds.values()) == pytest.approx(result["traced_ms_per_step"], abs=0.01)
    assert positive_finite(result["traced_ms_per_step"], result["ms_per_step"])
    assert 1 <= len(result["top"]) <= 15
    assert sum(ms for _, _, ms in result["top"]) <= result["traced_ms_per_step"] + 0.01


@pytest.mark.slow
def test_embedding_load_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "embedding_load.py"), "--quick", "--workdir",
                        str(tmp_path / "work")], tmp_path)
    text = tmp_path / "work" / "glove_5000x50.txt"
    assert (result["rows"], result["dim"]) == (5000, 50)   # each child asserts 5,000 rows
    assert result["file_mib"] == round(text.stat().st_size / 2**20, 1)
    assert len(text.read_text().splitlines()) == 5000
    cases = ("textkit_text", "textkit_cached", "gensim_text", "gensim_binary")
    assert positive_finite(*(result[f"{case}_s"] for case in cases))
    assert result["text_speedup"] == pytest.approx(
        result["gensim_text_s"] / result["textkit_text_s"], rel=0.02)
    assert result["cached_speedup_vs_gensim_binary"] == pytest.approx(
        result["gensim_binary_s"] / result["textkit_cached_s"], rel=0.02)


@pytest.fixture
def generated_multi30k(tmp_path):
    """Toy pairs in Multi30k's tokenised layout (``train.lc.norm.tok.{en,de}``)."""
    folder = tmp_path / "tok"
    folder.mkdir()
    pairs = toy_translation("train", num_sentences=1500, seed=0)
    (folder / "train.lc.norm.tok.en").write_text("".join(s + "\n" for s, _ in pairs))
    (folder / "train.lc.norm.tok.de").write_text("".join(t + "\n" for _, t in pairs))
    return folder, pairs


def test_bucketing_benchmark_on_generated_pairs(tmp_path, generated_multi30k):
    folder, pairs = generated_multi30k
    result = last_json([str(BENCHMARKS / "bucketing.py"), "--data-dir", str(folder)], tmp_path)
    lengths = np.array([(len(s.split()) + 1, len(t.split()) + 1) for s, t in pairs])
    # random batching, recomputed: batches of 64 in the seed-0 permutation, padded to the max
    order = np.random.default_rng(0).permutation(len(lengths))
    cells = sum(len(chunk) * chunk.max(axis=0).sum() for chunk in
                (lengths[order[i:i + 64]] for i in range(0, len(order), 64)))
    assert result["random"]["num_batches"] == math.ceil(1500 / 64)
    assert result["random"]["pad_fraction"] == round(1 - lengths.sum() / cells, 4)
    fixed, rounded = result["fixed_bucket"], result["fixed_bucket_round8"]
    assert rounded["pad_fraction"] >= fixed["pad_fraction"]   # rows of 64, longer padding
    for name in ("fixed_bucket", "token_budget", "fixed_bucket_round8", "token_budget_round8"):
        assert result[name]["num_shapes"] <= result[name]["num_batches"]
    assert result["fixed_bucket"]["pad_fraction"] < result["random"]["pad_fraction"]
    assert result["fixed_bucket"]["batch_sizes"] == [64]
    assert max(result["token_budget"]["batch_sizes"]) <= 4096


@pytest.mark.slow
def test_data_pipeline_quick_on_generated_pairs(tmp_path, generated_multi30k):
    folder, pairs = generated_multi30k
    result, log = run_benchmark([str(BENCHMARKS / "data_pipeline.py"), "--quick", "--data-dir",
                                 str(folder), "--spm-vocab-size", "300"], tmp_path)
    assert positive_finite(result["tokens_per_s"], result["spm_encode_tokens_per_s"])
    # one epoch: every source token + eos and every target token + eos, counted once
    expected = sum(len(s.split()) + 1 + len(t.split()) + 1 for s, t in pairs)
    assert re.search(rf"^loader: {expected} tokens in [\d.]+s over 1 epoch", log, re.M), log
    assert re.search(r"^sentencepiece: 3000 sentences -> \d+ pieces .*\(vocab 300\)", log, re.M)


@pytest.mark.slow
def test_latency_benchmark_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "latency.py"), "--quick", "--no-peers", "--rounds",
                        "2"], tmp_path)
    assert result["source_tokens"] == 20 and result["steps"] == 20
    for mode in ("greedy", "beam4", "greedy_int8", "beam4_int8"):
        assert result[f"latency_{mode}_ms"] > 0
        assert result[f"first_call_{mode}_s"] > result[f"latency_{mode}_ms"] / 1000
    assert result["ct2_skipped"] == result["hf_skipped"] == "--no-peers"


def test_int8_dot_benchmark_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "int8_dot.py"), "--quick", "--rows", "1,48"], tmp_path)
    for product in ("logits", "ffn_in", "ffn_out"):
        for rows in (1, 48):
            figures = [result[f"{product}_{rows}_{kind}"] for kind in ("int8_ms", "bf16_ms")]
            assert min(figures) > 0
            assert result[f"{product}_{rows}_ratio"] == pytest.approx(
                figures[0] / figures[1], rel=0.1)   # (the figures are rounded to 1 µs)
    assert result["crossover_rows"] in (None, 1, 48)
    assert result["bf16_carrier_min_rows"] == 48 and result["quick"] is True


def test_adamw_update_benchmark_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "adamw_update.py"), "--quick", "--runs", "2"], tmp_path)
    assert positive_finite(*(result[f"{name}_ms"] for name in ("recipe", "optax", "one_pass")))
    assert result["one_pass_ratio"] == pytest.approx(
        result["optax_ms"] / result["one_pass_ms"], rel=0.01)
    assert result["max_abs_diff"] < 1e-6        # the one-pass form is optax's update
    for name in ("recipe", "optax", "one_pass"):
        assert result[f"fusions_{name}"] >= 1   # the embedding table is updated in the program
    assert result["quick"] is True and result["params"] > 0


def test_grad_dots_benchmark_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "grad_dots.py"), "--quick", "--runs", "2"], tmp_path)
    flops = 2 * result["rows"] * result["d_in"] * result["d_out"]
    for name in ("forward", "input_grad", "weight_grad", "weight_grad_transposed",
                 "weight_grad_flat_transposed"):
        for dtype in ("float32", "bfloat16"):
            key = f"{name}_{dtype}"
            assert positive_finite(result[f"{key}_ms"], result[f"{key}_gflops"])
            assert result[f"{key}_gflops"] == pytest.approx(
                flops / result[f"{key}_ms"] / 1e6, rel=0.05, abs=0.1)  # (both are rounded)
            assert isinstance(result[f"{key}_ynn"], bool)
            assert result[f"{key}_float32_operands"] in ((False,) if dtype == "float32"
                                                         else (False, True))
    assert result["quick"] is True and (result["rows"], result["d_in"]) == (64, 32)


@pytest.mark.slow
def test_large_corpus_benchmark_small(tmp_path):
    result = last_json([str(BENCHMARKS / "large_corpus.py"), "--pairs", "3000", "--workers",
                        "2", "--compare-in-memory"], tmp_path)
    assert result["pairs"] == 3000 and result["store_tokens"] > 3000 * 2
    assert positive_finite(*(result[key] for key in (
        "build_s", "build_peak_rss_mib", "epoch_tokens_per_s", "train_peak_rss_mib",
        "in_memory_s")))


@pytest.mark.slow
def test_train_step_benchmark_quick_with_the_rounded_bf16_path(tmp_path):
    result = last_json([str(BENCHMARKS / "train_step.py"), "--quick", "--bf16-dots", "rounded"],
                       tmp_path)
    assert result["bf16_dots"] == "rounded"
    assert {k for k in result if k.startswith("tiny_")} == {"tiny_float32", "tiny_bfloat16"}
    for case in ("tiny_float32", "tiny_bfloat16"):
        entry = result[case]
        assert positive_finite(entry["textkit_tok_s"], entry["flax_ref_tok_s"])
        assert entry["ratio"] == pytest.approx(
            entry["textkit_tok_s"] / entry["flax_ref_tok_s"], rel=0.01)
        assert positive_finite(entry["mfu"], entry["compile_s"])
    assert "cpu" in result


@pytest.mark.slow
def test_gpu_check_smoke_without_a_peer(tmp_path):
    """The prepared GPU check (issue 43) on tiny shapes: every part runs, the figures derive
    from one another, and the goals are reported (the peer's as None when it did not run)."""
    result = last_json([str(BENCHMARKS / "gpu_check.py"), "--smoke", "--no-peer"], tmp_path)
    assert "errors" not in result, result.get("errors")
    assert result["smoke"] is True and result["platform"] == "cpu"
    assert result["peak_source"].startswith("measured") and result["peak_flops"] > 0
    train = result["transformer_train"]
    for dtype in ("bfloat16", "float16"):
        entry = train[dtype]
        assert positive_finite(entry["tok_s"], entry["mfu"], entry["compile_s"])
        assert entry["tok_s"] == pytest.approx(
            train["batch"] * train["tgt_len"] / (entry["step_ms"] / 1e3), rel=0.01)
        assert entry["mfu"] == pytest.approx(
            train["flops_per_step"] / (entry["step_ms"] / 1e3) / result["peak_flops"],
            rel=0.01, abs=1e-4)
        bert = result["bert_squad"][dtype]
        assert positive_finite(bert["seq_s"], bert["mfu"]) and "ratio" not in bert
    assert positive_finite(result["decode_beam4"]["sent_s"])
    assert "ratio" not in result["decode_beam4"]
    assert result["peer_skipped"] == {"bert_squad": "--no-peer", "decode_beam4": "--no-peer"}
    goals = result["goals"]
    assert goals["bert_bf16_vs_torch_amp"] is None and goals["decode_vs_hf_fp16"] is None
    assert goals["bert_bf16_mfu"] == result["bert_squad"]["bfloat16"]["mfu"]
    assert goals["transformer_bf16_mfu_met"] is (train["bfloat16"]["mfu"] >= 0.40)


@pytest.mark.slow
def test_encoder_benchmark_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "encoder.py"), "--quick", "--no-peer", "--rounds", "1",
                        "--bfloat16", "on"], tmp_path)
    assert positive_finite(result["infer_sent_s"], result["infer_bf16_sent_s"],
                           result["train_tok_s"])
    assert result["peer_skipped"] == "--no-peer" and "infer_ratio" not in result


@pytest.mark.slow
@pytest.mark.parametrize("pack", [False, True])
def test_finetune_benchmark_quick(tmp_path, pack):
    result = last_json([str(BENCHMARKS / "finetune.py"), "--quick", "--no-peer", "--rounds",
                        "1"] + (["--pack"] if pack else []), tmp_path)
    # the token budget gives about 32 sentences per step: ceil(400 / 32) = 13 steps or fewer
    assert result["sentences"] == 400 and result["textkit_steps"] <= 13
    assert result["pack"] is pack
    assert 28 <= result["textkit_rows_per_step"] <= 40
    assert result["textkit_epoch_s"] > 0
    assert result["peer_skipped"] == "--no-peer" and "epoch_ratio" not in result


@pytest.mark.slow
def test_lora_benchmark_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "lora.py"), "--quick", "--no-peer", "--steps", "1"],
                       tmp_path)
    assert positive_finite(*(result[f"textkit_{case}_step_s"] for case in
                             ("attention", "all", "full")), result["memory_ratio"])
    assert result["trained_attention"] < result["trained_all"] < result["trained_full"]
    assert result["peer_skipped"] == "--no-peer" and "step_ratio_all" not in result
    if result["textkit_full_steps_peak_mib"] is not None:   # Linux lets the peak restart
        assert 0 < result["textkit_all_steps_peak_mib"] <= result["textkit_all_peak_mib"]
        assert result["steps_memory_ratio"] == pytest.approx(
            result["textkit_all_steps_peak_mib"] / result["textkit_full_steps_peak_mib"],
            abs=1e-3)


def test_median_json_combines_the_last_lines_of_several_runs(tmp_path):
    runs = [{"beam4_ratio": r, "greedy_ratio": g, "quick": False, "cpu": {"cpu": "x"},
             "nested": {"a": r * 2}} for r, g in ((2.71, 2.18), (2.98, 2.07), (2.80, 2.05))]
    log = "round 1: noise\n" + "".join(json.dumps(run) + "\nnot json\n" for run in runs)
    out = subprocess.run([sys.executable, str(BENCHMARKS / "median_json.py")], input=log,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["runs"] == 3 and set(result) == {"runs", "beam4_ratio", "greedy_ratio",
                                                   "nested.a"}
    assert result["beam4_ratio"] == {"median": 2.80, "min": 2.71, "max": 2.98}
    assert result["greedy_ratio"]["median"] == 2.07
    assert result["nested.a"]["median"] == pytest.approx(5.6)


@pytest.mark.slow
def test_pretrain_profile_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "pretrain_profile.py"), "--quick", "--runs", "1"],
                       tmp_path)
    groups = result["by_group"]
    for name in ("dense products, forward", "dense products, backward", "attention products",
                 "masked-LM head products", "layer norm", "dropout"):
        assert name in groups, name
    assert sum(groups.values()) == pytest.approx(result["traced_s"], abs=1e-3)
    assert positive_finite(result["grads_s"], result["update_s"], result["traced_s"])
    assert 1 <= len(result["top"]) <= 10 and result["quick"] is True


@pytest.mark.slow
def test_finetune_profile_quick(tmp_path):
    result = last_json([str(BENCHMARKS / "finetune_profile.py"), "--quick"], tmp_path)
    assert result["steps"] == result["epoch_steps"] > 0      # one update per training step
    assert positive_finite(result["gradients_ms"], result["update_ms"],
                           result["gradients_busy_ms"], result["update_busy_ms"])
    assert 0 < result["products_busy_ms"] <= result["gradients_busy_ms"]
    assert 1 <= len(result["top"]) <= 10 and result["top"][0][0] in ("traced", "update")
    assert 1 <= len(result["others_busy_ms"]) <= 8
    assert result["pack"] is True and result["quick"] is True


@pytest.mark.slow
def test_word2vec_benchmark_quick(tmp_path):
    """Each mode on both sides (textkit and gensim, each in its own process), the ratio from
    the two rates of the same line, and the held-out fastText scores on every pair."""
    result = last_json([str(BENCHMARKS / "word2vec.py"), "--quick", "--held-out"], tmp_path)
    assert result["quick"] is True and result["seeds"] == [1] and result["workers"] == 2
    for mode in ("skipgram", "cbow", "fasttext"):
        textkit, gensim = result[f"{mode}_textkit"][0], result[f"{mode}_gensim"][0]
        assert textkit["tokens"] == gensim["tokens"] == result["tokens"] == 30000
        assert textkit["vocab"] == gensim["vocab"]
        assert positive_finite(textkit["words_s"], gensim["words_s"], textkit["compile_s"])
        assert result[f"{mode}_ratio"] == pytest.approx(
            result[f"{mode}_textkit_words_s"] / result[f"{mode}_gensim_words_s"], rel=1e-6)
    for side in ("textkit", "gensim"):
        scores = result[f"fasttext_{side}"][0]
        assert scores["subword_wordsim353.tsv"]["pairs_used"] == 353
        assert scores["subword_simlex999.txt"]["pairs_used"] == 999
    assert "cpu" in result["cpu"]


@pytest.mark.slow
def test_serve_benchmark_without_a_peer(tmp_path):
    """Two textkit servers (slots and one slot) under a load generator in its own process."""
    result = last_json([str(BENCHMARKS / "serve.py"), "--quick", "--no-peer", "--rounds", "1",
                        "--clients", "1,2"], tmp_path)
    for name in ("textkit_1", "textkit_2", "textkit_batch1_1", "textkit_batch1_2"):
        assert positive_finite(result[name]["tokens_per_s"], result[name]["ttft_p50_s"])
        assert result[name]["ttft_p99_s"] >= result[name]["ttft_p50_s"]
    assert result["vs_peer_tokens_8"] is None and result["quick"] is True
