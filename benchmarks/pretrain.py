"""One masked-LM pretraining step of the BERT-base shape, textkit against transformers'
``BertForMaskedLM`` (torch, CPU), and the host masking pipeline against the step's appetite.

One random ``BertForMaskedLM`` of BERT-base's shape (12 layers x 768, 12 heads, ffn 3,072,
vocabulary 30,522) is written by textkit's ``save_pretrained``; both sides read it. The batch is
32 rows x 128 random ids ([CLS] first, [SEP] last, no padding) masked once by textkit's
``Masker`` (15 %, 80 / 10 / 10); transformers gets the same masked ids with ``labels`` -100 at
the unpicked positions. A step is the forward pass (dropout on), the loss (the mean NLL of the
picked tokens), the backward pass and AdamW (lr 1e-4, weight decay 0.01, eps 1e-8, as torch's
defaults):

- textkit: the pretraining task's loss (``tasks.pretraining_objectives.pretraining_loss``: the
  masked-LM head at the batch's 40 prediction slots per row) through
  ``training.make_train_step`` with ``optax.adamw`` (one compiled program, the state donated);
- transformers: zero_grad / forward with labels (the head at every position, the picked ones
  in the loss) / backward / ``AdamW.step`` in its own process (``hf_pretrain.py``,
  ``--peer-python``), alternating with textkit round by round.

Both compute the same loss: ``eval_loss`` and ``hf_eval_loss`` are the float32 loss without
dropout before any step (equal to about 1e-5).

Modes: ``float32``; ``bfloat16``: textkit's ``mixed_bfloat16`` policy (float32 weights,
bfloat16 compute) against torch's CPU autocast to bfloat16. The modes run one after the other:
each builds its textkit step and starts its own peer process, and both are dropped before the
next mode (with a peer holding both modes, both sides ran slower). Keys per mode: ``step_s_<mode>``,
``hf_step_s_<mode>`` and ``step_ratio_<mode>`` (transformers' median step time / textkit's:
above 1 is textkit faster), ``loss_<mode>`` (textkit's first step's).

Masking pipeline: a generated corpus packed into a ``TokenStore`` of 128-token sequences, read
back, batched (``PretrainingBatchify``) and masked (``Masker``, whole words) by
``MaskedLoader`` in this thread, no prefetch: ``masking_seq_s`` (sequences per second on one
core), ``step_seq_s`` (the float32 step's sequences per second) and ``masking_headroom``
(their ratio: above 1, the host keeps up with the step without help).

``--processes N`` runs all of the above N times, each in a fresh process, one after the other,
and reports the median of the N runs' values for every step time and the masking rate (the
ratios recomputed from them), each run's value listed under ``<key>_processes``, and
``processes``. One process keeps one speed for its whole run, and on some machines processes
differ by a quarter; rounds within one process do not average that out.

``--quick``: a 2-layer, 64-wide model, vocabulary 1,000, 4 x 16 tokens, a small corpus (checks
that the script runs). Without torch / transformers in the peer's Python (or with
``--no-peer``) the JSON line has ``peer_skipped`` instead of the ratios. The last output line
is one JSON object.

    python benchmarks/pretrain.py --peer-python /tmp/hfenv/bin/python
    python benchmarks/pretrain.py --quick --no-peer --rounds 1
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

from textkit.data import DataLoader, FixedBucketSampler, toy_lm_corpus
from textkit.data.masking import MaskedLoader, Masker, MaskingConfig
from textkit.data.pretraining_corpus import (
    PackingConfig,
    PretrainingBatchify,
    SpecialIds,
    build_pretraining_corpus,
)
from textkit.models import Encoder, EncoderConfig
from textkit.pretrained import EncoderTokenizer, load_pretrained, save_pretrained
from textkit.tasks.encoder_task import train_wordpiece
from textkit.tasks.pretraining_objectives import PretrainingModel, pretraining_loss
from textkit.training import create_train_state, make_train_step

BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_layers=12, num_heads=12,
                 intermediate_size=3072)
QUICK = dict(vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256)
SHAPES = {False: (32, 128), True: (4, 16)}
"""--quick -> (batch rows, tokens per row)."""
POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16"}
LEARNING_RATE = 1e-4
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPECIAL = SpecialIds(cls=2, sep=3, pad=0, mask=4, never_masked=(0, 1, 2, 3, 4), vocab_size=0)


def write_checkpoint(directory: Path, quick: bool) -> Path:
    """A random ``BertForMaskedLM`` of BERT-base's shape (tiny with ``quick``) written with
    textkit's ``save_pretrained``, with a WordPiece of the special tokens (ids only matter)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece

    config = EncoderConfig(architecture="bert", head="masked_lm", pad_id=0,
                           **(QUICK if quick else BERT_BASE))
    model = Encoder(config)
    params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    tokenizer = EncoderTokenizer(Tokenizer(WordPiece(vocab, unk_token="[UNK]")),
                                 pad_token="[PAD]", with_token_types=True)
    return save_pretrained(model, jax.tree_util.tree_map(np.asarray, params), tokenizer,
                           directory / "bert-base-mlm")


