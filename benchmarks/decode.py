"""Decoding throughput, beam 4 and greedy, sentences per second, against Hugging Face generate.

Two cases, each a batch of 32 random sources of 24 tokens and exactly 32 generated tokens per
hypothesis (EOS suppressed through ``min_length``):

- ``synthetic``: textkit's ``transformer_base`` (d512, 8 heads, ffn 2048, 6+6 layers, shared
  32,000 vocabulary, random init); HF: a random ``MarianMTModel`` of the same size.
- ``marian``: a checkpoint of OPUS-MT en-de's architecture (post-norm, swish, scaled embeddings,
  Marian's sinusoidal positions, ``final_logits_bias``, 58,101-entry vocabulary; random weights)
  written by ``textkit.pretrained.save_pretrained``; textkit reads it with ``load_pretrained``
  and HF with ``MarianMTModel.from_pretrained``: the same weights on both sides.

Modes: ``beam4`` and ``greedy`` (float32), ``beam4_int8`` and ``greedy_int8`` (textkit with
int8 weights, ``textkit.models.kernels.quantize_int8``; their HF ratios are against HF's float32
search, the only HF modes).

CTranslate2 (``ct2_generate.py``, its own process, ``--ct2-python``) converts the ``marian``
case's checkpoint and runs every mode: float32, and int8 with the faster of its ``int8`` and
``int8_float32`` compute types (``ct2_int8_compute_type``), ``intra_threads`` = the cores,
``inter_threads`` 1. Its keys are ``ct2_<mode>_sent_s`` and ``<mode>_ct2_ratio`` (textkit /
CTranslate2, the ``marian`` case); without ctranslate2 the JSON has ``ct2_skipped`` (why).
Encoding, cache set-up and the search loop run as one jit-compiled program per mode; compile time
is reported apart. HF ``generate`` runs in its own process (``hf_generate.py``, with the Python
given by ``--hf-python``: any environment with torch and transformers) and the two alternate,
round by round; the figures are medians over rounds, the ratios textkit / float32 HF.
Without torch/transformers (or with ``--no-hf``) the HF side is skipped with a note, and the
JSON line has ``hf_skipped`` (the reason) instead of the ratios.

``--checkpoint RUN_DIR --sentences FILE``: a third case, a model trained by
``examples/nmt/train.py`` translating real sentences end to end (SentencePiece encode ->
``Translator.translate`` -> decode) with the run's beam size and length penalty, float32 and
int8 alternating round by round (``checkpoint_sent_s``, ``checkpoint_int8_sent_s`` and
``checkpoint_int8_ratio``: medians of ``--rounds`` after a warm-up pass that compiles).
``--bf16-dots rounded`` forces the rounded bfloat16 path (operands rounded to bfloat16,
multiplied in float32) on a CPU with bf16 dot instructions, ``native`` the bfloat16 dots.
The last output line is one JSON object (``beam4_ratio``,
``greedy_ratio``, ``beam4_int8_ratio``, ``marian_beam4_ratio``, ... and ``cpu``).

    python benchmarks/decode.py --hf-python /path/to/venv/bin/python   # HF and CTranslate2
    python benchmarks/decode.py --quick --no-hf        # tiny models: checks that it runs
    python benchmarks/decode.py --case none --checkpoint runs/m30k \
        --sentences ../shared/data/multi30k-en-de/test_2016_flickr.en
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
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
from cpu_info import BF16_DOTS, choose_bf16_dots, cpu_info

from textkit.decoding import beam_search, greedy_search, model_step_fn
from textkit.models import Transformer, get_model
from textkit.pretrained import MarianTokenizer, load_pretrained, save_pretrained
from textkit.pretrained.marian import marian_config
from textkit.pretrained.t5 import t5_config
from textkit.pretrained.t5_tokenizer import T5Tokenizer

BATCH, SRC_LEN, STEPS = 32, 24, 32
MODES = ("beam4", "greedy", "beam4_int8", "greedy_int8")
HF_MODES = ("beam4", "greedy")
CT2_MODES = MODES
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
# t5-base (google-t5/t5-base) and flan-t5-base (google/flan-t5-base) config.json, the fields
# that shape the compute.
T5_BASE = dict(model_type="t5", vocab_size=32128, d_model=768, d_kv=64, num_heads=12, d_ff=3072,
               num_layers=12, num_decoder_layers=12, feed_forward_proj="relu",
               tie_word_embeddings=True, relative_attention_num_buckets=32,
               relative_attention_max_distance=128, dropout_rate=0.0, pad_token_id=0,
               eos_token_id=1, decoder_start_token_id=0, layer_norm_epsilon=1e-6)
T5_SHAPES = {"t5": T5_BASE,
             "flan_t5": dict(T5_BASE, d_ff=2048, feed_forward_proj="gated-gelu",
                             tie_word_embeddings=False)}
T5_QUICK = dict(vocab_size=1000, d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=2,
                num_decoder_layers=2)
SPIECE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tokenizers" / "t5"


class Case:
    """One model on both sides: textkit ``model``/``params``, the HF worker's spec, ids."""

    def __init__(self, name: str, model: Any, params: Any, hf_spec: dict[str, Any],
                 bos: int, eos: int, pad: int) -> None:
        self.name, self.model, self.params, self.hf_spec = name, model, params, hf_spec
        self.bos, self.eos, self.pad = bos, eos, pad
        self.int8_params: dict[Any, Any] = {}     # carrier -> quantized params (mode_params)


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


