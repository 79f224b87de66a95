"""Generate text from a language model trained by ``examples/language_model/train.py``.

The prompt is whitespace-tokenized (words outside the vocabulary become ``<unk>``), read after
an ``<eos>`` (a sentence start), then continued by ancestral sampling with temperature, top-k
and top-p (nucleus) filtering. ``<eos>`` prints as a line break; ``<pad>`` is never drawn::

    python examples/language_model/sample.py --checkpoint runs/ptb_small \\
        --prompt "the company said" --length 40 --temperature 0.8 --top-p 0.9

A model with a position limit (Transformer LM ``max_len``) must hold the prompt and the
continuation: a --length beyond it is refused, a prompt too long for it keeps its last tokens
(with a warning on stderr).
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

from textkit.cli import run_main
from textkit.cli.flags import HelpFormatter, Parser
from textkit.decoding import ExcludeTokensStep, model_step_fn, prefill, sample
from textkit.errors import ConfigError
from textkit.models import max_positions
from textkit.tasks import language_model as lm
from textkit.training import RunDir, find_run
from textkit.vocab import Vocab


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    model = p.add_argument_group("model")
    model.add_argument("--checkpoint", required=True, help="a train.py run directory, or its "
                       "runs folder (e.g. runs/lm_toy: the newest run, through 'latest')")
    model.add_argument("--step", default="best", help="'best', 'latest' or an epoch number")
    data = p.add_argument_group("data")
    data.add_argument("--prompt", default="", help="words the samples continue")
    sampling = p.add_argument_group("evaluation", "sampling")
    sampling.add_argument("--length", type=int, default=50, help="tokens to generate")
    sampling.add_argument("--temperature", type=float, default=1.0, help="softmax temperature")
    sampling.add_argument("--top-k", type=int, default=0,
                          help="keep the k most likely tokens (0: all)")
    sampling.add_argument("--top-p", type=float, default=1.0, help="nucleus mass (1: off)")
    sampling.add_argument("--num-samples", type=int, default=1, help="samples to draw")
    sampling.add_argument("--stop-at-eos", action="store_true",
                          help="end a sample at its first <eos>")
    sampling.add_argument("--seed", type=int, default=0, help="sampling seed")
    return p.parse_args(argv)


def render(vocab: Vocab, ids: np.ndarray) -> str:
    """Token ids -> text, one sentence per line."""
    text = " ".join(vocab.to_tokens([int(i) for i in ids])).replace(vocab.eos_token, "\n")
    return "\n".join(line.strip() for line in text.split("\n"))


def prompt_ids(vocab: Vocab, model, words: list[str], length: int) -> list[int]:
    """``<eos>`` + the prompt's ids, checked against the model: ids in its vocabulary, and
    prompt + ``length`` generated tokens within its positions (the prompt's last tokens are
    kept, with a warning, when it does not fit; a ``length`` that never fits is an error)."""
    if length < 1:
        raise ConfigError(f"--length must be >= 1; got {length}")
    ids = [vocab.eos_id, *vocab.to_ids(words)]
    size = model.config.input_vocab_size
    if size is not None and len(vocab) > size:
        raise ConfigError(f"the vocabulary has {len(vocab)} tokens but the model accepts ids "
                         f"< {size}: vocab.json and the checkpoint do not belong together")
    limit = max_positions(model)
    if limit is not None and length + 1 > limit:
        raise ConfigError(f"--length {length} plus one prompt token exceeds the model's "
                         f"{limit} positions (max_len); use --length <= {limit - 1}")
    if limit is not None and len(ids) + length > limit:
        keep = limit - length
        print(f"warning: the prompt has {len(ids) - 1} tokens but only its last {keep - 1} fit "
              f"in the model's {limit} positions with --length {length}; using those",
              file=sys.stderr)
        ids = [vocab.eos_id, *(ids[1:][-(keep - 1):] if keep > 1 else [])]
    return ids


def generate(args: argparse.Namespace) -> list[str]:
    """The prompt followed by each sample's continuation."""
    run = RunDir(find_run(args.checkpoint))
    config = run.read_config()
    vocab = Vocab.load(run.root / "vocab.json")
    model = lm.lm_preset(config["model"], config["model_overrides"], vocab,
                           config["precision"])
    step = args.step if args.step in ("best", "latest") else int(args.step)
    with run.checkpoint_manager(best_metric="valid_ppl", best_mode="min") as checkpoints:
        params = checkpoints.restore(step)[0]["params"]

    words = args.prompt.split()
    unknown = [w for w in words if w not in vocab]
    if unknown:
        print(f"not in the vocabulary, read as {vocab.unk_token}: {' '.join(unknown)}")
    prefix = jnp.asarray([prompt_ids(vocab, model, words, args.length)], jnp.int32)  # [1, P]
    step_fn = ExcludeTokensStep(model_step_fn(model), (vocab.pad_id,))
    cache = model.apply({"params": params}, 1, prefix.shape[1] + args.length,
                        method="init_cache")
    cache, last = prefill(step_fn, params, cache, prefix)
    out = sample(step_fn, params, cache, last, jax.random.key(args.seed),
                 max_length=args.length,
                 eos_id=vocab.eos_id if args.stop_at_eos else vocab.pad_id,
                 temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                 num_samples=args.num_samples, pad_id=vocab.pad_id)
    tokens, lengths = np.asarray(out.tokens[0]), np.asarray(out.lengths[0])    # [n, L], [n]
    return [(args.prompt + " " + render(vocab, row[:length])).strip(" ")
            for row, length in zip(tokens, lengths)]


def main(argv: list[str] | None = None) -> list[str]:
    texts = generate(parse_args(argv))
    for index, text in enumerate(texts):
        print(f"--- sample {index}\n{text}")
    return texts


if __name__ == "__main__":
    run_main(main, resumable=False)
