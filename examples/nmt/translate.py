"""Translate sentences with a model trained by ``examples/nmt/train.py`` or a Marian / OPUS-MT
checkpoint, one sentence per line::

    python examples/nmt/translate.py --checkpoint runs/nmt_toy < sentences.txt
    python examples/nmt/translate.py --pretrained opus-mt-en-de < sentences.txt

The recipe is ``textkit.cli.translate``, installed as ``textkit-translate`` (see its docstring
for every flag).
"""

import sys

from textkit.cli.translate import main

if __name__ == "__main__":
    sys.exit(main())
