import subprocess
import sys


def test_data_batchify_vocab_embedding_do_not_import_jax_or_flax():
    code = (
        "import sys\n"
        "import textkit.data, textkit.batchify, textkit.vocab, textkit.embedding, textkit._io\n"
        "import textkit.plot\n"
        "import textkit.data.tokenizers, textkit.data.registry, textkit.data.catalogue\n"
        "import textkit.data.lm, textkit.embedding.registry\n"
        "import textkit.embedding.word2vec, textkit.embedding.word2vec_batches\n"
        "import textkit.embedding.word2vec_corpus, textkit.embedding.writers\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'flax'))\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "", f"imported: {result.stdout.strip()}"
