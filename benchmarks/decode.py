"""Decoding throughput, beam 4 and greedy, sentences per second, against Hugging Face generate.

Two cases, each a batch of 32 random sources of 24 tokens and exactly 32 generated tokens per
hypothesis (EOS suppressed through ``min_length``):

- ``synthetic``: textkit's ``transformer_base`` (d512, 8 heads, ffn 2048, 6+6 layers, shared
  32,000 vocabulary, random init); HF: a random ``MarianMTModel`` of the same size.
- ``marian``: a checkpoint of OPUS-MT en-de's architecture (post-norm, swish, scaled embeddings,
  Marian's sinusoidal positions, ``final_logits_bias``, 58,101-entry vocabulary; random weights)
  written by ``textkit.models.save_pretrained``; textkit reads it with ``load_pretrained`` and HF
  with ``MarianMTModel.from_pretrained``: the same weights on both sides.

Encoding, cache set-up and the search loop run as one jit-compiled program per mode; compile time
is reported apart. HF ``generate`` runs in its own process (``hf_generate.py``, with the Python
given by ``--hf-python``: any environment with torch and transformers) and the two alternate,
round by round; the figures are medians over rounds, the ratios float32 textkit / float32 HF.
Without torch/transformers the HF side is skipped with a note. The last output line is one
JSON object (``beam4_ratio``, ``greedy_ratio``, ``marian_beam4_ratio``, ... and ``cpu``).

    python benchmarks/decode.py --hf-python /path/to/venv/bin/python
    python benchmarks/decode.py --quick --no-hf        # tiny models: checks that it runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from cpu_info import cpu_info

from textkit.data.marian_tokenizer import MarianTokenizer
from textkit.decoding import beam_search, greedy_search, model_step_fn
from textkit.models import Transformer, get_model, load_pretrained, save_pretrained
from textkit.models.marian import marian_config

BATCH, SRC_LEN, STEPS = 32, 24, 32
MODES = ("beam4", "greedy")
FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "tiny_marian"
# OPUS-MT en-de (Helsinki-NLP/opus-mt-en-de) config.json, the fields that shape the compute.
OPUS_EN_DE = dict(vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6,
                  encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
                  decoder_ffn_dim=2048, activation_function="swish", scale_embedding=True,
                  max_position_embeddings=512, pad_token_id=58100, eos_token_id=0,
                  decoder_start_token_id=58100, share_encoder_decoder_embeddings=True,
                  tie_word_embeddings=True, dropout=0.0, attention_dropout=0.0)
QUICK_SIZE = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256)


class Case:
    """One model on both sides: textkit ``model``/``params``, the HF worker's spec, ids."""

    def __init__(self, name: str, model: Any, params: Any, hf_spec: dict[str, Any],
                 bos: int, eos: int, pad: int) -> None:
        self.name, self.model, self.params, self.hf_spec = name, model, params, hf_spec
        self.bos, self.eos, self.pad = bos, eos, pad


def synthetic_case(quick: bool, policy: str) -> Case:
    """textkit ``transformer_base`` (``transformer_tiny`` with ``quick``), random init."""
    name, vocab = ("transformer_tiny", 1000) if quick else ("transformer_base", 32000)
    pad, bos, eos = 1, 2, 3
    model = get_model(name, src_vocab_size=vocab, tgt_vocab_size=vocab, dropout=0.0,
                      pad_id=pad, policy=policy)
    dummy = jnp.full((1, 8), bos, jnp.int32)
    params = model.init(jax.random.key(0), dummy, dummy)["params"]   # op by op: no long compile
    size = QUICK_SIZE if quick else dict(
        d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
        decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048)
    hf = dict(vocab_size=vocab, pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=bos,
              max_position_embeddings=256, share_encoder_decoder_embeddings=True, **size)
    return Case("synthetic", model, params, {"config": hf}, bos, eos, pad)


