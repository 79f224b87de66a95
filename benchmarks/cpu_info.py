"""What the benchmarks print about the CPU: model name and the SIMD / matrix features that
decide float32 vs bfloat16 matmul speed (read from ``/proc/cpuinfo``; empty elsewhere)."""

from __future__ import annotations

FEATURES = ("fma", "avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
            "amx_tile", "amx_bf16")


def cpu_info() -> dict[str, object]:
    """``{"cpu": model name, "features": present FEATURES, "missing": absent FEATURES}``."""
    # Imported here: textkit.models.kernels imports jax and flax, which the benchmarks' data
    # phases (large_corpus.py, measured for memory) import this module without needing.
    from textkit.models.kernels import model_and_flags

    model, flags = model_and_flags()
    return {"cpu": model, "features": [f for f in FEATURES if f in flags],
            "missing": [f for f in FEATURES if f not in flags]}
