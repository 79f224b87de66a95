"""The OpenAI-compatible HTTP server: a FastAPI app (``create_app``) over one checkpoint.

Routes, by the checkpoint's kind (``load_pretrained``):

* every kind: ``GET /health``, ``GET /v1/models``, ``GET /metrics`` (Prometheus text,
  ``metrics``), ``GET /`` (the chat page, ``static/chat.html``);
* "causal_lm": ``POST /v1/completions`` and ``POST /v1/chat/completions`` through the
  continuous-batching ``Engine`` (defaults: ``options``), answered whole or streamed as
  server-sent events in OpenAI's chunk format, ending ``data: [DONE]``;
* "sentence_encoder": ``POST /v1/embeddings``;
* "translation": ``POST /v1/translate`` (``{"text": [...], "src_lang", "tgt_lang",
  "beam_size"}`` -> ``{"translations": [...]}``).

Every refusal is OpenAI's error object (``schemas.error_body``) naming the field: 400 for a
malformed body or field, 401 without the ``api_key`` (``Authorization: Bearer KEY``), 404 for an
unknown model or route, 429 with ``Retry-After`` when the engine's queue is full, 503 while
draining, 504 past ``request_timeout``. A client that disconnects cancels its jobs (their
slots are free at the engine's next step). One log line per request (logger
``textkit.serve``): client, method, path, status, latency and tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from textkit.serve.engine import Engine, EngineStopped, Event, Job, QueueFull
from textkit.serve.metrics import Metrics
from textkit.serve.options import Defaults, request_seed
from textkit.serve.schemas import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    RequestError,
    TranslateRequest,
    error_body,
)

__all__ = ["Settings", "create_app"]

logger = logging.getLogger("textkit.serve")
PAGE = Path(__file__).resolve().parent / "static" / "chat.html"
FINISH = {"eos": "stop", "stop": "stop", "length": "length"}
"""The engine's finish reasons as OpenAI's."""
DISCONNECT_CHECK = 0.5
"""Seconds between checks that a client is still connected."""


@dataclasses.dataclass
class Settings:
    """``model_name``: the id ``/v1/models`` lists (and requests may name); ``api_key``: the
    bearer token every request but the page needs (None: none); ``request_timeout``: seconds
    a request may take; ``retry_after``: seconds a 429 asks a client to wait;
    ``embed_batch``: texts embedded together."""

    model_name: str
    api_key: str | None = None
    request_timeout: float = 600.0
    retry_after: int = 1
    embed_batch: int = 16
    draining: bool = False


class _Gate:
    """ASGI middleware: the API key, the drain, and one log line (and metrics) per request."""

    def __init__(self, app: Any, settings: Settings, metrics: Metrics):
        self.app, self.settings, self.metrics = app, settings, metrics

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status, ended = time.perf_counter(), [0], [False]
        scope.setdefault("state", {})

        async def observed(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                ended[0] = True

        try:
            refusal = self._refusal(scope)
            await (refusal or self.app)(scope, receive, observed)
        finally:        # 499: the client left before the response ended (nginx's code)
            self._log(scope, status[0] if ended[0] else 499, time.perf_counter() - start)

    def _refusal(self, scope: dict) -> JSONResponse | None:
        path = scope["path"]
        if self.settings.draining and path not in ("/health", "/metrics"):
            return JSONResponse(error_body("the server is shutting down", None,
                                           "service_unavailable"), 503)
        if self.settings.api_key is None or path == "/":
            return None
        headers = dict(scope["headers"])
        given = headers.get(b"authorization", b"").decode("latin-1")
        if given != f"Bearer {self.settings.api_key}":
            return JSONResponse(error_body("missing or wrong API key (Authorization: Bearer "
                                           "KEY)", None, "authentication_error",
                                           "invalid_api_key"), 401)
        return None

    def _log(self, scope: dict, status: int, seconds: float) -> None:
        usage = scope["state"].get("usage")
        prompt, completion = usage or (0, 0)
        self.metrics.observe(scope["path"], status, seconds, prompt, completion)
        client = scope.get("client") or ("-", 0)
        tokens = f" prompt_tokens={prompt} completion_tokens={completion}" if usage else ""
        logger.info('%s:%s "%s %s" %d %.1f ms%s', client[0], client[1], scope["method"],
                    scope["path"], status, seconds * 1000, tokens)


async def _json(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RequestError(f"the body is not valid JSON: {err}") from None


def _check_model(settings: Settings, name: str | None) -> None:
    if name is not None and name != settings.model_name:
        raise RequestError(f"model {name!r} does not exist; this server serves "
                           f"{settings.model_name!r}", "model", 404)


def _token(tokenizer: Any, token_id: int) -> str:
    return tokenizer.decode([token_id], skip_special_tokens=False)


class _Generation:
    """The generation endpoints over an ``Engine``."""

    def __init__(self, engine: Engine, tokenizer: Any, defaults: Defaults, settings: Settings):
        self.engine, self.tokenizer = engine, tokenizer
        self.defaults, self.settings = defaults, settings
        self.vocab = engine.model.config.vocab_size

    # ---------------------------------------------------------------------------- prompts
    def completion_prompts(self, body: CompletionRequest) -> list[list[int]]:
        prompt = body.prompt
        if isinstance(prompt, str):
            prompt = [prompt]
        elif prompt and isinstance(prompt[0], int):
            prompt = [prompt]
        rows = []
        for index, item in enumerate(prompt):
            ids = self.tokenizer.encode(item) if isinstance(item, str) else list(item)
            bad = [i for i in ids if not 0 <= i < self.vocab]
            if bad:
                raise RequestError(f"prompt {index}: token id {bad[0]} is outside the "
                                   f"vocabulary (0..{self.vocab - 1})", "prompt")
            if not ids and self.tokenizer.bos_id is not None:
                ids = [self.tokenizer.bos_id]
            if not ids:
                raise RequestError(f"prompt {index} is empty", "prompt")
            rows.append(ids)
        return rows

    def chat_prompt(self, body: ChatRequest) -> list[int]:
        from textkit.pretrained.lm_tokenizer import ChatTemplateError

        messages = []
        for index, message in enumerate(body.messages):
            try:
                text = message.text()
            except ValueError as err:
                raise RequestError(f"messages.{index}.content: {err}",
                                   f"messages.{index}.content") from None
            role = "system" if message.role == "developer" else message.role
            messages.append({"role": role, "content": text})
        try:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        except ChatTemplateError as err:
            raise RequestError(str(err), "messages") from None
        return self.tokenizer.encode(text, add_special_tokens=False)

    # ------------------------------------------------------------------------------- jobs
    async def run(self, request: Request, body: CompletionRequest | ChatRequest,
                  prompts: list[list[int]]) -> AsyncIterator[tuple[int, Event]]:
        """Submit a job per prompt and choice (choice k = prompt i's j-th, k = i * n + j),
        then yield ``(k, event)`` until every job ended; ends the jobs when the client
        leaves, the time runs out or the consumer stops."""
        if len(prompts) * body.n > self.engine.max_queue:
            raise RequestError(f"{len(prompts)} prompts x n={body.n} choices exceed the "
                               f"{self.engine.max_queue} this server queues at once",
                               "n" if body.n > 1 else "prompt")
        seed = request_seed(body)
        samplings = [self.defaults.sampling(body, len(ids), self.engine.context, seed=seed,
                                            prompt_index=i, choice=j)
                     for i, ids in enumerate(prompts) for j in range(body.n)]
        queue: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def emitter(k: int) -> Callable[[Event], None]:
            def emit(event: Event) -> None:
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, (k, event))
                except RuntimeError:       # the request's loop is gone
                    pass
            return emit

        jobs = [Job(prompts[k // body.n], s, emitter(k)) for k, s in enumerate(samplings)]
        self.engine.submit(jobs)
        request.state.usage = (sum(map(len, prompts)), 0)
        deadline = time.monotonic() + self.settings.request_timeout
        check = time.monotonic() + DISCONNECT_CHECK
        left = len(jobs)
        try:
            while left:
                now = time.monotonic()
                if now >= deadline:
                    raise RequestError(f"the request took longer than "
                                       f"{self.settings.request_timeout:g} s", None, 504,
                                       "timeout")
                if now >= check:        # a client gone while its jobs run: end them
                    if await request.is_disconnected():
                        return
                    check = now + DISCONNECT_CHECK
                try:
                    k, event = await asyncio.wait_for(queue.get(),
                                                      min(deadline, check) - now)
                except TimeoutError:
                    continue
                if event.finish_reason == "cancelled":
                    raise RequestError("the server stopped before the request finished",
                                       None, 503, "service_unavailable")
                if event.token_id is not None:
                    prompt, done = request.state.usage
                    request.state.usage = (prompt, done + 1)
                left -= event.finish_reason is not None
                yield k, event
        finally:
            for job in jobs:
                job.cancel()

    # ------------------------------------------------------------------------ responses
    def completion_logprobs(self, events: list[Event], top: int, offset: int) -> dict:
        tokens = [_token(self.tokenizer, e.token_id) for e in events if e.token_id is not None]
        steps = [e for e in events if e.token_id is not None]
        offsets, at = [], offset
        for text in tokens:
            offsets.append(at)
            at += len(text)
        return {"tokens": tokens, "token_logprobs": [e.logprob for e in steps],
                "top_logprobs": [{_token(self.tokenizer, i): v for i, v in e.top[:top]}
                                 for e in steps] if top else None,
                "text_offset": offsets}

    def chat_logprobs(self, events: list[Event], top: int) -> dict:
        def entry(token_id: int, logprob: float) -> dict:
            text = _token(self.tokenizer, token_id)
            return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

        return {"content": [{**entry(e.token_id, e.logprob),
                             "top_logprobs": [entry(i, v) for i, v in e.top[:top]]}
                            for e in events if e.token_id is not None]}


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _sse(data: Any) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _add_generation_routes(app: FastAPI, gen: _Generation, settings: Settings) -> None:
    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = CompletionRequest.parse(await _json(request))
        _check_model(settings, body.model)
        if body.echo and body.logprobs is not None:
            raise RequestError("echo with logprobs (the prompt's log-probabilities) is not "
                               "supported", "echo")
        prompts = gen.completion_prompts(body)
        echoes = [gen.tokenizer.decode(ids) if body.echo else "" for ids in prompts]
        run = gen.run(request, body, prompts)
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                "created": int(time.time()), "model": settings.model_name}
        top = body.logprobs or 0
        if body.stream:
            first, run = await _first(run)

            async def stream() -> AsyncIterator[str]:
                sent: set[int] = set()
                async for k, event in _chain(first, run):
                    text = event.text
                    if k not in sent:
                        text, sent = echoes[k // body.n] + text, sent | {k}
                    logprobs = (gen.completion_logprobs([event], top, 0)
                                if body.logprobs is not None else None)
                    if text or event.finish_reason or logprobs:
                        yield _sse({**head, "choices": [{
                            "index": k, "text": text, "logprobs": logprobs,
                            "finish_reason": FINISH.get(event.finish_reason)}]})
                prompt, done = request.state.usage
                yield _sse({**head, "choices": [], "usage": _usage(prompt, done)})
                yield "data: [DONE]\n\n"

            return _streaming(stream())
        events = await _collect(run, len(prompts) * body.n)
        choices = []
        for k, got in enumerate(events):
            echo = echoes[k // body.n]
            choices.append({
                "index": k, "text": echo + "".join(e.text for e in got),
                "logprobs": (gen.completion_logprobs(got, top, len(echo))
                             if body.logprobs is not None else None),
                "finish_reason": FINISH[got[-1].finish_reason]})
        return {**head, "choices": choices, "usage": _usage(*request.state.usage)}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = ChatRequest.parse(await _json(request))
        _check_model(settings, body.model)
        prompts = [gen.chat_prompt(body)]
        run = gen.run(request, body, prompts)
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                "created": int(time.time()), "model": settings.model_name}
        top = body.top_logprobs or 0
        if body.stream:
            first, run = await _first(run)
            head["object"] = "chat.completion.chunk"

            async def stream() -> AsyncIterator[str]:
                for k in range(body.n):
                    yield _sse({**head, "choices": [{
                        "index": k, "delta": {"role": "assistant", "content": ""},
                        "logprobs": None, "finish_reason": None}]})
                async for k, event in _chain(first, run):
                    logprobs = gen.chat_logprobs([event], top) if body.logprobs else None
                    if event.text or event.finish_reason or logprobs:
                        delta = {"content": event.text} if event.text else {}
                        yield _sse({**head, "choices": [{
                            "index": k, "delta": delta, "logprobs": logprobs,
                            "finish_reason": FINISH.get(event.finish_reason)}]})
                prompt, done = request.state.usage
                yield _sse({**head, "choices": [], "usage": _usage(prompt, done)})
                yield "data: [DONE]\n\n"

            return _streaming(stream())
        events = await _collect(run, body.n)
        choices = [{"index": k,
                    "message": {"role": "assistant", "content": "".join(e.text for e in got)},
                    "logprobs": gen.chat_logprobs(got, top) if body.logprobs else None,
                    "finish_reason": FINISH[got[-1].finish_reason]}
                   for k, got in enumerate(events)]
        return {**head, "choices": choices, "usage": _usage(*request.state.usage)}


async def _first(run: AsyncIterator[tuple[int, Event]]
                 ) -> tuple[tuple[int, Event] | None, AsyncIterator[tuple[int, Event]]]:
    """The first event of ``run`` (so a refusal or a full queue is an error response, not a
    broken stream) and ``run``."""
    try:
        return await run.__anext__(), run
    except StopAsyncIteration:
        return None, run


async def _chain(first: tuple[int, Event] | None, run: AsyncIterator[tuple[int, Event]]
                 ) -> AsyncIterator[tuple[int, Event]]:
    """``first`` (when there is one), then the rest of ``run``."""
    try:
        if first is not None:
            yield first
        async for item in run:
            yield item
    finally:
        await run.aclose()


def _streaming(chunks: AsyncIterator[str]) -> StreamingResponse:
    """Server-sent events; a refusal after the headers went out (a timeout, a stop) is an
    error event, then ``[DONE]``."""
    async def guarded() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield chunk
        except RequestError as err:
            yield _sse(err.body())
            yield "data: [DONE]\n\n"
    return StreamingResponse(guarded(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


async def _collect(run: AsyncIterator[tuple[int, Event]], count: int) -> list[list[Event]]:
    events: list[list[Event]] = [[] for _ in range(count)]
    async for k, event in run:
        events[k].append(event)
    if any(not got or got[-1].finish_reason is None for got in events):
        raise RequestError("the client disconnected", None, 499)
    return events


def _add_embedding_route(app: FastAPI, loaded: Any, settings: Settings) -> None:
    model, tokenizer = loaded.model, loaded.tokenizer
    limit = model.config.length_limit
    lock = threading.Lock()

    @jax.jit
    def embed(params: Any, batch: dict[str, jax.Array]) -> jax.Array:
        return model.apply({"params": params}, **batch)["sentence_embedding"]

    def run(texts: list[str]) -> list[list[float]]:
        vectors = []
        size = settings.embed_batch
        for start in range(0, len(texts), size):
            chunk = texts[start:start + size]
            batch = tokenizer.encode_batch(chunk + [""] * (size - len(chunk)),
                                           pad_to_multiple_of=16)
            with lock:
                out = embed(loaded.params, {k: jnp.asarray(v) for k, v in batch.items()})
            vectors += np.asarray(out)[:len(chunk)].tolist()
        return vectors

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Any:
        body = EmbeddingRequest.parse(await _json(request))
        _check_model(settings, body.model)
        texts = [body.input] if isinstance(body.input, str) else body.input
        lengths = [len(tokenizer.encode_batch([t])["input_ids"][0]) for t in texts]
        for index, length in enumerate(lengths):
            if length > limit:
                raise RequestError(f"input {index} has {length} tokens; the model takes "
                                   f"{limit}", "input")
        vectors = await run_in_threadpool(run, texts)
        request.state.usage = (sum(lengths), 0)
        return {"object": "list", "model": settings.model_name,
                "data": [{"object": "embedding", "index": i, "embedding": v}
                         for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": sum(lengths), "total_tokens": sum(lengths)}}


def _add_translation_route(app: FastAPI, loaded: Any, translator_for: Callable[..., Any],
                           settings: Settings) -> None:
    lock = threading.Lock()
    languages = tuple(getattr(loaded.target_tokenizer, "languages", ()) or ())

    def check_languages(body: TranslateRequest) -> None:
        for field in ("src_lang", "tgt_lang"):
            code = getattr(body, field)
            if code is None:
                continue
            if not languages:
                raise RequestError(f"{field}={code!r}: this checkpoint takes no language "
                                   f"codes", field)
            if code not in languages:
                raise RequestError(f"{field}={code!r} is not one of the checkpoint's "
                                   f"{len(languages)} language codes", field)

    def run(body: TranslateRequest) -> list[str]:
        with lock:
            translator, params = translator_for(body.src_lang, body.tgt_lang, body.beam_size)
            return translator.translate(params, body.text)

    @app.post("/v1/translate")
    async def translate(request: Request) -> Any:
        from textkit.errors import TextkitError

        body = TranslateRequest.parse(await _json(request))
        _check_model(settings, body.model)
        check_languages(body)
        try:
            texts = await run_in_threadpool(run, body)
        except (TextkitError, ValueError) as err:      # e.g. a source too long
            raise RequestError(str(err), "text") from None
        return {"object": "translation", "model": settings.model_name,
                "translations": texts}


def create_app(loaded: Any, settings: Settings, *, engine: Engine | None = None,
               translator_for: Callable[..., Any] | None = None) -> FastAPI:
    """The app serving ``loaded`` (a ``load_pretrained`` result): a causal LM through
    ``engine`` (warmed up; the app starts and stops its thread), a sentence encoder as
    embeddings, a translation model through ``translator_for(src_lang, tgt_lang, beam_size)
    -> (Translator, params)``."""
    metrics = Metrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if engine is not None:
            engine.start()
        yield
        settings.draining = True
        if engine is not None:
            engine.stop()

    app = FastAPI(title="textkit", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.settings = settings

    @app.exception_handler(RequestError)
    async def refused(request: Request, err: RequestError) -> JSONResponse:
        return JSONResponse(err.body(), err.status)

    @app.exception_handler(QueueFull)
    async def full(request: Request, err: QueueFull) -> JSONResponse:
        return JSONResponse(error_body(f"the server is busy: {err}; retry later", None,
                                       "rate_limit_error"), 429,
                            headers={"Retry-After": str(settings.retry_after)})

    @app.exception_handler(EngineStopped)
    async def stopped(request: Request, err: EngineStopped) -> JSONResponse:
        return JSONResponse(error_body(str(err), None, "service_unavailable"), 503)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        return JSONResponse(error_body(f"{request.method} {request.url.path}: {err.detail}"),
                            err.status_code)

    @app.get("/health")
    async def health() -> JSONResponse:
        if engine is not None and engine.failure:
            return JSONResponse({"status": "failed", "reason": engine.failure}, 503)
        return JSONResponse({"status": "draining" if settings.draining else "ok"})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": settings.model_name, "object": "model",
                                            "created": 0, "owned_by": "textkit"}]}

    @app.get("/metrics")
    async def metrics_text() -> PlainTextResponse:
        return PlainTextResponse(metrics.render(engine),
                                 media_type="text/plain; version=0.0.4")

    @app.get("/")
    async def page() -> HTMLResponse:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    if loaded.kind == "causal_lm":
        if engine is None:
            raise ValueError("a causal_lm checkpoint is served through an Engine (engine=)")
        defaults = Defaults.from_checkpoint(loaded.generation, loaded.tokenizer.eos_ids)
        _add_generation_routes(app, _Generation(engine, loaded.tokenizer, defaults, settings),
                               settings)
    elif loaded.kind == "sentence_encoder":
        _add_embedding_route(app, loaded, settings)
    elif loaded.kind == "translation":
        if translator_for is None:
            raise ValueError("a translation checkpoint is served through translator_for=")
        _add_translation_route(app, loaded, translator_for, settings)
    else:
        raise ValueError(f"a {loaded.kind} checkpoint has nothing to serve (causal_lm, "
                         f"sentence_encoder and translation checkpoints do)")
    app.add_middleware(_Gate, settings=settings, metrics=metrics)
    return app
