"""The memory-mapped token store: round trip, atomic builds, keys, damage, streaming input."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import numpy as np
import pytest
from subprocesses import ROOT

from textkit.data import (
    ParallelLines,
    SentencePieceTokenizer,
    TokenStore,
    build_token_store,
    toy_translation,
)
from textkit.data.token_store import remove_stale
from textkit.tasks import translation


class CharTokenizer:
    """Picklable stand-in: one id per character (vocabulary ``size``)."""

    def __init__(self, size: int = 300):
        self.size = size

    def encode(self, texts):
        return [[ord(c) % self.size for c in text] for text in texts]

    def __len__(self):
        return self.size


@pytest.fixture(scope="module")
def spm_tokenizer(tmp_path_factory):
    text = [s for pair in toy_translation("train", num_sentences=300, seed=0) for s in pair]
    path = tmp_path_factory.mktemp("spm") / "spm.model"
    return SentencePieceTokenizer.train(text, path, vocab_size=120, model_type="bpe", seed=0,
                                        hard_vocab_limit=False, verbose=False)


def write_pair(folder, src_lines, tgt_lines):
    src, tgt = folder / "train.src", folder / "train.tgt"
    src.write_text("".join(line + "\n" for line in src_lines))
    tgt.write_text("".join(line + "\n" for line in tgt_lines))
    return src, tgt


@pytest.mark.parametrize("num_workers", [0, 2])
def test_store_round_trip_equals_in_memory_encoding(tmp_path, spm_tokenizer, num_workers):
    pairs = toy_translation("train", num_sentences=500, seed=1)
    pairs[3] = (pairs[3][0], "")                                # an empty side: dropped by both
    src, tgt = write_pair(tmp_path, [s for s, _ in pairs], [t for _, t in pairs])
    source = ParallelLines(src, tgt)
    run = SimpleNamespace(root=tmp_path / "run")
    store = translation.encode_corpus(run, source, spm_tokenizer, spm_tokenizer,
                                      num_workers=num_workers)
    assert len(store) == len(pairs) and store.meta["dtype"] == "uint16"
    expected = translation.encode_pairs(pairs, spm_tokenizer, spm_tokenizer, max_length=20)
    kept = translation.trainable(store, max_length=20)
    assert len(kept) == len(expected) < len(pairs)
    got = [(s.tolist(), t.tolist()) for s, t in kept.__getitems__(range(len(kept)))]
    assert got == [(list(s), list(t)) for s, t in expected]
    assert kept.lengths.tolist() == [[len(s), len(t)] for s, t in expected]
    lines = [kept.line_of(i) for i in range(len(kept))]
    assert 4 not in lines                                        # line 4: the empty target
    assert translation.encode_pairs([pairs[line - 1] for line in lines], spm_tokenizer,
                                    spm_tokenizer) == [(list(s), list(t)) for s, t in expected]
    # the same store is reused (no rebuild) while nothing changed
    mtime = (store.directory / "meta.json").stat().st_mtime_ns
    again = translation.encode_corpus(run, source, spm_tokenizer, spm_tokenizer)
    assert again.directory == store.directory
    assert (again.directory / "meta.json").stat().st_mtime_ns == mtime


def test_loader_over_a_store_matches_the_loader_over_lists(tmp_path, spm_tokenizer):
    pairs = toy_translation("train", num_sentences=300, seed=2)
    store = translation.trainable(translation.encode_corpus(
        SimpleNamespace(root=tmp_path), pairs, spm_tokenizer, spm_tokenizer))
    lists = translation.encode_pairs(pairs, spm_tokenizer, spm_tokenizer)
    options = dict(pad_id=0, bos_id=1, eos_id=2, num_buckets=4, seed=3)
    for a, b in zip(translation.seq2seq_loader(store, 256, **options),
                    translation.seq2seq_loader(lists, 256, **options)):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_changed_source_file_rebuilds_and_removes_the_old_store(tmp_path):
    src, tgt = write_pair(tmp_path, ["a b", "c d e"], ["x", "y z"])
    run = SimpleNamespace(root=tmp_path / "run")
    tok = CharTokenizer()
    first = translation.encode_corpus(run, ParallelLines(src, tgt), tok, tok)
    tgt.write_text("x\nyy zz\n")                                  # same line count, new text
    second = translation.encode_corpus(run, ParallelLines(src, tgt), tok, tok)
    assert second.directory != first.directory and not first.directory.exists()
    assert second[1][1].tolist() == tok.encode(["yy zz"])[0]
    third = translation.encode_corpus(run, ParallelLines(src, tgt), CharTokenizer(200), tok)
    assert third.directory != second.directory                    # a new tokenizer too


def test_killed_build_leaves_no_store_and_the_next_build_starts_clean(tmp_path):
    directory = tmp_path / "store" / "train-abc"
    script = textwrap.dedent(f"""
        import time
        from textkit.data import build_token_store

        class CharTokenizer:
            def encode(self, texts):
                return [[ord(c) % 300 for c in text] for text in texts]

            def __len__(self):
                return 300

        def slow():
            for i in range(10**6):
                if i % 100 == 0:
                    time.sleep(0.01)
                yield ("source %d" % i, "target %d" % i)

        build_token_store({str(directory)!r}, slow, [CharTokenizer(), CharTokenizer()],
                          key="k", chunk_size=100)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 60
        while not any(p.glob("*.bin") for p in directory.parent.glob(".train-abc.*")):
            assert process.poll() is None, "the build process ended early"
            assert time.monotonic() < deadline, "the build never started writing"
            time.sleep(0.1)
        time.sleep(0.5)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    assert not directory.exists()
    with pytest.raises(FileNotFoundError, match="not a token store"):
        TokenStore(directory)
    leftovers = list(directory.parent.glob(".train-abc.*"))
    assert leftovers, "the kill did not interrupt a build"
    store = build_token_store(directory, lambda: [("a", "b")], [CharTokenizer()] * 2, key="k")
    assert len(store) == 1
    remove_stale(directory.parent, "train-", directory)
    assert not list(directory.parent.glob(".train-abc.*")) and directory.exists()