def write_t5_checkpoint(directory: Path, name: str, quick: bool) -> Path:
    """A random checkpoint of t5-base's (``name`` "t5") or flan-t5-base's ("flan_t5") shape
    (tiny with ``quick``) in ``directory``, with T5's real ``spiece.model`` (``../shared``;
    the tiny fixture's tokenizer with ``quick`` or without it: ids only matter here)."""
    hf = dict(T5_SHAPES[name], **(T5_QUICK if quick else {}))
    source = SPIECE if (SPIECE / "spiece.model").is_file() and not quick else (
        FIXTURE.parent / "tiny_t5")
    tokenizer = T5Tokenizer.from_directory(source, 0)
    model = Transformer(t5_config(hf))
    dummy = jnp.zeros((1, 8), jnp.int32)
    params = model.init(jax.random.key(2), dummy, dummy)["params"]
    return save_pretrained(model, params, (tokenizer, tokenizer), directory / f"{name}-shape")


def checkpoint_model_case(name: str, checkpoint: Path, policy: str) -> Case:
    """The checkpoint as ``load_pretrained`` reads it; HF (and CTranslate2) read the same
    directory."""
    pretrained = load_pretrained(checkpoint, policy=policy, dropout=0.0)
    model, params, tgt = pretrained.model, pretrained.params, pretrained.target_tokenizer
    return Case(name, model, params, {"checkpoint": str(checkpoint)},
                tgt.bos_id, tgt.eos_id, tgt.pad_id)


def mode_beams(mode: str) -> int:
    """Beam size of ``mode`` (beam<K>[_int8] or greedy[_int8])."""
    if mode.startswith("beam"):
        return int(mode.removesuffix("_int8").removeprefix("beam"))
    return 1


def mode_params(case: Case, mode: str) -> Any:
    """The case's parameters as ``mode`` decodes with them: for ``*_int8`` int8 values in the
    carrier ``Translator`` would use for ``BATCH`` x beams rows (``int8_carrier``)."""
    if not mode.endswith("_int8"):
        return case.params
    from textkit.models.kernels import int8_carrier, quantize_int8

    carrier = jax.numpy.dtype(int8_carrier(BATCH * mode_beams(mode)))
    if carrier not in case.int8_params:
        case.int8_params[carrier] = quantize_int8(case.model, case.params, carrier=carrier)
    return case.int8_params[carrier]


@dataclasses.dataclass(frozen=True)
class GatherStep:
    """The model's step without the beam hooks of the decoding contract: the search tiles the
    cache, gathers it by parent every step and never grows it (the path before issue 17)."""

    model: Any

    def __call__(self, params, cache, tokens):
        return self.model.apply({"params": params}, cache, tokens, method="decode_step")


def compile_search(case: Case, mode: str, src: jax.Array, *, gather: bool = False):
    """Compiled ``(params, src int32[B, S]) -> tokens int32[B, n, STEPS]`` and its compile s.

    ``mode``: beam<K>[_int8] or greedy; ``gather``: through ``GatherStep``."""
    step_fn = GatherStep(case.model) if gather else model_step_fn(case.model)
    options = dict(max_length=STEPS, eos_id=case.eos, pad_id=case.pad, min_length=STEPS)

    def run(params, src_tokens):
        variables = {"params": params}
        encoded = case.model.apply(variables, src_tokens, method="encode")
        cache = case.model.apply(variables, encoded, src_tokens, STEPS, method="init_cache")
        if mode.startswith("beam"):
            return beam_search(step_fn, params, cache, case.bos, beam_size=mode_beams(mode),
                               alpha=0.6, **options).tokens
        return greedy_search(step_fn, params, cache, case.bos, **options).tokens

    params = mode_params(case, mode)
    start = time.perf_counter()
    compiled = jax.jit(run).lower(params, src).compile()
    compile_s = time.perf_counter() - start
    tokens = np.asarray(compiled(params, src))
    if np.any(tokens[..., :-1] == case.eos):
        raise RuntimeError(f"{case.name} {mode}: a hypothesis ended before {STEPS} tokens")
    return compiled, compile_s


