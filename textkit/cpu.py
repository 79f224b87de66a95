"""The host CPU as Linux describes it in ``/proc/cpuinfo``: model name and feature flags.
Elsewhere (macOS, Windows) both are empty, and callers fall back to what works on any CPU."""

from __future__ import annotations

import functools
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


@functools.cache
def model_and_flags() -> tuple[str | None, frozenset[str]]:
    """(model name or None, feature flags) of the first processor ``CPUINFO`` lists."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return None, frozenset()
    model, flags = None, frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model is None:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = frozenset(value.split())
    return model, flags


def has_bf16_dots() -> bool:
    """Whether the CPU has bfloat16 dot-product instructions (``avx512_bf16`` or ``amx_bf16``),
    which XLA:CPU uses for bfloat16 x bfloat16 -> float32 matmuls."""
    return bool(model_and_flags()[1] & {"avx512_bf16", "amx_bf16"})
