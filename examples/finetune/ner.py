"""Fine-tune an encoder for named-entity recognition (CoNLL columns) and export it. With no
arguments it trains a small BERT from scratch on built-in toy sentences:

    python examples/finetune/ner.py
    python examples/finetune/ner.py --pretrained DIR --dataset wnut17 \\
        --data-dir ../shared/data/wnut17 --lr 5e-5 --epochs 3
    python examples/finetune/ner.py --pretrained DIR --train-file train.conll \\
        --valid-file dev.conll --test-file test.conll
    python examples/finetune/ner.py --pretrained runs/ner_toy/latest/export \\
        --predict words.txt     # writes runs/ner_toy/predictions/<time>/predictions.conll

Each word's tag is learnt and predicted at its first sub-word; entities are scored as conlleval
and seqeval count them (exact span and type). The best checkpoint by validation F1 is scored on
the test split and exported to ``<run>/export``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textkit.cli import run_main
from textkit.cli.finetune import finetune
from textkit.tasks import TokenClassificationTask


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return finetune(TokenClassificationTask, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    run_main(main)
