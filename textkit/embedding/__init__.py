"""Pretrained word vectors: loaders, binary cache, registry, lookup and evaluation.

Only numpy (and tqdm) is used; nothing here imports jax.

    emb = TokenEmbedding.from_file("glove.6B.100d.txt")     # or create("glove", "glove.6B.100d")
    emb["the"], emb[["a", "b"]], emb.most_similar("king", k=5)
    matrix, found, missing = emb.for_vocab(vocab)            # [len(vocab), D] init weights
    emb.save("glove.cache"); TokenEmbedding.load("glove.cache")
"""

from textkit.embedding.errors import EmbeddingFormatError
from textkit.embedding.evaluation import (
    AnalogyResult,
    SimilarityResult,
    evaluate_analogy,
    evaluate_similarity,
    read_analogy_questions,
    read_similarity_pairs,
)
from textkit.embedding.fasttext_bin import FastTextSubwords
from textkit.embedding.formats import FORMATS, detect_format
from textkit.embedding.registry import (
    PretrainedSource,
    create,
    get_source,
    list_sources,
    register_source,
)
from textkit.embedding.token_embedding import TokenEmbedding, VocabMatrix

__all__ = [
    "FORMATS",
    "AnalogyResult",
    "EmbeddingFormatError",
    "FastTextSubwords",
    "PretrainedSource",
    "SimilarityResult",
    "TokenEmbedding",
    "VocabMatrix",
    "create",
    "detect_format",
    "evaluate_analogy",
    "evaluate_similarity",
    "get_source",
    "list_sources",
    "read_analogy_questions",
    "read_similarity_pairs",
    "register_source",
]