def test_damaged_store_is_named_and_rebuilt(tmp_path):
    tok = CharTokenizer()
    store = build_token_store(tmp_path / "s", lambda: [("abc", "de")] * 3, [tok, tok], key="k")
    bin_path = store.directory / "src.bin"
    bin_path.write_bytes(bin_path.read_bytes()[:-2])
    with pytest.raises(ValueError, match="damaged"):
        TokenStore(tmp_path / "s")
    rebuilt = build_token_store(tmp_path / "s", lambda: [("abc", "de")] * 3, [tok, tok], key="k")
    assert rebuilt[2][0].tolist() == tok.encode(["abc"])[0]


def test_large_vocabularies_use_int32_and_fields_must_match(tmp_path):
    big = CharTokenizer(70000)
    store = build_token_store(tmp_path / "s", lambda: [("é", "\U0001F600")], [big, big], key="k")
    assert store.meta["dtype"] == "int32"
    assert store[0][1].tolist() == [0x1F600 % 70000]
    with pytest.raises(ValueError, match="2 fields"):
        build_token_store(tmp_path / "t", lambda: [], [big], key="k")


def test_parallel_lines_streams_and_names_bad_input(tmp_path):
    src, tgt = write_pair(tmp_path, ["\ufeffa ", "", "c"], ["x", "y", " z"])
    assert list(ParallelLines(src, tgt)) == [("a", "x"), ("", "y"), ("c", "z")]
    tgt.write_text("x\ny\n")
    with pytest.raises(ValueError, match=r"train\.src has 3 lines, .*train\.tgt has 2 lines"):
        ParallelLines(src, tgt)
    tgt.write_bytes(b"x\n\xff\nz")
    with pytest.raises(ValueError, match=r"train\.tgt, line 2: invalid utf-8"):
        list(ParallelLines(src, tgt))