class Worker:
    """A peer engine's worker script (``hf_generate.py``, ``ct2_generate.py``) in its own
    process; ``start`` gives the reason (a str) instead when it cannot run."""

    @classmethod
    def start(cls, script: str, python: str, spec: dict[str, Any],
              src: np.ndarray) -> Worker | str:
        worker = cls()
        worker.process = subprocess.Popen(
            [python, str(Path(__file__).with_name(script))], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        ready = worker.ask({**spec, "src": src.tolist(), "steps": STEPS})
        if "error" in ready:
            print(f"{script} skipped: {ready['error']}", flush=True)
            worker.process.wait()
            return str(ready["error"])
        worker.ready = ready
        print(f"{script}: {ready}", flush=True)
        return worker

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker exited (status {self.process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.write(json.dumps({"quit": True}) + "\n")
        self.process.stdin.close()
        self.process.wait()


def measure(case: Case, src: np.ndarray, rounds: int, hf_python: str | None,
            ct2_python: str | None, label: str) -> tuple[dict[str, float], dict[str, str]]:
    """Median sentences/s of textkit and, alternating mode by mode in every round, of HF
    (float32 modes) and CTranslate2 (every mode; the ``marian`` case only, which has a
    checkpoint to convert); and why a peer did not run (``{"hf_skipped": ...}``)."""
    device_src = jnp.asarray(src)
    compiled = {}
    for mode in MODES:
        compiled[mode], compile_s = compile_search(case, mode, device_src)
        print(f"{case.name} textkit {mode} ({label}): compiled in {compile_s:.1f}s", flush=True)
    peers: dict[str, Worker] = {}
    skipped: dict[str, str] = {}
    wanted = {"hf": ("hf_generate.py", hf_python, case.hf_spec),
              "ct2": ("ct2_generate.py", ct2_python, case.hf_spec)}
    for name, (script, python, spec) in wanted.items():
        if python is None:
            skipped[f"{name}_skipped"] = f"--no-{name}"
        elif name == "ct2" and "checkpoint" not in spec:
            continue                           # CTranslate2 converts checkpoints only
        else:
            started = Worker.start(script, python, spec, src)
            if isinstance(started, str):
                skipped[f"{name}_skipped"] = started
            else:
                peers[name] = started
    times: dict[str, list[float]] = {}
    for round_index in range(rounds):
        for mode in MODES:
            start = time.perf_counter()
            compiled[mode](mode_params(case, mode), device_src).block_until_ready()
            times.setdefault(f"textkit_{mode}", []).append(time.perf_counter() - start)
            for name, worker in peers.items():
                if mode in (HF_MODES if name == "hf" else CT2_MODES):
                    times.setdefault(f"{name}_{mode}", []).append(
                        worker.ask({"mode": mode})["batch_s"])
        print(f"  round {round_index + 1}: " + ", ".join(
            f"{key} {BATCH / values[-1]:.2f}" for key, values in times.items()) + " sent/s",
            flush=True)
    for worker in peers.values():
        worker.close()
    rates = {key: BATCH / statistics.median(values) for key, values in times.items()}
    if "ct2" in peers:
        skipped["ct2_int8_compute_type"] = peers["ct2"].ready["int8_compute_type"]
    return rates, skipped


def compare_gather(case: Case, src: np.ndarray, rounds: int,
                   beam_sizes: list[int]) -> dict[str, float]:
    """Sentences/s of the search with the in-place cache and through ``GatherStep`` (the
    tiled cache gathered every step), alternating, for each beam size; medians."""
    device_src = jnp.asarray(src)
    programs = {}
    for beams in beam_sizes:
        for path in ("inplace", "gather"):
            programs[f"{path}_beam{beams}"], _ = compile_search(
                case, f"beam{beams}", device_src, gather=path == "gather")
    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        for key, program in programs.items():
            start = time.perf_counter()
            program(case.params, device_src).block_until_ready()
            times.setdefault(key, []).append(time.perf_counter() - start)
    out = {f"{key}_sent_s": round(BATCH / statistics.median(values), 2)
           for key, values in times.items()}
    for beams in beam_sizes:
        print(f"beam {beams}: in place {out[f'inplace_beam{beams}_sent_s']:.2f} sent/s, "
              f"gathered {out[f'gather_beam{beams}_sent_s']:.2f} sent/s", flush=True)
    return out


def checkpoint_case(run_dir: str, sentences: str, rounds: int, limit: int) -> dict[str, float]:
    """Sentences/s of a trained run translating the first ``limit`` lines of ``sentences``
    end to end (text in, text out), float32 and int8 alternating round by round (medians; the
    ratio int8 / float32 of the medians); the int8 outputs' agreement too."""
    from textkit.data.datasets import read_lines
    from textkit.decoding import Translator
    from textkit.tasks import translation

    run = translation.load_trained(run_dir)
    texts = read_lines(sentences)[:limit]
    out: dict[str, float] = {"checkpoint_sentences": len(texts)}
    labels = {"checkpoint": None, "checkpoint_int8": "int8"}
    translators, outputs, times = {}, {}, {label: [] for label in labels}
    for label, quantize in labels.items():
        translators[label] = Translator(
            run.model, run.src_tokenizer, run.tgt_tokenizer, beam_size=run.config["beam_size"],
            alpha=run.config["alpha"], batch_size=run.config["decode_batch_size"],
            quantize=quantize)
        start = time.perf_counter()
        outputs[label] = translators[label].translate(run.params, texts)  # compiles every shape
        print(f"checkpoint {label}: first pass with compilation "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    for round_index in range(rounds):
        for label, translator in translators.items():
            start = time.perf_counter()
            translator.translate(run.params, texts)
            times[label].append(time.perf_counter() - start)
        print(f"  round {round_index + 1}: " + ", ".join(
            f"{label} {len(texts) / values[-1]:.2f}" for label, values in times.items())
            + " sent/s", flush=True)
    for label, values in times.items():
        out[f"{label}_sent_s"] = round(len(texts) / statistics.median(values), 2)
    out["checkpoint_int8_ratio"] = round(
        statistics.median(times["checkpoint"]) / statistics.median(times["checkpoint_int8"]), 3)
    print(f"checkpoint: float32 {out['checkpoint_sent_s']:.2f}, int8 "
          f"{out['checkpoint_int8_sent_s']:.2f} sent/s end to end ({len(texts)} sentences, "
          f"beam {run.config['beam_size']}): int8 {out['checkpoint_int8_ratio']:.2f}x",
          flush=True)
    same = sum(a == b for a, b in zip(outputs["checkpoint"], outputs["checkpoint_int8"]))
    out["checkpoint_int8_same_output"] = round(same / len(texts), 3)
    return out


def summarise(case_name: str, f32: dict[str, float], bf16: dict[str, float] | None,
              ) -> dict[str, float]:
    """The JSON keys of one case (``synthetic`` unprefixed, ``<case>_...`` for the others);
    the CTranslate2 figures are unprefixed for ``marian`` (``ct2_<mode>_sent_s`` and
    ``<mode>_ct2_ratio``) and prefixed for the T5 cases (``t5_ct2_beam4_sent_s``,
    ``t5_beam4_ct2_ratio``)."""
    prefix = "" if case_name == "synthetic" else f"{case_name}_"
    ct2 = "" if case_name == "marian" else prefix
    out = {}
    for mode in MODES:
        out[f"{prefix}{mode}_sent_s"] = round(f32[f"textkit_{mode}"], 2)
        if bf16:
            out[f"{prefix}{mode}_bfloat16_sent_s"] = round(bf16[f"textkit_{mode}"], 2)
        peer = mode.removesuffix("_int8")
        if f"hf_{peer}" in f32:
            out[f"{prefix}hf_{peer}_sent_s"] = round(f32[f"hf_{peer}"], 2)
            out[f"{prefix}{mode}_ratio"] = round(f32[f"textkit_{mode}"] / f32[f"hf_{peer}"], 2)
            print(f"{case_name} {mode}: textkit {f32[f'textkit_{mode}']:.2f} sent/s, HF "
                  f"{peer} {f32[f'hf_{peer}']:.2f} sent/s: "
                  f"{out[f'{prefix}{mode}_ratio']:.2f}x", flush=True)
        if f"ct2_{mode}" in f32:
            out[f"{ct2}ct2_{mode}_sent_s"] = round(f32[f"ct2_{mode}"], 2)
            ratio = out[f"{ct2}{mode}_ct2_ratio"] = round(
                f32[f"textkit_{mode}"] / f32[f"ct2_{mode}"], 2)
            print(f"{case_name} {mode}: textkit {f32[f'textkit_{mode}']:.2f} sent/s, "
                  f"CTranslate2 {f32[f'ct2_{mode}']:.2f} sent/s: {ratio:.2f}x", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=["synthetic", "marian", "t5", "flan_t5", "all",
                                           "none"], default="all",
                        help="all: synthetic and marian; t5 / flan_t5: random weights in "
                             "t5-base's / flan-t5-base's shape")
    parser.add_argument("--checkpoint", default=None,
                        help="save dir of an examples/nmt/train.py run (the real-model case)")
    parser.add_argument("--sentences", default=None,
                        help="source sentences for --checkpoint, one per line")
    parser.add_argument("--checkpoint-lines", type=int, default=500)
    parser.add_argument("--compare-gather", default=None, metavar="K,K,...",
                        help="also time the synthetic case's beam search with the in-place "
                             "cache against the gathered one, for these beam sizes")
    parser.add_argument("--quick", action="store_true",
                        help="tiny models, vocabulary 1000: checks that the script runs")
    parser.add_argument("--bfloat16", action="store_true",
                        help="also time textkit with bfloat16 weights and compute")
    parser.add_argument("--bf16-dots", choices=BF16_DOTS, default="auto",
                        help="with --bfloat16: native bfloat16 dots, or the rounded operands "
                             "multiplied in float32 (auto: native only with avx512_bf16/amx_bf16)")
    parser.add_argument("--rounds", type=int, default=9,
                        help="alternating rounds (medians); on a 2-core VM one batch's time "
                             "moves by up to 15 %% from round to round on either side")
    parser.add_argument("--hf-python", default=sys.executable,
                        help="Python with torch + transformers for the HF worker process")
    parser.add_argument("--no-hf", action="store_true", help="skip the HF side")
    parser.add_argument("--ct2-python", default=None,
                        help="Python with ctranslate2 + transformers + sentencepiece for the "
                             "CTranslate2 worker (default: --hf-python)")
    parser.add_argument("--no-ct2", action="store_true", help="skip the CTranslate2 side")
    args = parser.parse_args()

    bf16_dots = choose_bf16_dots(args.bf16_dots)
    machine = cpu_info()
    print(f"cpu: {machine['cpu']}; has {machine['features']}; lacks {machine['missing']}; "
          f"devices {jax.devices()}", flush=True)
    src = np.random.default_rng(0).integers(4, 990 if args.quick else 32000,
                                            size=(BATCH, SRC_LEN)).astype(np.int32)
    hf_python = None if args.no_hf else args.hf_python
    ct2_python = None if args.no_ct2 else (args.ct2_python or args.hf_python)
    for flag, python in (("--hf-python", hf_python), ("--ct2-python", ct2_python)):
        if python and not shutil.which(python):
            parser.error(f"{flag} {python}: no such executable")
    summary: dict[str, Any] = {"batch": BATCH, "src_len": SRC_LEN, "steps": STEPS,
                               "quick": args.quick}
    bf16_policy = "params=bfloat16,compute=bfloat16,output=float32"
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = (write_marian_checkpoint(Path(tmp), args.quick)
                      if args.case in ("marian", "all") else None)
        if args.case in T5_SHAPES:
            checkpoint = write_t5_checkpoint(Path(tmp), args.case, args.quick)
        builders = {"synthetic": lambda policy: synthetic_case(args.quick, policy),
                    **{name: lambda policy, name=name: checkpoint_model_case(
                        name, checkpoint, policy) for name in ("marian", *T5_SHAPES)}}
        names = {"all": ["synthetic", "marian"], "none": []}.get(args.case, [args.case])
        for name in names:
            f32, skipped = measure(builders[name]("float32"), src, args.rounds, hf_python,
                                   ct2_python, "float32")
            summary.update(skipped)
            bf16 = (measure(builders[name](bf16_policy), src, args.rounds, None, None,
                            "bfloat16")[0] if args.bfloat16 else None)
            summary.update(summarise(name, f32, bf16))
            if bf16:
                summary["bf16_dots"] = bf16_dots
    if args.compare_gather:
        summary.update(compare_gather(synthetic_case(args.quick, "float32"), src, args.rounds,
                                      [int(k) for k in args.compare_gather.split(",")]))
    if args.checkpoint:
        summary.update(checkpoint_case(args.checkpoint, args.sentences, args.rounds,
                                       args.checkpoint_lines))
    summary["cpu"] = machine
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
