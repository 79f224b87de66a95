"""The transformers side of ``finetune.py``: one ``Trainer`` epoch in its own process.

Reads one JSON object on stdin (``checkpoint``, ``train``, ``max_length``, ``batch_size``) and
prints one JSON line: ``epoch_s`` (the Trainer's ``train_runtime``), ``steps`` and the torch
threads. Needs torch and transformers (not textkit's dependencies).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)


class Examples(torch.utils.data.Dataset):
    """Tokenised sentences with labels (no padding: the collator pads each batch)."""

    def __init__(self, encodings: dict, labels: list[int]):
        self.encodings, self.labels = encodings, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        item = {k: v[i] for k, v in self.encodings.items()}
        item["labels"] = self.labels[i]
        return item


def length_grouping() -> dict:
    """Length-grouped batches under either name transformers has used: ``group_by_length``
    (up to v4) or ``train_sampling_strategy="group_by_length"`` (v5)."""
    import inspect
    fields = inspect.signature(TrainingArguments).parameters
    if "train_sampling_strategy" in fields:
        return {"train_sampling_strategy": "group_by_length"}
    return {"group_by_length": True}


def main() -> None:
    spec = json.loads(sys.stdin.read())
    torch.set_num_threads(os.cpu_count() or 1)
    tokenizer = AutoTokenizer.from_pretrained(spec["checkpoint"])
    model = AutoModelForSequenceClassification.from_pretrained(spec["checkpoint"])
    with open(spec["train"], encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f.readlines()[1:]]
    encodings = tokenizer([r[0] for r in rows], truncation=True, max_length=spec["max_length"])
    data = Examples(encodings, [int(r[1]) for r in rows])
    with tempfile.TemporaryDirectory() as out:
        arguments = TrainingArguments(
            output_dir=out, per_device_train_batch_size=spec["batch_size"],
            num_train_epochs=1, learning_rate=2e-5, **length_grouping(),
            eval_strategy="no", save_strategy="no", logging_strategy="no", report_to=[],
            use_cpu=True, dataloader_num_workers=0, disable_tqdm=True, seed=0,
            bf16=spec.get("precision") == "mixed_bfloat16")
        trainer = Trainer(model=model, args=arguments, train_dataset=data,
                          data_collator=DataCollatorWithPadding(tokenizer))
        result = trainer.train()
    print(json.dumps({"epoch_s": round(result.metrics["train_runtime"], 2),
                      "steps": result.global_step, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
