"""Translate sentences with a model trained by ``examples/nmt/train.py`` or a Marian checkpoint.

The command line ``textkit-translate`` (installed with the package; ``python
examples/nmt/translate.py`` runs the same). Reads one sentence per line from --input (default:
stdin), writes one translation per line to --output (default: stdout). The model, its
configuration and SentencePiece models come from the training run's --save-dir; the parameters
are the ones its test evaluation used (``final/``)::

    textkit-translate --checkpoint runs/nmt_toy < sentences.txt
    textkit-translate --checkpoint runs/nmt_toy --input test.src \\
        --output test.hyp --reference test.tgt --beam-size 4 --alpha 0.6

A pretrained Marian / OPUS-MT checkpoint directory (Hugging Face layout, downloaded by any
tool) translates the same way; the search follows its generation_config.json (beam size,
length penalty in transformers' form n ** alpha, max_length, banned pad, forced EOS), and the
flags override it (--max-length counts output tokens, EOS included: transformers'
max_new_tokens, i.e. max_length - 1)::

    textkit-translate --pretrained opus-mt-en-de < sentences.txt
    textkit-translate --pretrained opus-mt-en-de --beam-size 1

A T5-family checkpoint (T5, Flan-T5, mT5) reads its task from a text prefix: --prefix puts one
before every source; --task names an entry of its config.json's task_specific_params, whose
prefix and generation settings are applied::

    textkit-translate --pretrained flan-t5-base --prefix "translate English to German: "
    textkit-translate --pretrained t5-base --task translation_en_to_de

--quantize int8 decodes with int8 weights (CPU inference; ``textkit.models.kernels.quantize_int8``).
With --reference, cased and lowercased sacreBLEU scores and signatures go to stderr. A source
longer than the model accepts is truncated with a warning naming its line (--on-long-source
truncate, the default) or refused naming it (error); input that is not UTF-8 is refused naming
the line. Bad input ends the command with one line naming the flag, or the file and line, and
exit status 2; Ctrl-C and a closed pipe end it as ``textkit.cli.run_main`` says (JAX and the
models are imported under it, in the functions).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from textkit._io import write_text_atomic
from textkit.cli import run_main
from textkit.cli.flags import HelpFormatter, Parser, number
from textkit.cli.stdin import read_stdin_lines
from textkit.data.datasets import read_lines
from textkit.errors import ConfigError, DataFileError, TextkitError

if TYPE_CHECKING:     # JAX and the models are imported in the functions, under run_main
    from textkit.decoding import Translator

_POSITIVE = number(int, "an integer >= 1", lambda v: v >= 1)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from textkit.decoding.translator import LONG_SOURCE_POLICIES

    p = Parser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    model = p.add_argument_group("model").add_mutually_exclusive_group(required=True)
    model.add_argument("--checkpoint", help="a training run's directory, or its runs folder "
                       "(e.g. runs/nmt_toy: the newest run, through its 'latest' link)")
    model.add_argument("--pretrained", help="an encoder-decoder checkpoint directory (Marian / "
                       "OPUS-MT, BART, mBART-50, M2M100, NLLB, T5, Flan-T5, mT5)")
    languages = p.add_argument_group("languages (--pretrained multilingual checkpoints)")
    languages.add_argument("--src-lang-code", help="the source language code, in the "
                           "checkpoint family's spelling (M2M100 'en')")
    languages.add_argument("--tgt-lang-code", help="the target language code (its token is "
                           "forced first); default: the checkpoint's forced_bos_token_id")
    tasks = p.add_argument_group("text-to-text tasks (--pretrained T5-family checkpoints)")
    tasks.add_argument("--prefix", default=None,
                       help="put before every source, e.g. 'translate English to German: ' "
                            "(default: none, or --task's)")
    tasks.add_argument("--task", default=None,
                       help="an entry of config.json's task_specific_params, e.g. "
                            "translation_en_to_de: its prefix and generation settings")
    data = p.add_argument_group("data")
    data.add_argument("--input", default="-", help="source sentences, one per line (-: stdin); "
                      "an empty line gives an empty translation")
    data.add_argument("--on-long-source", choices=LONG_SOURCE_POLICIES, default="truncate",
                      help="a source longer than the model's positions: truncate it (warning "
                           "naming the line) or stop with an error naming the line")
    decoding = p.add_argument_group("evaluation")
    decoding.add_argument("--beam-size", type=_POSITIVE, default=None,
                          help="default: the training run's")
    decoding.add_argument("--alpha", type=number(float, "a number >= 0", lambda v: v >= 0),
                          default=None,
                          help="default: the training run's")
    decoding.add_argument("--max-length", type=_POSITIVE, default=None,
                          help="--pretrained: most output tokens, EOS included (default: "
                               "generation_config.json's max_length - 1)")
    decoding.add_argument("--batch-size", type=_POSITIVE, default=None,
                          help="sentences per decode batch")
    decoding.add_argument("--quantize", choices=["int8"], default=None,
                          help="int8 weights and int8 x int8 matmuls (CPU inference)")
    decoding.add_argument("--one-cache-segment", action="store_true",
                          help="keep the decoding cache at full length from the first step "
                               "(default: grown in up to three segments)")
    decoding.add_argument("--reference", default=None,
                          help="reference file: print BLEU to stderr")
    output = p.add_argument_group("output")
    output.add_argument("--output", default="-",
                        help="translations, one per line (-: stdout)")
    return p.parse_args(argv)


def pretrained_translator(args: argparse.Namespace,
                          ) -> tuple[Translator, object, str, bool]:
    """(translator, params, description, pretokenized) of a --pretrained checkpoint directory;
    the flags given override its generation defaults."""
    from textkit.pretrained import PretrainedError, load_translator
    from textkit.pretrained.errors import LanguageError
    from textkit.pretrained.loader import task_settings

    given = {"beam_size": args.beam_size, "alpha": args.alpha, "max_length": args.max_length,
             "batch_size": args.batch_size, "quantize": args.quantize}
    options = {k: v for k, v in given.items() if v is not None}
    if args.one_cache_segment:
        options["grow_cache"] = False
    if args.task is not None:
        try:
            task_settings(args.pretrained, args.task)
        except PretrainedError as err:
            raise ConfigError(f"--task {args.task}: {err}") from None
    try:
        translator, params = load_translator(
            args.pretrained, src_lang=args.src_lang_code, tgt_lang=args.tgt_lang_code,
            prefix=args.prefix, task=args.task, on_long_source=args.on_long_source, **options)
    except LanguageError as err:
        raise ConfigError(f"--src-lang-code / --tgt-lang-code: {err}") from None
    except PretrainedError as err:
        raise ConfigError(f"--pretrained {args.pretrained}: {err}") from None
    return translator, params, f"the pretrained checkpoint {args.pretrained}", False


def checkpoint_translator(args: argparse.Namespace,
                          ) -> tuple[Translator, object, str, bool]:
    """(translator, params, description, pretokenized) of a training run's directory
    (pretokenized: it trained on the toy corpus, tokenised by design)."""
    from textkit.decoding import Translator
    from textkit.tasks import translation

    try:
        run = translation.load_trained(args.checkpoint)
    except FileNotFoundError as err:      # not a run directory, or a run that did not finish
        raise ConfigError(f"--checkpoint {args.checkpoint}: {err}") from None
    config = run.config
    translator = Translator(
        run.model, run.src_tokenizer, run.tgt_tokenizer,
        beam_size=args.beam_size if args.beam_size is not None else config["beam_size"],
        alpha=args.alpha if args.alpha is not None else config["alpha"],
        batch_size=args.batch_size or config["decode_batch_size"],
        on_long_source=args.on_long_source, quantize=args.quantize,
        grow_cache=not args.one_cache_segment)
    return translator, run.params, run.source, config.get("dataset") == "toy"


def translate(argv: Sequence[str] | None = None) -> None:
    """Translate (module docstring) with the command line ``argv``."""
    args = parse_args(argv)
    started = time.perf_counter()
    for name, path in (("--input", args.input), ("--reference", args.reference)):
        if path not in (None, "-") and not Path(path).is_file():
            raise ConfigError(f"{name} {path}: no such file")
    for name, path in (("--checkpoint", args.checkpoint), ("--pretrained", args.pretrained)):
        if path is not None and not Path(path).is_dir():
            raise ConfigError(f"{name} {path}: no such directory")
    given = [flag for flag, value in (("--prefix", args.prefix), ("--task", args.task),
                                      ("--src-lang-code", args.src_lang_code),
                                      ("--tgt-lang-code", args.tgt_lang_code)) if value]
    if args.checkpoint is not None and given:
        raise ConfigError(f"{' and '.join(given)}: for --pretrained checkpoints; a training "
                          f"run of --checkpoint takes none")
    if args.output != "-" and not Path(args.output).resolve().parent.is_dir():
        raise ConfigError(f"--output {args.output}: its folder does not exist")
    sources = read_stdin_lines() if args.input == "-" else read_lines(args.input)
    references = None
    if args.reference is not None:
        references = read_lines(args.reference)
        if len(references) != len(sources):
            raise DataFileError(f"--reference {args.reference} has {len(references)} lines but "
                                f"the input has {len(sources)}; expected one per source")
    if args.pretrained is not None:
        translator, params, described, pretokenized = pretrained_translator(args)
    elif args.src_lang_code or args.tgt_lang_code:
        raise ConfigError("--src-lang-code / --tgt-lang-code choose the languages of a "
                          "--pretrained multilingual checkpoint; a training run has its own")
    else:
        translator, params, described, pretokenized = checkpoint_translator(args)
    try:
        translations = translator.translate(params, sources, progress=args.output != "-")
    except ValueError as err:       # a source the model cannot take, named by its line
        if isinstance(err, TextkitError):
            raise
        where = "standard input" if args.input == "-" else f"--input {args.input}"
        raise DataFileError(f"{where}, {err}") from None

    text = "".join(line + "\n" for line in translations)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        write_text_atomic(args.output, text)
    if references is not None:
        from textkit.tasks import translation

        scores = translation.bleu_scores(translations, references, pretokenized=pretokenized)
        print(f"BLEU {scores['bleu']:.2f}  {scores['signature']}", file=sys.stderr)
        print(f"BLEU {scores['bleu_lowercase']:.2f}  {scores['signature_lowercase']}",
              file=sys.stderr)
    print(f"translated {len(sources)} sentences with {described} in "
          f"{time.perf_counter() - started:.1f}s", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (``run_main``: one line and exit status 2 for bad input, 130
    on Ctrl-C, 141 on a closed pipe); 0 when every sentence was translated."""
    run_main(lambda: translate(argv), resumable=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
