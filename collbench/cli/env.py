"""``collbench env``: what collbench finds on this machine, before anything is measured."""

from __future__ import annotations

import importlib.util
import os
import sys

from collbench import __version__
from collbench.launch import launcher as launch
from collbench.launch import spawn
from collbench.backends import names, plugins, unavailable_reason
from collbench.errors import UsageError


def _version(module: str) -> str:
    if importlib.util.find_spec(module) is None:
        return "not installed"
    try:
        from importlib.metadata import version
        return version(module)
    except Exception:
        return "installed"


def gather() -> dict:
    try:
        launcher, stray = launch.detect(), ""
    except UsageError as exc:            # show what is wrong with the environment, not crash on it
        launcher, stray = launch.Launcher("none", 0, 1, 0, False), f" (not a launch: {exc})"
    mpiexec = spawn.find_mpiexec()
    info = {
        "collbench": __version__,
        "python": sys.version.split()[0] + f" ({sys.executable})",
        "launcher": launcher.name + stray,
        "rank / world size": f"{launcher.rank} / {launcher.world_size}",
        "mpiexec": f"{mpiexec} ({spawn.mpiexec_flavour(mpiexec)})" if mpiexec else "not found",
        "mpi4py": _version("mpi4py"),
        "MPI library": _mpi_library(),
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "cpus": str(os.cpu_count()),
    }
    for name in names():
        reason = unavailable_reason(name)
        origin = f" (plugin {plugins()[name].value})" if name in plugins() else ""
        info[f"backend {name}"] = ("usable" if reason is None else f"unusable: {reason}") + origin
    if "torch" in sys.modules:
        from collbench.backends.nccl import gpu_summary
        info["GPUs"] = gpu_summary()
    return info


def _mpi_library() -> str:
    """The MPI library mpi4py links, read without initialising MPI."""
    if importlib.util.find_spec("mpi4py") is None:
        return "-"
    try:
        import mpi4py
        mpi4py.rc.initialize = False
        from mpi4py import MPI

        from collbench.results.records import tidy_library_version
        return tidy_library_version(MPI.Get_library_version())
    except Exception as exc:  # libmpi missing or broken: say so, do not crash
        return f"unusable ({exc.__class__.__name__}: {str(exc).strip().splitlines()[0]})"


def print_report() -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="collbench env", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in gather().items():
        table.add_row(escape(key), escape(value))     # install hints hold [brackets]
    Console().print(table)
