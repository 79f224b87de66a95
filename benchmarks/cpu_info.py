"""What the benchmarks print about the CPU: model name and the SIMD / matrix features that
decide float32 vs bfloat16 matmul speed (read from ``/proc/cpuinfo``; empty elsewhere)."""

from __future__ import annotations

from pathlib import Path

FEATURES = ("fma", "avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
            "amx_tile", "amx_bf16")


def cpu_info() -> dict[str, object]:
    """``{"cpu": model name, "features": present FEATURES, "missing": absent FEATURES}``."""
    path = Path("/proc/cpuinfo")
    if not path.exists():
        return {"cpu": None, "features": [], "missing": []}
    model, flags = None, set()
    for line in path.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model is None:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return {"cpu": model, "features": [f for f in FEATURES if f in flags],
            "missing": [f for f in FEATURES if f not in flags]}
