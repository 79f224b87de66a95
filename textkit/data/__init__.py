"""Datasets, tokenizers, samplers and the loader. Never imports jax or flax.

Each module adds one import line here for its public names.
"""
from textkit.data.samplers import Batch, FixedBucketSampler, SortedBucketSampler, SplitSampler  # noqa: F401
