"""Word vectors: loaders, writers, binary cache, registry, lookup, evaluation and training.

Only numpy (and tqdm) is used at import; jax is imported by ``word2vec_update`` alone, when
``train_word2vec`` starts.

    emb = TokenEmbedding.from_file("glove.6B.100d.txt")     # or create("glove", "glove.6B.100d")
    emb["the"], emb[["a", "b"]], emb.most_similar("king", k=5)
    matrix, found, missing = emb.for_vocab(vocab)            # [len(vocab), D] init weights
    emb.save("glove.cache"); TokenEmbedding.load("glove.cache")
    model = train_word2vec(build_corpus(read_sentences("text.txt"), 5), Word2VecConfig())
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
from textkit.embedding.word2vec import (
    EpochReport,
    Word2VecModel,
    Word2VecState,
    load_state,
    save_state,
    train_word2vec,
)
from textkit.embedding.word2vec_config import Word2VecConfig
from textkit.embedding.word2vec_corpus import Corpus, build_corpus, read_sentences
from textkit.embedding.writers import write_word2vec_binary, write_word2vec_text

__all__ = [
    "FORMATS",
    "AnalogyResult",
    "Corpus",
    "EmbeddingFormatError",
    "EpochReport",
    "FastTextSubwords",
    "PretrainedSource",
    "SimilarityResult",
    "TokenEmbedding",
    "VocabMatrix",
    "Word2VecConfig",
    "Word2VecModel",
    "Word2VecState",
    "build_corpus",
    "create",
    "detect_format",
    "evaluate_analogy",
    "evaluate_similarity",
    "get_source",
    "list_sources",
    "load_state",
    "read_analogy_questions",
    "read_sentences",
    "read_similarity_pairs",
    "register_source",
    "save_state",
    "train_word2vec",
    "write_word2vec_binary",
    "write_word2vec_text",
]
