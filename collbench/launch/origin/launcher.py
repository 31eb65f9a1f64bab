"""Who started us: the launcher, rank, local rank and world size, from the environment.

Under a launcher each process is one rank; ``collbench.launch.self_launch`` starts the ranks when
there is none. A launcher's variables count only when they are consistent: the rank is a
number below the world size, and the way to reach the launcher is there (an open ``PMI_FD``
or a ``PMI_PORT`` for PMI, a PMIx server for Open MPI and PMIx, a rendezvous address for
torch). A leftover ``RANK`` or ``PMI_RANK`` from another job is not a launcher: believing it
would run a silent one-rank "benchmark", or keep every message quiet as if another rank spoke.
Such an environment is refused with one line that names the variables and what they lack.

A launch MPI cannot start from (srun without an MPI plugin, or with one the MPI library does
not speak) is said by ``pmi``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Mapping, Optional

from collbench import environment
from collbench.errors import UsageError
from collbench.launch import processes


@dataclass(frozen=True)
class Launcher:
    """Who started this process and where it stands: the one place collbench learns its rank.

    ``detect`` fills it from the environment; once ranks can talk, the runner adds every rank's
    host (``with_hosts``)."""

    name: str          # mpiexec, srun, torchrun, collbench (self-launched local processes), env,
                       # none
    rank: int
    world_size: int
    local_rank: int
    shares_mpi_world: bool  # ranks share an MPI world (mpi4py can be used)
    hosts: tuple = ()  # every rank's host name, in rank order, once known
    world_size_variable: str = ""  # the variable the world size came from ("" when none said it)
    self_launched: str = ""  # how collbench itself launched this process: "local", "mpi", "" (it
                             # did not)
    #: how MPI reaches the launcher: "pmi" (PMI-1 or PMI-2: PMI_FD or PMI_PORT), "pmix" (a PMIx
    #: server), "" (no way: srun --mpi=none, torch's launchers, no launcher)
    pmi: str = ""

    def with_hosts(self, hosts) -> "Launcher":
        return dataclasses.replace(self, hosts=tuple(hosts))

    @property
    def by_collbench(self) -> bool:
        """Whether collbench launches (or launched) these ranks itself, rather than a user's
        launcher."""
        return self.name == "none" or bool(self.self_launched)


class StrayLauncherVariables(UsageError):
    """Launcher variables that do not describe a launch this process is part of."""


def _int(env: Mapping[str, str], *names: str) -> Optional[int]:
    for name in names:
        value = env.get(name)
        if value is not None and value.strip().isdigit() and len(value.strip()) < 10:
            return int(value)
    return None


def _first(env: Mapping[str, str], *names: str) -> str:
    return next((n for n in names if env.get(n) is not None), "")


def _stray(env: Mapping[str, str], present: list, lacking: str, fix: str) -> StrayLauncherVariables:
    shown = ", ".join(f"{n}={env[n]!r}" if len(env[n]) < 40 else n for n in present)
    return StrayLauncherVariables(f"{shown} {'is' if len(present) == 1 else 'are'} set, but "
                                  f"{lacking}: no launcher started this process (left over from "
                                  f"another job?); unset {' '.join(present)}, or {fix}")


def _rank_and_size(env, present: list, rank_names: tuple, size_names: tuple, fix: str) -> tuple:
    rank, size = _int(env, *rank_names), _int(env, *size_names)
    if rank is None or size is None:
        missing = " or ".join(n for n in (rank_names if rank is None else size_names))
        raise _stray(env, present, f"{missing} is not a whole number", fix)
    if size < 1 or rank >= size:
        raise _stray(env, present, f"rank {rank} is not below the world size {size}", fix)
    return rank, size


def _fd_open(value: Optional[str]) -> bool:
    if value is None or not value.strip().isdigit():
        return False
    try:
        os.fstat(int(value))
        return True
    except (OSError, OverflowError):
        return False


def _pmix_server(env: Mapping[str, str]) -> bool:
    return "PMIX_NAMESPACE" in env or any(k.startswith("PMIX_SERVER_URI") for k in env)


_MPI_FIX = "start collbench under mpiexec or srun"
_TORCH_FIX = "start collbench under torchrun (or set MASTER_ADDR and MASTER_PORT too)"


def _open_mpi(env) -> Optional[Launcher]:
    present = [n for n in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK") if n in env]
    if not present:
        return None
    if (not _pmix_server(env) and "OMPI_MCA_orte_hnp_uri" not in env
        and "OMPI_MCA_ess_base_jobid" not in env):
        raise _stray(env, present, "no Open MPI runtime is there (no PMIX_NAMESPACE or "
                                   "PMIX_SERVER_URI*)", _MPI_FIX)
    rank, size = _rank_and_size(env, present, ("OMPI_COMM_WORLD_RANK",), ("OMPI_COMM_WORLD_SIZE",),
                                _MPI_FIX)
    return Launcher("mpiexec", rank, size, _int(env, "OMPI_COMM_WORLD_LOCAL_RANK") or 0, True,
                    world_size_variable="OMPI_COMM_WORLD_SIZE",
                    pmi="pmix" if _pmix_server(env) else "")


def _pmi(env) -> Optional[Launcher]:
    present = [n for n in ("PMI_RANK", "PMI_SIZE") if n in env]
    if not present:
        return None
    if not _fd_open(env.get("PMI_FD")) and "PMI_PORT" not in env:
        raise _stray(env, present,
                     "there is no open PMI_FD or PMI_PORT to reach a launcher through", _MPI_FIX)
    if not _fd_open(env.get("PMI_FD")) and _nothing_listens(env["PMI_PORT"]):
        raise _stray(env, present + ["PMI_PORT"], "nothing listens at that port on this host",
                     _MPI_FIX)
    rank, size = _rank_and_size(env, present, ("PMI_RANK",), ("PMI_SIZE",), _MPI_FIX)
    local = _int(env, "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID") or 0
    return Launcher("srun" if environment.SLURM_STEP_ID in env else "mpiexec", rank, size, local,
                    True, world_size_variable="PMI_SIZE", pmi="pmi")


def _nothing_listens(address: str) -> bool:
    """``address`` (PMI_PORT's host:port) is on this host, and no socket listens on its port
    (a launcher's variable left from another job). Asked of the kernel's tables: a connection
    to a launcher's real PMI port could be taken for a rank's."""
    host, _, port = address.strip().rpartition(":")
    if host not in ("localhost", "127.0.0.1", "::1", "[::1]") or not port.isdigit():
        return False
    return processes.listening(int(port)) == set()


def _pmix(env) -> Optional[Launcher]:
    if "PMIX_RANK" not in env:
        return None
    if not _pmix_server(env):
        raise _stray(env, ["PMIX_RANK"],
                     "no PMIx server is there (no PMIX_NAMESPACE or PMIX_SERVER_URI*)", _MPI_FIX)
    size_variable = _first(env, "SLURM_STEP_NUM_TASKS", "PMIX_SIZE", "SLURM_NTASKS")
    if size_variable:
        rank, size = _rank_and_size(env, ["PMIX_RANK"], ("PMIX_RANK",), (size_variable,), _MPI_FIX)
    else:                   # MPI will tell; the runner checks it against nothing
        rank, size = _int(env, "PMIX_RANK") or 0, 1
    local = _int(env, "PMIX_LOCAL_RANK", "SLURM_LOCALID") or 0
    return Launcher("srun" if environment.SLURM_STEP_ID in env else "mpiexec", rank, size, local,
                    True, world_size_variable=size_variable, pmi="pmix")


def _torch_like(env, *, marked: bool) -> Optional[Launcher]:
    """torchrun and collbench's own local launch (``marked``: they say who they are), or
    RANK and WORLD_SIZE set by hand (the rest)."""
    ours = environment.TORCHELASTIC_RUN_ID in env or env.get(environment.LAUNCHED) == "local"
    present = [n for n in (environment.RANK, environment.WORLD_SIZE,
                           environment.TORCHELASTIC_RUN_ID) if n in env]
    if not present or ours != marked:
        return None
    missing = [n for n in (environment.RANK, environment.WORLD_SIZE, environment.MASTER_ADDR,
                           environment.MASTER_PORT)
               if not env.get(n, "").strip()]
    if missing:
        names = ", ".join(missing[:-1]) + " and " + missing[-1] if len(missing) > 1 else missing[0]
        raise _stray(env, present, f"{names} {'is' if len(missing) == 1 else 'are'} not",
                     _TORCH_FIX)
    rank, size = _rank_and_size(env, present, (environment.RANK,), (environment.WORLD_SIZE,),
                                _TORCH_FIX)
    local = _int(env, environment.LOCAL_RANK) or 0
    if env.get(environment.LAUNCHED) == "local":
        return Launcher("collbench", rank, size, local, False,
                        world_size_variable=environment.WORLD_SIZE)
    name = "torchrun" if environment.TORCHELASTIC_RUN_ID in env else "env"
    return Launcher(name, rank, size, local, False, world_size_variable=environment.WORLD_SIZE)


def _slurm_step(env) -> Optional[Launcher]:
    """srun without PMI variables (``--mpi=none``): a step's task. An MPI library that links
    Slurm's own PMI library may start from that; the others see a world of one rank in each
    task (``pmi.world_mismatch``). A bare SLURM_PROCID (an sbatch script, no step) is no launch."""
    if not ("SLURM_STEP_NUM_TASKS" in env and "SLURM_PROCID" in env
            and environment.SLURM_STEP_ID in env):
        return None
    rank, size = _rank_and_size(env, ["SLURM_PROCID", "SLURM_STEP_NUM_TASKS"], ("SLURM_PROCID",),
                                ("SLURM_STEP_NUM_TASKS",), _MPI_FIX)
    return Launcher("srun", rank, size, _int(env, "SLURM_LOCALID") or 0, True,
                    world_size_variable="SLURM_STEP_NUM_TASKS")


_DETECTORS = (_open_mpi, _pmi, _pmix, lambda env: _torch_like(env, marked=True), _slurm_step,
              lambda env: _torch_like(env, marked=False))


def detect(env: Mapping[str, str] = os.environ) -> Launcher:
    """The launcher this process runs under, from its environment variables; raises
    ``StrayLauncherVariables`` when they are there but do not hang together."""
    for detector in _DETECTORS:
        found = detector(env)
        if found is not None:
            break
    else:
        found = Launcher("none", 0, 1, 0, False)
    return dataclasses.replace(found, self_launched=env.get(environment.LAUNCHED, ""))


def detected_rank(env: Mapping[str, str] = os.environ, *, on_host: bool = False) -> int:
    """This process's rank (``on_host``: its rank among those of its host) for deciding who
    prints an error: 0 when the environment is not a consistent launch (then nobody else would
    say it)."""
    try:
        launch = detect(env)
    except UsageError:
        return 0
    return launch.local_rank if on_host else launch.rank
