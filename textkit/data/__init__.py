"""Datasets, tokenizers, samplers and the loader. Never imports jax or flax.

Each module adds one import line here for its public names.
"""
from textkit.data.datasets import (  # noqa: F401
    LanguageModelCorpus,
    ParallelTextDataset,
    TextClassificationDataset,
    TextLineDataset,
    TSVDataset,
)
from textkit.data.download import ChecksumError, OfflineError, download, textkit_home  # noqa: F401
from textkit.data.lm import BPTTBatches, bptt_batches  # noqa: F401
from textkit.data.loader import DataLoader  # noqa: F401
from textkit.data.registry import get_dataset, list_datasets, register_dataset  # noqa: F401
from textkit.data.samplers import Batch, FixedBucketSampler, SortedBucketSampler, SplitSampler  # noqa: F401
from textkit.data.splits import kfold_indices  # noqa: F401
from textkit.data.tokenizers import SentencePieceTokenizer, WhitespaceTokenizer  # noqa: F401
from textkit.data.toy import toy_lm_corpus, toy_sentiment, toy_translation  # noqa: F401
