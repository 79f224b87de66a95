"""BERT-base sequence classification, textkit against transformers (torch, CPU): inference
sentences/s and fine-tuning tokens/s.

One random checkpoint of BERT-base's shape (12 layers x 768, 12 heads, ffn 3,072, vocabulary
30,522; ``BertForSequenceClassification``, 2 labels) is written by textkit's
``save_pretrained`` into a temporary folder; textkit reads it with ``load_pretrained`` and
transformers with ``from_pretrained``: the same weights and the same work on both sides. The
batch is 32 rows x 128 tokens of random ids (no padding), token types 0, random labels.

Modes:

- ``infer``: the classifier's logits (float32, dropout off); sentences/s, key ``infer_ratio``.
- ``train``: one fine-tuning step on the same batch (dropout on, cross-entropy, AdamW, lr
  2e-5): textkit's ``training.make_train_step`` (one jit-compiled program, the state donated,
  optax's ``adamw``, the policy's compute dtype) against zero_grad / forward / backward /
  ``AdamW.step`` in torch; tokens/s (32 x 128 per step), key ``train_ratio``.
- ``infer_bf16``: ``infer`` with bfloat16 weights and compute on both sides (textkit's policy
  ``params=bfloat16,compute=bfloat16,output=float32``, transformers' model cast to bfloat16),
  key ``infer_bf16_ratio``; run where the CPU has bf16 dots (``avx512_bf16`` / ``amx_bf16``)
  unless ``--bfloat16 on|off`` says otherwise.

transformers runs in its own process (``hf_encoder.py``, with the Python given by
``--peer-python``: any environment with torch and transformers) and the two alternate, round by
round; the figures are medians over ``--rounds``, the ratios textkit / transformers; compile
times are reported apart. Without torch / transformers in that Python (or with ``--no-peer``)
the JSON line has ``peer_skipped`` (the reason) instead of the ratios; when both run,
``infer_logits_max_abs_diff`` checks that they compute the same logits. ``--quick``: a 2-layer,
64-wide model, vocabulary 1,000, 4 x 16 tokens (checks that the script runs). The last output
line is one JSON object.

    python benchmarks/encoder.py --peer-python /tmp/hfenv/bin/python
    python benchmarks/encoder.py --quick --no-peer --rounds 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from cpu_info import cpu_info

from textkit.models import Encoder, EncoderConfig
from textkit.pretrained import EncoderTokenizer, load_pretrained, save_pretrained
from textkit.training import create_train_state, make_train_step

BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_layers=12, num_heads=12,
                 intermediate_size=3072)
QUICK = dict(vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256)
SHAPES = {False: (32, 128), True: (4, 16)}
"""--quick -> (batch rows, tokens per row)."""
LEARNING_RATE = 2e-5
BF16_POLICY = "params=bfloat16,compute=bfloat16,output=float32"


def write_checkpoint(directory: Path, quick: bool, head: str = "sequence_classification",
                     **overrides: Any) -> Path:
    """A random BERT sequence classifier (or another ``head``) of BERT-base's shape (tiny with
    ``quick``; ``overrides``: other ``EncoderConfig`` fields) written with textkit's
    ``save_pretrained``; its tokenizer is a WordPiece of the specials (ids only matter
    here)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece

    config = EncoderConfig(architecture="bert", head=head, num_labels=2, pad_id=0,
                           **{**(QUICK if quick else BERT_BASE), **overrides})
    model = Encoder(config)
    params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]  # op by op
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}
    tokenizer = EncoderTokenizer(Tokenizer(WordPiece(vocab, unk_token="[UNK]")),
                                 pad_token="[PAD]", with_token_types=True)
    name = "bert-base-shape" + ("" if head == "sequence_classification" else f"-{head}")
    return save_pretrained(model, params, tokenizer, directory / name)


def batch_arrays(quick: bool, vocab_size: int) -> dict[str, np.ndarray]:
    """The benchmark batch: random ids int32 [B, T], all-ones mask, zero types, labels [B]."""
    rows, length = SHAPES[quick]
    rng = np.random.default_rng(0)
    ids = rng.integers(1000 if not quick else 5, vocab_size, size=(rows, length), dtype=np.int32)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids),
            "labels": rng.integers(0, 2, size=rows, dtype=np.int32)}


def textkit_calls(checkpoint: Path, batch: dict[str, np.ndarray],
                  modes: list[str]) -> dict[str, Callable[[], None]]:
    """One compiled call per mode (each run once, compile time printed); with ``infer``, also
    ``"logits"``: the float32 logits as numpy."""
    inputs = {k: jnp.asarray(v) for k, v in batch.items() if k != "labels"}
    labels = jnp.asarray(batch["labels"])
    calls: dict[str, Callable[[], None]] = {}
    for mode in modes:
        policy = BF16_POLICY if mode == "infer_bf16" else "float32"
        pretrained = load_pretrained(checkpoint, policy=policy)
        model, params = pretrained.model, pretrained.params
        params = jax.device_put(params)
        start = time.perf_counter()
        if mode == "train":
            calls[mode] = train_call(model, params, inputs, labels)
        else:
            forward = jax.jit(lambda p, x, m=model: m.apply({"params": p}, **x)["logits"])
            compiled = forward.lower(params, inputs).compile()
            calls[mode] = lambda c=compiled, p=params: c(p, inputs).block_until_ready()
            if mode == "infer":
                calls["logits"] = lambda c=compiled, p=params: np.asarray(c(p, inputs))
        calls[mode]()
        print(f"textkit {mode}: compiled and ran once in {time.perf_counter() - start:.1f}s",
              flush=True)
    return calls


