"""Datasets, tokenizers, samplers and the loader. Never imports jax or flax."""

from textkit.data import catalogue  # noqa: F401  (registers the named corpora)
from textkit.data.datasets import (
    LanguageModelCorpus,
    ParallelLines,
    ParallelTextDataset,
    TextClassificationDataset,
    TextLineDataset,
    TSVDataset,
)
from textkit.data.download import ChecksumError, OfflineError, download, textkit_home
from textkit.data.lm import BPTTBatches, bptt_batches
from textkit.data.loader import DataLoader
from textkit.data.packing import PackedBatch, PackedSampler, pack_rows
from textkit.data.registry import (
    DatasetInfo,
    dataset_files,
    get_dataset,
    get_dataset_info,
    list_datasets,
    register_dataset,
)
from textkit.data.samplers import Batch, FixedBucketSampler, SortedBucketSampler, SplitSampler
from textkit.data.splits import kfold_indices
from textkit.data.token_store import TokenStore, build_token_store, file_digest
from textkit.data.tokenizers import SentencePieceTokenizer, WhitespaceTokenizer
from textkit.data.toy import toy_lm_corpus, toy_sentiment, toy_translation

__all__ = [
    "BPTTBatches", "Batch", "ChecksumError", "DataLoader", "FixedBucketSampler",
    "LanguageModelCorpus", "OfflineError", "PackedBatch", "PackedSampler", "ParallelLines",
    "ParallelTextDataset", "pack_rows",
    "SentencePieceTokenizer", "SortedBucketSampler", "SplitSampler", "TSVDataset",
    "TextClassificationDataset", "TextLineDataset", "TokenStore", "WhitespaceTokenizer",
    "bptt_batches", "build_token_store", "dataset_files", "download", "file_digest",
    "DatasetInfo", "get_dataset", "get_dataset_info", "kfold_indices", "list_datasets",
    "register_dataset", "textkit_home",
    "toy_lm_corpus", "toy_sentiment", "toy_translation",
]
