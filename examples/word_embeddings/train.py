"""Train word vectors (skip-gram or CBOW, negative sampling; fastText subwords) on a text file.

The recipe is ``textkit.cli.word2vec``, installed as ``textkit-word2vec``.

The text is read one sentence per line, lowercased (``--no-lowercase`` keeps the case) and
split on whitespace, as gensim's ``LineSentence`` reads the same lowercased file. The settings
are gensim's (``textkit.embedding.Word2VecConfig``: ``--vector-size``, ``--window``,
``--min-count``, ``--negative``, ``--sample``, ``--epochs``, ``--alpha``, ``--min-n``,
``--max-n``, ``--bucket``; ``--subwords`` for fastText's character n-grams).

Examples::

    python examples/word_embeddings/train.py --train-file ../shared/data/ptb/ptb.train.txt \\
        --objective skipgram --save-dir runs/w2v_ptb
    python examples/word_embeddings/train.py --train-file text.txt --objective cbow \\
        --subwords --save-dir runs/ft_text --resume     # continue after the last epoch saved

Writes to ``--save-dir``: ``config.json``, ``train.log``, ``vectors.txt`` (word2vec text),
``vectors.bin`` (word2vec C binary), ``embedding/`` (``TokenEmbedding.save``'s folder; with
``--subwords`` it holds the n-gram rows, so ``TokenEmbedding.load`` gives unseen words
vectors), ``checkpoints/epoch-N.npz`` (the matrices after the last finished epoch: ``--resume``
continues from it) and ``summary.json`` (words/s, loss per epoch, and the scores on the
similarity and analogy sets of ``--eval-dir``).
"""

from collections.abc import Sequence
from typing import Any

from textkit.cli import run_main
from textkit.cli.word2vec import train


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return train(argv)


if __name__ == "__main__":
    run_main(main)
