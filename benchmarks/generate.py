"""Decoder-only generation: textkit's ``Generator`` against transformers' ``generate`` and
CTranslate2's ``Generator`` on the same random-weight checkpoints.

Two shapes (``--shapes``): GPT-2 small (124M) and SmolLM2-135M's configuration (Llama
architecture, grouped-query attention), written once in transformers' layout by the peer worker
(``lm_peers.py``, with the real GPT-2 / SmolLM2 tokenizer files of ``../shared``) and read by
all three engines. Cases:

* ``single``: one prompt of 32 tokens -> 64 new tokens; the figure is ms per new token;
* ``batch``: 16 prompts of mixed lengths 8-64 -> 64 new tokens each; tokens per second;

each greedy and top-p sampling (top-k 50, top-p 0.9), float32 and int8 (textkit's int8 weights
against CTranslate2's ``int8`` compute type; transformers has no CPU int8 ``generate`` path and
is measured in float32 only). Every engine generates exactly 64 tokens per prompt. The engines
alternate rounds (``--rounds``, medians); the peers run in their own process
(``--peer-python``: a Python with torch 2.13.0, transformers and ctranslate2). First-call
compilation of each textkit shape is reported (``compile_s``).

    python benchmarks/generate.py --peer-python /tmp/hfenv/bin/python --rounds 5
    python benchmarks/generate.py --quick --no-peers     # checks that it runs (seconds)

The last line is one JSON object: per shape and case, ``textkit`` / ``hf`` / ``ct2`` figures,
the ratios ``vs_hf`` and ``vs_ct2`` (> 1: textkit faster) and ``compile_s``, with
``cpu_info()``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from cpu_info import cpu_info

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "tokenizers"
TOKENIZERS = {"gpt2": "gpt2", "smollm2": "smollm2"}
NEW_TOKENS = 64
MODES = ("greedy", "top_p")


class Peer:
    """``lm_peers.py`` in its own process."""

    def __init__(self, python: str):
        self.process = subprocess.Popen([python, str(Path(__file__).with_name("lm_peers.py"))],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"lm_peers.py exited (status {self.process.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"lm_peers.py: {answer['error']}")
        return answer

    def close(self) -> None:
        self.process.stdin.write(json.dumps({"quit": True}) + "\n")
        self.process.stdin.close()
        self.process.wait()


def prompts(case: str, vocab: int, quick: bool) -> list[list[int]]:
    """The case's prompts (fixed seed): one of 32 ids, or 16 of 8-64 ids."""
    rng = np.random.default_rng(0)
    if case == "single":
        return [rng.integers(100, vocab, 8 if quick else 32).tolist()]
    lengths = rng.integers(8, 65, 4 if quick else 16)
    return [rng.integers(100, vocab, int(n)).tolist() for n in lengths]


def textkit_engine(directory: Path, batch: int, int8: bool):
    from textkit.decoding import Generator
    from textkit.pretrained import load_pretrained

    loaded = load_pretrained(directory, dropout=0.0)
    generator = Generator.from_pretrained(loaded, batch_size=batch,
                                          quantize="int8" if int8 else None)
    return generator, loaded.params


def textkit_seconds(engine, mode: str, rows: list[list[int]], new_tokens: int) -> float:
    generator, params = engine
    sampling = {"do_sample": True, "top_k": 50, "top_p": 0.9} if mode == "top_p" else {}
    start = time.perf_counter()
    generator.generate(params, rows, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       **sampling)
    return time.perf_counter() - start


