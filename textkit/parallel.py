"""Data-parallel (and model-axis-ready) training on JAX's own distributed engine.

No ``pmap`` and no custom collectives: processes join with ``jax.distributed``, devices form a
``Mesh`` with a ``data`` axis (and a ``model`` axis of size 1 unless asked for), each process
feeds its rows of the global batch through ``jax.make_array_from_process_local_data``, and
``jax.jit`` with ``NamedSharding`` in/out shardings inserts the gradient all-reduce. A step over
N devices computes the same update as one device on the same global batch.

Typical use (the recipes do exactly this)::

    parallel.initialize()                      # no-op for a single process
    mesh = parallel.make_mesh()                # all devices of all processes on "data"
    sampler = FixedBucketSampler(..., num_shards=jax.process_count(),
                                 shard_id=jax.process_index())
    state = parallel.replicate(state, mesh)    # or shard_params(state, mesh, rules)
    step = make_train_step(loss_fn, opt, **parallel.train_step_shardings(mesh, state))
    for batch in loader:                       # this process's numpy rows
        state, metrics = step(state, parallel.global_batch(batch, mesh))

Every process runs the same program: the same number of steps, the same batch shape at each
step (the sharded samplers guarantee both), and the same calls to collective helpers
(``to_host`` of sharded arrays, checkpoint saves). Only logging is process-0-only
(``is_main_process``); Orbax checkpoints must be saved by *every* process.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec, Sharding

from textkit.settings import flag

DATA_AXIS = "data"
MODEL_AXIS = "model"

ENV_COORDINATOR = ("TEXTKIT_COORDINATOR", "JAX_COORDINATOR_ADDRESS")
ENV_NUM_PROCESSES = ("TEXTKIT_NUM_PROCESSES", "JAX_NUM_PROCESSES")
ENV_PROCESS_ID = ("TEXTKIT_PROCESS_ID", "JAX_PROCESS_ID")

PartitionRules = Sequence[tuple[str, PartitionSpec]]


def _env(names: Sequence[str]) -> tuple[str, str] | None:
    """``(name, value)`` of the first non-empty environment variable among ``names``."""
    for name in names:
        if os.environ.get(name):
            return name, os.environ[name]
    return None


def _env_int(names: Sequence[str]) -> int | None:
    found = _env(names)
    if found is None:
        return None
    name, value = found
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} must be an integer") from None


def _launched_by_cluster() -> bool:
    """True inside a multi-task ``srun`` step or an Open MPI job, which JAX detects itself."""
    for name in ("SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE"):
        if int(os.environ.get(name, "1") or "1") > 1:
            return True
    return False


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: Sequence[int] | None = None,
    *,
    cpu_collectives: str = "gloo",
    timeout_s: int = 300,
) -> bool:
    """Join a multi-process JAX job; return True when more than one process takes part.

    Arguments left as None fall back to the environment: ``TEXTKIT_COORDINATOR`` or
    ``JAX_COORDINATOR_ADDRESS`` ("host:port" of process 0), ``TEXTKIT_NUM_PROCESSES`` or
    ``JAX_NUM_PROCESSES``, ``TEXTKIT_PROCESS_ID`` or ``JAX_PROCESS_ID``. Inside a multi-task
    ``srun`` step (SLURM) or an Open MPI job, JAX fills in whatever is missing itself. With
    none of these, or with one process, this is a no-op, so a recipe can call it
    unconditionally. Call it before anything touches a JAX device. CPU cross-process
    collectives use ``cpu_collectives`` ("gloo" or "mpi"). Calling it again is a no-op.
    """
    if jax.distributed.is_initialized():
        return jax.process_count() > 1
    if coordinator_address is None and (found := _env(ENV_COORDINATOR)):
        coordinator_address = found[1]
    if num_processes is None:
        num_processes = _env_int(ENV_NUM_PROCESSES)
    if process_id is None:
        process_id = _env_int(ENV_PROCESS_ID)
    if num_processes == 1:
        if process_id not in (None, 0):
            raise ValueError(f"process_id={process_id} but num_processes=1")
        return False
    if coordinator_address is None and not _launched_by_cluster():
        if num_processes is not None or process_id is not None:
            raise ValueError(
                f"num_processes={num_processes}, process_id={process_id} need a coordinator "
                f"address ('host:port' of process 0): an argument or one of "
                f"{', '.join(ENV_COORDINATOR)}")
        return False
    if coordinator_address is not None and not _launched_by_cluster():
        missing = [name for name, value in
                   (("num_processes", num_processes), ("process_id", process_id))
                   if value is None]
        if missing:
            raise ValueError(
                f"coordinator {coordinator_address} is set but {' and '.join(missing)} "
                f"is not (arguments, or {ENV_NUM_PROCESSES[0]} / {ENV_PROCESS_ID[0]})")
    jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
        initialization_timeout=timeout_s,
    )
    return jax.process_count() > 1


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """How a run is started (see ``initialize``), not part of its configuration. Each field is
    the recipe flag of the same name (``num_processes`` is ``--num-processes``)."""

    coordinator: str | None = flag(
        None, "host:port of process 0 for a multi-process run (or TEXTKIT_COORDINATOR)",
        group="launch")
    num_processes: int | None = flag(None, "processes in the job (or TEXTKIT_NUM_PROCESSES)",
                                     group="launch")
    process_id: int | None = flag(None, "this process's index (or TEXTKIT_PROCESS_ID)",
                                  group="launch")


def is_main_process() -> bool:
    """True on process 0: the one that logs, prints summaries and shows progress bars."""
    return jax.process_index() == 0


def per_process(global_size: int, name: str = "global batch size") -> int:
    """This process's share of a global size (sentences, a token budget): ``global / processes``.

    Raises ValueError when it does not divide evenly, since then the global batch would depend
    on the number of processes.
    """
    processes = jax.process_count()
    if global_size % processes:
        raise ValueError(
            f"{name} {global_size} does not split evenly over {processes} processes")
    return global_size // processes


def make_mesh(model_parallel: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ``(data, model)`` mesh over ``devices`` (default: all devices of all processes).

    Devices are ordered by process, so each process owns a contiguous block of the ``data``
    axis and the global batch is the processes' local batches concatenated in process order.
    ``model_parallel`` devices share one replica along ``model``; parameters are replicated
    along it unless ``shard_params`` rules split them.
    """
    devices = sorted(jax.devices() if devices is None else devices,
                     key=lambda d: (d.process_index, d.id))
    if model_parallel < 1 or len(devices) % model_parallel:
        raise ValueError(
            f"{len(devices)} devices cannot be split into model-parallel groups of "
            f"{model_parallel}")
    shape = (len(devices) // model_parallel, model_parallel)
    return jax.make_mesh(shape, (DATA_AXIS, MODEL_AXIS),
                         axis_types=(AxisType.Auto, AxisType.Auto), devices=devices)


def data_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) axis split over the ``data`` axis, the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def replicated_sharding(mesh: Mesh) -> NamedSharding:
    """Every device holds the whole array."""
    return NamedSharding(mesh, PartitionSpec())


