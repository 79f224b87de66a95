"""The server's numbers in Prometheus' text exposition format (``GET /metrics``): requests by
endpoint and status, their latency, and the engine's queue depth, busy slots, tokens and
tokens per second. Written by hand: the format is a few lines of text, no client library."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

__all__ = ["Metrics"]


class Metrics:
    """Request counters (thread-safe) and the exposition of them with an engine's gauges."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, int]] = Counter()
        self._seconds: Counter[str] = Counter()
        self._prompt_tokens = 0
        self._completion_tokens = 0

    def observe(self, path: str, status: int, seconds: float, prompt_tokens: int = 0,
                completion_tokens: int = 0) -> None:
        """Count one finished request."""
        with self._lock:
            self._requests[path, status] += 1
            self._seconds[path] += seconds
            self._prompt_tokens += prompt_tokens
            self._completion_tokens += completion_tokens

    def render(self, engine: Any | None) -> str:
        """The exposition text (``engine``: a ``textkit.serve.engine.Engine``, or None)."""
        lines = ["# HELP textkit_requests_total Requests answered, by path and status.",
                 "# TYPE textkit_requests_total counter"]
        with self._lock:
            for (path, status), count in sorted(self._requests.items()):
                lines.append(f'textkit_requests_total{{path="{path}",status="{status}"}} '
                             f"{count}")
            lines += ["# HELP textkit_request_seconds_total Time spent answering, by path.",
                      "# TYPE textkit_request_seconds_total counter"]
            lines += [f'textkit_request_seconds_total{{path="{path}"}} {seconds:.6f}'
                      for path, seconds in sorted(self._seconds.items())]
            lines += ["# HELP textkit_prompt_tokens_total Prompt tokens of answered requests.",
                      "# TYPE textkit_prompt_tokens_total counter",
                      f"textkit_prompt_tokens_total {self._prompt_tokens}",
                      "# HELP textkit_completion_tokens_total Tokens generated for answered "
                      "requests.",
                      "# TYPE textkit_completion_tokens_total counter",
                      f"textkit_completion_tokens_total {self._completion_tokens}"]
        if engine is not None:
            lines += [
                "# HELP textkit_queue_depth Jobs waiting for a slot.",
                "# TYPE textkit_queue_depth gauge",
                f"textkit_queue_depth {engine.queue_depth}",
                "# HELP textkit_active_slots Slots decoding a job.",
                "# TYPE textkit_active_slots gauge",
                f"textkit_active_slots {engine.active_slots}",
                "# HELP textkit_slots Slots of the engine.",
                "# TYPE textkit_slots gauge",
                f"textkit_slots {engine.slots}",
                "# HELP textkit_generated_tokens_total Tokens the engine generated.",
                "# TYPE textkit_generated_tokens_total counter",
                f"textkit_generated_tokens_total {engine.generated_tokens}",
                "# HELP textkit_finished_jobs_total Choices the engine ended (any reason).",
                "# TYPE textkit_finished_jobs_total counter",
                f"textkit_finished_jobs_total {engine.finished_jobs}",
                "# HELP textkit_tokens_per_second Tokens generated per second, last 10 s.",
                "# TYPE textkit_tokens_per_second gauge",
                f"textkit_tokens_per_second {engine.tokens_per_second:.3f}"]
        return "\n".join(lines) + "\n"
