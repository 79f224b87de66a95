"""Decoding throughput: Transformer-base beam search (beam 4) and greedy, sentences per second.

Setting (issue 5): ``transformer_base`` (d512, 8 heads, ffn 2048, 6+6 layers, shared 32,000 vocab,
random init), a batch of 32 random sources of 24 tokens, exactly 32 generated tokens per
hypothesis (EOS suppressed through ``min_length``). Encoding, cache set-up and the search loop run
as one jit-compiled program per mode; compile time is measured apart from the timed runs.

If ``transformers`` and ``torch`` are installed, HuggingFace ``generate`` with a randomly
initialised MarianMT model of the same size and settings runs in the same invocation and the
ratios are printed. The last output line is one JSON object.

    python benchmarks/decode.py                 # float32 and bfloat16-weights, best reported
    python benchmarks/decode.py --quick         # tiny model, checks that everything runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from cpu_info import cpu_info

from textkit.decoding import beam_search, greedy_search, model_step_fn
from textkit.models import get_model

BATCH, SRC_LEN, STEPS, VOCAB = 32, 24, 32, 32000
PAD, BOS, EOS = 1, 2, 3


def build(name: str, vocab: int, precision: str) -> tuple[Any, Any]:
    """Model and random parameters. ``precision="bfloat16"`` stores the weights in bfloat16 for
    inference (one cast up front instead of one per decoding step) under a bfloat16 compute
    policy; ``float32`` keeps everything float32."""
    policy = ("float32" if precision == "float32"
              else "params=bfloat16,compute=bfloat16,output=float32")
    model = get_model(name, src_vocab_size=vocab, tgt_vocab_size=vocab, dropout=0.0,
                      pad_id=PAD, policy=policy)
    dummy = jnp.full((1, 8), BOS, jnp.int32)
    params = model.init(jax.random.key(0), dummy, dummy)["params"]   # op by op: no long compile
    return model, params


def decoder(model: Any, mode: str, steps: int):
    """jit-compiled ``(params, src_tokens int32[B, S]) -> tokens int32[B, n, steps]``."""
    step_fn = model_step_fn(model)

    def run(params, src_tokens):
        variables = {"params": params}
        encoded = model.apply(variables, src_tokens, method="encode")
        cache = model.apply(variables, encoded, src_tokens, steps, method="init_cache")
        if mode == "beam4":
            out = beam_search(step_fn, params, cache, BOS, beam_size=4, max_length=steps,
                              eos_id=EOS, alpha=0.6, pad_id=PAD, min_length=steps)
        else:
            out = greedy_search(step_fn, params, cache, BOS, max_length=steps, eos_id=EOS,
                                pad_id=PAD, min_length=steps)
        return out.tokens

    return jax.jit(run)


def time_textkit(model: Any, params: Any, src: np.ndarray, mode: str, steps: int,
                 repeats: int) -> dict[str, float]:
    """Compile time and median wall time per batch (after one warm-up run)."""
    run = decoder(model, mode, steps)
    src = jnp.asarray(src)
    start = time.perf_counter()
    compiled = run.lower(params, src).compile()
    compile_s = time.perf_counter() - start
    tokens = compiled(params, src)
    tokens.block_until_ready()
    lengths_ok = bool(np.all(np.asarray(tokens) != PAD))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        compiled(params, src).block_until_ready()
        times.append(time.perf_counter() - start)
        print(f"  textkit {mode}: {times[-1]:.3f}s per batch", flush=True)
    if not lengths_ok:
        raise RuntimeError(f"{mode}: some hypothesis stopped before {steps} tokens")
    median = statistics.median(times)
    return {"compile_s": compile_s, "batch_s": median, "sent_s": src.shape[0] / median}


def time_huggingface(src: np.ndarray, vocab: int, steps: int, repeats: int,
                     quick: bool) -> dict[str, float] | None:
    """HF MarianMT of the same size, random init, ``generate`` with the same settings."""
    try:
        import torch
        from transformers import MarianConfig, MarianMTModel
    except ImportError:
        print("transformers/torch not installed: HuggingFace comparison skipped")
        return None
    size = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256) if quick \
        else dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                  decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048)
    config = MarianConfig(vocab_size=vocab, pad_token_id=PAD, eos_token_id=EOS,
                          decoder_start_token_id=BOS, max_position_embeddings=256,
                          share_encoder_decoder_embeddings=True, **size)
    torch.manual_seed(0)
    model = MarianMTModel(config).eval()
    inputs = torch.as_tensor(src, dtype=torch.long)
    result = {}
    for mode, beams in (("beam4", 4), ("greedy", 1)):
        def generate(beams=beams):
            with torch.no_grad():
                return model.generate(inputs, attention_mask=torch.ones_like(inputs),
                                      num_beams=beams, do_sample=False, max_new_tokens=steps,
                                      min_new_tokens=steps, early_stopping=False)
        generate()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            generate()
            times.append(time.perf_counter() - start)
            print(f"  HF {mode}: {times[-1]:.3f}s per batch", flush=True)
        result[f"hf_{mode}_sent_s"] = src.shape[0] / statistics.median(times)
    return result


def matmul_gflops() -> float:
    """float32 2048^3 matmul throughput now: how busy the machine is (165-180 GFLOP/s measured
    on the quiet 2-core AVX-512 development VM, 60 or less when other jobs share it)."""
    a = jnp.ones((2048, 2048), jnp.float32)
    matmul = jax.jit(lambda a: a @ a)
    matmul(a).block_until_ready()
    best = min(_timed(lambda: matmul(a).block_until_ready()) for _ in range(3))
    return 2 * 2048**3 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny model, vocab 1000, 8 steps: checks that the script runs")
    parser.add_argument("--precision", choices=["float32", "bfloat16", "both"], default=None,
                        help="textkit weights/compute dtype; 'both' (default; float32 with "
                             "--quick) reports the faster")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-hf", action="store_true", help="skip the HuggingFace side")
    args = parser.parse_args()

    name, vocab, steps = ("transformer_tiny", 1000, 8) if args.quick \
        else ("transformer_base", VOCAB, STEPS)
    rng = np.random.default_rng(0)
    src = rng.integers(4, vocab, size=(BATCH, SRC_LEN)).astype(np.int32)
    precision = args.precision or ("float32" if args.quick else "both")
    precisions = ["float32", "bfloat16"] if precision == "both" else [precision]
    machine = cpu_info()
    print(f"cpu: {machine['cpu']}; has {machine['features']}; lacks {machine['missing']}",
          flush=True)
    calibration = matmul_gflops()
    print(f"devices: {jax.devices()}; model {name}, vocab {vocab}, batch {BATCH} x {SRC_LEN}, "
          f"{steps} steps; f32 matmul {calibration:.0f} GFLOP/s now", flush=True)

    measured: dict[str, dict[str, dict[str, float]]] = {}
    for precision in precisions:
        model, params = build(name, vocab, precision)
        for mode in ("beam4", "greedy"):
            print(f"textkit {mode} ({precision}) ...", flush=True)
            stats = time_textkit(model, params, src, mode, steps, args.repeats)
            measured.setdefault(mode, {})[precision] = stats
            print(f"textkit {mode} {precision}: {stats['sent_s']:.1f} sentences/s, "
                  f"compile {stats['compile_s']:.1f}s", flush=True)

    summary: dict[str, Any] = {"model": name, "batch": BATCH, "src_len": SRC_LEN,
                               "steps": steps, "vocab": vocab,
                               "matmul_gflops_at_start": round(calibration, 1)}
    compile_s = 0.0
    for mode in ("beam4", "greedy"):
        best = max(measured[mode], key=lambda p: measured[mode][p]["sent_s"])
        summary[f"{mode}_sent_s"] = round(measured[mode][best]["sent_s"], 2)
        summary[f"{mode}_precision"] = best
        summary[f"{mode}_compile_s"] = round(measured[mode][best]["compile_s"], 2)
        for precision, stats in measured[mode].items():
            summary[f"{mode}_{precision}_sent_s"] = round(stats["sent_s"], 2)
        compile_s += measured[mode][best]["compile_s"]
    summary["compile_s"] = round(compile_s, 2)
    summary["matmul_gflops_at_end"] = round(matmul_gflops(), 1)
    summary["cpu"] = machine

    hf = None if args.no_hf else time_huggingface(src, vocab, steps, args.repeats, args.quick)
    if hf:
        summary.update({key: round(value, 2) for key, value in hf.items()})
        for mode in ("beam4", "greedy"):
            summary[f"{mode}_ratio"] = round(summary[f"{mode}_sent_s"] / hf[f"hf_{mode}_sent_s"], 2)
            print(f"{mode}: textkit / HF = {summary[f'{mode}_ratio']:.2f}x")
    print(f"beam4 {summary['beam4_sent_s']} sent/s, greedy {summary['greedy_sent_s']} sent/s, "
          f"compile {summary['compile_s']}s")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
