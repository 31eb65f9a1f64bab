"""Who started us: the launcher, rank, local rank and world size, from the environment.

Under a launcher each process is one rank; ``collbench.launch.spawn`` starts the ranks when
there is none.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Mapping, Optional


CHILD_MARK = "COLLBENCH_LAUNCHED"


@dataclass(frozen=True)
class Launcher:
    """Who started this process and where it stands: the one place collbench learns its rank.

    ``detect`` fills it from the environment; once ranks can talk, the runner adds every rank's
    host (``with_hosts``)."""

    name: str          # mpiexec, srun, torchrun, collbench (self-launched local processes), env, none
    rank: int
    world_size: int
    local_rank: int
    mpi: bool          # ranks share an MPI world (mpi4py can be used)
    hosts: tuple = ()  # every rank's host name, in rank order, once known

    def with_hosts(self, hosts) -> "Launcher":
        return dataclasses.replace(self, hosts=tuple(hosts))


def _int(env: Mapping[str, str], *names: str) -> Optional[int]:
    for name in names:
        value = env.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def detect(env: Mapping[str, str] = os.environ) -> Launcher:
    """The launcher this process runs under, from its environment variables."""
    if "OMPI_COMM_WORLD_SIZE" in env:
        return Launcher("mpiexec", _int(env, "OMPI_COMM_WORLD_RANK") or 0, _int(env, "OMPI_COMM_WORLD_SIZE"),
                        _int(env, "OMPI_COMM_WORLD_LOCAL_RANK") or 0, True)
    if "PMI_SIZE" in env or "PMIX_RANK" in env or "PMI_RANK" in env:
        size = _int(env, "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS") or 1
        local = _int(env, "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "PMIX_LOCAL_RANK", "SLURM_LOCALID") or 0
        name = "srun" if "SLURM_STEP_ID" in env else "mpiexec"
        return Launcher(name, _int(env, "PMI_RANK", "PMIX_RANK") or 0, size, local, True)
    if "TORCHELASTIC_RUN_ID" in env and "WORLD_SIZE" in env:
        return Launcher("torchrun", _int(env, "RANK") or 0, _int(env, "WORLD_SIZE"),
                        _int(env, "LOCAL_RANK") or 0, False)
    if env.get(CHILD_MARK) == "local" and "WORLD_SIZE" in env:
        return Launcher("collbench", _int(env, "RANK") or 0, _int(env, "WORLD_SIZE"),
                        _int(env, "LOCAL_RANK") or 0, False)
    if "SLURM_STEP_NUM_TASKS" in env and "SLURM_PROCID" in env:
        return Launcher("srun", _int(env, "SLURM_PROCID") or 0, _int(env, "SLURM_STEP_NUM_TASKS"),
                        _int(env, "SLURM_LOCALID") or 0, True)
    if "RANK" in env and "WORLD_SIZE" in env:
        return Launcher("env", _int(env, "RANK") or 0, _int(env, "WORLD_SIZE"),
                        _int(env, "LOCAL_RANK") or 0, False)
    return Launcher("none", 0, 1, 0, False)
