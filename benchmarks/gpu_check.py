"""One prepared GPU check (issue 43): textkit's training and decoding on one H100 / H200 against
what its seeds promise, in at most 8 minutes, with what the machine already has installed (JAX,
torch, transformers; textkit from the source tree on ``PYTHONPATH``; nothing downloaded).

    PYTHONPATH=. python benchmarks/gpu_check.py --peer-python python    # on the GPU machine
    python benchmarks/gpu_check.py --smoke --no-peer                     # tiny shapes, CPU

Three measurements, each after a warm-up that compiles (compile seconds reported apart), in
alternating rounds (the order flips every round) whose medians are reported:

- ``transformer_train``: the Transformer-base train step of ``train_step.py``
  (``textkit_runner``, Adam, dropout 0.1, vocabulary 32,000) on ``--mt-batch`` x ``--mt-len``
  source and target tokens, in ``mixed_bfloat16`` and in ``mixed_float16`` with dynamic loss
  scaling (``textkit.training.with_loss_scaling``); target tokens/s and MFU.
- ``bert_squad``: a SQuAD-shaped fine-tuning step of BERT-base (sequence 384, ``--bert-batch``
  rows, start/end cross-entropy, AdamW 2e-5, dropout on): textkit's ``make_train_step`` under
  ``mixed_bfloat16`` / ``mixed_float16`` (loss-scaled) against transformers'
  ``BertForQuestionAnswering`` with torch AMP (autocast; ``GradScaler`` for float16) and torch
  AdamW in its own process (``hf_squad_step.py``). Both read one random checkpoint written by
  textkit's ``save_pretrained`` (``encoder.write_checkpoint``). Sequences/s and MFU.
- ``decode_beam4``: beam-4 decoding, 32 random sources of 24 tokens, exactly 32 new tokens, of
  a random checkpoint of OPUS-MT en-de's shape (transformer-base, written by ``decode.py``'s
  ``write_marian_checkpoint``): textkit (float16 weights and compute, float32 logits) against
  transformers' ``generate`` in float16 (``hf_generate.py``); sentences/s.

MFU = analytic model FLOPs per second (``train_step.model_flops``; for BERT the same count:
3 x the forward's matmuls and attention products) / the dense bfloat16 / float16 peak of the
device kind (``PEAK_FLOPS``: H100 SXM and H200 989 TFLOP/s, H100 PCIe 756, A100 312); a kind not
in the table (a CPU) is measured (``train_step.matmul_peak``); ``peak_source`` says which.
``goals`` holds the targets of issue 43 as ratios and booleans: BERT-base fine-tuning >= 1.2x
torch AMP and >= 35 % MFU in bfloat16, Transformer-base training >= 40 % MFU (bfloat16),
decoding ahead of transformers' float16 ``generate``. Without torch / transformers in
``--peer-python`` (or with ``--no-peer``) the peer figures are left out and ``peer_skipped``
says why. JAX is given at most ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (default here 0.5) of the
GPU's memory so that the torch process has room. The last output line is one JSON object.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")  # before JAX starts a client

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import decode  # noqa: E402
import encoder  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import train_step  # noqa: E402

from textkit.pretrained import load_pretrained  # noqa: E402
from textkit.training import create_train_state, make_train_step  # noqa: E402
from textkit.training.optim import with_loss_scaling  # noqa: E402

PEAK_FLOPS = (("H200", None, 989e12), ("H100", "PCIE", 756e12), ("H100", None, 989e12),
              ("A100", None, 312e12))
"""(name in the device kind, also required or None, dense bfloat16/float16 FLOP/s)."""
POLICIES = {"bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
DECODE_POLICY = "params=float16,compute=float16,output=float32"
GOALS = {"bert_vs_torch_amp": 1.2, "bert_mfu": 0.35, "transformer_mfu": 0.40, "decode_vs_hf": 1.0}
FULL = dict(mt_size="base", mt_vocab=32000, bert_len=384)
SMOKE = dict(mt_size="tiny", mt_vocab=1000, bert_len=32)


BEGIN = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - BEGIN:6.1f}s] {message}", flush=True)


def peak_flops(kind: str, n: int = 2048) -> tuple[float, str]:
    """(FLOP/s, where the figure comes from) for a device kind (one not in the table: the best
    of a few n x n x n bfloat16 dots)."""
    upper = kind.upper()
    for name, also, flops in PEAK_FLOPS:
        if name in upper and (also is None or also in upper):
            return flops, f"table: {name}{' ' + also if also else ''} dense 16-bit peak"
    measured = train_step.matmul_peak(jnp.bfloat16, jnp.float32, n=n) * 1e9
    return measured, f"measured: best {n}^3 bfloat16 dot here ({kind!r} is not in the table)"


def alternate(calls: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Median of each call's seconds per step over ``rounds``, the order flipped each round."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for round_index in range(rounds):
        order = list(calls) if round_index % 2 == 0 else list(reversed(calls))
        for name in order:
            times[name].append(calls[name]())
        log(f"  round {round_index + 1}: " + ", ".join(
            f"{name} {times[name][-1] * 1e3:.1f} ms" for name in calls))
    return {name: statistics.median(values) for name, values in times.items()}


def per_step(run: Callable[[], None], steps: int) -> Callable[[], float]:
    """Seconds per step of ``steps`` calls of ``run`` (each blocks until its step is done)."""
    def call() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            run()
        return (time.perf_counter() - start) / steps
    return call


def start_peer(script: str, python: str | None, spec: dict[str, Any],
               src: np.ndarray) -> decode.Worker | str:
    """``decode.Worker`` running ``script``, or why not (a str)."""
    if python is None:
        return "--no-peer"
    try:
        return decode.Worker.start(script, python, spec, src)
    except (OSError, RuntimeError, json.JSONDecodeError) as error:
        return f"{script} did not start: {error}"


def with_peer(calls: dict[str, Callable[[], float]], peer: decode.Worker | str,
              requests: dict[str, tuple[dict[str, Any], str]], rounds: int
              ) -> tuple[dict[str, float], dict[str, Any]]:
    """``alternate`` over textkit's ``calls`` and, when ``peer`` runs, one call per
    ``requests[name] = (message, reply key)``; (medians, ``{}`` or ``{"peer_skipped": why}``).
    A peer that fails midway is dropped from the figures, not the whole check."""
    if isinstance(peer, str):
        return alternate(calls, rounds), {"peer_skipped": peer}
    failures: list[str] = []

    def ask(message: dict[str, Any], key: str) -> float:
        if failures:
            return float("nan")
        try:
            return float(peer.ask(message)[key])
        except (OSError, RuntimeError, KeyError, ValueError) as error:
            failures.append(f"the peer failed: {type(error).__name__}: {error}")
            return float("nan")

    peer_calls = {name: (lambda m=message, k=key: ask(m, k))
                  for name, (message, key) in requests.items()}
    medians = alternate({**calls, **peer_calls}, rounds)
    try:
        peer.close()
    except OSError:
        pass
    if failures:
        return {name: medians[name] for name in calls}, {"peer_skipped": failures[0]}
    return medians, {}


def transformer_train(shape: dict, args, peak: float) -> dict[str, Any]:
    """Tokens/s and MFU of the Transformer-base train step, bfloat16 and float16."""
    size, vocab = shape["mt_size"], shape["mt_vocab"]
    rows, length = args.mt_batch, args.mt_len
    batch = {k: jnp.asarray(v) for k, v in
             train_step.make_batch(0, rows, length, length, vocab).items()}
    calls, out = {}, {}
    for dtype, policy in POLICIES.items():
        optimizer = with_loss_scaling(optax.adam(1e-4), policy)
        run, compile_s = train_step.textkit_runner(size, policy, batch, vocab=vocab,
                                                   optimizer=optimizer)
        log(f"transformer {size} {dtype}: compiled in {compile_s:.1f}s")
        calls[dtype] = per_step(run, args.steps)
        out[dtype] = {"compile_s": round(compile_s, 2)}
    medians = alternate(calls, args.rounds)
    s = train_step.SIZES[size]
    flops = train_step.model_flops(s["d_model"], s["d_ff"], s["layers"], rows, length, length,
                                   vocab)
    for dtype, seconds in medians.items():
        out[dtype].update(tok_s=round(rows * length / seconds, 1),
                          step_ms=round(seconds * 1e3, 3), mfu=round(flops / seconds / peak, 4))
    out.update(size=size, batch=rows, src_len=length, tgt_len=length, vocab=vocab,
               flops_per_step=flops, tokens_counted="target tokens")
    return out


def bert_flops(config: dict, rows: int, length: int) -> float:
    """3 x the forward's matmul and attention-product FLOPs of one batch (embeddings, norms,
    softmax, the 2-way QA head and the optimizer not counted), as ``model_flops`` counts."""
    d, ff = config["hidden_size"], config["intermediate_size"]
    per_layer = rows * length * (8 * d * d + 4 * d * ff) + rows * 4 * length * length * d
    return 3.0 * config["num_layers"] * per_layer


def squad_batch(rows: int, length: int, vocab: int) -> dict[str, np.ndarray]:
    """Random ids int32 [B, T] and start <= end answer positions [B]."""
    rng = np.random.default_rng(0)
    start = rng.integers(0, length, rows, dtype=np.int32)
    return {"input_ids": rng.integers(5, vocab, (rows, length), dtype=np.int32),
            "start_positions": start,
            "end_positions": np.minimum(start + rng.integers(0, 8, rows), length - 1
                                        ).astype(np.int32)}


def squad_runner(checkpoint: Path, policy: str, batch: dict[str, np.ndarray]
                 ) -> tuple[Callable[[], None], float]:
    """(warmed-up step runner, compile seconds) of textkit's SQuAD fine-tuning step."""
    pretrained = load_pretrained(checkpoint, policy=policy)
    model, params = pretrained.model, jax.device_put(pretrained.params)
    ids = jnp.asarray(batch["input_ids"])
    data = {"inputs": {"input_ids": ids, "attention_mask": jnp.ones_like(ids),
                       "token_type_ids": jnp.zeros_like(ids)},
            "start": jnp.asarray(batch["start_positions"]),
            "end": jnp.asarray(batch["end_positions"])}

    def loss_fn(p, batch, rng):
        out = model.apply({"params": p}, **batch["inputs"], deterministic=False,
                          rngs={"dropout": rng})
        ce = optax.softmax_cross_entropy_with_integer_labels
        loss = (ce(out["start_logits"].astype(jnp.float32), batch["start"])
                + ce(out["end_logits"].astype(jnp.float32), batch["end"])) / 2
        return loss.sum(), (jnp.asarray(ids.shape[0], jnp.float32), None)

    tx = with_loss_scaling(optax.adamw(encoder.LEARNING_RATE), policy)
    step = make_train_step(loss_fn, tx)
    state = create_train_state(params, tx, jax.random.key(1))
    start = time.perf_counter()
    compiled = step.lower(state, data).compile()
    compile_s = time.perf_counter() - start
    holder = [compiled(state, data)[0]]

    def run() -> None:
        holder[0], metrics = compiled(holder[0], data)
        metrics["loss"].block_until_ready()

    run()
    return run, compile_s


