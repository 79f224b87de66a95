"""Data-parallel (and model-axis-ready) training on JAX's own distributed engine.

No ``pmap`` and no custom collectives: processes join with ``jax.distributed``, devices form a
``Mesh`` with a ``data`` axis (and a ``model`` axis of size 1 unless asked for), each process
feeds its local shard of the global batch through ``jax.make_array_from_process_local_data``,
and ``jax.jit`` with ``NamedSharding`` in/out shardings inserts the gradient all-reduce.

Typical use (the recipes do exactly this)::

    parallel.initialize()                      # no-op for a single process
    mesh = parallel.make_mesh()                # all devices on the "data" axis
    sampler = FixedBucketSampler(..., num_shards=jax.process_count(),
                                 shard_id=jax.process_index())
    state = parallel.replicate(state, mesh)
    step = make_train_step(loss_fn, opt, **parallel.train_step_shardings(mesh, state))
    for batch in loader:                       # per-process numpy batch
        state, metrics = step(state, parallel.global_batch(batch, mesh))
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"
MODEL_AXIS = "model"

_ENV_COORDINATOR = ("TEXTKIT_COORDINATOR", "JAX_COORDINATOR_ADDRESS")
_ENV_NUM_PROCESSES = ("TEXTKIT_NUM_PROCESSES", "JAX_NUM_PROCESSES")
_ENV_PROCESS_ID = ("TEXTKIT_PROCESS_ID", "JAX_PROCESS_ID")


def _env(names: Sequence[str]) -> str | None:
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    return None


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: Sequence[int] | None = None,
    cpu_collectives: str = "gloo",
) -> bool:
    """Join a multi-process JAX job; return True when more than one process takes part.

    Arguments fall back to ``TEXTKIT_COORDINATOR``/``JAX_COORDINATOR_ADDRESS``,
    ``TEXTKIT_NUM_PROCESSES``/``JAX_NUM_PROCESSES`` and ``TEXTKIT_PROCESS_ID``/``JAX_PROCESS_ID``.
    With none of them set and no cluster (SLURM, ...) detected by JAX, this is a no-op, so a
    recipe can call it unconditionally. CPU collectives use ``cpu_collectives`` (gloo), which
    must be chosen before any computation runs. Must be called before JAX touches a device.
    """
    coordinator_address = coordinator_address or _env(_ENV_COORDINATOR)
    if num_processes is None and _env(_ENV_NUM_PROCESSES):
        num_processes = int(_env(_ENV_NUM_PROCESSES))
    if process_id is None and _env(_ENV_PROCESS_ID):
        process_id = int(_env(_ENV_PROCESS_ID))
    in_cluster = "SLURM_JOB_ID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1
    if coordinator_address is None and not in_cluster:
        if num_processes not in (None, 1):
            raise ValueError(
                f"num_processes={num_processes} needs a coordinator address "
                f"(argument or one of {', '.join(_ENV_COORDINATOR)})")
        return False
    jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
    )
    return jax.process_count() > 1


def is_main_process() -> bool:
    """True on process 0: the one that logs, writes summaries and drives progress bars."""
    return jax.process_index() == 0


def make_mesh(model_parallel: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ``(data, model)`` mesh over ``devices`` (default: all devices of all processes).

    ``model_parallel`` devices share one model replica along the ``model`` axis; parameters are
    replicated along it unless ``shard_params`` rules say otherwise.
    """
    devices = list(jax.devices() if devices is None else devices)
    if len(devices) % model_parallel:
        raise ValueError(
            f"{len(devices)} devices cannot be split into model-parallel groups of "
            f"{model_parallel}")
    shape = (len(devices) // model_parallel, model_parallel)
    return jax.make_mesh(shape, (DATA_AXIS, MODEL_AXIS), devices=devices)


def data_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) axis split over the ``data`` axis, the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def replicated_sharding(mesh: Mesh) -> NamedSharding:
    """Every device holds the whole array."""
    return NamedSharding(mesh, PartitionSpec())


def local_batch_size(global_batch_size: int, mesh: Mesh) -> int:
    """Rows of the global batch that this process feeds (processes own equal device counts)."""
    data_size = mesh.shape[DATA_AXIS]
    if global_batch_size % data_size:
        raise ValueError(
            f"global batch of {global_batch_size} rows does not split over {data_size} "
            f"data-parallel devices")
    return global_batch_size // jax.process_count()


def global_batch(local_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Turn this process's numpy batch (its rows of the global batch) into global arrays.

    Every array is split along axis 0 over the ``data`` axis; the global batch is the
    concatenation of the processes' local batches in process order.
    """
    sharding = data_sharding(mesh)
    return {
        name: jax.make_array_from_process_local_data(sharding, np.asarray(value))
        for name, value in local_batch.items()
    }


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Place every leaf of ``tree`` (params, optimizer state, ...) on all devices of ``mesh``."""
    return jax.device_put(tree, replicated_sharding(mesh))


def param_shardings(
    params: Any, mesh: Mesh, rules: Sequence[tuple[str, PartitionSpec]] = ()
) -> Any:
    """A sharding per leaf of ``params``: the first rule whose regex matches the leaf's
    '/'-joined path gives its ``PartitionSpec`` (e.g. ``(r"ffn/.*kernel", P(None, "model"))``);
    unmatched leaves are replicated."""
    compiled = [(re.compile(pattern), spec) for pattern, spec in rules]

    def sharding_for(path, _leaf):
        name = "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
        for pattern, spec in compiled:
            if pattern.search(name):
                return NamedSharding(mesh, spec)
        return replicated_sharding(mesh)

    return jax.tree_util.tree_map_with_path(sharding_for, params)


def shard_params(
    params: Any, mesh: Mesh, rules: Sequence[tuple[str, PartitionSpec]] = ()
) -> Any:
    """Place ``params`` on ``mesh`` following ``rules`` (see ``param_shardings``)."""
    return jax.device_put(params, param_shardings(params, mesh, rules))


def train_step_shardings(mesh: Mesh, state: Any) -> dict[str, Any]:
    """``in_shardings``/``out_shardings`` for ``make_train_step``: the state keeps the
    sharding it was placed with, the batch is split over ``data``, metrics are replicated."""
    state_sharding = jax.tree_util.tree_map(lambda x: x.sharding, state)
    return {
        "in_shardings": (state_sharding, data_sharding(mesh)),
        "out_shardings": (state_sharding, replicated_sharding(mesh)),
    }


def to_host(tree: Any) -> Any:
    """Fetch a replicated (or fully addressable) pytree as numpy on every process."""
    return jax.tree_util.tree_map(
        lambda x: np.asarray(jax.device_get(x.addressable_data(0)))
        if isinstance(x, jax.Array) and x.is_fully_replicated else np.asarray(x),
        tree,
    )
