"""Batchify callables that turn a list of samples into numpy arrays. Never imports jax."""

from textkit.batchify.shape import BatchShape

__all__ = ["BatchShape"]
