"""The line protocol of the peer workers (``hf_*.py``, ``ct2_generate.py``), which run in
another Python (torch, transformers, CTranslate2) and never import textkit: the benchmark
writes one JSON spec line, then requests; the worker answers one JSON line each."""

from __future__ import annotations

import importlib
import json
import sys
from types import ModuleType


def reply(message: dict) -> None:
    """One JSON line to the benchmark."""
    print(json.dumps(message), flush=True)


def begin(*modules: str) -> tuple[dict, list[ModuleType]] | None:
    """The benchmark's spec (the first stdin line) and ``modules`` imported; None, after
    replying ``{"error": ...}`` naming this Python, when one of them cannot be imported."""
    spec = json.loads(sys.stdin.readline())
    try:
        return spec, [importlib.import_module(name) for name in modules]
    except ImportError as error:
        reply({"error": f"{error} (in {sys.executable})"})
        return None
