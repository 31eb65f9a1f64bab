"""Run metadata: where, with what, and how the numbers were taken."""

from __future__ import annotations

import datetime
import os
import platform
import socket
from collections import Counter

from collbench import __version__
from collbench.environment import LIBRARY_PREFIXES
from collbench.results.records import SCHEMA_VERSION

#: The variables a run records (``metadata.environment``): every one that tunes the MPI library
#: or its transports (MPICH's MPIR_CVAR_ among them, which alone can move a row 2-3x), and
#: those of NCCL, gloo, torch.distributed and CUDA's device list.
ENV_PREFIXES = tuple(dict.fromkeys(LIBRARY_PREFIXES + ("NCCL_", "OMPI_", "GLOO_", "TORCH_DIST",
                                                      "CUDA_VISIBLE")))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list:
    """GPU model and driver from nvidia-smi, where there is one (without importing torch)."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return []
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return ([line.strip() for line in smi.stdout.splitlines() if line.strip()]
            if smi.returncode == 0 else [])


def relevant_env() -> dict:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}


def ranks_per_node(hostnames: list) -> int:
    return max(Counter(hostnames).values()) if hostnames else 1


def collect(*, hostnames: list, launcher: str, argv: list, settings: dict, versions: dict) -> dict:
    """Metadata for the whole run, assembled on rank 0 from what all ranks reported."""
    import numpy

    return {
        "schema_version": SCHEMA_VERSION,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "collbench_version": __version__,
        "command_line": ["collbench"] + list(argv),
        "launcher": launcher,
        "world_size": len(hostnames),
        "hostnames": sorted(set(hostnames)),
        "rank_hosts": hostnames,
        "ranks_per_node": ranks_per_node(hostnames),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus(),
        "platform": platform.platform(),
        "versions": {"python": platform.python_version(), "numpy": numpy.__version__, **versions},
        "settings": settings,
        "environment": relevant_env(),
    }


def hostname() -> str:
    return socket.gethostname()

