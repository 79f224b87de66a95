"""Where int8 weight values multiply faster: held as int8 (an int8 x int8 -> int32 dot) or as
bfloat16 (a bfloat16 x bfloat16 -> float32 dot of the same values), by number of input rows.

Times ``textkit.models.kernels.int8_matmul`` for both carriers on the products of a decoding
step of OPUS-MT en-de's shape: the logits product ([rows, 512] x the [58,101, 512] table, as
columns) and the feed-forward products ([rows, 512] x [512, 2048], [rows, 2048] x [2048, 512]),
for each row count of ``--rows`` (a decoding step's rows are sentences x beams). The carriers
alternate call by call; figures are medians of ``--calls`` calls in milliseconds. Both carriers
give the same numbers (checked on every shape). ``crossover_rows`` is the smallest row count
from which bfloat16 is faster on the logits product and on every larger row count measured
(None: never); ``textkit.models.kernels.BF16_CARRIER_MIN_ROWS`` is the rule the decoder uses.

Keys: ``<product>_<rows>_int8_ms``, ``<product>_<rows>_bf16_ms``, ``<product>_<rows>_ratio``
(int8 ms / bfloat16 ms: above 1 bfloat16 is faster), ``crossover_rows``,
``bf16_carrier_min_rows``, ``has_bf16_dots``, ``cpu``. The last output line is one JSON object.

    python benchmarks/int8_dot.py
    python benchmarks/int8_dot.py --quick
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from cpu_info import cpu_info

from textkit.models.kernels import (
    BF16_CARRIER_MIN_ROWS,
    has_bf16_dots,
    int8_matmul,
    symmetric_int8,
)

PRODUCTS = {   # name: (input features, output features, weight stored transposed)
    "logits": (512, 58101, True),
    "ffn_in": (512, 2048, False),
    "ffn_out": (2048, 512, False),
}


def carriers(weight: np.ndarray, transposed: bool) -> tuple[dict[str, jax.Array], jax.Array]:
    """({"int8": values, "bf16": the same values as bfloat16}, float32 scale [outputs])."""
    values, scale = symmetric_int8(jnp.asarray(weight), axis=1 if transposed else 0)
    return {"int8": values, "bf16": values.astype(jnp.bfloat16)}, scale.reshape(-1)


def time_product(name: str, rows: int, calls: int, rng: np.random.Generator,
                 scale_down: int) -> dict[str, float]:
    inputs, outputs, transposed = PRODUCTS[name]
    outputs //= scale_down
    shape = (outputs, inputs) if transposed else (inputs, outputs)
    weights, scale = carriers(rng.normal(size=shape).astype(np.float32), transposed)
    x = jnp.asarray(rng.normal(size=(rows, inputs)), jnp.float32)
    product = jax.jit(lambda a, w, s: int8_matmul(a, w, s, transposed=transposed,
                                                  columns=transposed))
    results = {key: np.asarray(product(x, w, scale)) for key, w in weights.items()}
    if not np.array_equal(results["int8"], results["bf16"]):
        raise RuntimeError(f"{name} with {rows} rows: the carriers' results differ")
    times: dict[str, list[float]] = {key: [] for key in weights}
    for _ in range(calls):
        for key, w in weights.items():
            start = time.perf_counter()
            product(x, w, scale).block_until_ready()
            times[key].append(time.perf_counter() - start)
    int8_ms, bf16_ms = (1e3 * statistics.median(times[key]) for key in ("int8", "bf16"))
    prefix = f"{name}_{rows}"
    return {f"{prefix}_int8_ms": round(int8_ms, 3), f"{prefix}_bf16_ms": round(bf16_ms, 3),
            f"{prefix}_ratio": round(int8_ms / bf16_ms, 3)}


def crossover(summary: dict[str, float], rows: list[int]) -> int | None:
    """Smallest row count from which every logits ratio is above 1."""
    found = None
    for count in reversed(sorted(rows)):
        if summary[f"logits_{count}_ratio"] <= 1.0:
            break
        found = count
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,4,16,32,48,64,128,256",
                        help="row counts, comma-separated")
    parser.add_argument("--calls", type=int, default=21, help="timed calls per carrier")
    parser.add_argument("--quick", action="store_true",
                        help="outputs a sixteenth of the size, 3 calls: checks that it runs")
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    calls, scale_down = (3, 16) if args.quick else (args.calls, 1)
    machine = cpu_info()
    print(f"cpu: {machine['cpu']}; has {machine['features']}", flush=True)
    rng = np.random.default_rng(0)
    summary: dict[str, object] = {}
    for name in PRODUCTS:
        for count in rows:
            figures = time_product(name, count, calls, rng, scale_down)
            summary.update(figures)
            print(f"{name:8s} rows {count:4d}: int8 {figures[f'{name}_{count}_int8_ms']:8.3f} ms"
                  f"  bfloat16 {figures[f'{name}_{count}_bf16_ms']:8.3f} ms"
                  f"  ratio {figures[f'{name}_{count}_ratio']:.2f}", flush=True)
    summary.update(crossover_rows=crossover(summary, rows),
                   bf16_carrier_min_rows=BF16_CARRIER_MIN_ROWS, has_bf16_dots=has_bf16_dots(),
                   quick=args.quick, cpu=machine)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
