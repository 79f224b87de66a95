"""What the benchmarks print about the CPU: model name and the SIMD / matrix features that
decide float32 vs bfloat16 matmul speed (read from ``/proc/cpuinfo``; empty elsewhere)."""

from __future__ import annotations

FEATURES = ("fma", "avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
            "amx_tile", "amx_bf16", "amx_int8")


def cpu_info() -> dict[str, object]:
    """``{"cpu": model name, "features": present FEATURES, "missing": absent FEATURES}``."""
    # Imported here: textkit.models.kernels imports jax and flax, which the benchmarks' data
    # phases (large_corpus.py, measured for memory) import this module without needing.
    from textkit.models.kernels import model_and_flags

    model, flags = model_and_flags()
    return {"cpu": model, "features": [f for f in FEATURES if f in flags],
            "missing": [f for f in FEATURES if f not in flags]}


BF16_DOTS = ("auto", "native", "rounded")


def choose_bf16_dots(choice: str) -> str:
    """Select how textkit multiplies bfloat16 operands on this CPU (``--bf16-dots``): "auto"
    (native dots only where ``/proc/cpuinfo`` lists avx512_bf16 or amx_bf16), "native" (always
    bfloat16 dots) or "rounded" (the rounded operands multiplied in float32, the path of CPUs
    without bf16 dot instructions, forced on any CPU). Call before any model is traced; returns
    the path taken ("native" or "rounded") for the JSON line."""
    from textkit.models import kernels

    if choice not in BF16_DOTS:
        raise ValueError(f"--bf16-dots {choice!r}: expected one of {BF16_DOTS}")
    if choice != "auto":
        forced = choice == "native"
        kernels.has_bf16_dots = lambda: forced
    return "native" if kernels.native_low_precision_dots("bfloat16") else "rounded"
