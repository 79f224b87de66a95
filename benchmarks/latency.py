"""One-sentence translation latency, text in and text out: textkit's ``Translator`` against
CTranslate2 and Hugging Face ``generate`` on the same checkpoint.

The checkpoint is ``decode.py``'s: a random model of OPUS-MT en-de's shape written by textkit's
``save_pretrained`` (``--quick``: a tiny one). The sentence is cut to ``--source-tokens``
SentencePiece pieces (the end-of-sentence token follows), and every engine produces exactly
``--steps`` target tokens (end-of-sentence banned, or its minimum length forced), greedy and
beam 4, float32 and int8 (textkit: ``Translator(quantize="int8")``; CTranslate2: the faster of
its ``int8`` / ``int8_float32`` compute types; Hugging Face has float32 only). A call is timed
from the text to the detokenised text: tokenisation, encoding, search, detokenisation.

textkit compiles one program per batch shape on first use: ``first_call_s`` is the time of the
first call of each mode (compilation included), after which the shape is warm; the figures are
medians of ``--rounds`` warm calls, the engines alternating call by call (CTranslate2 and
Hugging Face each in its own process, ``ct2_generate.py`` / ``hf_generate.py``).

Keys (milliseconds per sentence): ``latency_<mode>_ms`` (textkit), ``ct2_latency_<mode>_ms``,
``hf_latency_<mode>_ms`` and the speed ratios ``latency_<mode>_ct2_ratio`` /
``latency_<mode>_hf_ratio`` (peer ms / textkit ms: above 1, textkit answers sooner). Without a
peer's packages the JSON says why (``ct2_skipped``, ``hf_skipped``). The last output line is one
JSON object.

    python benchmarks/latency.py --peer-python /tmp/hfenv/bin/python
    python benchmarks/latency.py --quick --no-peers --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from cpu_info import cpu_info
from decode import Worker, write_marian_checkpoint

from textkit.pretrained import load_translator

MODES = ("greedy", "beam4", "greedy_int8", "beam4_int8")
SENTENCE = ("the small dog runs quickly across the green park while two children watch it "
            "from the old wooden bench near the river and laugh loudly together")


def source_text(translator: Any, pieces: int) -> str:
    """The longest prefix of ``SENTENCE`` (cut at a character) that the source tokenizer makes
    ``pieces`` pieces at most (it adds end-of-sentence)."""
    encode = translator.src_tokenizer.encode
    for n in range(len(SENTENCE), 0, -1):
        text = SENTENCE[:n].strip()
        if len(encode([text])[0]) - 1 <= pieces:
            return text
    raise ValueError("the tokenizer splits the first character into too many pieces")


def translators(checkpoint: Path, steps: int) -> dict[str, Any]:
    """``{mode: (translator, params)}``: exactly ``steps`` output tokens (EOS banned)."""
    out = {}
    for mode in MODES:
        base, _, quantize = mode.partition("_")
        translator, params = load_translator(checkpoint, beam_size=1 if base == "greedy" else 4,
                                             max_length=steps, forced_eos=False,
                                             batch_size=1, quantize=quantize or None)
        translator.banned_ids = tuple(sorted({*translator.banned_ids, translator.eos_id}))
        out[mode] = (translator, params)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", default=sys.executable,
                        help="Python with ctranslate2, torch, transformers, sentencepiece")
    parser.add_argument("--no-peers", action="store_true", help="time textkit only")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--source-tokens", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="a tiny model (a smoke run)")
    args = parser.parse_args()
    print(json.dumps({"cpu": cpu_info()}), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = write_marian_checkpoint(Path(tmp), args.quick)
        engines = translators(checkpoint, args.steps)
        text = source_text(engines["greedy"][0], args.source_tokens)
        source = engines["greedy"][0].src_tokenizer.encode([text])[0]
        summary: dict[str, Any] = {"source_tokens": len(source) - 1, "steps": args.steps,
                                   "text": text, "quick": args.quick}
        for mode, (translator, params) in engines.items():
            start = time.perf_counter()
            translator.translate(params, [text])
            summary[f"first_call_{mode}_s"] = round(time.perf_counter() - start, 2)
            hypothesis = translator.translate_ids(params, [source])[0]
            assert len(hypothesis) == args.steps, (mode, len(hypothesis))
        peers: dict[str, Worker] = {}
        src = np.asarray([source], np.int32)
        for name, script in (("ct2", "ct2_generate.py"), ("hf", "hf_generate.py")):
            if args.no_peers:
                summary[f"{name}_skipped"] = "--no-peers"
                continue
            started = Worker.start(script, args.peer_python, {"checkpoint": str(checkpoint)},
                                   src)
            if isinstance(started, str):
                summary[f"{name}_skipped"] = started
            else:
                peers[name] = started
        times: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for mode, (translator, params) in engines.items():
                start = time.perf_counter()
                translator.translate(params, [text])
                times.setdefault(f"latency_{mode}", []).append(time.perf_counter() - start)
                for name, worker in peers.items():
                    if name == "hf" and mode.endswith("_int8"):
                        continue
                    answer = worker.ask({"latency": mode, "text": text, "steps": args.steps})
                    times.setdefault(f"{name}_latency_{mode}", []).append(answer["s"])
        for worker in peers.values():
            worker.close()
        ms = {key: 1000 * statistics.median(values) for key, values in times.items()}
        for key, value in ms.items():
            summary[f"{key}_ms"] = round(value, 2)
        for mode in MODES:
            for name in ("ct2", "hf"):
                if f"{name}_latency_{mode}" in ms:
                    summary[f"latency_{mode}_{name}_ratio"] = round(
                        ms[f"{name}_latency_{mode}"] / ms[f"latency_{mode}"], 2)
            print(f"{mode}: textkit {ms[f'latency_{mode}']:.1f} ms" + "".join(
                f", {name} {ms[f'{name}_latency_{mode}']:.1f} ms" for name in ("ct2", "hf")
                if f"{name}_latency_{mode}" in ms), flush=True)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
