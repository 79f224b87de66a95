"""``serve``: an OpenAI-compatible HTTP server over one checkpoint, with continuous batching.

``textkit-serve``, or the recipe ``examples/serving/serve.py``. Needs the ``serve`` extra
(FastAPI and uvicorn).

A decoder-only checkpoint answers ``/v1/completions`` and ``/v1/chat/completions`` through the
continuous-batching engine (``--batch-size`` slots of ``--context`` tokens each, every program
compiled before the port opens), a sentence-transformers directory ``/v1/embeddings``, a
translation checkpoint ``/v1/translate``; ``/`` is a chat page, ``/metrics`` Prometheus text
(``textkit.serve.app``). It listens on 127.0.0.1 unless ``--host`` says otherwise. SIGTERM or
Ctrl-C refuses new requests (503), lets those in flight finish for up to ``--drain-timeout``
seconds, then exits 0. Bad flags and checkpoints are refused before loading where they can
be: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import functools
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from textkit.cli import run_main
from textkit.cli.flags import Parser, number
from textkit.errors import ConfigError

__all__ = ["build", "main", "parse_args"]

_POSITIVE = number(int, "an integer >= 1", lambda v: v >= 1)
_SECONDS = number(float, "a number > 0", lambda v: v > 0)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; a value out of range is a usage error naming the flag."""
    from textkit.cli.generate import _policy

    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--pretrained", required=True, help="a checkpoint directory (decoder-only "
                   "LM, sentence-transformers encoder, or translation model)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=number(int, "a port in 0..65535", lambda v: 0 <= v < 65536),
                   default=8000, help="port to listen on (default: 8000; 0: any free one)")
    p.add_argument("--batch-size", type=_POSITIVE, default=8,
                   help="slots: requests decoded together (default: 8)")
    p.add_argument("--context", type=number(int, "an integer >= 2", lambda v: v >= 2),
                   help="tokens per slot, prompt and completion (default: the model's "
                        "positions, at most 4096)")
    p.add_argument("--precision", default="float32", type=_policy,
                   help="precision policy: float32 (default), mixed_bfloat16, mixed_float16 or "
                        "'params=...,compute=...,output=...'")
    p.add_argument("--quantize", choices=["int8"], help="int8 weights (CPU inference)")
    p.add_argument("--max-queue", type=_POSITIVE, default=64,
                   help="requests' choices waiting for a slot before 429 (default: 64)")
    p.add_argument("--request-timeout", type=_SECONDS, default=600.0,
                   help="seconds a request may take (default: 600)")
    p.add_argument("--api-key", help="bearer token every request must carry")
    p.add_argument("--drain-timeout", type=_SECONDS, default=30.0,
                   help="seconds requests in flight get to finish after SIGTERM (default: 30)")
    p.add_argument("--model-name", help="the model id clients use (default: the directory's "
                   "name)")
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    """(the FastAPI app, its settings) for ``args``; the engine warmed up."""
    root = Path(args.pretrained)
    if not root.is_dir():
        raise ConfigError(f"--pretrained {args.pretrained}: no such directory")
    try:
        from textkit.serve.app import Settings, create_app
    except ImportError as err:
        raise ConfigError(f"textkit-serve needs the serve extra (pip install "
                          f"'textkit-jax[serve]'): {err}") from None
    from textkit.pretrained import load_pretrained, load_translator
    from textkit.serve.engine import Engine

    settings = Settings(model_name=args.model_name or root.resolve().name,
                        api_key=args.api_key, request_timeout=args.request_timeout)
    try:
        loaded = load_pretrained(root, policy=args.precision)
    except ValueError as err:
        raise ConfigError(f"--pretrained {args.pretrained}: {err}") from None
    if loaded.kind == "causal_lm":
        limit = loaded.model.config.max_positions
        context = args.context or min(limit or 4096, 4096)
        if limit is not None and context > limit:
            raise ConfigError(f"--context {context}: the model takes {limit} positions")
        engine = Engine(loaded.model, loaded.params, loaded.tokenizer, slots=args.batch_size,
                        context=context, max_queue=args.max_queue, quantize=args.quantize)
        logging.getLogger("textkit.serve").info(
            "compiling %d prefill widths and the decode step", len(engine.buckets))
        engine.warm_up()
        return create_app(loaded, settings, engine=engine), settings
    if loaded.kind == "translation":
        @functools.lru_cache(maxsize=4)
        def translator_for(src: str | None, tgt: str | None, beam: int | None) -> Any:
            options = {"beam_size": beam} if beam else {}
            return load_translator(root, src_lang=src, tgt_lang=tgt, **options)

        translator_for(None, None, None)      # the default pair, loaded before serving
        return create_app(loaded, settings, translator_for=translator_for), settings
    try:
        return create_app(loaded, settings), settings
    except ValueError as err:
        raise ConfigError(f"--pretrained {args.pretrained}: {err}") from None


def serve(args: argparse.Namespace) -> None:
    """Build the app and serve it until SIGTERM / Ctrl-C, draining as the docstring says."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    app, settings = build(args)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            settings.draining = True       # new requests: 503; those in flight go on
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, host=args.host, port=args.port, access_log=False,
                            timeout_graceful_shutdown=args.drain_timeout, log_level="info")
    # uvicorn handles SIGTERM / SIGINT itself (the drain) and raises them again once it has
    # stopped: ignored then, so that the drained server exits 0 (not run_main's 128 + n)
    quiet = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        Server(config).run()
    finally:
        for sig, handler in quiet.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (``run_main``: one line and exit status 2 for bad input); 0
    after a drain."""
    run_main(lambda: serve(parse_args(argv)), resumable=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