def tiny_checkpoint(directory: Path) -> Path:
    """``--quick --no-peers``: a tiny random GPT-2 checkpoint written by textkit itself."""
    import jax

    from textkit.models import DecoderLM, get_model
    from textkit.pretrained import save_pretrained
    from textkit.pretrained.lm_tokenizer import LMTokenizer

    fixture = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "decoders" / "gpt2"
    model: DecoderLM = get_model("gpt2_small", vocab_size=320, hidden_size=32, num_layers=2,
                                 num_heads=4, intermediate_size=64, max_position_embeddings=256)
    params = model.init(jax.random.key(0), np.zeros((1, 4), np.int32))["params"]
    save_pretrained(model, params, LMTokenizer.from_directory(fixture), directory)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", help="a Python with torch, transformers, ctranslate2")
    parser.add_argument("--no-peers", action="store_true", help="textkit only")
    parser.add_argument("--shapes", default="gpt2,smollm2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that it runs")
    args = parser.parse_args()
    if not args.no_peers and not args.peer_python:
        parser.error("--peer-python is required unless --no-peers")
    new_tokens = 8 if args.quick else NEW_TOKENS
    work = Path(tempfile.mkdtemp(prefix="textkit_generate_"))
    peer = None if args.no_peers else Peer(args.peer_python)
    results: dict[str, Any] = {}
    shapes = ["tiny"] if args.no_peers and args.quick else args.shapes.split(",")
    for shape in shapes:
        directory = work / shape
        if shape == "tiny":
            tiny_checkpoint(directory)
        else:
            if not (SHARED / TOKENIZERS[shape]).is_dir():
                sys.exit(f"{SHARED / TOKENIZERS[shape]} is missing: the checkpoints use the "
                         f"real tokenizer files of ../shared")
            if peer is None:
                sys.exit("--no-peers runs the tiny shape only (with --quick): the real shapes "
                         "are written by the peer worker")
            peer.ask({"make": {"kind": shape, "dir": str(directory),
                               "tokenizer": str(SHARED / TOKENIZERS[shape])}})
        if peer is not None:
            print(f"{shape}: {peer.ask({'load': str(directory)})}", flush=True)
        vocab = json.loads((directory / "config.json").read_text())["vocab_size"]
        for case in ("single", "batch"):
            rows = prompts(case, vocab, args.quick)
            tokens = len(rows) * new_tokens
            for int8 in (False, True):
                engine = textkit_engine(directory, len(rows), int8)
                for mode in MODES:
                    name = f"{shape}.{case}.{mode}{'.int8' if int8 else ''}"
                    compile_s = textkit_seconds(engine, mode, rows, new_tokens)
                    times: dict[str, list[float]] = {"textkit": [], "hf": [], "ct2": []}
                    for _ in range(args.rounds):
                        times["textkit"].append(textkit_seconds(engine, mode, rows,
                                                                new_tokens))
                        if peer is None:
                            continue
                        if not int8:
                            times["hf"].append(peer.ask({
                                "engine": "hf", "mode": mode, "int8": False, "prompts": rows,
                                "new_tokens": new_tokens})["s"])
                        times["ct2"].append(peer.ask({
                            "engine": "ct2", "mode": mode, "int8": int8, "prompts": rows,
                            "new_tokens": new_tokens})["s"])
                    medians = {k: statistics.median(v) for k, v in times.items() if v}
                    if case == "single":
                        figures = {k: 1000 * s / new_tokens for k, s in medians.items()}
                        unit = "ms_per_token"
                    else:
                        figures = {k: tokens / s for k, s in medians.items()}
                        unit = "tokens_per_s"
                    entry: dict[str, Any] = {"unit": unit, **{k: round(v, 3)
                                                               for k, v in figures.items()}}
                    for peer_name in ("hf", "ct2"):
                        if peer_name in medians:
                            entry[f"vs_{peer_name}"] = round(
                                medians[peer_name] / medians["textkit"], 3)
                    entry["compile_s"] = round(compile_s - medians["textkit"], 2)
                    results[name] = entry
                    print(f"{name}: {entry}", flush=True)
    if peer is not None:
        peer.close()
    print(json.dumps({"new_tokens": new_tokens, "rounds": args.rounds, **cpu_info(),
                      "results": results}))


if __name__ == "__main__":
    main()
