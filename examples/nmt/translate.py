"""Translate sentences with a model trained by ``examples/nmt/train.py``.

Reads one sentence per line from --input (default: stdin), writes one translation per line to
--output (default: stdout). The model, its configuration and SentencePiece models come from the
training run's --save-dir; the parameters are the ones its test evaluation used (``final/``)::

    python examples/nmt/translate.py --checkpoint runs/nmt_toy < sentences.txt
    python examples/nmt/translate.py --checkpoint runs/nmt_toy --input test.src \\
        --output test.hyp --reference test.tgt --beam-size 4 --alpha 0.6

With --reference, cased and lowercased sacreBLEU scores and signatures go to stderr. A source
longer than the model accepts is truncated with a warning naming its line (--on-long-source
truncate, the default) or refused naming it (error); input that is not UTF-8 is refused naming
the line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import jax

from textkit._io import write_text_atomic
from textkit.data.datasets import read_lines
from textkit.decoding import Translator
from textkit.decoding.translator import LONG_SOURCE_POLICIES
from textkit.models import parse_overrides
from textkit.tasks import translation
from textkit.training import RunDir


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="the --save-dir of a training run")
    p.add_argument("--input", default="-", help="source sentences, one per line (-: stdin)")
    p.add_argument("--output", default="-", help="translations, one per line (-: stdout)")
    p.add_argument("--reference", default=None, help="reference file: print BLEU to stderr")
    p.add_argument("--beam-size", type=int, default=None, help="default: the training run's")
    p.add_argument("--alpha", type=float, default=None, help="default: the training run's")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per decode batch")
    p.add_argument("--on-long-source", choices=LONG_SOURCE_POLICIES, default="truncate",
                   help="a source longer than the model's positions: truncate it (warning "
                        "naming the line) or stop with an error naming the line")
    return p.parse_args(argv)


def read_stdin_lines() -> list[str]:
    """Lines of stdin read as bytes and decoded as UTF-8 (a leading BOM dropped); bytes that
    are not UTF-8 raise ``ValueError`` naming the line."""
    lines = sys.stdin.buffer.read().splitlines()
    texts = []
    for number, line in enumerate(lines, start=1):
        try:
            texts.append(line.decode("utf-8-sig" if number == 1 else "utf-8"))
        except UnicodeDecodeError as err:
            raise ValueError(f"<stdin>, line {number}: invalid utf-8 ({err.reason} at byte "
                             f"{err.start} of the line)") from None
    return texts


def main(argv: Sequence[str] | None = None) -> list[str]:
    args = parse_args(argv)
    sources = read_stdin_lines() if args.input == "-" else read_lines(args.input)
    run = RunDir(args.checkpoint)
    config = run.read_config()
    src_tok, tgt_tok = translation.tokenizers(run, config["joint_spm"])
    model = translation.build_model(
        config["model"], src_vocab_size=len(src_tok), tgt_vocab_size=len(tgt_tok),
        pad_id=src_tok.pad_id, precision=config["precision"], shared_vocab=config["joint_spm"],
        **parse_overrides(config["model_overrides"]))
    target = jax.eval_shape(lambda key: translation.init_params(model, key),
                            jax.random.PRNGKey(0))
    params, extra = run.load_final(target)

    translator = Translator(
        model, src_tok, tgt_tok,
        beam_size=args.beam_size if args.beam_size is not None else config["beam_size"],
        alpha=args.alpha if args.alpha is not None else config["alpha"],
        batch_size=args.batch_size or config["decode_batch_size"],
        on_long_source=args.on_long_source)
    translations = translator.translate(params, sources, progress=args.output != "-")

    text = "".join(line + "\n" for line in translations)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        write_text_atomic(args.output, text)
    if args.reference is not None:
        references = read_lines(args.reference)
        if len(references) != len(sources):
            raise SystemExit(f"{args.reference} has {len(references)} lines but the input has "
                             f"{len(sources)}")
        scores = translation.bleu_scores(translations, references)
        print(f"BLEU {scores['bleu']:.2f}  {scores['signature']}", file=sys.stderr)
        print(f"BLEU {scores['bleu_lowercase']:.2f}  {scores['signature_lowercase']}",
              file=sys.stderr)
    print(f"translated {len(sources)} sentences with {extra['source']} of {run.root}",
          file=sys.stderr)
    return translations


if __name__ == "__main__":
    main()
