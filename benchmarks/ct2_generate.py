"""CTranslate2 timed in its own process, for ``benchmarks/decode.py`` and ``latency.py``.

The worker converts the checkpoint (Marian, T5, ...) that the textkit and Hugging Face sides read
(``ctranslate2.converters.TransformersConverter``, float32 weights) and loads it three times:
``float32``, ``int8`` and ``int8_float32`` compute types (``intra_threads`` = the cores,
``inter_threads`` 1). The int8 modes use the faster of the two int8 types, chosen on the batch
in the warm-up. One JSON object per line over stdin / stdout:

    -> {"checkpoint": DIR, "src": [[ids]], "steps": N}
    <- {"ready": true, "ctranslate2": "...", "int8_compute_type": "...", "threads": T}
       or {"error": "..."}
    -> {"mode": "beam4" | "greedy" | "beam4_int8" | "greedy_int8"}
    <- {"mode": ..., "batch_s": seconds of one translate_batch of the whole batch}
    -> {"latency": mode, "text": "...", "steps": N}
    <- {"s": seconds from text to text (SentencePiece pieces, translate, detokenise), "text"}
    -> {"quit": true}

Every call forces exactly ``steps`` target tokens (``min_decoding_length`` =
``max_decoding_length``, the end token never reached first); the sources are the same ids the
other engines get.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from peer_worker import begin, reply


def vocabulary(model_dir: Path) -> list[str]:
    """The converted model's source vocabulary, in id order."""
    for name in ("shared_vocabulary.json", "source_vocabulary.json"):
        if (model_dir / name).is_file():
            return json.loads((model_dir / name).read_text())
    for name in ("shared_vocabulary.txt", "source_vocabulary.txt"):
        if (model_dir / name).is_file():
            return (model_dir / name).read_text().splitlines()
    raise FileNotFoundError(f"{model_dir} has no vocabulary file")


def main() -> None:
    started = begin("ctranslate2", "sentencepiece")
    if started is None:
        return
    spec, (ctranslate2, sentencepiece) = started
    threads = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "ct2"
        ctranslate2.converters.TransformersConverter(spec["checkpoint"]).convert(
            str(model_dir), force=True)
        pieces = vocabulary(model_dir)
        translators = {kind: ctranslate2.Translator(
            str(model_dir), device="cpu", compute_type=kind, intra_threads=threads,
            inter_threads=1) for kind in ("float32", "int8", "int8_float32")}
        steps = int(spec["steps"])
        source = [[pieces[i] for i in row] for row in spec["src"]]

        def run(translator, batch, beams: int, length: int):
            return translator.translate_batch(batch, beam_size=beams, max_decoding_length=length,
                                              min_decoding_length=length, length_penalty=1.0)

        def timed(kind: str, beams: int) -> float:
            start = time.perf_counter()
            run(translators[kind], source, beams, steps)
            return time.perf_counter() - start

        for kind in translators:                    # warm-up: allocations, kernel choice
            for beams in (4, 1):
                timed(kind, beams)
        int8_s = {kind: sum(min(timed(kind, b) for _ in range(2)) for b in (4, 1))
                  for kind in ("int8", "int8_float32")}
        int8 = min(int8_s, key=int8_s.get)
        reply({"ready": True, "ctranslate2": ctranslate2.__version__, "threads": threads,
               "int8_compute_type": int8,
               "int8_candidates_s": {k: round(v, 4) for k, v in int8_s.items()}})
        kinds = {"": "float32", "_int8": int8}
        spm = {}                 # Marian's SentencePiece models, read for the first latency

        def pieces_of(side: str) -> object:
            if side not in spm:
                spm[side] = sentencepiece.SentencePieceProcessor(
                    model_file=str(Path(spec["checkpoint"]) / f"{side}.spm"))
            return spm[side]

        for line in sys.stdin:
            request = json.loads(line)
            if request.get("quit"):
                return
            if "latency" in request:
                mode = request["latency"]
                kind = kinds["_int8" if mode.endswith("_int8") else ""]
                beams = 1 if mode.startswith("greedy") else 4
                start = time.perf_counter()
                tokens = pieces_of("source").encode(request["text"], out_type=str) + ["</s>"]
                result = run(translators[kind], [tokens], beams, int(request["steps"]))
                text = pieces_of("target").decode(result[0].hypotheses[0])
                reply({"s": time.perf_counter() - start, "text": text})
                continue
            mode = request["mode"]
            kind = kinds["_int8" if mode.endswith("_int8") else ""]
            reply({"mode": mode, "batch_s": timed(kind, 1 if mode.startswith("greedy") else 4)})


if __name__ == "__main__":
    main()
