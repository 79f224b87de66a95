"""transformers' ``BertForMaskedLM`` training step timed in its own process, for
``benchmarks/pretrain.py`` (torch and JAX each keep a thread pool sized to the machine; in one
process they would compete). One JSON object per line over stdin / stdout:

    -> {"checkpoint": DIR, "input_ids": [[ids]] (masked), "labels": [[ids or -100]],
        "modes": ["float32", "bfloat16"], "lr": x}
    <- {"ready": true, "torch": "...", "transformers": "...", "threads": n,
        "eval_loss": the float32 loss without dropout, before any step}  or  {"error": "..."}
    -> {"mode": "float32" | "bfloat16"}
    <- {"mode": ..., "step_s": seconds of one step}
    -> {"quit": true}

A step: zero_grad, forward with ``labels`` (train mode, dropout on; the loss is the mean
cross-entropy of the labelled tokens over logits at every position), backward,
``torch.optim.AdamW.step`` (weight decay 0.01). ``bfloat16``: the same under
``torch.autocast("cpu", dtype=torch.bfloat16)`` (float32 weights). Each mode runs
``WARM_UP`` steps before "ready" (torch's step time falls over its first few steps).
"""

from __future__ import annotations

import json
import sys
import time

from peer_worker import begin, reply

WARM_UP = 5


def main() -> None:
    started = begin("torch", "transformers")
    if started is None:
        return
    spec, (torch, transformers) = started
    from transformers import BertForMaskedLM

    ids = torch.as_tensor(spec["input_ids"], dtype=torch.long)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "token_type_ids": torch.zeros_like(ids),
              "labels": torch.as_tensor(spec["labels"], dtype=torch.long)}
    model = BertForMaskedLM.from_pretrained(spec["checkpoint"], dtype=torch.float32).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec["lr"], weight_decay=0.01)

    def step(bfloat16: bool) -> float:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16):
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        return float(loss.item())

    with torch.no_grad():
        eval_loss = float(model.eval()(**inputs).loss)
    model.train()
    calls = {"float32": lambda: step(False), "bfloat16": lambda: step(True)}
    for mode in spec["modes"]:     # warm-up: torch's first steps allocate and pick kernels
        for _ in range(WARM_UP):
            calls[mode]()
    reply({"ready": True, "torch": torch.__version__, "transformers": transformers.__version__,
           "threads": torch.get_num_threads(), "eval_loss": eval_loss})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            return
        start = time.perf_counter()
        calls[request["mode"]]()
        reply({"mode": request["mode"], "step_s": time.perf_counter() - start})


if __name__ == "__main__":
    main()
