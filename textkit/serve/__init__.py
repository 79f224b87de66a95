"""Serving: an OpenAI-compatible HTTP server (``app``, FastAPI on uvicorn: the ``serve`` extra)
over a continuous-batching engine (``engine``: fixed slots in one compiled KV cache). The engine
needs only jax; importing ``textkit.serve.app`` needs FastAPI."""
