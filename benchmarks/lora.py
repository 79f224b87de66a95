"""LoRA fine-tuning: step time and peak host memory, textkit against peft + transformers.

A random-weight model in SmolLM2-135M's configuration (``lm_peers.SHAPES["smollm2"]``) trains
on 8 sequences of 256 random tokens with AdamW: LoRA r = 8 (alpha 16) on the attention
projections (``q_proj,k_proj,v_proj,o_proj``) and on every linear layer (and ``gate_proj,
up_proj,down_proj``; ``all_int8``: the same over an int8 base, ``--quantize-base int8``'s
``kernels.quantize_int8``), and textkit's full fine-tuning of the same model for the memory
baseline.
Each case runs in a fresh process (its peak RSS is the process's VmHWM), warms up for two steps
(compilation excluded) and reports the median of ``--steps`` timed steps. The peer is
``benchmarks/hf_lora.py`` (peft's ``get_peft_model`` over transformers' ``LlamaForCausalLM``,
``torch.optim.AdamW`` on the trainable parameters; under ``--precision mixed_bfloat16`` a
CPU bfloat16 autocast) run by ``--peer-python`` (torch 2.13.0, transformers, peft 0.21.2).

    python benchmarks/lora.py --peer-python /tmp/hfenv/bin/python
    python benchmarks/lora.py --peer-python /tmp/hfenv/bin/python --precision mixed_bfloat16
    python benchmarks/lora.py --quick --no-peer          # a smoke run of seconds

The last line is one JSON object: ``textkit_<case>_step_s`` / ``_peak_mib`` / ``_state_mib``
(the train state's bytes: params, frozen base, optimizer state) for ``attention``, ``all``,
``all_int8`` and ``full``; ``int8_state_ratio`` (``all_int8`` over ``all`` state);
``peer_<case>_step_s`` / ``_peak_mib``; ``step_ratio_<case>`` (peer / textkit step time,
> 1: textkit faster); ``memory_ratio`` (textkit's LoRA on every linear
layer over its full fine-tuning, peak host memory); ``textkit_<case>_steps_peak_mib`` and
``steps_memory_ratio``: the same over the timed steps alone (the peak restarted after the
warm-up, so XLA's compilation is left out); ``trained_<case>`` parameter counts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from lm_peers import SHAPES  # noqa: E402

TARGETS = {"attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
           "all": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
TARGETS["all_int8"] = TARGETS["all"]
CASES = ("attention", "all", "all_int8", "full")
QUICK = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512}


def spec_of(args: argparse.Namespace) -> dict:
    """The shared settings of every case (model config, batch, steps, rank)."""
    config = {**SHAPES["smollm2"], **(QUICK if args.quick else {})}
    return {"config": config, "batch": 2 if args.quick else 8,
            "length": 32 if args.quick else 256, "steps": args.steps, "rank": 8, "alpha": 16,
            "precision": args.precision, "seed": 0}


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise OSError("no VmHWM in /proc/self/status (Linux only)")


def reset_peak_rss() -> bool:
    """Restart this process's VmHWM from its current RSS (Linux ``clear_refs`` 5); False where
    the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def textkit_case(spec: dict, case: str) -> dict:
    """One case in this process: median step seconds, peak RSS, trained parameters."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from textkit.adapters import Lora, LoraConfig, lora_on_activations
    from textkit.models.decoder_lm import DecoderLM
    from textkit.models.kernels import quantize_int8
    from textkit.precision import Policy
    from textkit.pretrained.decoders import decoder_config
    from textkit.pretrained.lora_sites import lora_sites
    from textkit.training import create_train_state, make_train_step

    config = decoder_config({**spec["config"], "architectures": ["LlamaForCausalLM"]},
                            policy=Policy.parse(spec["precision"]))
    model = DecoderLM(config)
    rng = np.random.default_rng(spec["seed"])
    tokens = rng.integers(1, config.vocab_size, (spec["batch"], spec["length"] + 1))
    batch = {"tokens": tokens.astype(np.int32)}
    params = jax.jit(lambda key: model.init(key, jnp.zeros((1, 8), jnp.int32))["params"])(
        jax.random.PRNGKey(0))

    def loss(p, b, key):
        logits = model.apply({"params": p}, b["tokens"][:, :-1])
        nll = -jnp.take_along_axis(jax.nn.log_softmax(logits.astype(jnp.float32)),
                                   b["tokens"][:, 1:, None], -1)[..., 0]
        return nll.sum(), (jnp.float32(nll.size), {})

    tx = optax.adamw(1e-4)
    if case == "full":
        state = create_train_state(params, tx, jax.random.PRNGKey(1))
        step = make_train_step(loss, tx)
    else:
        lora = Lora.select(LoraConfig(rank=spec["rank"], alpha=spec["alpha"],
                                      targets=tuple(TARGETS[case])), lora_sites(model, params))

        def lora_loss(p, b, key):
            weights, frozen = p
            with lora_on_activations(lora, weights, key):
                return loss(frozen, b, key)

        frozen = quantize_int8(model, params, jnp.zeros((1, 8), jnp.int32)) \
            if case == "all_int8" else params
        state = create_train_state(lora.init(jax.random.PRNGKey(2)), tx, jax.random.PRNGKey(1),
                                   frozen=frozen)
        del frozen
        step = make_train_step(lora_loss, tx)
    del params
    times, warm_peak, restarted = [], 0.0, False
    for i in range(2 + spec["steps"]):
        if i == 2:           # compiled and run twice: the peak so far includes compilation
            warm_peak, restarted = peak_rss_mib(), reset_peak_rss()
        start = time.perf_counter()
        state, metrics = step(state, batch)
        jax.block_until_ready(metrics["loss"])
        if i >= 2:
            times.append(time.perf_counter() - start)
    trained = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
    held = sum(x.nbytes for x in jax.tree_util.tree_leaves(state)) / 2 ** 20
    return {"step_s": statistics.median(times),
            "peak_mib": round(max(warm_peak, peak_rss_mib()), 1),
            "steps_peak_mib": round(peak_rss_mib(), 1) if restarted else None,
            "state_mib": round(held, 1), "trained": int(trained),
            "loss": float(metrics["loss"])}


def run_case(command: list[str], spec: dict) -> dict:
    """A case in its own process: the last JSON line it prints."""
    done = subprocess.run(command, input=json.dumps(spec), capture_output=True, text=True,
                          check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n"
                           f"{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer-python", help="a Python with torch, transformers and peft")
    p.add_argument("--no-peer", action="store_true", help="time textkit only")
    p.add_argument("--precision", default="float32", choices=("float32", "mixed_bfloat16"))
    p.add_argument("--steps", type=int, default=5, help="timed steps per case (median)")
    p.add_argument("--quick", action="store_true", help="a tiny model: a smoke run")
    p.add_argument("--case", help=argparse.SUPPRESS)        # a worker: one textkit case
    args = p.parse_args()
    if args.case:
        print(json.dumps(textkit_case(json.loads(sys.stdin.read()), args.case)), flush=True)
        return
    if not args.no_peer and not args.peer_python:
        p.error("give --peer-python PYTHON (torch, transformers, peft) or --no-peer")
    spec = spec_of(args)
    result: dict = {"precision": args.precision, "quick": args.quick, "rank": spec["rank"],
                    "batch": spec["batch"], "length": spec["length"]}
    env_python = [sys.executable, str(Path(__file__).resolve())]
    for case in CASES:
        found = run_case([*env_python, "--case", case], spec)
        result.update({f"textkit_{case}_step_s": round(found["step_s"], 4),
                       f"textkit_{case}_peak_mib": found["peak_mib"],
                       f"textkit_{case}_steps_peak_mib": found["steps_peak_mib"],
                       f"textkit_{case}_state_mib": found["state_mib"],
                       f"trained_{case}": found["trained"]})
        print(json.dumps({"textkit": case, **found}), flush=True)
    result["memory_ratio"] = round(result["textkit_all_peak_mib"]
                                   / result["textkit_full_peak_mib"], 3)
    if result["textkit_full_steps_peak_mib"]:
        result["steps_memory_ratio"] = round(result["textkit_all_steps_peak_mib"]
                                             / result["textkit_full_steps_peak_mib"], 3)
    result["int8_state_ratio"] = round(result["textkit_all_int8_state_mib"]
                                       / result["textkit_all_state_mib"], 3)
    if args.no_peer:
        result["peer_skipped"] = "--no-peer"
    else:
        for case in ("attention", "all"):
            found = run_case([args.peer_python, str(HERE / "hf_lora.py")],
                             {**spec, "targets": TARGETS[case]})
            result.update({f"peer_{case}_step_s": round(found["step_s"], 4),
                           f"peer_{case}_peak_mib": found["peak_mib"],
                           f"step_ratio_{case}": round(found["step_s"]
                                                       / result[f"textkit_{case}_step_s"], 3)})
            result["peer_versions"] = found["versions"]
            print(json.dumps({"peer": case, **found}), flush=True)
    result["threads"] = os.cpu_count()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
