"""AdamW's update of BERT-mini's 11.2 M parameters as XLA:CPU compiles it: optax's chain
against the same update written as one function per parameter (one pass over parameters,
gradients and moments), each jitted with the parameters and moments donated, as
``make_train_step``'s update program is.

- ``recipe``: the fine-tuning recipes' optimizer (``textkit.tasks.encoder_task.adamw``:
  clipping to norm 1, AdamW with no decay on biases and norms, warm-up and linear decay);
- ``optax``: ``clip_by_global_norm(1.0)`` then ``optax.adamw`` at a constant rate;
- ``one_pass``: the ``optax`` update in one ``tree_map`` that returns the new parameter and
  both moments of each leaf together (the global norm is computed first: it needs every
  gradient).

The one-pass form is checked against ``optax`` after three steps (``max_abs_diff``).
``fusions_<variant>`` counts the fusions of each compiled program over the word-embedding
table (the largest leaf): how many passes XLA makes over it. Timings are medians of
``--runs`` calls, the variants taking turns call by call. The last output line is one JSON object.

    python benchmarks/adamw_update.py
    python benchmarks/adamw_update.py --quick --runs 3     # checks that it runs
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from cpu_info import cpu_info
from train_step import time_interleaved

from textkit.models import Encoder, EncoderConfig
from textkit.tasks.encoder_task import adamw
from textkit.training.optim import clip_by_global_norm

LEARNING_RATE, BETA1, BETA2, EPS, DECAY = 2e-4, 0.9, 0.999, 1e-6, 0.01
BERT_MINI = dict(vocab_size=30522, hidden_size=256, num_layers=4, num_heads=4,
                 intermediate_size=1024)
QUICK = dict(vocab_size=1000, hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128)


def one_pass_adamw(params: Any, grads: Any, mu: Any, nu: Any, count: jax.Array) -> tuple:
    """``optax``'s variant (clipping, AdamW) as one function per leaf: ``(params, mu, nu,
    count)`` after the step."""
    norm = optax.global_norm(grads)
    clip = jnp.minimum(1.0, 1.0 / norm)              # textkit.training.clip_by_global_norm
    count = count + 1
    first = 1 - BETA1 ** count.astype(jnp.float32)
    second = 1 - BETA2 ** count.astype(jnp.float32)

    def leaf(p, g, m, v):
        g = g * clip
        m = BETA1 * m + (1 - BETA1) * g
        v = BETA2 * v + (1 - BETA2) * g * g
        step = (m / first) / (jnp.sqrt(v / second) + EPS) + DECAY * p
        return p - LEARNING_RATE * step, m, v

    out = jax.tree_util.tree_map(leaf, params, grads, mu, nu)
    pick = [jax.tree_util.tree_map(lambda t, i=i: t[i], out,
                                   is_leaf=lambda t: isinstance(t, tuple)) for i in range(3)]
    return (*pick, count)


def chain_update(tx: optax.GradientTransformation) -> Callable:
    """``(params, opt_state, grads) -> (params, opt_state)`` through ``tx``, donated."""

    def update(params, opt_state, grads):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return jax.jit(update, donate_argnums=(0, 1))


def embedding_fusions(hlo: str, shape: tuple[int, ...]) -> int:
    """Fusions in the program's entry whose result has ``shape`` (passes over that leaf)."""
    dims = ",".join(map(str, shape))
    return len(re.findall(rf"= f32\[{dims}\]\{{[\d,]*\}} fusion\(", hlo))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="a 2 x 64 model (a smoke run)")
    args = parser.parse_args()
    sizes = QUICK if args.quick else BERT_MINI
    config = EncoderConfig(architecture="bert", head="sequence_classification", num_labels=2,
                           pad_id=0, **sizes)
    params = jax.jit(Encoder(config).init)(jax.random.key(0),
                                           jnp.zeros((1, 8), jnp.int32))["params"]
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    grads = tree.unflatten([1e-3 * jax.random.normal(k, x.shape, x.dtype)
                            for k, x in zip(keys, leaves)])
    table = (sizes["vocab_size"], sizes["hidden_size"])
    fresh = lambda: jax.tree_util.tree_map(jnp.copy, params)  # noqa: E731 (donated each time)

    recipe_tx, _ = adamw(params, learning_rate=LEARNING_RATE, total_steps=2000, warmup=0.1,
                         weight_decay=DECAY, num_layers=sizes["num_layers"])
    optax_tx = optax.chain(clip_by_global_norm(1.0),
                           optax.adamw(LEARNING_RATE, BETA1, BETA2, EPS, weight_decay=DECAY))
    results: dict[str, Any] = {}
    calls: dict[str, Callable[[], None]] = {}
    for name, tx in (("recipe", recipe_tx), ("optax", optax_tx)):
        update = chain_update(tx)
        start = fresh()
        state = [start, tx.init(start)]
        results[f"fusions_{name}"] = embedding_fusions(
            update.lower(state[0], state[1], grads).compile().as_text(), table)

        def call(update=update, state=state):
            state[0], state[1] = update(state[0], state[1], grads)
            jax.block_until_ready(state[0])

        calls[name] = call
    fused = jax.jit(one_pass_adamw, donate_argnums=(0, 2, 3))
    zeros = lambda: jax.tree_util.tree_map(jnp.zeros_like, params)  # noqa: E731
    one_pass_start = lambda: [fresh(), zeros(), zeros(), jnp.zeros([], jnp.int32)]  # noqa: E731
    mine = one_pass_start()
    results["fusions_one_pass"] = embedding_fusions(
        fused.lower(mine[0], grads, mine[1], mine[2], mine[3]).compile().as_text(), table)

    def call_fused():
        mine[0], mine[1], mine[2], mine[3] = fused(mine[0], grads, mine[1], mine[2], mine[3])
        jax.block_until_ready(mine[0])

    calls["one_pass"] = call_fused
    for call in calls.values():
        call()                                                  # compiled and run once first
    seconds = time_interleaved(calls, args.runs)                # medians, taking turns
    results.update({f"{name}_ms": round(1e3 * s, 3) for name, s in seconds.items()})
    check_optax, check_opt = fresh(), optax_tx.init(params)
    check_mine = one_pass_start()
    reference = chain_update(optax_tx)
    for _ in range(3):
        check_optax, check_opt = reference(check_optax, check_opt, grads)
        check_mine = list(fused(check_mine[0], grads, check_mine[1], check_mine[2],
                                check_mine[3]))
    diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(
        jax.tree_util.tree_leaves(check_optax), jax.tree_util.tree_leaves(check_mine[0])))
    results["max_abs_diff"] = diff
    results["one_pass_ratio"] = round(results["optax_ms"] / results["one_pass_ms"], 3)
    count = sum(x.size for x in leaves)
    print(f"{count:,} parameters; recipe {results['recipe_ms']:.2f} ms, optax "
          f"{results['optax_ms']:.2f} ms, one pass {results['one_pass_ms']:.2f} ms; passes over "
          f"the embedding table: {results['fusions_recipe']} / {results['fusions_optax']} / "
          f"{results['fusions_one_pass']}; one pass vs optax max |diff| {diff:.2e}", flush=True)
    print(json.dumps({"params": count, "quick": args.quick, "runs": args.runs, **results,
                      "cpu": cpu_info()}))


if __name__ == "__main__":
    main()
