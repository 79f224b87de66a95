"""Serving under load: ``textkit-serve`` against ``transformers serve --continuous-batching`` on the
same random-weight checkpoint of SmolLM2-135M's configuration with its real tokenizer (written
by the peer worker, ``lm_peers.py``, from ``../shared``).

A load generator in its own process (this script with ``--loadgen``) sends streamed
``/v1/completions`` requests from 1, 8 and 32 concurrent clients (``--clients``): prompts of
8-256 tokens cut from WikiText-2's test split, ``max_tokens`` 16-128, greedy, drawn with a
fixed seed, the same requests to every server. Rounds alternate the servers (textkit, the peer,
textkit with ``--batch-size 1``, then again; ``--rounds``) and the figures are medians over the
rounds. The peer runs with ``HF_HUB_OFFLINE=1`` from ``--peer-python``'s environment (torch
2.13.0, ``transformers[serving]``), the checkpoint directory as its model; when it cannot start,
the JSON line says why (``peer_error``) and the other figures stand.

    python benchmarks/serve.py --peer-python /tmp/hfenv/bin/python --rounds 3
    python benchmarks/serve.py --quick --no-peer      # checks that it runs: a tiny checkpoint

Per server and client count: ``tokens_per_s`` (output tokens over the wall time of the whole
load), ``ttft_p50_s`` / ``ttft_p99_s`` (time to the first streamed text) and ``tpot_p50_s``
(time per output token after the first). The goals of issue 58, as ratios (> 1 meets them when
the goal is >= 1): ``vs_peer_tokens_8`` and ``vs_peer_tokens_32`` (goal 2), ``vs_batch1_tokens_8``
(goal 3), ``ttft_8_over_lone`` (p50 time to first token at 8 clients over a lone request's;
goal <= 2). The last line is one JSON object, with ``cpu_info()``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cpu_info import cpu_info

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
WIKITEXT = SHARED / "wikitext-2" / "wiki.test.tokens"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def requests_for(directory: Path, count: int, seed: int, quick: bool) -> list[dict[str, Any]]:
    """``count`` (prompt text, max_tokens) pairs: prompts cut from WikiText-2's test split at
    token lengths 8-256 (quick: 8-32), max_tokens 16-128 (quick: 4-8)."""
    from textkit.pretrained.lm_tokenizer import LMTokenizer

    tokenizer = LMTokenizer.from_directory(directory)
    text = (WIKITEXT.read_text(encoding="utf-8") if WIKITEXT.is_file()
            else "the quick brown fox jumps over the lazy dog . " * 400)
    ids = tokenizer.encode(" ".join(text.split()[:20000]), add_special_tokens=False)
    rng = random.Random(seed)
    longest, new = (32, (4, 8)) if quick else (256, (16, 128))
    out = []
    for _ in range(count):
        length = rng.randint(8, longest)
        start = rng.randrange(0, len(ids) - length)
        out.append({"prompt": tokenizer.decode(ids[start:start + length]),
                    "max_tokens": rng.randint(*new)})
    return out


class Server:
    """A server process on 127.0.0.1: ``textkit-serve`` or the peer."""

    def __init__(self, name: str, command: list[str], env: dict[str, str] | None = None):
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"serve_{name}_", suffix=".log")
        self.process = subprocess.Popen([*command, "--port", str(self.port)], env=env,
                                        stdout=self.log, stderr=subprocess.STDOUT)

    def wait(self, timeout: float) -> str | None:
        """None once ``/health`` answers, else why not (its log's end)."""
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return None
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.log.seek(0)
        return f"{self.name} did not start: {self.log.read()[-1500:]}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


async def _client(url: str, model: str, requests: list[dict[str, Any]],
                  found: list[dict[str, float]]) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=600) as client:
        for request in requests:
            body = {"model": model, "temperature": 0, "seed": 0, "stream": True,
                    "stream_options": {"include_usage": True}, **request}
            start, first, chunks, usage = time.perf_counter(), None, 0, None
            async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    if not line.startswith("data: {"):
                        continue
                    data = json.loads(line[6:])
                    if data.get("usage"):
                        usage = data["usage"]["completion_tokens"]
                    for choice in data.get("choices") or []:
                        if choice.get("text"):
                            chunks += 1
                            first = first or time.perf_counter()
            end = time.perf_counter()
            found.append({"ttft": (first or end) - start, "seconds": end - start,
                          "tokens": usage if usage is not None else chunks})


def loadgen(url: str, model: str, clients: int, path: Path) -> dict[str, Any]:
    """Send the requests of ``path`` from ``clients`` concurrent clients: per request its time
    to first text, its time and its output tokens, and the wall time."""
    requests = json.loads(path.read_text())
    found: list[dict[str, float]] = []

    async def run() -> None:
        await asyncio.gather(*(_client(url, model, requests[c::clients], found)
                               for c in range(clients)))

    start = time.perf_counter()
    asyncio.run(run())
    return {"wall": time.perf_counter() - start, "requests": found}