def global_batch(local_batch: Any, mesh: Mesh) -> Any:
    """Turn this process's numpy batch (its rows of the global batch) into global arrays.

    ``local_batch`` is a dict of arrays, or any pytree of them (e.g. a recurrent state with
    rows ``[B_local, H]``); every array is split along axis 0 over ``data`` and the global
    batch is the processes' local batches concatenated in process order. Each process must
    feed the same shapes, with rows divisible by its number of devices (a clear error names
    the field otherwise).
    """
    sharding = data_sharding(mesh)
    local_devices = len(mesh.local_devices)

    def place(path: Any, value: Any) -> jax.Array:
        value = np.asarray(value)
        if value.ndim == 0 or value.shape[0] % local_devices:
            raise ValueError(
                f"batch field {_path_name(path)!r} of shape {value.shape} cannot be split over "
                f"this process's {local_devices} devices: its rows must be a multiple of "
                f"{local_devices}")
        return jax.make_array_from_process_local_data(sharding, value)

    return jax.tree_util.tree_map_with_path(place, local_batch)


def _path_name(path: Any) -> str:
    return jax.tree_util.keystr(path, simple=True, separator="/")


def param_shardings(tree: Any, mesh: Mesh, rules: PartitionRules = ()) -> Any:
    """A ``NamedSharding`` per leaf of ``tree`` (params, or a whole ``TrainState``).

    The first rule whose regex ``search``-matches the leaf's '/'-joined path (e.g.
    ``params/encoder/layer_0/ffn/dense_in/kernel``) gives its ``PartitionSpec``, e.g.
    ``(r"ffn/dense_in/kernel$", P(None, "model"))``; unmatched leaves are replicated. On a
    ``TrainState`` the same rules also place the optimizer moments, whose paths end alike.
    """
    compiled = [(re.compile(pattern), spec) for pattern, spec in rules]

    def sharding_for(path: Any, leaf: Any) -> NamedSharding:
        name = _path_name(path)
        for pattern, spec in compiled:
            if pattern.search(name):
                if len(spec) > np.ndim(leaf):
                    raise ValueError(
                        f"rule {pattern.pattern!r} gives {spec} to {name!r}, which has only "
                        f"{np.ndim(leaf)} dimensions (shape {np.shape(leaf)})")
                return NamedSharding(mesh, spec)
        return replicated_sharding(mesh)

    return jax.tree_util.tree_map_with_path(sharding_for, tree)


