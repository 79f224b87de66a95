"""Fine-tune an encoder for extractive question answering (SQuAD v1.1 / v2.0) and export it.
With no arguments it trains a small BERT from scratch on built-in toy questions:

    python examples/finetune/squad.py
    python examples/finetune/squad.py --pretrained DIR --dataset squad1.1 \\
        --data-dir ../shared/data/squad-v1.1 --lr 3e-5 --epochs 2
    python examples/finetune/squad.py --pretrained DIR --train-file train.json \\
        --valid-file dev.json --max-length 384 --doc-stride 128
    python examples/finetune/squad.py --pretrained runs/squad_toy/latest/export \\
        --predict questions.json  # writes runs/squad_toy/predictions/<time>/predictions.json

Questions and contexts are cut into --max-length windows that share --doc-stride tokens; the
best span over a question's windows is its answer. The evaluated split's answers are written to
``<run>/predictions.json`` in the official form (question id -> answer text) beside the exact
match and F1 of the official SQuAD script; the best checkpoint is exported to ``<run>/export``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textkit.cli import run_main
from textkit.cli.finetune import finetune
from textkit.tasks import QuestionAnsweringTask


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return finetune(QuestionAnsweringTask, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    run_main(main)