def figures(load: dict[str, Any]) -> dict[str, float]:
    found = load["requests"]
    ttft = sorted(r["ttft"] for r in found)
    tpot = [(r["seconds"] - r["ttft"]) / (r["tokens"] - 1) for r in found if r["tokens"] > 1]
    return {"tokens_per_s": sum(r["tokens"] for r in found) / load["wall"],
            "ttft_p50_s": statistics.median(ttft),
            "ttft_p99_s": ttft[min(len(ttft) - 1, round(0.99 * (len(ttft) - 1)))],
            "tpot_p50_s": statistics.median(tpot) if tpot else float("nan")}


def run_load(server: Server, model: str, clients: int, path: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--loadgen", server.url, "--model", model,
                          "--clients", str(clients), "--requests", str(path)],
                         capture_output=True, text=True, check=True)
    return figures(json.loads(out.stdout.strip().splitlines()[-1]))


def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every server started, loaded and stopped; the medians and ratios (module docstring)."""
    directory = work / "model"
    if args.quick:
        from generate import tiny_checkpoint

        tiny_checkpoint(directory)
    else:
        from generate import SHARED as TOKENIZERS
        from generate import Peer

        maker = Peer(args.peer_python or sys.executable)
        maker.ask({"make": {"kind": "smollm2", "dir": str(directory),
                            "tokenizer": str(TOKENIZERS / "smollm2")}})
        maker.close()
    counts = [int(c) for c in args.clients.split(",")]
    textkit = [sys.executable, "-m", "textkit.cli.serve", "--pretrained", str(directory),
               "--model-name", "bench", "--context", "64" if args.quick else "512"]
    servers = {"textkit": Server("textkit", [*textkit, "--batch-size", str(max(counts))]),
               "textkit_batch1": Server("textkit_batch1", [*textkit, "--batch-size", "1"])}
    result: dict[str, Any] = {"quick": args.quick, "rounds": args.rounds, "clients": counts}
    if not args.no_peer:
        cli = Path(args.peer_python).with_name("transformers")
        servers["peer"] = Server("peer", [str(cli), "serve", str(directory),
                                          "--continuous-batching", "--host", "127.0.0.1",
                                          "--device", "cpu"],
                                 env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:   # no server outlives the run, whatever ends it
        names = {"textkit": "bench", "textkit_batch1": "bench", "peer": str(directory)}
        for name in list(servers):
            problem = servers[name].wait(900)
            if problem:
                if name != "peer":
                    sys.exit(problem)
                result["peer_error"] = problem
                servers.pop(name).stop()
        runs: dict[str, dict[int, list[dict[str, float]]]] = {n: {} for n in servers}
        for round_number in range(args.rounds):
            for clients in counts:
                path = work / f"requests_{clients}.json"
                path.write_text(json.dumps(requests_for(directory, max(clients * 4, 8),
                                                        clients, args.quick)))
                for name, server in servers.items():
                    if name == "textkit_batch1" and clients != 8 and 8 in counts:
                        continue
                    found = run_load(server, names[name], clients, path)
                    runs[name].setdefault(clients, []).append(found)
                    print(f"round {round_number} {name} {clients} clients: {found}", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    for name, by_clients in runs.items():
        for clients, rounds in by_clients.items():
            result[f"{name}_{clients}"] = {
                key: round(statistics.median(r[key] for r in rounds), 4) for key in rounds[0]}

    def ratio(a: str, b: str, key: str) -> float | None:
        if a in result and b in result and result[b][key]:
            return round(result[a][key] / result[b][key], 3)
        return None

    result["vs_peer_tokens_8"] = ratio("textkit_8", "peer_8", "tokens_per_s")
    result["vs_peer_tokens_32"] = ratio("textkit_32", "peer_32", "tokens_per_s")
    result["vs_batch1_tokens_8"] = ratio("textkit_8", "textkit_batch1_8", "tokens_per_s")
    result["ttft_8_over_lone"] = ratio("textkit_8", "textkit_1", "ttft_p50_s")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", help="a Python with torch and transformers[serving]")
    parser.add_argument("--no-peer", action="store_true", help="textkit only")
    parser.add_argument("--quick", action="store_true", help="a tiny checkpoint, few requests")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--requests", help=argparse.SUPPRESS)
    parser.add_argument("--loadgen", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loadgen:
        print(json.dumps(loadgen(args.loadgen, args.model, int(args.clients),
                                 Path(args.requests))))
        return
    if not args.no_peer and not args.peer_python:
        parser.error("--peer-python is required unless --no-peer")
    with tempfile.TemporaryDirectory(prefix="textkit_serve_bench_") as work:
        result = bench(args, Path(work))
    print(json.dumps({**result, **cpu_info()}))


if __name__ == "__main__":
    main()