def train_call(model: Encoder, params: Any, inputs: dict[str, jax.Array],
               labels: jax.Array) -> Callable[[], None]:
    """One AdamW fine-tuning step per call through ``make_train_step`` (state donated)."""

    def loss_fn(p, batch, rng):
        logits = model.apply({"params": p}, **batch["inputs"], deterministic=False,
                             rngs={"dropout": rng})["logits"]
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
        return loss.sum(), (jnp.asarray(labels.shape[0], jnp.float32), None)

    tx = optax.adamw(LEARNING_RATE)
    step = make_train_step(loss_fn, tx)
    holder = {"state": create_train_state(params, tx, jax.random.key(1))}
    batch = {"inputs": inputs, "labels": labels}

    def call() -> None:
        holder["state"], metrics = step(holder["state"], batch)
        metrics["loss"].block_until_ready()

    return call


class Peer:
    """``hf_encoder.py`` in its own process; ``start`` gives the reason (a str) instead when it
    cannot run."""

    @classmethod
    def start(cls, python: str, spec: dict[str, Any]) -> Peer | str:
        peer = cls()
        peer.process = subprocess.Popen(
            [python, str(Path(__file__).with_name("hf_encoder.py"))], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        ready = peer.ask(spec)
        if "error" in ready:
            print(f"transformers side skipped: {ready['error']}", flush=True)
            peer.process.wait()
            return str(ready["error"])
        print(f"peer: torch {ready['torch']}, transformers {ready['transformers']}, "
              f"{ready['threads']} threads", flush=True)
        peer.logits = ready.get("logits")
        return peer

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the transformers worker exited (status {self.process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.write(json.dumps({"quit": True}) + "\n")
        self.process.stdin.close()
        self.process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a 2-layer, 64-wide model, 4 x 16 tokens: checks that it runs")
    parser.add_argument("--rounds", type=int, default=9, help="alternating rounds (medians)")
    parser.add_argument("--modes", default="infer,train,infer_bf16",
                        help="comma-separated subset of infer, train, infer_bf16")
    parser.add_argument("--bfloat16", choices=["auto", "on", "off"], default="auto",
                        help="infer_bf16: auto runs it where the CPU has bf16 dots")
    parser.add_argument("--peer-python", default=sys.executable,
                        help="Python with torch + transformers for the worker process")
    parser.add_argument("--no-peer", action="store_true", help="skip the transformers side")
    args = parser.parse_args()

    machine = cpu_info()
    print(f"cpu: {machine['cpu']}; has {machine['features']}; lacks {machine['missing']}; "
          f"devices {jax.devices()}", flush=True)
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - {"infer", "train", "infer_bf16"}
    if unknown:
        parser.error(f"--modes: unknown {sorted(unknown)}")
    bf16_dots = bool({"avx512_bf16", "amx_bf16"} & set(machine["features"]))
    summary: dict[str, Any] = {"shape": QUICK if args.quick else BERT_BASE,
                               "batch": SHAPES[args.quick][0], "seq_len": SHAPES[args.quick][1],
                               "quick": args.quick}
    if "infer_bf16" in modes and (args.bfloat16 == "off"
                                  or (args.bfloat16 == "auto" and not bf16_dots)):
        modes.remove("infer_bf16")
        summary["bf16_skipped"] = ("--bfloat16 off" if args.bfloat16 == "off" else
                                   "the CPU has no bf16 dots (avx512_bf16 / amx_bf16)")
    python = None if args.no_peer else args.peer_python
    if python and not shutil.which(python):
        parser.error(f"--peer-python {python}: no such executable")
    rows, length = SHAPES[args.quick]
    units = {"infer": rows, "infer_bf16": rows, "train": rows * length}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = write_checkpoint(Path(tmp), args.quick)
        batch = batch_arrays(args.quick, (QUICK if args.quick else BERT_BASE)["vocab_size"])
        calls = textkit_calls(checkpoint, batch, modes)
        started = Peer.start(python, {
            "checkpoint": str(checkpoint), "input_ids": batch["input_ids"].tolist(),
            "labels": batch["labels"].tolist(), "modes": modes, "lr": LEARNING_RATE,
        }) if python else "--no-peer"
        peer, skipped = (None, started) if isinstance(started, str) else (started, None)
        if peer and peer.logits is not None:      # the same work: the same logits
            diff = float(np.abs(calls["logits"]() - np.asarray(peer.logits)).max())
            summary["infer_logits_max_abs_diff"] = diff
            print(f"float32 logits, textkit vs transformers: max |diff| {diff:.1e}", flush=True)
        times: dict[str, list[float]] = {}
        for round_index in range(args.rounds):
            for mode in modes:
                start = time.perf_counter()
                calls[mode]()
                times.setdefault(f"textkit_{mode}", []).append(time.perf_counter() - start)
                if peer:
                    times.setdefault(f"hf_{mode}", []).append(peer.ask({"mode": mode})["batch_s"])
            print(f"  round {round_index + 1}: " + ", ".join(
                f"{key} {values[-1] * 1000:.1f} ms" for key, values in times.items()),
                flush=True)
        if peer:
            peer.close()
    if skipped:
        summary["peer_skipped"] = skipped
    for mode in modes:
        unit = "tok_s" if mode == "train" else "sent_s"
        ours = units[mode] / statistics.median(times[f"textkit_{mode}"])
        summary[f"{mode}_{unit}"] = round(ours, 2)
        if f"hf_{mode}" in times:
            theirs = units[mode] / statistics.median(times[f"hf_{mode}"])
            summary[f"hf_{mode}_{unit}"] = round(theirs, 2)
            summary[f"{mode}_ratio"] = round(ours / theirs, 3)
            print(f"{mode}: textkit {ours:.2f} {unit}, transformers {theirs:.2f} {unit}: "
                  f"{ours / theirs:.2f}x", flush=True)
    summary["cpu"] = machine
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
