"""Data-pipeline demo: generated parallel corpus -> vocab -> bucket sampler -> loader.

Generates a seeded toy translation corpus, numericalises it, buckets it by (source, target)
length so every batch has one of a few fixed padded shapes, and loads one epoch with background
threads. Prints the sampler's stats() and a one-line summary. Runs in seconds, no arguments:

    python examples/data_pipeline.py [--num-sentences 20000] [--batch-size 64] [--seed 0]
"""

import argparse
import time

import numpy as np
from tqdm import tqdm

from textkit.batchify import BatchShape, Pad
from textkit.data import DataLoader, FixedBucketSampler, toy_translation
from textkit.data.tokenizers import WhitespaceTokenizer
from textkit.vocab import Vocab


class TranslationBatchify:
    """(src + eos, bos + tgt, tgt + eos) id samples -> the batch dict, padded to ``shape``."""

    def __init__(self, pad_id: int):
        self.src = Pad(pad_val=pad_id, dtype=np.int32, ret_length=True, length_index=0)
        self.tgt = Pad(pad_val=pad_id, dtype=np.int32, ret_length=True, length_index=1)
        self.tgt_out = Pad(pad_val=pad_id, dtype=np.int32, length_index=1)

    def __call__(self, samples, shape: BatchShape) -> dict[str, np.ndarray]:
        src_tokens, src_lengths = self.src([s[0] for s in samples], shape)
        tgt_input, tgt_lengths = self.tgt([s[1] for s in samples], shape)
        return dict(src_tokens=src_tokens, src_lengths=src_lengths, tgt_input=tgt_input,
                    tgt_output=self.tgt_out([s[2] for s in samples], shape),
                    tgt_lengths=tgt_lengths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-sentences", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-buckets", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()

    pairs = toy_translation("train", num_sentences=args.num_sentences, seed=args.seed)
    tokenizer = WhitespaceTokenizer()
    src_tokens = tokenizer.encode([src for src, _ in pairs])
    tgt_tokens = tokenizer.encode([tgt for _, tgt in pairs])
    src_vocab, tgt_vocab = Vocab(src_tokens), Vocab(tgt_tokens)
    eos, bos = [src_vocab.eos_id], [tgt_vocab.bos_id]
    samples = [
        (s.tolist() + eos, bos + t.tolist(), t.tolist() + eos)
        for s, t in zip(src_vocab.numericalize(src_tokens), tgt_vocab.numericalize(tgt_tokens))
    ]
    lengths = [(len(src), len(tgt_in)) for src, tgt_in, _ in samples]
    print(f"corpus: {len(samples)} pairs, vocab src {len(src_vocab)} / tgt {len(tgt_vocab)}")

    sampler = FixedBucketSampler(lengths, args.batch_size, num_buckets=args.num_buckets,
                                 shuffle=True, seed=args.seed)
    print(sampler.stats())
    loader = DataLoader(samples, sampler, TranslationBatchify(src_vocab.pad_id), num_workers=2)

    shapes, tokens = set(), 0
    for batch in tqdm(loader, desc="epoch 0", unit="batch"):
        shapes.add((*batch["src_tokens"].shape, batch["tgt_input"].shape[1]))
        tokens += int(batch["src_lengths"].sum() + batch["tgt_lengths"].sum())
    print(f"loaded {len(loader)} batches, {tokens} tokens, {len(shapes)} distinct padded shapes "
          f"(<= {len(sampler.bucket_keys)} buckets), padding {sampler.padding_fraction():.1%}, "
          f"{time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    main()