def _put(leaf: Any, sharding: Sharding) -> jax.Array:
    """``leaf`` placed with ``sharding``; with several processes each takes its own slices
    from a host copy (every process must hold the same value, e.g. from the same seed)."""
    if jax.process_count() == 1 or (
            isinstance(leaf, jax.Array) and not leaf.is_fully_addressable):
        return jax.device_put(leaf, sharding)
    host = np.asarray(jax.device_get(leaf))
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def shard_params(tree: Any, mesh: Mesh, rules: PartitionRules = ()) -> Any:
    """Place ``tree`` (params or a ``TrainState``) on ``mesh`` following ``rules``
    (see ``param_shardings``); with no rules every leaf is replicated."""
    return jax.tree_util.tree_map(_put, tree, param_shardings(tree, mesh, rules))


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Place every leaf of ``tree`` (params, optimizer state, ...) on all devices of ``mesh``."""
    return shard_params(tree, mesh)


def _shardings_of(tree: Any) -> Any:
    return jax.tree_util.tree_map(
        lambda x: x if isinstance(x, Sharding) else x.sharding, tree,
        is_leaf=lambda x: isinstance(x, Sharding))


def train_step_shardings(mesh: Mesh, state: Any) -> dict[str, Any]:
    """``in_shardings``/``out_shardings`` keyword arguments for ``make_train_step``.

    ``state`` is the placed ``TrainState`` (or a pytree of its shardings): it keeps its
    placement across steps (so donation reuses its buffers), the batch is split over ``data``
    and the metrics come back replicated.
    """
    state_shardings = _shardings_of(state)
    return {
        "in_shardings": (state_shardings, data_sharding(mesh)),
        "out_shardings": (state_shardings, replicated_sharding(mesh)),
    }


def eval_step_shardings(mesh: Mesh, params: Any) -> dict[str, Any]:
    """``in_shardings``/``out_shardings`` for ``make_eval_step`` (see ``train_step_shardings``)."""
    return {
        "in_shardings": (_shardings_of(params), data_sharding(mesh)),
        "out_shardings": replicated_sharding(mesh),
    }


def main_process_decides(flag: bool) -> bool:
    """Process 0's ``flag`` on every process: a decision taken from a local clock (a time
    budget) must be the same everywhere, or the processes stop at different steps and hang.
    A collective when there are several processes; every process must call it."""
    return bool(main_process_value(bool(flag)))


def main_process_value(value: int | float | bool) -> int | float | bool:
    """Process 0's scalar ``value`` on every process (see ``main_process_decides``)."""
    if jax.process_count() == 1:
        return value
    return np.asarray(multihost_utils.broadcast_one_to_all(np.asarray(value))).item()


def to_host(tree: Any) -> Any:
    """The pytree as numpy arrays, whole, on every process.

    Replicated and process-local arrays are read locally; arrays split across processes are
    gathered, which is a collective: then every process must call this with the same tree.
    """

    def fetch(x: Any) -> np.ndarray:
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return np.asarray(jax.device_get(x))
        if x.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree_util.tree_map(fetch, tree)


def local_copy(tree: Any) -> Any:
    """``to_host(tree)`` placed on this process's first device: a private copy for work that
    each process does alone (decoding, evaluation), outside the mesh and with no collectives
    afterwards. Like ``to_host`` it is a collective when arrays are split across processes."""
    return jax.device_put(to_host(tree), jax.local_devices()[0])
