"""Where int8 weight values multiply faster: held as int8 (an int8 x int8 -> int32 dot), as
bfloat16 (a bfloat16 x bfloat16 -> float32 dot of the same values) or in the uint8 carrier (the
input shifted into unsigned bytes times the int8 values: the VNNI product of
``textkit.models.vnni``), by number of input rows.

Times ``textkit.models.kernels.int8_matmul`` for both carriers on the products of a decoding
step of OPUS-MT en-de's shape: the logits product ([rows, 512] x the [58,101, 512] table, as
columns) and the feed-forward products ([rows, 512] x [512, 2048], [rows, 2048] x [2048, 512]),
for each row count of ``--rows`` (a decoding step's rows are sentences x beams). The carriers
alternate call by call; figures are medians of ``--calls`` calls in milliseconds. The carriers
give the same numbers (checked on every shape). ``crossover_rows`` is the smallest row count
from which bfloat16 is faster on the logits product and on every larger row count measured
(None: never); ``vnni_crossover_rows`` the same for the uint8 carrier against the faster of the
other two. ``textkit.models.kernels.BF16_CARRIER_MIN_ROWS`` and ``VNNI_CARRIER_MIN_ROWS`` are the
rules the decoder uses. The uint8 carrier is timed only on a CPU with VNNI (``has_vnni``).

Keys: ``<product>_<rows>_int8_ms``, ``<product>_<rows>_bf16_ms``, ``<product>_<rows>_ratio``
(int8 ms / bfloat16 ms: above 1 bfloat16 is faster), with VNNI ``<product>_<rows>_vnni_ms`` and
``<product>_<rows>_vnni_ratio`` (the faster other carrier's ms / the uint8 carrier's),
``crossover_rows``, ``vnni_crossover_rows``, ``bf16_carrier_min_rows``,
``vnni_carrier_min_rows``, ``has_bf16_dots``, ``has_vnni``, ``cpu``. The last output line is one
JSON object.

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
    VNNI_CARRIER_MIN_ROWS,
    has_bf16_dots,
    has_vnni,
    int8_matmul,
    symmetric_int8,
)

PRODUCTS = {   # name: (input features, output features, weight stored transposed)
    "logits": (512, 58101, True),
    "ffn_in": (512, 2048, False),
    "ffn_out": (2048, 512, False),
}


def carriers(weight: np.ndarray, transposed: bool) -> tuple[dict[str, tuple], jax.Array]:
    """({carrier: (weight values, column sums or None)}: "int8", "bf16" (the same values as
    bfloat16) and, on a CPU with VNNI, "vnni" (int8 values and their sums), float32 scale
    [outputs])."""
    axis = 1 if transposed else 0
    values, scale = symmetric_int8(jnp.asarray(weight), axis=axis)
    found = {"int8": (values, None), "bf16": (values.astype(jnp.bfloat16), None)}
    if has_vnni():
        found["vnni"] = (values, jnp.sum(values.astype(jnp.int32), axis=axis))
    return found, scale.reshape(-1)


def time_product(name: str, rows: int, calls: int, rng: np.random.Generator,
                 scale_down: int) -> dict[str, float]:
    inputs, outputs, transposed = PRODUCTS[name]
    outputs //= scale_down
    shape = (outputs, inputs) if transposed else (inputs, outputs)
    weights, scale = carriers(rng.normal(size=shape).astype(np.float32), transposed)
    x = jnp.asarray(rng.normal(size=(rows, inputs)), jnp.float32)
    product = jax.jit(lambda a, w, s, total: int8_matmul(
        a, w, s, weight_sum=total, transposed=transposed, columns=transposed))
    results = {key: np.asarray(product(x, w, scale, total))
               for key, (w, total) in weights.items()}
    if any(not np.array_equal(results["int8"], r) for r in results.values()):
        raise RuntimeError(f"{name} with {rows} rows: the carriers' results differ")
    times: dict[str, list[float]] = {key: [] for key in weights}
    for _ in range(calls):
        for key, (w, total) in weights.items():
            start = time.perf_counter()
            product(x, w, scale, total).block_until_ready()
            times[key].append(time.perf_counter() - start)
    ms = {key: 1e3 * statistics.median(values) for key, values in times.items()}
    prefix = f"{name}_{rows}"
    figures = {f"{prefix}_int8_ms": round(ms["int8"], 3), f"{prefix}_bf16_ms": round(ms["bf16"], 3),
               f"{prefix}_ratio": round(ms["int8"] / ms["bf16"], 3)}
    if "vnni" in ms:
        figures[f"{prefix}_vnni_ms"] = round(ms["vnni"], 3)
        figures[f"{prefix}_vnni_ratio"] = round(min(ms["int8"], ms["bf16"]) / ms["vnni"], 3)
    return figures


def crossover(summary: dict[str, float], rows: list[int], key: str = "ratio") -> int | None:
    """Smallest row count from which every logits ``key`` ratio is above 1."""
    found = None
    for count in reversed(sorted(rows)):
        if summary.get(f"logits_{count}_{key}", 0.0) <= 1.0:
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
            vnni = figures.get(f"{name}_{count}_vnni_ms")
            print(f"{name:8s} rows {count:4d}: int8 {figures[f'{name}_{count}_int8_ms']:8.3f} ms"
                  f"  bfloat16 {figures[f'{name}_{count}_bf16_ms']:8.3f} ms"
                  f"  ratio {figures[f'{name}_{count}_ratio']:.2f}"
                  + ("" if vnni is None else f"  vnni {vnni:8.3f} ms"), flush=True)
    summary.update(crossover_rows=crossover(summary, rows),
                   vnni_crossover_rows=crossover(summary, rows, "vnni_ratio"),
                   bf16_carrier_min_rows=BF16_CARRIER_MIN_ROWS,
                   vnni_carrier_min_rows=VNNI_CARRIER_MIN_ROWS, has_bf16_dots=has_bf16_dots(),
                   has_vnni=has_vnni(), quick=args.quick, cpu=machine)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
