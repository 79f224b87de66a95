"""Load pretraining exports with transformers and compare their outputs with textkit's:

    /tmp/hfenv/bin/python tools/check_pretraining_exports.py EXPORT [EXPORT ...]

Each ``EXPORT`` (a ``<run>/export`` or its ``generator/``) holds ``textkit_outputs.npz``,
written by the textkit side (``tests/test_pretraining.py``): the texts' ``input_ids``,
``attention_mask`` (and ``token_type_ids``) as textkit's tokenizer gave them and textkit's
``logits``, with the texts themselves in ``textkit_texts.json``. The check loads the class of
``config.json``'s ``architectures`` (``BertForMaskedLM``, ``ElectraForPreTraining``, ...) and
its tokenizer (``AutoTokenizer``), asserts equal ids, and prints one JSON line per export with
the largest logit difference at the real positions; it exits 1 when one is over 1e-4.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers


def check(directory: Path) -> float:
    """The largest |logit difference| of ``directory``'s export against textkit's."""
    saved = np.load(directory / "textkit_outputs.npz")
    texts = json.loads((directory / "textkit_texts.json").read_text())
    architecture = json.loads((directory / "config.json").read_text())["architectures"][0]
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    inputs = tokenizer(texts, padding="max_length", max_length=saved["input_ids"].shape[1],
                       return_tensors="pt")
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        if key in saved.files:
            assert np.array_equal(inputs[key].numpy(), saved[key]), (directory, key)
    model = getattr(transformers, architecture).from_pretrained(directory).eval()
    with torch.no_grad():
        logits = model(**{k: v for k, v in inputs.items() if k in saved.files}).logits.numpy()
    real = saved["attention_mask"].astype(bool)
    return float(np.abs(logits - saved["logits"])[real].max())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("exports", nargs="+", type=Path)
    worst = 0.0
    for directory in p.parse_args().exports:
        difference = check(directory)
        worst = max(worst, difference)
        print(json.dumps({"export": str(directory), "max_abs_logit_difference": difference}))
    sys.exit(1 if worst > 1e-4 else 0)


if __name__ == "__main__":
    main()
