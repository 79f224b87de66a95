"""Data-pipeline demo: generated parallel corpus -> vocab -> bucket sampler -> loader.

Generates a seeded toy translation corpus, numericalises it, buckets it by (source, target)
length so every batch has one of a few fixed padded shapes, and loads one epoch with background
threads. Prints the sampler's stats() and a one-line summary. Runs in seconds, no arguments:

    python examples/data_pipeline.py [--num-sentences 20000] [--batch-size 64] [--seed 0]
"""

import argparse
import time

from tqdm import tqdm

from textkit.batchify import Seq2SeqBatchify
from textkit.cli import run_main
from textkit.data import DataLoader, FixedBucketSampler, toy_translation
from textkit.data.tokenizers import WhitespaceTokenizer
from textkit.vocab import Vocab


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
    samples = [  # (src + eos, tgt): the batchify adds bos / eos to the target
        (s.tolist() + [src_vocab.eos_id], t.tolist())
        for s, t in zip(src_vocab.numericalize(src_tokens), tgt_vocab.numericalize(tgt_tokens))
    ]
    lengths = [(len(src), len(tgt) + 1) for src, tgt in samples]
    print(f"corpus: {len(samples)} pairs, vocab src {len(src_vocab)} / tgt {len(tgt_vocab)}")

    sampler = FixedBucketSampler(lengths, args.batch_size, num_buckets=args.num_buckets,
                                 shuffle=True, seed=args.seed)
    print(sampler.stats())
    batchify = Seq2SeqBatchify(src_vocab.pad_id, tgt_vocab.bos_id, tgt_vocab.eos_id)
    loader = DataLoader(samples, sampler, batchify, num_workers=2)

    shapes, tokens = set(), 0
    for batch in tqdm(loader, desc="epoch 0", unit="batch"):
        shapes.add((*batch["src_tokens"].shape, batch["tgt_input"].shape[1]))
        tokens += int(batch["src_lengths"].sum() + batch["tgt_lengths"].sum())
    print(f"loaded {len(loader)} batches, {tokens} tokens, {len(shapes)} distinct padded shapes "
          f"(<= {len(sampler.bucket_keys)} buckets), padding {sampler.padding_fraction():.1%}, "
          f"{time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    run_main(main, resumable=False)