def masked_batch(quick: bool, vocab_size: int) -> dict[str, np.ndarray]:
    """The benchmark batch: random ids [B, T] between [CLS] and [SEP], masked once."""
    rows, length = SHAPES[quick]
    ids = np.random.default_rng(0).integers(5, vocab_size, size=(rows, length), dtype=np.int32)
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    masker = Masker(MaskingConfig(), mask_id=SPECIAL.mask, vocab_size=vocab_size,
                    never_masked=SPECIAL.never_masked)
    batch = masker({"input_ids": ids}, np.random.default_rng(1))
    return {**batch, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def textkit_steps(checkpoint: Path, batch: dict[str, np.ndarray],
                  modes: list[str]) -> tuple[dict[str, Callable[[], float]], dict[str, float]]:
    """One compiled training step per mode (each run once, compile time printed) and the
    first step's loss per mode, with ``eval_loss``: the float32 loss without dropout."""
    device_batch = {k: jnp.asarray(v) for k, v in batch.items()}
    calls, losses = {}, {}
    for mode in modes:
        pretrained = load_pretrained(checkpoint, policy=POLICIES[mode])
        model = PretrainingModel(pretrained.model)
        tx = optax.adamw(LEARNING_RATE, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01)
        step = make_train_step(pretraining_loss(model), tx)
        params = {"encoder": jax.device_put(pretrained.params)}
        if mode == "float32":
            total, (count, _) = jax.jit(pretraining_loss(model))(params, device_batch, None)
            losses["eval_loss"] = float(total / count)
        holder = {"state": create_train_state(params, tx, jax.random.key(1))}

        def call(step=step, holder=holder) -> float:
            holder["state"], metrics = step(holder["state"], device_batch)
            return float(metrics["loss"])

        start = time.perf_counter()
        losses[mode] = call()
        calls[mode] = call
        print(f"textkit {mode}: compiled and ran once in {time.perf_counter() - start:.1f}s",
              flush=True)
    return calls, losses


def masking_throughput(quick: bool, directory: Path) -> float:
    """Sequences per second of the host pipeline (store -> batches -> masks) in this thread."""
    rows, length = SHAPES[quick]
    sentences = toy_lm_corpus("train", 2000 if quick else 40000)
    documents = [sentences[i:i + 8] for i in range(0, len(sentences), 8)]
    tokenizer = train_wordpiece(sentences, 2000, "bert")
    corpus = build_pretraining_corpus(
        directory / "store", lambda: iter(documents), tokenizer.tokenizer,
        PackingConfig(length), vocab_size=len(tokenizer), key="benchmark")
    special = SpecialIds(
        tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]"), tokenizer.pad_id,
        tokenizer.token_to_id("[MASK]"), tuple(range(5)), len(tokenizer))
    sampler = FixedBucketSampler(np.full(len(corpus), length), rows, num_buckets=1,
                                 round_to=None, shuffle=True)
    loader = MaskedLoader(
        DataLoader(corpus.store, sampler, PretrainingBatchify(
            special, length, with_token_types=True, pairs=False)),
        Masker(MaskingConfig(whole_word=True), mask_id=special.mask,
               vocab_size=len(tokenizer), never_masked=special.never_masked), seed=0)
    start = time.perf_counter()
    count = sum(len(batch["input_ids"]) for batch in loader)
    return count / (time.perf_counter() - start)


