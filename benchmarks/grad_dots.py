"""The three matrix products of one dense layer's training step on XLA:CPU, float32 against
bfloat16 operands, and which of them XLA gives to its fast dot library (YNNPACK).

One layer of the BERT-base feed-forward shape: x [rows, d_in] times w [d_in, d_out] (default
4,096 x 768 -> 3,072). Products, each one ``jax.jit`` program timed alone (median of
``--runs``):
- ``forward``: ``za,ab->zb`` (y = x w);
- ``input_grad``: ``zb,ab->za`` (dx = g wᵀ);
- ``weight_grad``: ``za,zb->ab`` (dw = xᵀ g: contracts the rows of both operands);
- ``weight_grad_transposed``: the same with xᵀ materialised behind
  ``jax.lax.optimization_barrier``, so the product is [d_in, rows] x [rows, d_out];
- ``weight_grad_flat_transposed``: xᵀ flattened behind the barrier, reshaped after it.
For each product and dtype: ``<product>_<dtype>_ms``, ``<product>_<dtype>_gflops``, and from
the optimized HLO ``<product>_<dtype>_ynn`` (a YNNPACK fusion holds the dot) and
``<product>_<dtype>_float32_operands`` (the bfloat16 operands were converted to float32 before
the dot). The last output line is one JSON object (with ``cpu``).

    python benchmarks/grad_dots.py
    python benchmarks/grad_dots.py --quick --runs 2      # checks that it runs
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from cpu_info import cpu_info


def product(spec: str) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """The float32-result einsum ``spec`` of two operands."""
    return lambda a, b: jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)


def weight_grad_transposed(x: jax.Array, g: jax.Array) -> jax.Array:
    """dw [d_in, d_out] from xᵀ [d_in, rows] materialised behind a barrier and g [rows, d_out]."""
    return product("az,zb->ab")(jax.lax.optimization_barrier(x.T), g)


def weight_grad_flat_transposed(x: jax.Array, g: jax.Array) -> jax.Array:
    """The same with xᵀ flattened behind the barrier and reshaped back after it: the copy
    then gets the row-major layout that YNNPACK's dot takes."""
    flat = jax.lax.optimization_barrier(x.T.reshape(-1))                     # [d_in * rows]
    return product("az,zb->ab")(flat.reshape(x.shape[1], x.shape[0]), g)


PRODUCTS = {
    "forward": (product("za,ab->zb"), ("x", "w")),
    "input_grad": (product("zb,ab->za"), ("g", "w")),
    "weight_grad": (product("za,zb->ab"), ("x", "g")),
    "weight_grad_transposed": (weight_grad_transposed, ("x", "g")),
    "weight_grad_flat_transposed": (weight_grad_flat_transposed, ("x", "g")),
}
"""name -> (function, its operands' names)."""


def float32_operands(hlo: str, shapes: list[tuple[int, ...]]) -> bool:
    """Whether the optimized HLO makes a float32 copy of an operand of one of ``shapes``
    (in either order of its two axes)."""
    names = {f"f32[{a},{b}]" for a, b in shapes} | {f"f32[{b},{a}]" for a, b in shapes}
    return any(re.search(re.escape(name) + r"\{[0-9,]+\} fusion\(", hlo) for name in names)


def time_call(call: Callable[[], jax.Array], runs: int) -> float:
    """Median seconds of ``call`` (compiled and run once first)."""
    jax.block_until_ready(call())
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--d-in", type=int, default=768)
    parser.add_argument("--d-out", type=int, default=3072)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="64 x 32 -> 48: checks that it runs")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.d_in, args.d_out = 64, 32, 48
    machine = cpu_info()
    print(f"cpu: {machine['cpu']}; has {machine['features']}", flush=True)
    rng = np.random.default_rng(0)
    shapes = {"x": (args.rows, args.d_in), "w": (args.d_in, args.d_out),
              "g": (args.rows, args.d_out)}
    result: dict = {"rows": args.rows, "d_in": args.d_in, "d_out": args.d_out,
                    "quick": args.quick}
    flops = 2 * args.rows * args.d_in * args.d_out
    for dtype_name, dtype in (("float32", jnp.float32), ("bfloat16", jnp.bfloat16)):
        arrays = {k: jnp.asarray(rng.standard_normal(shape), dtype) for k, shape in shapes.items()}
        for name, (function, operands) in PRODUCTS.items():
            inputs = [arrays[k] for k in operands]
            compiled = jax.jit(function).lower(*inputs).compile()
            hlo = compiled.as_text()
            seconds = time_call(lambda compiled=compiled, inputs=inputs: compiled(*inputs),
                                args.runs)
            key = f"{name}_{dtype_name}"
            result[f"{key}_ms"] = round(seconds * 1e3, 3)
            result[f"{key}_gflops"] = float(f"{flops / seconds / 1e9:.3g}")   # tiny quick runs too
            result[f"{key}_ynn"] = "__ynn_fusion" in hlo
            result[f"{key}_float32_operands"] = (
                dtype_name == "bfloat16" and float32_operands(hlo, [shapes[k] for k in operands]))
            print(f"{key}: {seconds * 1e3:.1f} ms, {flops / seconds / 1e9:.0f} GFLOP/s, "
                  f"YNNPACK {result[f'{key}_ynn']}, float32 operands "
                  f"{result[f'{key}_float32_operands']}", flush=True)
    result["cpu"] = machine
    print(json.dumps(result))


if __name__ == "__main__":
    main()
