"""Batchify callables that turn a list of samples into numpy arrays. Never imports jax.

Every callable is ``fn(samples, shape=None)``; ``shape`` is the ``BatchShape`` a bucket sampler
assigned to the batch.
"""

from textkit.batchify.containers import Dict, List, NamedTuple, Tuple
from textkit.batchify.packing import PackedBatchify
from textkit.batchify.pad import Pad
from textkit.batchify.shape import BatchShape
from textkit.batchify.stack import Stack
from textkit.batchify.tasks import ClassificationBatchify, EncoderBatchify, Seq2SeqBatchify

__all__ = ["BatchShape", "ClassificationBatchify", "Dict", "EncoderBatchify", "List",
           "NamedTuple", "PackedBatchify", "Pad", "Seq2SeqBatchify", "Stack", "Tuple"]