class Peer:
    """``hf_pretrain.py`` in its own process; ``start`` gives the reason (a str) instead when
    it cannot run."""

    @classmethod
    def start(cls, python: str, spec: dict[str, Any]) -> Peer | str:
        peer = cls()
        peer.process = subprocess.Popen(
            [python, str(Path(__file__).with_name("hf_pretrain.py"))], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        ready = peer.ask(spec)
        if "error" in ready:
            print(f"transformers side skipped: {ready['error']}", flush=True)
            peer.process.wait()
            return str(ready["error"])
        print(f"peer: torch {ready['torch']}, transformers {ready['transformers']}, "
              f"{ready['threads']} threads", flush=True)
        peer.eval_loss = ready["eval_loss"]
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


def run_rounds(calls: dict[str, Callable[[], float]], peer: Peer | None,
               rounds: int) -> dict[str, list[float]]:
    """Step seconds per side and mode, the sides alternating round by round."""
    times: dict[str, list[float]] = {}
    for round_index in range(rounds):
        for mode, call in calls.items():
            start = time.perf_counter()
            call()
            times.setdefault(f"step_s_{mode}", []).append(time.perf_counter() - start)
            if peer:
                times.setdefault(f"hf_step_s_{mode}", []).append(
                    peer.ask({"mode": mode})["step_s"])
        print(f"  round {round_index + 1}: " + ", ".join(
            f"{key} {values[-1] * 1000:.1f} ms" for key, values in times.items()), flush=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a 2-layer, 64-wide model, 4 x 16 tokens: checks that it runs")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (medians)")
    parser.add_argument("--modes", default="float32,bfloat16",
                        help="comma-separated subset of float32, bfloat16")
    parser.add_argument("--peer-python", default=sys.executable,
                        help="Python with torch + transformers for the worker process")
    parser.add_argument("--no-peer", action="store_true", help="skip the transformers side")
    parser.add_argument("--processes", type=int, default=1,
                        help="run everything in this many fresh processes, one after the "
                             "other, and report the medians of their medians")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(POLICIES) or not modes:
        parser.error(f"--modes: expected a subset of {list(POLICIES)}, got {args.modes!r}")
    python = None if args.no_peer else args.peer_python
    if python and not shutil.which(python):
        parser.error(f"--peer-python {python}: no such executable")
    if args.processes < 1:
        parser.error(f"--processes: expected at least 1, got {args.processes}")
    if args.processes > 1:
        print(json.dumps(across_processes(sys.argv[1:], args.processes, modes)))
        return
    machine = cpu_info()
    print(f"cpu: {machine['cpu']}; has {machine['features']}; devices {jax.devices()}",
          flush=True)
    shape = QUICK if args.quick else BERT_BASE
    rows, length = SHAPES[args.quick]
    summary: dict[str, Any] = {"shape": shape, "batch": rows, "seq_len": length,
                               "quick": args.quick}
    with tempfile.TemporaryDirectory() as tmp:
        summary["masking_seq_s"] = round(masking_throughput(args.quick, Path(tmp)), 1)
        checkpoint = write_checkpoint(Path(tmp), args.quick)
        batch = masked_batch(args.quick, shape["vocab_size"])
        picked = np.zeros(batch["targets"].shape, bool)
        np.put_along_axis(picked, batch["mlm_positions"], batch["mlm_weights"] > 0, axis=1)
        labels = np.where(picked, batch["targets"], -100)
        losses: dict[str, float] = {}
        times: dict[str, list[float]] = {}
        for mode in modes:   # one mode at a time: a process holding both slowed both sides
            calls, mode_losses = textkit_steps(checkpoint, batch, [mode])
            losses.update(mode_losses)
            started = Peer.start(python, {
                "checkpoint": str(checkpoint), "input_ids": batch["input_ids"].tolist(),
                "labels": labels.tolist(), "modes": [mode], "lr": LEARNING_RATE,
            }) if python else "--no-peer"
            peer = None if isinstance(started, str) else started
            times.update(run_rounds(calls, peer, args.rounds))
            del calls
            if peer:
                peer.close()
                summary["hf_eval_loss"] = peer.eval_loss
            else:
                summary["peer_skipped"] = started
    if "eval_loss" in losses:
        summary["eval_loss"] = losses["eval_loss"]
    for mode in modes:
        summary[f"loss_{mode}"] = round(losses[mode], 4)
        for key in (f"step_s_{mode}", f"hf_step_s_{mode}"):
            if key in times:
                summary[key] = round(statistics.median(times[key]), 4)
    add_ratios(summary, modes)
    summary["cpu"] = machine
    print(json.dumps(summary))


def add_ratios(summary: dict[str, Any], modes: list[str]) -> None:
    """``step_ratio_<mode>`` (with the peer), ``step_seq_s`` and ``masking_headroom`` (with
    float32) from the summary's step seconds and masking rate."""
    for mode in modes:
        if f"hf_step_s_{mode}" in summary:
            summary[f"step_ratio_{mode}"] = round(
                summary[f"hf_step_s_{mode}"] / summary[f"step_s_{mode}"], 3)
    if "float32" in modes:
        summary["step_seq_s"] = round(summary["batch"] / summary["step_s_float32"], 2)
        summary["masking_headroom"] = round(summary["masking_seq_s"] / summary["step_seq_s"], 1)


def across_processes(argv: list[str], count: int, modes: list[str]) -> dict[str, Any]:
    """This benchmark run ``count`` times, each in a fresh process, one after the other (a
    process keeps one speed for its whole run, and processes differ): every step time and the
    masking rate is the median of the runs' values, listed per run under ``<key>_processes``,
    and the ratios are recomputed from those medians."""
    runs = []
    for index in range(count):
        print(f"process {index + 1} of {count}", flush=True)
        child = subprocess.Popen([sys.executable, __file__, *argv, "--processes", "1"],
                                 stdout=subprocess.PIPE, text=True)
        last = ""
        for line in child.stdout:
            print(line, end="", flush=True)
            last = line if line.strip() else last
        if child.wait():
            raise SystemExit(f"process {index + 1} of {count} exited with status "
                             f"{child.returncode}")
        runs.append(json.loads(last))
    summary = {**runs[0], "processes": count}
    timed = [k for k in summary if k.startswith(("step_s_", "hf_step_s_"))] + ["masking_seq_s"]
    for key in timed:
        values = [run[key] for run in runs]
        summary[key] = round(statistics.median(values), 4)
        summary[f"{key}_processes"] = values
    add_ratios(summary, modes)
    return summary


if __name__ == "__main__":
    main()