def write_marian_checkpoint(directory: Path, quick: bool) -> Path:
    """A random checkpoint of OPUS-MT en-de's shape (tiny with ``quick``) in ``directory``.

    The tokenizer is the test fixture's SentencePiece models with a vocabulary padded to the
    model's size (ids only matter here: the sources are random ids)."""
    hf = dict(OPUS_EN_DE, **(dict(QUICK_SIZE, vocab_size=1000, pad_token_id=999,
                                  decoder_start_token_id=999) if quick else {}))
    vocab = json.loads((FIXTURE / "vocab.json").read_text())
    vocab = {piece: i for piece, i in vocab.items() if piece != "<pad>"}
    vocab.update({f"▁filler{i}": i for i in range(len(vocab), hf["vocab_size"] - 1)})
    vocab["<pad>"] = hf["pad_token_id"]
    tokenizer = MarianTokenizer(FIXTURE / "source.spm", vocab,
                                decoder_start_id=hf["decoder_start_token_id"])
    model = Transformer(marian_config(hf))
    dummy = jnp.full((1, 8), hf["pad_token_id"], jnp.int32)
    params = model.init(jax.random.key(1), dummy, dummy)["params"]
    return save_pretrained(model, params, (tokenizer, tokenizer), directory / "opus-mt-shape")


def marian_case(checkpoint: Path, policy: str) -> Case:
    """The checkpoint as ``load_pretrained`` reads it; HF reads the same directory."""
    model, params, _, tgt = load_pretrained(checkpoint, policy=policy, dropout=0.0)
    return Case("marian", model, params, {"checkpoint": str(checkpoint)},
                tgt.bos_id, tgt.eos_id, tgt.pad_id)


def compile_search(case: Case, mode: str, src: jax.Array):
    """Compiled ``(params, src int32[B, S]) -> tokens int32[B, n, STEPS]`` and its compile s."""
    step_fn = model_step_fn(case.model)
    options = dict(max_length=STEPS, eos_id=case.eos, pad_id=case.pad, min_length=STEPS)

    def run(params, src_tokens):
        variables = {"params": params}
        encoded = case.model.apply(variables, src_tokens, method="encode")
        cache = case.model.apply(variables, encoded, src_tokens, STEPS, method="init_cache")
        if mode == "beam4":
            return beam_search(step_fn, params, cache, case.bos, beam_size=4, alpha=0.6,
                               **options).tokens
        return greedy_search(step_fn, params, cache, case.bos, **options).tokens

    start = time.perf_counter()
    compiled = jax.jit(run).lower(case.params, src).compile()
    compile_s = time.perf_counter() - start
    tokens = np.asarray(compiled(case.params, src))
    if np.any(tokens[..., :-1] == case.eos):
        raise RuntimeError(f"{case.name} {mode}: a hypothesis ended before {STEPS} tokens")
    return compiled, compile_s


