"""Pretrain an encoder (masked LM or ELECTRA) from raw text and export it for fine-tuning.
With no arguments it pretrains a small BERT on the built-in generated text:

    python examples/pretrain/train.py --model bert_tiny --max-steps 200
    python examples/pretrain/train.py --model bert_mini --train-file ptb.train.txt \\
        sst2.txt --valid-file wiki.valid.tokens --max-length 128 --batch-size 32 \\
        --time-budget-min 40 --eval-every 200 --save-dir runs/bert_mini_mlm
    python examples/pretrain/train.py --objective electra \\
        --model electra_small_discriminator --model-overrides num_layers=4 --train-file ...
    python examples/pretrain/train.py --pretrained ../shared/data/tokenizers/bert-base-uncased \\
        --init random --model bert_mini --train-file ...   # a published tokenizer
    python examples/finetune/classify.py --pretrained runs/bert_mini_mlm/export ...

A document is a line, a blank-line separated paragraph (the default: a file without blank
lines is one document, its lines the sentences) or a WikiText article (``--documents``).
Sequences of ``--max-length`` tokens are packed from whole sentences within documents
(``--cross-documents`` lets them cross; ``--pairs nsp|sop`` adds a sentence-pair head); masks
are drawn anew every epoch (``--mask-probability``, ``--whole-word-masking``). The run
exports ``<run>/export`` (``BertForMaskedLM``, ``RobertaForMaskedLM``, ...; ELECTRA: the
discriminator as ``ElectraForPreTraining`` and the generator in ``export/generator``) and
writes ``summary.json``, ``metrics.jsonl`` and ``curves.png``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textkit.cli import run_main
from textkit.cli.pretrain import train


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return train(argv)


if __name__ == "__main__":
    run_main(main)
