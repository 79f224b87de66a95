"""Train a sentence classifier (Kim's TextCNN, LSTM or BiLSTM) on word embeddings.

Datasets: ``toy`` (a generated sentiment corpus, no download: train 4,000 / test 500 by default),
``mr`` (movie-review polarity, no split: stratified k-fold cross-validation with ``--folds``),
``sst2`` (GLUE SST-2: train / dev, test labels are hidden) and ``imdb`` (train / test). Tokens
are whitespace-separated; the vocabulary holds every word of the loaded segments seen at least
``--min-freq`` times (as in Kim's setup, so test words get their pretrained vectors).
Embedding modes (Kim 2014): ``rand``, ``static``, ``non-static``, ``multichannel``; the
pretrained modes need ``--embedding-path`` (a GloVe / word2vec / fastText file) or
``--embedding-source kind:name`` (textkit's registry).

Batches come from a ``FixedBucketSampler`` with one set of bucket lengths for training and
evaluation; partial batches keep their shape with dummy rows, so each step compiles once per
bucket for the whole run (all folds). The reported accuracy of a fold is the test accuracy
after the last epoch (no model selection on test data).

Examples::

    python examples/sentiment/train.py                       # toy corpus, TextCNN-rand
    python examples/sentiment/train.py --dataset mr --data-dir ../shared/data/mr-polarity \\
        --model textcnn --mode rand --optimizer adam --lr 1e-3 --batch-size 50 --epochs 3 \\
        --max-norm 3    # the README gives its measured 10-fold accuracy
    python examples/sentiment/train.py --dataset mr --data-dir ../shared/data/mr-polarity \\
        --mode static --embedding-path glove.840B.300d.txt --run-folds 0

Writes ``<save-dir>/config.json``, ``train.log`` and ``summary.json`` (the common schema of
``RunDir.summary`` plus accuracy_mean, accuracy_std over folds (ddof=0), folds (per-fold
accuracy, sample counts, evaluation records, seconds), vocabulary and embedding coverage).
Each fold trains from scratch in a few minutes, so the recipe keeps no checkpoints: it neither
resumes nor runs on several devices.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import jax
import numpy as np

from textkit.data import WhitespaceTokenizer
from textkit.embedding import TokenEmbedding, create
from textkit.models import get_model
from textkit.models.classifier import EMBEDDING_MODES
from textkit.tasks import classification
from textkit.training import RunDir, create_train_state, fit, make_eval_step, make_train_step
from textkit.vocab import Vocab

MODELS = {"textcnn": "textcnn", "lstm": "lstm_classifier", "bilstm": "bilstm_classifier"}
DEFAULT_LR = {"adadelta": 1.0, "adam": 1e-3}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", choices=classification.DATASETS, default="toy")
    p.add_argument("--data-dir", help="folder with the corpus files (rt-polarity.neg/.pos, "
                   "SST-2 *.tsv, aclImdb/); downloaded there if missing")
    p.add_argument("--toy-sentences", type=int, default=4000,
                   help="training sentences of the toy corpus (test gets an eighth)")
    p.add_argument("--folds", type=int, default=10, help="cross-validation folds (mr)")
    p.add_argument("--run-folds", help="comma-separated subset of folds to run, e.g. 0 "
                   "(the splits stay those of --folds)")
    p.add_argument("--model", choices=sorted(MODELS), default="textcnn")
    p.add_argument("--mode", choices=EMBEDDING_MODES, default="rand")
    p.add_argument("--embedding-path", help="pretrained vector file (format detected)")
    p.add_argument("--embedding-source", metavar="KIND:NAME",
                   help="pretrained vectors from the registry, e.g. glove:glove.6B.100d")
    p.add_argument("--embedding-root", help="folder for registry vector files")
    p.add_argument("--embed-dim", type=int, default=300, help="embedding size for --mode rand")
    p.add_argument("--num-filters", type=int, default=100, help="TextCNN maps per window")
    p.add_argument("--hidden-size", type=int, default=150, help="LSTM units per direction")
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--min-freq", type=int, default=1,
                   help="words seen fewer times map to <unk>")
    p.add_argument("--max-length", type=int, help="truncate sentences to this many tokens")
    p.add_argument("--num-buckets", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--optimizer", choices=sorted(DEFAULT_LR), default="adadelta",
                   help="adadelta (rho 0.95, eps 1e-6, as Kim) or adam")
    p.add_argument("--lr", type=float, help="learning rate (default: adadelta 1.0, adam 1e-3)")
    p.add_argument("--max-norm", type=float,
                   help="Kim's l2 constraint: rescale each output unit's weight vector to at "
                   "most this norm after every update (Kim: 3); off by default")
    p.add_argument("--precision", default="float32",
                   help="precision policy, e.g. float32, mixed_bfloat16, mixed_float16")
    p.add_argument("--eval-every-epoch", action="store_true",
                   help="also report test accuracy after every epoch (diagnostics only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-dir", default="runs/sentiment")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run already in --save-dir (it keeps no checkpoints)")
    p.add_argument("--no-progress", action="store_true", help="hide the tqdm bars")
    args = p.parse_args(argv)
    pretrained = args.embedding_path or args.embedding_source
    if args.embedding_path and args.embedding_source:
        p.error("give --embedding-path or --embedding-source, not both")
    if (args.mode == "rand") == bool(pretrained):
        p.error(f"--mode {args.mode} " + ("takes no pretrained vectors" if pretrained else
                "needs --embedding-path or --embedding-source"))
    return argparse.Namespace(**{**vars(args), "lr": args.lr or DEFAULT_LR[args.optimizer]})


def load_embedding(args: argparse.Namespace) -> TokenEmbedding:
    if args.embedding_path:
        return TokenEmbedding.from_file(args.embedding_path, encoding_errors="replace")
    kind, sep, name = args.embedding_source.partition(":")
    if not sep:
        raise SystemExit(f"--embedding-source {args.embedding_source!r}: expected KIND:NAME")
    return create(kind, name, root=args.embedding_root, encoding_errors="replace")


def encode(args: argparse.Namespace, segments: dict[str, Any]) -> tuple[Vocab, dict[str, list]]:
    """The vocabulary of every loaded segment and ``{segment: [(ids, label)]}``."""
    tokens = {s: WhitespaceTokenizer().encode(texts) for s, (texts, _) in segments.items()}
    if args.max_length:
        tokens = {s: [t[: args.max_length] for t in sents] for s, sents in tokens.items()}
    vocab = Vocab([t for sents in tokens.values() for t in sents], min_freq=args.min_freq,
                  bos_token=None, eos_token=None)
    return vocab, {s: list(zip(vocab.numericalize(tokens[s]), segments[s][1].tolist()))
                   for s in segments}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    run = RunDir(args.save_dir)
    run.open(vars(args), resume=args.overwrite, check=(), reuse_flag="--overwrite")
    segments = classification.load_segments(args.dataset, args.data_dir, seed=args.seed,
                                            toy_sentences=args.toy_sentences)
    vocab, samples = encode(args, segments)
    lengths = np.array([len(ids) for part in samples.values() for ids, _ in part])
    keys = classification.bucket_keys(lengths, args.num_buckets)
    run.log(f"{args.dataset}: " + ", ".join(f"{s} {len(v):,}" for s, v in samples.items())
            + f" sentences; vocabulary {len(vocab):,}; lengths {lengths.min()}-"
            f"{lengths.max()}; bucket keys {keys}")
    pretrained, coverage, embed_dim = None, None, args.embed_dim
    if args.mode != "rand":
        embedding = load_embedding(args)
        found = embedding.for_vocab(vocab, unknown="normal")
        pretrained, embed_dim = found.matrix, embedding.dim
        coverage = {"found": found.found, "vocab": len(vocab), "dim": embed_dim}
        run.log(f"pretrained vectors ({len(embedding):,} x {embed_dim}) cover {found.found:,} "
                f"of {len(vocab):,} vocab tokens; the others start from N(0, std of the vectors)")
    size = ({"num_filters": args.num_filters} if args.model == "textcnn"
            else {"hidden_size": args.hidden_size})
    num_classes = int(max(int(labels.max()) for _, labels in segments.values())) + 1
    model = get_model(MODELS[args.model], vocab_size=len(vocab), num_classes=num_classes,
                      embed_dim=embed_dim, mode=args.mode, dropout=args.dropout,
                      pad_id=vocab.pad_id, policy=args.precision, **size)
    optimizer = classification.optimizer(args.optimizer, args.lr, policy=args.precision,
                                         max_norm_limit=args.max_norm)
    loss_fn = classification.make_loss(model)
    train_step, eval_step = make_train_step(loss_fn, optimizer), make_eval_step(loss_fn)
    fits = []

    def run_fold(fold: int, train: list, test: list) -> classification.FoldResult:
        start = time.perf_counter()
        init_key, state_key = jax.random.split(jax.random.key(args.seed + fold))
        state = create_train_state(classification.init_params(model, init_key, pretrained),
                                   optimizer, state_key)
        test_loader = classification.make_loader(test, vocab.pad_id, args.batch_size, keys,
                                                 shuffle=False)
        fits.append(fit(
            state, train_step, classification.make_loader(
                train, vocab.pad_id, args.batch_size, keys, shuffle=True, seed=args.seed + fold),
            epochs=args.epochs, eval_each_epoch=args.eval_every_epoch, log=run.log,
            show_progress=not args.no_progress,
            evaluate=lambda state: {f"test_{k}": v for k, v in classification.evaluate(
                eval_step, state.params, test_loader).items()}, desc=f"fold {fold}"))
        final = fits[-1].progress.history[-1]
        return classification.FoldResult(
            fold=fold, accuracy=final["test_accuracy"], loss=final["test_loss"],
            train_samples=len(train), test_samples=final["test_count"],
            history=fits[-1].progress.history, wall_s=time.perf_counter() - start)

    if args.dataset == "mr":
        only = [int(k) for k in args.run_folds.split(",")] if args.run_folds else None
        cv = classification.cross_validate(
            segments["all"][1], args.folds, lambda k, train, test: run_fold(
                k, [samples["all"][i] for i in train], [samples["all"][i] for i in test]),
            seed=args.seed, only_folds=only)
    else:
        cv = classification.CrossValidation([run_fold(0, samples["train"], samples["test"])])
    summary = run.summary("classification", vars(args), fits[-1], num_params=sum(
        x.size for x in jax.tree_util.tree_leaves(fits[-1].state.params)), results={
        "accuracy_mean": cv.accuracy_mean, "accuracy_std": cv.accuracy_std,
        "folds": [vars(f) for f in cv.folds],
        "train_eval_s": round(sum(f.wall_s for f in cv.folds), 2), "vocab_size": len(vocab),
        "embedding_coverage": coverage, "bucket_keys": keys, "policy": args.precision})
    run.log(f"{len(cv.folds)} fold(s): accuracy {100 * cv.accuracy_mean:.2f} ± "
            f"{100 * cv.accuracy_std:.2f} %, {train_step.num_traces} compiled programs, "
            f"wall {summary['wall_s']:.1f} s -> {run.summary_path}")
    return summary


if __name__ == "__main__":
    main()
