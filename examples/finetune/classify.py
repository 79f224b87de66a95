"""Fine-tune an encoder for sentence (pair) classification or regression (GLUE) and export it.
With no arguments it trains a small BERT from scratch on the built-in toy sentiment data:

    python examples/finetune/classify.py
    python examples/finetune/classify.py --pretrained DIR --dataset glue_sst2 \\
        --data-dir ../shared/data/glue-sst2 --lr 2e-5 --epochs 3
    python examples/finetune/classify.py --pretrained DIR --train-file train.csv \\
        --valid-file dev.csv --text-column review --label-column stars
    python examples/finetune/classify.py --pretrained DIR --dataset glue_sst2 \\
        --data-dir ../shared/data/glue-sst2 --max-length 64 --pack   # packed rows
    python examples/finetune/classify.py --pretrained runs/classify_toy/latest/export \\
        --predict new.tsv     # writes runs/classify_toy/predictions/<time>/predictions.jsonl

``--pretrained DIR`` is a Hugging Face checkpoint directory (BERT, RoBERTa, XLM-R, ELECTRA,
DistilBERT, ...); ``--init random`` trains its architecture from fresh weights. The run keeps
the best checkpoint by the dataset's GLUE metric, exports it to ``<run>/export`` with
``save_pretrained`` (transformers loads it) and writes ``summary.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textkit.cli import run_main
from textkit.cli.finetune import finetune
from textkit.tasks import SequenceClassificationTask


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return finetune(SequenceClassificationTask, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    run_main(main)
