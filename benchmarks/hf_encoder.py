"""transformers' BERT sequence classifier timed in its own process, for
``benchmarks/encoder.py``.

torch and JAX each keep a thread pool sized to the machine; in one process they compete, so
``encoder.py`` starts this worker (with any Python that has torch and transformers:
``--peer-python``) and alternates rounds with it over stdin/stdout, one JSON object per line:

    -> {"checkpoint": DIR, "input_ids": [[ids]], "labels": [ids], "modes": [...], "lr": x}
    <- {"ready": true, "torch": "...", "transformers": "...", "threads": n,
        "logits": [[...]] (float32 infer, when asked)}  or  {"error": "..."}
    -> {"mode": "infer" | "train" | "infer_bf16"}
    <- {"mode": ..., "batch_s": seconds of one call}
    -> {"quit": true}

``infer``: ``model(input_ids, attention_mask, token_type_ids).logits`` under
``torch.inference_mode`` (float32, eval mode); ``infer_bf16``: the same with the model cast to
bfloat16; ``train``: one AdamW step (train mode, dropout on): zero_grad, forward with
``labels`` (cross-entropy), backward, ``optimizer.step``. Each mode runs twice before "ready".
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
    from transformers import BertForSequenceClassification

    def load(dtype):
        return BertForSequenceClassification.from_pretrained(spec["checkpoint"], dtype=dtype)

    ids = torch.as_tensor(spec["input_ids"], dtype=torch.long)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "token_type_ids": torch.zeros_like(ids)}
    labels = torch.as_tensor(spec["labels"], dtype=torch.long)
    modes = spec["modes"]
    infer_model = load(torch.float32).eval() if "infer" in modes else None
    bf16_model = load(torch.bfloat16).eval() if "infer_bf16" in modes else None
    train_model = load(torch.float32).train() if "train" in modes else None
    optimizer = (torch.optim.AdamW(train_model.parameters(), lr=spec["lr"])
                 if train_model is not None else None)

    def infer(model) -> list:
        with torch.inference_mode():
            return model(**inputs).logits.float().tolist()

    def train() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = train_model(**inputs, labels=labels).loss
        loss.backward()
        optimizer.step()
        loss.item()

    calls = {"infer": lambda: infer(infer_model), "infer_bf16": lambda: infer(bf16_model),
             "train": train}
    for mode in modes:                       # warm-up: first calls allocate and pick kernels
        calls[mode]()
        calls[mode]()
    reply({"ready": True, "torch": torch.__version__, "transformers": transformers.__version__,
           "threads": torch.get_num_threads(),
           "logits": infer(infer_model) if infer_model is not None else None})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            return
        start = time.perf_counter()
        calls[request["mode"]]()
        reply({"mode": request["mode"], "batch_s": time.perf_counter() - start})


if __name__ == "__main__":
    main()
