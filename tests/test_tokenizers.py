import itertools
import pickle
import random
from pathlib import Path

import numpy as np
import pytest

from textkit.data.tokenizers import SentencePieceTokenizer, WhitespaceTokenizer
from textkit.vocab import Vocab

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MULTI30K_TRAIN_DE = DATA / "multi30k-en-de" / "train.de"


def test_whitespace_tokenizer():
    tok = WhitespaceTokenizer()
    assert tok.encode("  ein  Hund\tläuft \n") == ["ein", "Hund", "läuft"]
    assert tok.encode(["a b", "", "c"]) == [["a", "b"], [], ["c"]]
    assert tok.decode(["a", "b"]) == "a b"
    assert tok.decode([["a", "b"], ["c"]]) == ["a b", "c"]
    assert tok.decode([]) == ""


def generated_sentences(n: int = 3000, seed: int = 0) -> list[str]:
    """German-like sentences from a made-up lexicon (umlauts, ß, capitals, Zipf-like word
    frequencies): enough variety for a 300-piece unigram model, trained in well under a second."""
    syllables = ("ba be bi bo bu da de di do du ka ke ki ko ku la le li lo lu ma me mi mo mu "
                 "na ne ni no nu ra re ri ro ru sa se si so su ta te ti to tu ä ö ü ß äu sch "
                 "st ei ie").split()
    rng = random.Random(seed)
    lexicon = sorted({"".join(rng.choice(syllables) for _ in range(rng.randint(1, 4)))
                      for _ in range(600)})
    lexicon = [w.capitalize() if i % 5 == 0 else w for i, w in enumerate(lexicon)]
    weights = [1 / (i + 1) for i in range(len(lexicon))]
    sentences = [" ".join(rng.choices(lexicon, weights, k=rng.randint(3, 14))) + " ."
                 for _ in range(n)]
    sentences[5] = "Straße  über   Füße ."    # runs of spaces: collapsed by nmt_nfkc
    return sentences


# Each test runs on a generated corpus (always) and on Multi30k's German side when ../shared
# holds it (an extra check on real text). Vocabulary sizes fit each corpus.
CORPORA = {"generated": 300, "multi30k": 2000}


@pytest.fixture(scope="module", params=sorted(CORPORA))
def corpus(request):
    if request.param == "generated":
        return request.param, generated_sentences()
    if not MULTI30K_TRAIN_DE.exists():
        pytest.skip(f"shared Multi30k data not found at {MULTI30K_TRAIN_DE}")
    with open(MULTI30K_TRAIN_DE, encoding="utf-8") as f:
        return request.param, [line.rstrip("\n") for line in itertools.islice(f, 5000)]


@pytest.fixture(scope="module")
def multi30k_sentences(corpus):
    """The corpus's sentences (the name kept from when Multi30k was the only corpus)."""
    return corpus[1]


@pytest.fixture(scope="module")
def unigram(corpus, tmp_path_factory):
    name, sentences = corpus
    prefix = tmp_path_factory.mktemp("spm") / f"{name}_unigram"
    return SentencePieceTokenizer.train(sentences, prefix, vocab_size=CORPORA[name],
                                        user_defined_symbols=["<sep>"], seed=1, verbose=False)


def test_trained_model_special_ids_agree_with_vocab(unigram, corpus):
    assert (unigram.unk_id, unigram.pad_id, unigram.bos_id, unigram.eos_id) == (0, 1, 2, 3)
    vocab = unigram.vocab
    assert isinstance(vocab, Vocab) and len(vocab) == len(unigram) == CORPORA[corpus[0]]
    assert (vocab.unk_id, vocab.pad_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    assert vocab.idx_to_token[:4] == ["<unk>", "<pad>", "<bos>", "<eos>"]
    assert vocab["<sep>"] == 4  # user symbols follow the specials
    assert vocab.idx_to_token == Vocab.from_sentencepiece(unigram.processor).idx_to_token


def test_encode_decode_round_trip_batched(unigram, multi30k_sentences):
    batch = multi30k_sentences[:200]
    ids = unigram.encode(batch)
    assert len(ids) == 200 and all(isinstance(i, int) for i in ids[0])
    # German umlauts and ß survive (coverage 1.0); the nmt_nfkc rule collapses runs of spaces
    assert unigram.decode(ids) == [" ".join(s.split()) for s in batch]
    pieces = unigram.encode(batch[:3], out_type=str)
    assert [unigram.vocab[p] for p in pieces] == ids[:3]
    single = unigram.encode(batch[0], add_bos=True, add_eos=True)
    assert single[0] == 2 and single[-1] == 3 and single[1:-1] == ids[0]
    assert unigram.decode(np.asarray(ids[0])) == batch[0]
    assert unigram.decode([np.asarray(i, np.int32) for i in ids[:2]]) == batch[:2]
    assert unigram.encode("Straße <sep> Hund", out_type=str).count("<sep>") == 1


def test_sampling_varies_segmentation(unigram, multi30k_sentences):
    text = multi30k_sentences[7]
    best = unigram.encode(text)
    samples = {tuple(unigram.encode(text, enable_sampling=True, nbest_size=-1, alpha=0.1))
               for _ in range(30)}
    assert len(samples) > 1 and all(unigram.decode(list(s)) == text for s in samples)
    assert tuple(best) == tuple(unigram.encode(text))  # no sampling: deterministic
    with pytest.raises(ValueError, match="out_type"):
        unigram.encode(text, out_type=bytes)


def test_save_load_pickle(unigram, tmp_path, multi30k_sentences):
    path = unigram.save(tmp_path / "copy")
    assert path.name == "copy.model" and [p.name for p in tmp_path.iterdir()] == ["copy.model"]
    loaded = SentencePieceTokenizer.load(path)
    batch = multi30k_sentences[:50]
    assert loaded.encode(batch) == unigram.encode(batch)
    clone = pickle.loads(pickle.dumps(unigram))
    assert clone.encode(batch) == unigram.encode(batch) and clone.vocab == unigram.vocab


def test_bpe_from_file(tmp_path, corpus, multi30k_sentences):
    path = tmp_path / "train.txt"
    path.write_text("\n".join(multi30k_sentences[:2000]) + "\n", encoding="utf-8")
    size = CORPORA[corpus[0]] // 2
    bpe = SentencePieceTokenizer.train(path, tmp_path / "bpe.model", vocab_size=size,
                                       model_type="bpe", verbose=False)
    assert (tmp_path / "bpe.model").is_file() and len(bpe) == size
    first = [" ".join(s.split()) for s in multi30k_sentences[:20]]
    assert bpe.decode(bpe.encode(first)) == first
    dropped = {tuple(bpe.encode(multi30k_sentences[3], enable_sampling=True, alpha=0.5))
               for _ in range(20)}
    assert len(dropped) > 1  # BPE-dropout


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.model"):
        SentencePieceTokenizer(tmp_path / "nothing.model")
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        SentencePieceTokenizer.train(tmp_path / "missing.txt", tmp_path / "m", vocab_size=10)
    with pytest.raises(ValueError, match="model_type"):
        SentencePieceTokenizer.train(["a b"], tmp_path / "m", vocab_size=10, model_type="wp")
    with pytest.raises(ValueError, match="training failed"):
        SentencePieceTokenizer.train(["a b c"], tmp_path / "m", vocab_size=5000, verbose=False)
    assert not (tmp_path / "m.model").exists()
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="junk.model"):
        SentencePieceTokenizer(tmp_path / "junk.model")
