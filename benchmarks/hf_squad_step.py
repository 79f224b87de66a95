"""transformers' BERT question-answering fine-tuning step under torch AMP, timed in its own
process, for ``benchmarks/gpu_check.py``.

torch and JAX each take the accelerator's memory (and the CPU's threads); in one process they
compete, so ``gpu_check.py`` starts this worker (with any Python that has torch and
transformers: ``--peer-python``) and alternates rounds with it over stdin/stdout, one JSON
object per line:

    -> {"checkpoint": DIR, "src": [[input ids]], "start_positions": [i], "end_positions": [i],
        "modes": ["bfloat16", "float16"], "lr": x, "device": "cuda" | "cpu"}
    <- {"ready": true, "torch": "...", "transformers": "...", "device": "..."}
       or {"error": "..."}
    -> {"mode": "bfloat16" | "float16", "steps": n}
    <- {"mode": ..., "step_s": seconds per step over n steps}
    -> {"quit": true}

One step: ``zero_grad``, the forward of ``BertForQuestionAnswering`` (float32 weights, train
mode, dropout on) with ``start_positions`` / ``end_positions`` under
``torch.autocast(dtype=...)``, backward and ``torch.optim.AdamW.step``; for ``float16`` through a
``torch.amp.GradScaler`` (dynamic loss scaling). Each mode has its own model and optimizer and
runs three steps before "ready". Timing ends with ``torch.cuda.synchronize`` on a GPU.
"""

from __future__ import annotations

import json
import sys
import time

from peer_worker import begin, reply


def main() -> None:
    started = begin("torch", "transformers")
    if started is None:
        return
    spec, (torch, transformers) = started
    from transformers import BertForQuestionAnswering
    device = spec.get("device", "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        reply({"error": f"torch {torch.__version__} sees no CUDA device (in {sys.executable})"})
        return
    tensor = lambda key: torch.as_tensor(spec[key], dtype=torch.long, device=device)  # noqa: E731
    ids = tensor("src")
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "token_type_ids": torch.zeros_like(ids),
             "start_positions": tensor("start_positions"),
             "end_positions": tensor("end_positions")}

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def make_step(mode: str):
        dtype = getattr(torch, mode)
        model = BertForQuestionAnswering.from_pretrained(spec["checkpoint"],
                                                         dtype=torch.float32).to(device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=spec["lr"])
        scaler = torch.amp.GradScaler(device, enabled=mode == "float16")

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device, dtype=dtype):
                loss = model(**batch).loss
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

        return step

    steps = {mode: make_step(mode) for mode in spec["modes"]}
    for step in steps.values():              # warm-up: allocation and kernel choice
        for _ in range(3):
            step()
    sync()
    reply({"ready": True, "torch": torch.__version__, "transformers": transformers.__version__,
           "device": torch.cuda.get_device_name() if device == "cuda" else "cpu"})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            return
        n = int(request.get("steps", 1))
        sync()
        start = time.perf_counter()
        for _ in range(n):
            steps[request["mode"]]()
        sync()
        reply({"mode": request["mode"], "step_s": (time.perf_counter() - start) / n})


if __name__ == "__main__":
    main()
