"""Transformer train-step throughput: textkit vs a plain flax.linen reference, same invocation.

One step = forward, backward and Adam on a batch of 32 x 32 source and 32 x 32 target tokens
(no padding) with a 32,000-token shared vocabulary, dropout 0.1. Throughput counts **target
tokens** (32 x 32 = 1,024 per step) for both implementations, as the issue's reference figures do.
Compile time (lower + compile of the textkit step) is reported apart and never enters the timing.
The two implementations take turns step by step, so a change in machine load hits both alike.

MFU = analytic model FLOPs per step (forward matmuls x 3 for the backward; embeddings, norms,
softmax and the optimizer not counted) / step time / the matmul peak measured here on 2048^2
dots: float32 x float32 for ``float32``; for ``bfloat16`` the faster of bfloat16 x bfloat16 ->
float32 and float32 (XLA:CPU without bf16 dot instructions runs the former slower than the
latter, and textkit then multiplies the bfloat16-rounded operands in float32; with
``avx512_bf16`` or ``amx_bf16`` it uses the native dot: see
``textkit.models.kernels.native_low_precision_dots``).

    python benchmarks/train_step.py            # small and base, float32 and bfloat16
    python benchmarks/train_step.py --quick    # tiny only, few steps: a smoke run

The last output line is one JSON object keyed ``<size>_<dtype>``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cpu_info import BF16_DOTS, choose_bf16_dots, cpu_info  # noqa: E402
from flax_reference import (  # noqa: E402
    ReferenceConfig,
    ReferenceTransformer,
    make_reference_train_step,
)

from textkit.models import get_model  # noqa: E402
from textkit.training import create_train_state, cross_entropy, make_train_step  # noqa: E402

BATCH, SRC_LEN, TGT_LEN, VOCAB, PAD = 32, 32, 32, 32000, 1
SIZES = {"tiny": dict(d_model=64, num_heads=4, d_ff=256, layers=1),
         "small": dict(d_model=256, num_heads=4, d_ff=1024, layers=3),
         "base": dict(d_model=512, num_heads=8, d_ff=2048, layers=6)}
POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16"}


def log(message: str) -> None:
    print(message, flush=True)


def matmul_peak(dtype, result_dtype, n: int = 2048, repeats: int = 5) -> float:
    """Best-of-``repeats`` GFLOP/s of an n x n x n dot with the given input/result dtypes."""
    a = jnp.asarray(np.random.default_rng(0).normal(size=(n, n)), dtype)
    dot = jax.jit(lambda x, y: jax.lax.dot(x, y, preferred_element_type=result_dtype))
    dot(a, a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dot(a, a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


def model_flops(d: int, ff: int, layers: int, batch: int = BATCH, src_len: int = SRC_LEN,
                tgt_len: int = TGT_LEN, vocab: int = VOCAB) -> float:
    """Analytic train-step FLOPs (3 x forward matmul FLOPs) of one batch."""
    src, tgt = batch * src_len, batch * tgt_len
    encoder = src * (8 * d * d + 4 * d * ff) + batch * 4 * src_len * src_len * d
    decoder = (tgt * (12 * d * d + 4 * d * ff)      # self q,k,v,o + cross q,o + ffn
               + src * 4 * d * d                    # cross-attention keys/values of the memory
               + batch * 4 * tgt_len * (tgt_len + src_len) * d)
    logits = tgt * 2 * d * vocab
    return 3.0 * (layers * (encoder + decoder) + logits)


def make_batch(seed: int, batch: int = BATCH, src_len: int = SRC_LEN, tgt_len: int = TGT_LEN,
               vocab: int = VOCAB) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tgt = rng.integers(4, vocab, (batch, tgt_len + 1), dtype=np.int32)
    return {"src_tokens": rng.integers(4, vocab, (batch, src_len), dtype=np.int32),
            "tgt_input": tgt[:, :-1], "tgt_output": tgt[:, 1:]}


def time_interleaved(runs: dict[str, Callable[[], None]], steps: int) -> dict[str, float]:
    """Median seconds per step of each ``runs[name]()`` (which blocks until done), the runs
    taking turns step by step so that both see the same machine load."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(steps):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def textkit_runner(size: str, policy: str, batch, *, vocab: int = VOCAB,
                   optimizer: optax.GradientTransformation | None = None
                   ) -> tuple[Callable[[], None], float]:
    """(warmed-up step runner, compile seconds) of the textkit train step (Adam 1e-4 unless
    ``optimizer`` is given, e.g. wrapped in a dynamic loss scale for float16)."""
    s = SIZES[size]
    model = get_model("transformer_base", src_vocab_size=vocab, tgt_vocab_size=vocab,
                      d_model=s["d_model"], num_heads=s["num_heads"], d_ff=s["d_ff"],
                      num_encoder_layers=s["layers"], num_decoder_layers=s["layers"],
                      dropout=0.1, max_len=256, pad_id=PAD, policy=policy)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), batch["src_tokens"],
                                 batch["tgt_input"])["params"]

    def loss_fn(params, batch, rng):
        logits = model.apply({"params": params}, batch["src_tokens"], batch["tgt_input"],
                             deterministic=rng is None, rngs={"dropout": rng})
        loss_sum, weight_sum = cross_entropy(logits, batch["tgt_output"],
                                             batch["tgt_output"] != PAD)
        return loss_sum, (weight_sum, None)

    optimizer = optimizer if optimizer is not None else optax.adam(1e-4)
    state = create_train_state(params, optimizer, jax.random.PRNGKey(1))
    train_step = make_train_step(loss_fn, optimizer)
    start = time.perf_counter()
    compiled = train_step.lower(state, batch).compile()
    compile_s = time.perf_counter() - start
    holder = [compiled(state, batch)[0]]  # warm-up step

    def run():
        holder[0], metrics = compiled(holder[0], batch)
        metrics["loss"].block_until_ready()

    return run, compile_s