def bert_squad(checkpoint: Path, config: dict, args, peak: float, peer_python: str | None,
               device: str, length: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(figures, peer facts or ``{"peer_skipped": why}``) of the SQuAD-shaped step."""
    rows = args.bert_batch
    batch = squad_batch(rows, length, config["vocab_size"])
    calls, out = {}, {}
    for dtype, policy in POLICIES.items():
        run, compile_s = squad_runner(checkpoint, policy, batch)
        log(f"bert squad {dtype}: compiled in {compile_s:.1f}s")
        calls[f"textkit_{dtype}"] = per_step(run, args.steps)
        out[dtype] = {"compile_s": round(compile_s, 2)}
    spec = {"checkpoint": str(checkpoint), "modes": list(POLICIES), "lr": encoder.LEARNING_RATE,
            "device": device, "start_positions": batch["start_positions"].tolist(),
            "end_positions": batch["end_positions"].tolist()}
    peer = start_peer("hf_squad_step.py", peer_python, spec, batch["input_ids"])
    requests = {f"torch_{dtype}": ({"mode": dtype, "steps": args.steps}, "step_s")
                for dtype in POLICIES}
    medians, facts = with_peer(calls, peer, requests, args.rounds)
    if not facts:
        facts = {"torch": peer.ready.get("torch"), "transformers": peer.ready.get("transformers"),
                 "torch_device": peer.ready.get("device")}
    flops = bert_flops(config, rows, length)
    for dtype in POLICIES:
        seconds = medians[f"textkit_{dtype}"]
        out[dtype].update(seq_s=round(rows / seconds, 2), step_ms=round(seconds * 1e3, 3),
                          mfu=round(flops / seconds / peak, 4))
        if f"torch_{dtype}" in medians:
            theirs = medians[f"torch_{dtype}"]
            out[dtype].update(torch_amp_seq_s=round(rows / theirs, 2),
                              torch_amp_mfu=round(flops / theirs / peak, 4),
                              ratio=round(theirs / seconds, 3))
    out.update(batch=rows, seq_len=length, flops_per_step=flops,
               attention_dropout=args.attention_dropout)
    return out, facts


def decode_beam4(workdir: Path, smoke: bool, args, peer_python: str | None,
                 device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sentences/s of beam-4 decoding, textkit float16 against transformers' generate."""
    checkpoint = decode.write_marian_checkpoint(workdir, smoke)
    case = decode.checkpoint_model_case("marian", checkpoint, DECODE_POLICY)
    src = np.random.default_rng(0).integers(4, 990 if smoke else 32000,
                                            (decode.BATCH, decode.SRC_LEN), dtype=np.int32)
    device_src = jnp.asarray(src)
    compiled, compile_s = decode.compile_search(case, "beam4", device_src)
    log(f"decode beam4: compiled in {compile_s:.1f}s")

    def textkit_call() -> float:
        start = time.perf_counter()
        compiled(case.params, device_src).block_until_ready()
        return time.perf_counter() - start

    calls = {"textkit": textkit_call}
    hf_dtype = "float16" if device == "cuda" else "float32"
    peer = start_peer("hf_generate.py", peer_python,
                      {"checkpoint": str(checkpoint), "dtype": hf_dtype, "device": device}, src)
    medians, facts = with_peer(calls, peer, {"hf": ({"mode": "beam4"}, "batch_s")},
                               args.rounds)
    out: dict[str, Any] = {"sent_s": round(decode.BATCH / medians["textkit"], 2),
                           "compile_s": round(compile_s, 2), "policy": DECODE_POLICY,
                           "batch": decode.BATCH, "src_len": decode.SRC_LEN,
                           "new_tokens": decode.STEPS}
    if "hf" in medians:
        out.update(hf_sent_s=round(decode.BATCH / medians["hf"], 2), hf_dtype=hf_dtype,
                   ratio=round(medians["hf"] / medians["textkit"], 3))
    return out, facts


def goals(result: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, as the measured ratios / MFUs and whether each is met (None: not
    measured)."""
    bert = result.get("bert_squad", {}).get("bfloat16", {})
    measured = {"bert_bf16_vs_torch_amp": (bert.get("ratio"), GOALS["bert_vs_torch_amp"]),
                "bert_bf16_mfu": (bert.get("mfu"), GOALS["bert_mfu"]),
                "transformer_bf16_mfu": (result.get("transformer_train", {}).get(
                    "bfloat16", {}).get("mfu"), GOALS["transformer_mfu"]),
                "decode_vs_hf_fp16": (result.get("decode_beam4", {}).get("ratio"), None)}
    out: dict[str, Any] = {}
    for name, (value, at_least) in measured.items():
        out[name] = value
        out[f"{name}_met"] = None if value is None else (
            value > GOALS["decode_vs_hf"] if at_least is None else value >= at_least)
    out["targets"] = GOALS
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes (on any backend, e.g. the CPU): checks that it runs")
    parser.add_argument("--peer-python", default=None,
                        help="a Python with torch and transformers (default: this one)")
    parser.add_argument("--no-peer", action="store_true", help="time textkit only")
    parser.add_argument("--rounds", type=int, default=None, help="default 5 (smoke 2)")
    parser.add_argument("--steps", type=int, default=None,
                        help="train steps per round and side (default 10, smoke 1)")
    parser.add_argument("--mt-batch", type=int, default=None, help="default 128 (smoke 4)")
    parser.add_argument("--mt-len", type=int, default=None,
                        help="source = target tokens per row (default 128, smoke 8)")
    parser.add_argument("--bert-batch", type=int, default=None, help="default 32 (smoke 2)")
    parser.add_argument("--attention-dropout", type=float, default=0.1,
                        help="BERT's attention dropout, in the checkpoint both sides read (0: "
                             "textkit's fused attention applies)")
    args = parser.parse_args(argv)
    smoke = args.smoke
    defaults = dict(rounds=2, steps=1, mt_batch=4, mt_len=8, bert_batch=2) if smoke else \
        dict(rounds=5, steps=10, mt_batch=128, mt_len=128, bert_batch=32)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    shape = SMOKE if smoke else FULL
    peer_python = None if args.no_peer else (args.peer_python or sys.executable)
    first = jax.devices()[0]
    device = "cuda" if first.platform == "gpu" else "cpu"
    log(f"jax {jax.__version__} on {first.platform}: {first.device_kind} "
        f"({jax.device_count()} device(s)); python {platform.python_version()}")
    if device != "cuda" and not smoke:
        log("warning: no GPU in this JAX; the full check is meant for one H100 / H200")
    peak, peak_source = peak_flops(first.device_kind, 512 if smoke else 2048)
    log(f"peak {peak / 1e12:.1f} TFLOP/s ({peak_source})")
    result: dict[str, Any] = {
        "device_kind": first.device_kind, "platform": first.platform, "jax": jax.__version__,
        "peak_flops": peak, "peak_source": peak_source, "smoke": smoke, "rounds": args.rounds,
        "steps_per_round": args.steps,
        "mem_fraction": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")}
    workdir = Path(tempfile.mkdtemp(prefix="textkit-gpu-check-"))
    config = {**encoder.QUICK, "num_layers": 1} if smoke else encoder.BERT_BASE

    def bert_part() -> tuple[dict[str, Any], dict[str, Any]]:
        checkpoint = encoder.write_checkpoint(workdir, smoke, "question_answering",
                                              attention_dropout=args.attention_dropout,
                                              num_layers=config["num_layers"])
        return bert_squad(checkpoint, config, args, peak, peer_python, device,
                          shape["bert_len"])

    parts = {"transformer_train": lambda: (transformer_train(shape, args, peak), {}),
             "bert_squad": bert_part,
             "decode_beam4": lambda: decode_beam4(workdir, smoke, args, peer_python, device)}
    skipped: dict[str, Any] = {}
    errors: dict[str, str] = {}
    try:
        for name, part in parts.items():
            try:
                result[name], facts = part()
            except Exception as error:     # one part's failure must not lose the others
                traceback.print_exc()
                errors[name] = f"{type(error).__name__}: {error}"[:1000]
                continue
            finally:
                gc.collect()
            log(f"{name}: {result[name]}")
            if "peer_skipped" in facts:
                skipped[name] = facts.pop("peer_skipped")
            result.update(facts)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if skipped:
        result["peer_skipped"] = skipped
    if errors:
        result["errors"] = errors
    result["goals"] = goals(result)
    result["elapsed_s"] = round(time.perf_counter() - BEGIN, 1)
    result["within_8_min"] = result["elapsed_s"] <= 480
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
