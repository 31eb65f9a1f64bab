"""Whether MPI can start from the launcher's process-management interface (PMI), and the line
that says why not: before MPI starts, where MPI would abort with a message of its own and an
exit code that says nothing, or wait forever; and after, when it started a world other than the
launcher's.

The cases: a ``/dev/shm`` this user cannot write to; under srun, no MPI plugin, a PMIx plugin
the MPI library cannot start from, and MPICH's shared memory left by an earlier job with the
same number (docs/slurm.md, "When srun cannot start MPI"; docs/failures.md). Only the standard
library is used here; the MPI library is asked in a process of its own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Optional

from collbench.errors import SharedUsageError, UsageError
from collbench.launch import processes
from collbench.launch.origin.launcher import Launcher

SRUN_FIX = "start collbench with srun --mpi=pmi2 (or export SLURM_MPI_TYPE=pmi2 before srun)"
#: where MPICH keeps its shared memory
SHARED_MEMORY = Path("/dev/shm")
#: seconds before this task started that a segment of its step may have been made: the tasks
#: of a step start together, and a peer makes its segment after its imports; a segment of an
#: earlier job with the same number is older than the cluster's restart that reused the number
MARGIN_S = 10.0


def world_mismatch(launcher: Launcher, started: int) -> UsageError:
    """The error when MPI started ``started`` ranks but the launcher's variables say otherwise.

    srun with no MPI plugin is the common case: each of its N tasks is a world of one rank, all
    alike, so rank 0 alone says it. Otherwise the variables are most likely left over."""
    if launcher.name == "srun" and not launcher.pmi and started == 1:
        return SharedUsageError(f"srun started {launcher.world_size} tasks, but MPI sees each one "
                                "alone (a world of 1 rank): srun gave them no MPI plugin "
                                "(--mpi=none, Slurm's MpiDefault), so MPI has no way to find the "
                                f"others; {SRUN_FIX}")
    return UsageError(f"{launcher.world_size_variable}={launcher.world_size} says "
                      f"{launcher.world_size} ranks, but {started} started: a variable left over "
                      "from another job? unset it, or start collbench under the launcher that set "
                      "it")


def mpi_start_problem(launcher: Launcher, env: Mapping[str, str] = os.environ) -> Optional[str]:
    """Why MPI cannot start under this srun step, known before MPI tries; None when nothing is
    known against it. Every task of a step finds the same."""
    if launcher.name != "srun":
        return None
    if launcher.pmi == "pmix":
        return _pmix_problem()
    if launcher.pmi == "pmi" and env.get("PMI_JOBID"):
        return _stale_shared_memory(env["PMI_JOBID"])
    return None


def shared_memory_problem(launcher: Launcher, folder: Path = SHARED_MEMORY) -> Optional[str]:
    """Why MPI cannot start on this host: a /dev/shm that is there but cannot be written to
    (mounted read-only, or not this user's), for ranks that share an MPI world; None when
    nothing is known against it. Every rank of this host finds the same, naming it."""
    if not (launcher.shares_mpi_world and launcher.world_size > 1):
        return None
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:                 # none here: the MPI library uses something else, or says so
        return None
    if not read_only and os.access(folder, os.W_OK | os.X_OK):
        return None
    why = "is mounted read-only" if read_only else "is not writable by this user"
    return (f"{folder} {why} on {socket.gethostname()}: MPI keeps the memory the ranks of a host "
            "share there (MPICH's and UCX's shared memory) and would fail in MPI_Init; make it "
            f"writable (a container: docker run --shm-size=1g, or mount -o remount,rw {folder})")


def _pmix_problem() -> Optional[str]:
    """An MPICH built without PMIx aborts in MPI_Init under srun --mpi=pmix; MPICH names its
    configure options in its description of itself, and speaks PMIx only when built with it."""
    library = mpi_library_description()
    fields = {key.strip(): value.strip()
              for key, _, value in (line.partition(":") for line in library.splitlines())}
    configure = fields.get("MPICH configure")
    if configure is None or "pmix" in configure.lower():      # not MPICH, or MPICH with PMIx
        return None
    return ("srun started collbench with its PMIx plugin (--mpi=pmix), but the MPI library "
            f"collbench uses (MPICH {fields.get('MPICH Version', '')}, built without PMIx) cannot "
            f"start from it; {SRUN_FIX}")


_LIBRARY_PROBE = ("import mpi4py; mpi4py.rc.initialize = False\n"
                  "from mpi4py import MPI; print(MPI.Get_library_version())")


def mpi_library_description(seconds: float = 120.0) -> str:
    """The MPI library's description of itself (MPI_Get_library_version, which needs no
    MPI_Init), as mpi4py loads it, in a process of its own: this one initialises MPI on its
    first import of mpi4py. "" when it cannot be had."""
    try:
        probe = subprocess.run([sys.executable, "-c", _LIBRARY_PROBE], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=seconds)
    except (OSError, subprocess.SubprocessError):
        return ""
    return probe.stdout if probe.returncode == 0 else ""


def fnv1a(text: str) -> int:
    """32-bit FNV-1a, MPICH's hash of the PMI job id into the names of its shared memory."""
    value = 2166136261
    for byte in text.encode():
        value = ((value ^ byte) * 16777619) & 0xFFFFFFFF
    return value


def mpich_segments(job_id: str) -> list:
    """MPICH's shared-memory files on this host for PMI job id ``job_id`` (srun's "JOB.STEP")."""
    key = f"_{fnv1a(job_id):x}_"
    try:
        return sorted(p for p in SHARED_MEMORY.iterdir()
                      if p.name.startswith(("mpich_shm_", "mpich_vci_")) and key in p.name)
    except OSError:
        return []


def _stale_shared_memory(job_id: str) -> Optional[str]:
    started = processes.started_at(os.getppid())      # the task srun started: this rank's guardian
    stale = []
    for path in mpich_segments(job_id):
        try:
            made = path.stat().st_mtime
        except OSError:
            continue
        if started is not None and made < started - MARGIN_S:
            stale.append((path, made))
    if not stale:
        return None
    path, made = stale[0]
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(made))
    more = f" (and {len(stale) - 1} more)" if len(stale) > 1 else ""
    return (f"{path}{more}, from {when}, is MPICH's shared memory for Slurm job step {job_id}, "
            "left by an earlier job with the same number: MPI_Init would take it for this job's "
            f"and wait forever; remove it (rm {SHARED_MEMORY}/mpich_*_{fnv1a(job_id):x}_*) and "
            "start again")

