"""Hugging Face ``generate`` timed in its own process, for ``benchmarks/decode.py``.

torch and JAX each keep a thread pool sized to the machine; in one process they compete and both
figures collapse, so ``decode.py`` starts this worker (with any Python that has torch and
transformers: ``--hf-python``) and alternates rounds with it over stdin/stdout, one JSON object
per line:

    -> {"checkpoint": DIR} or {"config": {MarianConfig fields}}, plus "src": [[ids]], "steps": N
    <- {"ready": true, "torch": "...", "transformers": "..."}   or   {"error": "..."}
    -> {"mode": "beam4" | "greedy"}
    <- {"mode": ..., "batch_s": seconds of one generate call}
    -> {"latency": "beam4" | "greedy", "text": "...", "steps": N}   (checkpoints only)
    <- {"s": seconds from text to text (tokenizer, generate, batch_decode), "text": ...}
    -> {"quit": true}

Every generate call forces exactly ``steps`` new tokens (``min_new_tokens`` = ``max_new_tokens``)
with ``early_stopping=False``, float32, ``torch.no_grad``. The first message may also name
``"dtype"`` (``"float16"``, ``"bfloat16"``; default float32) and ``"device"`` (``"cuda"``;
default the CPU), as ``gpu_check.py`` does; a timed call then ends with
``torch.cuda.synchronize``.
"""

from __future__ import annotations

import json
import sys
import time

from peer_worker import begin, reply


def load(spec: dict):
    """The model of ``spec``: a checkpoint directory of any encoder-decoder family
    (``AutoModelForSeq2SeqLM``), or a Marian config with random init."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, MarianConfig, MarianMTModel

    dtype = getattr(torch, spec.get("dtype", "float32"))
    device = spec.get("device", "cpu")
    if spec.get("checkpoint"):
        model = AutoModelForSeq2SeqLM.from_pretrained(spec["checkpoint"], dtype=dtype)
    else:
        torch.manual_seed(0)
        model = MarianMTModel(MarianConfig(**spec["config"])).to(dtype)
    return model.to(device).eval()


def main() -> None:
    started = begin("torch", "transformers")
    if started is None:
        return
    spec, (torch, transformers) = started
    model = load(spec)
    device = spec.get("device", "cpu")
    inputs = torch.as_tensor(spec["src"], dtype=torch.long).to(device)
    steps = int(spec["steps"])

    def generate(beams: int):
        with torch.no_grad():
            out = model.generate(inputs, attention_mask=torch.ones_like(inputs),
                                 num_beams=beams, do_sample=False, max_new_tokens=steps,
                                 min_new_tokens=steps, early_stopping=False)
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    for beams in (4, 1):                       # warm-up: first calls allocate and pick kernels
        generate(beams)
    reply({"ready": True, "torch": torch.__version__, "transformers": transformers.__version__,
           "threads": torch.get_num_threads()})
    tokenizer = None
    if spec.get("checkpoint"):
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(spec["checkpoint"])
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            return
        if "latency" in request:
            beams, steps = {"beam4": 4, "greedy": 1}[request["latency"]], int(request["steps"])
            start = time.perf_counter()
            encoded = tokenizer([request["text"]], return_tensors="pt")
            with torch.no_grad():
                out = model.generate(**encoded, num_beams=beams, do_sample=False,
                                     max_new_tokens=steps, min_new_tokens=steps,
                                     early_stopping=False)
            text = tokenizer.batch_decode(out, skip_special_tokens=True)[0]
            reply({"s": time.perf_counter() - start, "text": text})
            continue
        beams = {"beam4": 4, "greedy": 1}[request["mode"]]
        start = time.perf_counter()
        generate(beams)
        reply({"mode": request["mode"], "batch_s": time.perf_counter() - start})


if __name__ == "__main__":
    main()
