"""Test helpers shared by the recipe and multi-process tests: load a recipe script as a module,
run several processes at once on CPU devices and report their logs on failure."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the test session's XLA flags for faster compiles (conftest.py), kept by ``cpu_env``
FAST_COMPILE = {"--xla_backend_optimization_level": "0", "--xla_cpu_use_fusion_emitters": "false"}


def load_script(path: Path, name: str) -> ModuleType:
    """Import the script at ``path`` as module ``name`` (recipes are not a package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu_env(devices: int) -> dict[str, str]:
    """This environment without launcher variables, on ``devices`` host CPU devices."""
    env = {k: v for k, v in os.environ.items()       # conftest.py's compilation cache kept
           if not k.startswith(("JAX_", "TEXTKIT_", "SLURM_", "OMPI_"))
           or k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split()    # conftest.py's
            if f.startswith(tuple(FAST_COMPILE))]
    env["XLA_FLAGS"] = " ".join([f"--xla_force_host_platform_device_count={devices}", *kept])
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(ROOT)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def log_tails(paths: list[Path]) -> str:
    return "\n".join(f"--- {p.name}:\n{p.read_text()[-3000:]}" for p in paths if p.exists())


def run_all(commands: list[tuple[list[str], int, Path]], timeout_s: float) -> None:
    """Start every ``(argv, devices, log file)`` at once and wait for all; fail with the logs'
    tails on a time-out or a non-zero exit, killing whatever still runs."""
    processes = []
    logs = [log for _, _, log in commands]
    try:
        for argv, devices, log in commands:
            with open(log, "w") as log_file:
                processes.append(subprocess.Popen(
                    [sys.executable, *argv], env=cpu_env(devices), stdout=log_file,
                    stderr=subprocess.STDOUT))
        for process in processes:
            process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"processes did not finish in {timeout_s} s\n{log_tails(logs)}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    codes = [process.returncode for process in processes]
    assert codes == [0] * len(processes), f"exit codes {codes}\n{log_tails(logs)}"