def reference_runner(size: str, dtype_name: str, batch) -> Callable[[], None]:
    """Warmed-up step runner of the plain flax reference."""
    s = SIZES[size]
    config = ReferenceConfig(vocab_size=VOCAB, d_model=s["d_model"], num_heads=s["num_heads"],
                             d_ff=s["d_ff"], num_encoder_layers=s["layers"],
                             num_decoder_layers=s["layers"], dropout=0.1, pad_id=PAD,
                             dtype=jnp.dtype(dtype_name))
    model = ReferenceTransformer(config)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), batch["src_tokens"],
                                 batch["tgt_input"])["params"]
    optimizer = optax.adam(1e-4)
    step = make_reference_train_step(model, optimizer)
    holder = [params, optimizer.init(params), jax.random.PRNGKey(2)]

    def run():
        holder[2], rng = jax.random.split(holder[2])
        holder[0], holder[1], loss = step(holder[0], holder[1], batch, rng)
        loss.block_until_ready()

    run()  # compile + warm-up
    return run


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per case")
    parser.add_argument("--sizes", default="small,base")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--quick", action="store_true",
                        help="tiny only, 2 timed steps, 256^2 matmul peaks (a smoke run)")
    parser.add_argument("--bf16-dots", choices=BF16_DOTS, default="auto",
                        help="textkit's bfloat16 matmuls: native dots, or the rounded operands "
                             "multiplied in float32 (auto: native only with avx512_bf16/amx_bf16)")
    args = parser.parse_args(argv)
    bf16_dots = choose_bf16_dots(args.bf16_dots)
    sizes, dtypes, steps = args.sizes.split(","), args.dtypes.split(","), args.steps
    if args.quick:
        sizes, steps = ["tiny"], 2

    log(f"jax {jax.__version__} on {platform.processor() or platform.machine()}, "
        f"{jax.devices()[0].device_kind}; batch {BATCH}x{SRC_LEN} src + {BATCH}x{TGT_LEN} tgt, "
        f"vocab {VOCAB}")
    machine = cpu_info()
    log(f"cpu: {machine['cpu']}; has {machine['features']}; lacks {machine['missing']} "
        f"(without avx512_bf16/amx_bf16, bfloat16 matmuls are not faster than float32)")
    n = 256 if args.quick else 2048
    float32_peak = matmul_peak(jnp.float32, jnp.float32, n)
    bfloat16_peak = matmul_peak(jnp.bfloat16, jnp.float32, n)
    log(f"matmul peak {n}^2: float32 {float32_peak:.0f} GFLOP/s, "
        f"bfloat16->float32 {bfloat16_peak:.0f} GFLOP/s, bfloat16->bfloat16 "
        f"{matmul_peak(jnp.bfloat16, jnp.bfloat16, n):.0f} GFLOP/s")
    peaks = {"float32": float32_peak, "bfloat16": max(bfloat16_peak, float32_peak)}

    batch = {k: jnp.asarray(v) for k, v in make_batch(0).items()}
    tokens = BATCH * TGT_LEN
    results = {}
    for size in sizes:
        flops = model_flops(SIZES[size]["d_model"], SIZES[size]["d_ff"], SIZES[size]["layers"])
        for dtype in dtypes:
            textkit_run, compile_s = textkit_runner(size, POLICIES[dtype], batch)
            medians = time_interleaved(
                {"textkit": textkit_run, "reference": reference_runner(size, dtype, batch)},
                steps)
            seconds, reference = medians["textkit"], medians["reference"]
            entry = {"textkit_tok_s": round(tokens / seconds, 1),
                     "flax_ref_tok_s": round(tokens / reference, 1),
                     "ratio": round(reference / seconds, 3),
                     "compile_s": round(compile_s, 2),
                     "mfu": round(flops / seconds / (peaks[dtype] * 1e9), 4)}
            results[f"{size}_{dtype}"] = entry
            log(f"{size}_{dtype}: {entry}")
    results["matmul_peak_gflops"] = {"float32": round(float32_peak, 1),
                                     "bfloat16_to_float32": round(bfloat16_peak, 1),
                                     "mfu_denominator_bfloat16": round(peaks["bfloat16"], 1)}
    results["cpu"] = machine
    results["bf16_dots"] = bf16_dots
    results["tokens_counted"] = "target tokens per second (32 x 32 per step)"
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
