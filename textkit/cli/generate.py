"""``generate``: text from a decoder-only checkpoint, streamed (what
``examples/language_model/generate.py`` runs).

Prompts come from ``--prompt`` (repeatable) or standard input, one per line (UTF-8; a line ends
at ``\\n``, ``\\r\\n`` or ``\\r``); they are decoded in batches of mixed lengths. Greedy unless
``--num-beams`` or ``--sample`` is given or the checkpoint's ``generation_config.json`` says
otherwise. Plain output is one line per prompt, in input order: a prompt's line is written as
soon as it and those before it are complete, the first unfinished one streamed as it is
produced; a backslash, a line feed and a carriage return in the generated text are written
``\\\\``, ``\\n`` and ``\\r``, so that line *i* of the output always belongs to prompt *i*.
``--jsonl`` prints one JSON object per prompt, in input order, each as soon as it can, with
``text`` (as generated), ``token_ids`` (the generated ids, without the prompt) and
``finish_reason``. ``--chat`` wraps each prompt as a user message in the checkpoint's chat
template, after ``--system TEXT`` when given; ``--interactive`` is a multi-turn chat: each line
of standard input is the user's next message, the reply streamed, the conversation kept.
``--quantize int8`` decodes with int8 weights (CPU).

Bad input is refused before the model is loaded where it can be (an empty standard input,
bytes that are not UTF-8, a value out of range), and before generating otherwise (a prompt
too long for the positions ``--max-new-tokens`` leaves, named by its line): one line naming the
flag or the line, exit status 2. Ctrl-C and a closed pipe end it as ``run_main`` says, the
lines written before kept.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from textkit.cli import run_main
from textkit.cli.flags import Parser, number
from textkit.cli.stdin import read_stdin_lines
from textkit.errors import ConfigError, TextkitError

__all__ = ["main", "one_line", "parse_args", "run"]

_POSITIVE = number(int, "an integer >= 1", lambda v: v >= 1)


def _policy(text: str) -> str:
    """``--precision``'s value, refused as a usage error unless ``Policy.parse`` reads it."""
    from textkit.precision import Policy

    try:
        Policy.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (each default is the checkpoint's, where it has one); a value out of
    range is a usage error naming the flag."""
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--pretrained", required=True, help="a Hugging Face checkpoint directory "
                   "(GPT-2, Llama, Mistral, Qwen2/3, Gemma, SmolLM)")
    p.add_argument("--adapter", help="a LoRA adapter directory (PEFT's format: "
                   "adapter_config.json, adapter_model.safetensors) for --pretrained, merged "
                   "in")
    p.add_argument("--prompt", action="append", help="a prompt (repeatable); default: one "
                   "prompt per line of standard input")
    p.add_argument("--max-new-tokens", type=_POSITIVE, help="tokens to generate per prompt "
                   "(default: the checkpoint's, else 20)")
    p.add_argument("--num-beams", type=_POSITIVE, help="beam search with this many beams")
    p.add_argument("--sample", action="store_true", help="sample instead of searching")
    p.add_argument("--temperature", type=number(float, "a number > 0", lambda v: v > 0),
                   help="sampling temperature")
    p.add_argument("--top-k", type=number(int, "an integer >= 0", lambda v: v >= 0),
                   help="sample among the k most likely tokens (0: all)")
    p.add_argument("--top-p", type=number(float, "a number in (0, 1]", lambda v: 0 < v <= 1),
                   help="nucleus mass")
    p.add_argument("--min-p", type=number(float, "a number in [0, 1)", lambda v: 0 <= v < 1),
                   help="drop tokens below this share of the best one")
    p.add_argument("--repetition-penalty", type=number(float, "a number > 0", lambda v: v > 0),
                   help="transformers' repetition penalty (1: none)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--batch-size", type=_POSITIVE, default=8, help="prompts decoded together")
    p.add_argument("--chat", action="store_true", help="apply the checkpoint's chat template")
    p.add_argument("--system", help="a system message before each chat (with --chat or "
                   "--interactive)")
    p.add_argument("--interactive", action="store_true", help="a multi-turn chat: each line "
                   "of standard input is the next user message, the history kept")
    p.add_argument("--quantize", choices=["int8"], help="int8 weights (CPU inference)")
    p.add_argument("--jsonl", action="store_true", help="one JSON object per prompt")
    p.add_argument("--precision", default="float32", type=_policy,
                   help="precision policy: float32, mixed_bfloat16, mixed_float16 or "
                        "'params=...,compute=...,output=...'")
    p.add_argument("--truncate", action="store_true", help="cut prompts too long for the "
                   "model from the left (with a warning) instead of refusing them")
    args = p.parse_args(argv)
    if args.system is not None and not (args.chat or args.interactive):
        p.error("--system needs --chat or --interactive")
    if args.interactive and (args.prompt or args.jsonl or (args.num_beams or 1) > 1):
        p.error("--interactive reads its messages from standard input and streams its "
                "replies: not with --prompt, --jsonl or --num-beams")
    if args.sample and (args.num_beams or 1) > 1:
        p.error(f"--sample with --num-beams {args.num_beams}: sampling with beams is not "
                "implemented; give one of them")
    return args


def _options(args: argparse.Namespace) -> dict[str, Any]:
    options = {"max_new_tokens": args.max_new_tokens, "num_beams": args.num_beams,
               "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
               "min_p": args.min_p, "repetition_penalty": args.repetition_penalty}
    options = {k: v for k, v in options.items() if v is not None}
    if args.sample:
        options["do_sample"] = True
    elif args.num_beams:
        options["do_sample"] = False
    return options


def one_line(text: str) -> str:
    """``text`` on one line: ``\\``, line feed and carriage return written ``\\\\``, ``\\n``
    and ``\\r`` (the plain output's form; ``--jsonl`` keeps the text as it is)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _prompts(args: argparse.Namespace) -> tuple[list[str], Callable[[int], str]]:
    """The prompts, and the name of prompt ``i`` for messages (its ``--prompt`` or its line
    of standard input)."""
    if args.prompt:
        return args.prompt, lambda i: f"--prompt {i + 1} of {len(args.prompt)}"
    prompts = read_stdin_lines()
    if not prompts:
        raise ConfigError("no prompts: standard input is empty; give one prompt per line of "
                          "standard input, or --prompt TEXT")
    return prompts, lambda i: f"standard input, line {i + 1}"


def _check_lengths(generator: Any, prompts: Sequence[Any], args: argparse.Namespace,
                   where: Callable[[int], str]) -> None:
    """Refuse, before generating, a prompt longer than the positions that
    ``max_new_tokens`` leaves (unless ``--truncate``), or an empty one without a BOS token to
    start from, naming its line and the flags."""
    limit = generator.model.config.max_positions
    if limit is None:
        return
    config = generator.config
    if args.max_new_tokens is not None:
        given = f"--max-new-tokens {config.max_new_tokens}"
    elif config.max_new_tokens is not None:
        given = (f"max_new_tokens {config.max_new_tokens} (the checkpoint's; --max-new-tokens "
                 f"sets it)")
    elif config.max_length is not None:
        given = (f"max_length {config.max_length} (the checkpoint's, prompt included; "
                 f"--max-new-tokens sets the new tokens)")
    else:
        given = f"max_new_tokens {config.new_tokens(0)} (the default; --max-new-tokens sets it)"
    if config.max_length is None and limit - config.new_tokens(0) < 1:
        raise ConfigError(f"{given}: the model takes {limit} positions in all, prompt "
                          f"included; expected --max-new-tokens <= {limit - 1}")
    if args.truncate:
        return
    encode = generator.tokenizer.encode
    for index, prompt in enumerate(prompts):
        length = len(encode(prompt) if isinstance(prompt, str) else prompt)
        if length == 0 and generator.tokenizer.bos_id is None:
            raise ConfigError(f"{where(index)}: the prompt is empty and the checkpoint's "
                              "tokenizer has no BOS token to start from; expected text")
        room = limit - config.new_tokens(length)
        if length > room:
            raise ConfigError(f"{where(index)}: the prompt has {length} tokens, but the model "
                              f"takes {limit} positions and {given} leaves {room} for the "
                              "prompt; shorten it, lower --max-new-tokens, or pass --truncate "
                              "(cut it from the left)")


class _InOrder:
    """Writes results in input order, each as soon as it and those before it are complete;
    the plain output streams the first unfinished prompt's pieces as they come."""

    def __init__(self, out: Any, count: int, jsonl: bool):
        self.out, self.count, self.jsonl = out, count, jsonl
        self.pieces: list[list[str]] = [[] for _ in range(count)]
        self.written = [0] * count          # pieces of each prompt written
        self.results: dict[int, Any] = {}
        self.shown = 0                      # the first prompt not complete on the output

    def piece(self, index: int, text: str) -> None:
        self.pieces[index].append(text)
        if index == self.shown and not self.jsonl:
            self._catch_up()
            self.out.flush()

    def done(self, index: int, result: Any) -> None:
        self.results[index] = result
        while self.shown in self.results:
            result = self.results[self.shown]
            if self.jsonl:
                self.out.write(json.dumps(_row(result), ensure_ascii=False) + "\n")
            else:
                if not self.pieces[self.shown]:      # beam search: no pieces
                    self.pieces[self.shown].append(result.text)
                self._catch_up()
                self.out.write("\n")
            self.shown += 1
            if self.shown < self.count and not self.jsonl:
                self._catch_up()
        self.out.flush()

    def _catch_up(self) -> None:
        pieces = self.pieces[self.shown]
        self.out.write(one_line("".join(pieces[self.written[self.shown]:])))
        self.written[self.shown] = len(pieces)


def _row(result: Any) -> dict[str, Any]:
    return {"text": result.text, "token_ids": result.token_ids,
            "finish_reason": result.finish_reason}


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    """(the load_pretrained result, its Generator)."""
    from textkit.decoding import Generator
    from textkit.pretrained import load_pretrained

    try:
        loaded = load_pretrained(args.pretrained, policy=args.precision, adapter=args.adapter)
        return loaded, Generator.from_pretrained(
            loaded, batch_size=args.batch_size, truncate=args.truncate,
            quantize=args.quantize, **_options(args))
    except ValueError as err:
        if isinstance(err, TextkitError):
            raise
        raise ConfigError(f"--pretrained {args.pretrained}: {err}") from None


def _chat_ids(generator: Any, conversations: list[list[dict[str, str]]]) -> list[list[int]]:
    try:
        return generator.chat_prompts(conversations)
    except ValueError as err:        # no chat template, or one that failed
        raise ConfigError(f"--chat: {err}") from None


def _interactive(args: argparse.Namespace, out: Any) -> list[dict[str, Any]]:
    """The multi-turn session of ``--interactive``: a line in, the reply streamed out."""
    loaded, generator = _load(args)
    history = [{"role": "system", "content": args.system}] if args.system else []
    rows = []
    for line_number, line in enumerate(sys.stdin, start=1):
        history.append({"role": "user", "content": line.rstrip("\r\n")})
        prompt = _chat_ids(generator, [history])
        where = f"standard input, line {line_number} (the conversation so far)"
        _check_lengths(generator, prompt, args, lambda _, where=where: where)
        for _, item in generator.generate_stream(loaded.params, prompt, seed=args.seed,
                                                 results=True):
            if isinstance(item, str):
                out.write(item)
                out.flush()
            else:
                result = item
        out.write("\n")
        out.flush()
        history.append({"role": "assistant", "content": result.text})
        rows.append(_row(result))
    return rows


def run(args: argparse.Namespace, out: Any = None) -> list[dict[str, Any]]:
    """Generate for every prompt, written to ``out`` (default: standard output) in input
    order as soon as it can be; returns the results (text, token_ids, finish_reason) in
    input order."""
    out = out if out is not None else sys.stdout
    if not Path(args.pretrained).is_dir():
        raise ConfigError(f"--pretrained {args.pretrained}: no such directory (expected a "
                          "Hugging Face checkpoint directory)")
    if args.adapter and not Path(args.adapter).is_dir():
        raise ConfigError(f"--adapter {args.adapter}: no such directory (expected a PEFT "
                          "adapter directory)")
    if args.interactive:
        return _interactive(args, out)
    prompts, where = _prompts(args)          # before the model: bad input is refused at once
    loaded, generator = _load(args)
    if args.chat:
        system = [{"role": "system", "content": args.system}] if args.system else []
        prompts = _chat_ids(generator, [[*system, {"role": "user", "content": p}]
                                        for p in prompts])
    _check_lengths(generator, prompts, args, where)
    writer = _InOrder(out, len(prompts), args.jsonl)
    for index, item in generator.generate_stream(loaded.params, prompts, seed=args.seed,
                                                 results=True):
        if isinstance(item, str):
            writer.piece(index, item)
        else:
            writer.done(index, item)
    return [_row(writer.results[i]) for i in range(len(prompts))]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (``run_main``: one line and exit status 2 for bad input, 130
    on Ctrl-C, 141 on a closed pipe); 0 when every prompt was generated."""
    run_main(lambda: run(parse_args(argv)), resumable=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