class HFWorker:
    """``hf_generate.py`` in its own process; ``None`` from ``start`` when it cannot run."""

    @classmethod
    def start(cls, python: str, spec: dict[str, Any], src: np.ndarray) -> HFWorker | None:
        worker = cls()
        worker.process = subprocess.Popen(
            [python, str(Path(__file__).with_name("hf_generate.py"))], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        ready = worker.ask({**spec, "src": src.tolist(), "steps": STEPS})
        if "error" in ready:
            print(f"HF side skipped: {ready['error']}", flush=True)
            worker.process.wait()
            return None
        print(f"HF worker: torch {ready['torch']}, transformers {ready['transformers']}, "
              f"{ready['threads']} threads", flush=True)
        return worker

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the HF worker exited (status {self.process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.write(json.dumps({"quit": True}) + "\n")
        self.process.stdin.close()
        self.process.wait()


def measure(case: Case, src: np.ndarray, rounds: int, hf_python: str | None,
            label: str) -> dict[str, float]:
    """Median sentences/s of textkit (and HF, alternating round by round) for both modes."""
    device_src = jnp.asarray(src)
    compiled = {}
    for mode in MODES:
        compiled[mode], compile_s = compile_search(case, mode, device_src)
        print(f"{case.name} textkit {mode} ({label}): compiled in {compile_s:.1f}s", flush=True)
    worker = HFWorker.start(hf_python, case.hf_spec, src) if hf_python else None
    times: dict[str, list[float]] = {}
    for round_index in range(rounds):
        for mode in MODES:
            start = time.perf_counter()
            compiled[mode](case.params, device_src).block_until_ready()
            times.setdefault(f"textkit_{mode}", []).append(time.perf_counter() - start)
            if worker:
                times.setdefault(f"hf_{mode}", []).append(worker.ask({"mode": mode})["batch_s"])
        print(f"  round {round_index + 1}: " + ", ".join(
            f"{key} {BATCH / values[-1]:.2f}" for key, values in times.items()) + " sent/s",
            flush=True)
    if worker:
        worker.close()
    return {key: BATCH / statistics.median(values) for key, values in times.items()}


def summarise(case_name: str, f32: dict[str, float], bf16: dict[str, float] | None,
              ) -> dict[str, float]:
    """The JSON keys of one case (``synthetic`` unprefixed, ``marian_...`` for the other)."""
    prefix = "" if case_name == "synthetic" else f"{case_name}_"
    out = {}
    for mode in MODES:
        out[f"{prefix}{mode}_sent_s"] = round(f32[f"textkit_{mode}"], 2)
        if bf16:
            out[f"{prefix}{mode}_bfloat16_sent_s"] = round(bf16[f"textkit_{mode}"], 2)
        if f"hf_{mode}" in f32:
            out[f"{prefix}hf_{mode}_sent_s"] = round(f32[f"hf_{mode}"], 2)
            out[f"{prefix}{mode}_ratio"] = round(f32[f"textkit_{mode}"] / f32[f"hf_{mode}"], 2)
            print(f"{case_name} {mode}: textkit {f32[f'textkit_{mode}']:.2f} sent/s, HF "
                  f"{f32[f'hf_{mode}']:.2f} sent/s: {out[f'{prefix}{mode}_ratio']:.2f}x",
                  flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=["synthetic", "marian", "all"], default="all")
    parser.add_argument("--quick", action="store_true",
                        help="tiny models, vocabulary 1000: checks that the script runs")
    parser.add_argument("--bfloat16", action="store_true",
                        help="also time textkit with bfloat16 weights and compute")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hf-python", default=sys.executable,
                        help="Python with torch + transformers for the HF worker process")
    parser.add_argument("--no-hf", action="store_true", help="skip the HF side")
    args = parser.parse_args()

    machine = cpu_info()
    print(f"cpu: {machine['cpu']}; has {machine['features']}; lacks {machine['missing']}; "
          f"devices {jax.devices()}", flush=True)
    src = np.random.default_rng(0).integers(4, 990 if args.quick else 32000,
                                            size=(BATCH, SRC_LEN)).astype(np.int32)
    hf_python = None if args.no_hf else args.hf_python
    summary: dict[str, Any] = {"batch": BATCH, "src_len": SRC_LEN, "steps": STEPS,
                               "quick": args.quick}
    bf16_policy = "params=bfloat16,compute=bfloat16,output=float32"
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = (write_marian_checkpoint(Path(tmp), args.quick)
                      if args.case in ("marian", "all") else None)
        builders = {"synthetic": lambda policy: synthetic_case(args.quick, policy),
                    "marian": lambda policy: marian_case(checkpoint, policy)}
        for name in (["synthetic", "marian"] if args.case == "all" else [args.case]):
            f32 = measure(builders[name]("float32"), src, args.rounds, hf_python, "float32")
            bf16 = (measure(builders[name](bf16_policy), src, args.rounds, None, "bfloat16")
                    if args.bfloat16 else None)
            summary.update(summarise(name, f32, bf16))
    summary["cpu"] = machine
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
