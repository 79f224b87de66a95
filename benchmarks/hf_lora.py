"""The peft + transformers side of ``lora.py``: LoRA training steps in their own process.

Reads one JSON object on stdin (``config``: a Llama ``config.json`` dict, ``batch``,
``length``, ``steps``, ``rank``, ``alpha``, ``targets``, ``precision``, ``seed``) and prints
one JSON line: ``step_s`` (median of ``steps`` timed steps after two warm-up steps),
``peak_mib`` (this process's VmHWM), ``trained`` and the versions. Needs torch, transformers
and peft (not textkit's dependencies).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import peft
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


def main() -> None:
    spec = json.loads(sys.stdin.read())
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(spec["seed"])
    settings = dict(spec["config"])
    config = AutoConfig.for_model(settings.pop("model_type"), **settings)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model = peft.get_peft_model(model, peft.LoraConfig(
        r=spec["rank"], lora_alpha=spec["alpha"], target_modules=spec["targets"]))
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    rng = np.random.default_rng(spec["seed"])
    tokens = torch.from_numpy(rng.integers(1, config.vocab_size,
                                           (spec["batch"], spec["length"] + 1)))
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) \
        if spec["precision"] == "mixed_bfloat16" else contextlib.nullcontext()
    times = []
    for i in range(2 + spec["steps"]):
        start = time.perf_counter()
        with autocast:
            logits = model(input_ids=inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1),
                                                 labels.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= 2:
            times.append(time.perf_counter() - start)
    peak = next(int(line.split()[1]) / 1024 for line in
                Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
    print(json.dumps({"step_s": statistics.median(times), "peak_mib": round(peak, 1),
                      "trained": sum(p.numel() for p in trainable), "loss": float(loss),
                      "versions": {"torch": torch.__version__, "peft": peft.__version__,
                                   "transformers": transformers.__version__,
                                   "threads": torch.get_num_threads()}}))


if __name__ == "__main__":
    main()
