"""``generate``: text from a decoder-only checkpoint, streamed (what
``examples/language_model/generate.py`` runs).

Prompts come from ``--prompt`` (repeatable) or standard input, one per line; they are decoded
in batches of mixed lengths. Greedy unless ``--num-beams`` or ``--sample`` is given or the
checkpoint's ``generation_config.json`` says otherwise. Plain output streams each prompt's text
as it is produced (prompts in input order); ``--jsonl`` prints one JSON object per prompt, in
input order, with ``text`` and ``token_ids`` (the generated ids, without the prompt). ``--chat``
wraps each prompt as a user message in the checkpoint's chat template.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from textkit.errors import TextkitError

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (each default is the checkpoint's, where it has one)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pretrained", required=True, help="a Hugging Face checkpoint directory "
                   "(GPT-2, Llama, Mistral, Qwen2/3, Gemma, SmolLM)")
    p.add_argument("--prompt", action="append", help="a prompt (repeatable); default: one "
                   "prompt per line of standard input")
    p.add_argument("--max-new-tokens", type=int, help="tokens to generate per prompt "
                   "(default: the checkpoint's, else 20)")
    p.add_argument("--num-beams", type=int, help="beam search with this many beams")
    p.add_argument("--sample", action="store_true", help="sample instead of searching")
    p.add_argument("--temperature", type=float, help="sampling temperature")
    p.add_argument("--top-k", type=int, help="sample among the k most likely tokens (0: all)")
    p.add_argument("--top-p", type=float, help="nucleus mass")
    p.add_argument("--min-p", type=float, help="drop tokens below this share of the best one")
    p.add_argument("--repetition-penalty", type=float, help="transformers' repetition penalty")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--batch-size", type=int, default=8, help="prompts decoded together")
    p.add_argument("--chat", action="store_true", help="apply the checkpoint's chat template")
    p.add_argument("--jsonl", action="store_true", help="one JSON object per prompt")
    p.add_argument("--precision", default="float32", help="float32 or mixed_bfloat16")
    p.add_argument("--truncate", action="store_true", help="cut prompts too long for the "
                   "model from the left (with a warning) instead of refusing them")
    return p.parse_args(argv)


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


def run(args: argparse.Namespace, out: Any = sys.stdout) -> list[dict[str, Any]]:
    """Generate for every prompt; returns the results (text, token_ids) in input order."""
    from textkit.decoding import Generator
    from textkit.pretrained import load_pretrained

    prompts = args.prompt if args.prompt else [line.rstrip("\n") for line in sys.stdin]
    loaded = load_pretrained(args.pretrained, policy=args.precision)
    generator = Generator.from_pretrained(loaded, batch_size=args.batch_size,
                                          truncate=args.truncate, **_options(args))
    if args.chat:
        prompts = [loaded.tokenizer.apply_chat_template([{"role": "user", "content": p}],
                                                        add_generation_prompt=True)
                   for p in prompts]
        prompts = [loaded.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    results = generator.generate(loaded.params, prompts, seed=args.seed) \
        if args.jsonl or generator.config.num_beams > 1 else None
    if results is None:                               # stream, prompts in input order
        pieces: dict[int, list[str]] = {}
        shown = 0
        for index, piece in generator.generate_stream(loaded.params, prompts, seed=args.seed):
            pieces.setdefault(index, []).append(piece)
            if index == shown:
                out.write(piece)
                out.flush()
        texts = ["".join(pieces.get(i, [])) for i in range(len(prompts))]
        for i in range(len(prompts)):
            if i > shown:
                out.write(texts[i])
            out.write("\n")
        return [{"text": t} for t in texts]
    rows = [{"text": r.text, "token_ids": r.token_ids} for r in results]
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False) + "\n" if args.jsonl else
                  row["text"] + "\n")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; exit status 2 with a one-line error for bad input."""
    args = parse_args(argv)
    try:
        run(args)
    except (TextkitError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
