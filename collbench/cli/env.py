"""``collbench env``: what collbench finds on this machine, before anything is measured."""

from __future__ import annotations

import importlib.util
import os
import sys

from collbench import __version__
from collbench.launch.origin import launcher as launch
from collbench.launch.self_launch.mpiexec import find_mpiexec, mpiexec_flavour
from collbench.backends import backend_class, names, plugins, unavailable_reason
from collbench.errors import UsageError


def _version(module: str) -> str:
    if importlib.util.find_spec(module) is None:
        return "not installed"
    try:
        from importlib.metadata import version
        return version(module)
    except Exception:
        return "installed"


def environment_report() -> dict:
    """What ``collbench env`` shows: each item found (versions, launcher, backends) and its
    value."""
    try:
        launcher, stray = launch.detect(), ""
    except UsageError as exc:            # show what is wrong with the environment, not crash on it
        launcher, stray = launch.Launcher("none", 0, 1, 0, False), f" (not a launch: {exc})"
    mpiexec = find_mpiexec()
    info = {
        "collbench": __version__,
        "python": sys.version.split()[0] + f" ({sys.executable})",
        "launcher": launcher.name + stray,
        "rank / world size": f"{launcher.rank} / {launcher.world_size}",
        "mpiexec": f"{mpiexec} ({mpiexec_flavour(mpiexec)})" if mpiexec else "not found",
        "mpi4py": _version("mpi4py"),
        "MPI library": _mpi_library(),
        "MPI thread level": _thread_level(),
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "cpus": str(os.cpu_count()),
        "huge pages": _huge_pages(),
    }
    found: dict = {}
    for name in names():
        reason = unavailable_reason(name)
        origin = f" (plugin {plugins()[name].value})" if name in plugins() else ""
        info[f"backend {name}"] = ("usable" if reason is None else f"unusable: {reason}") + origin
        try:
            found.update(backend_class(name).environment())      # the GPUs nccl sees, say
        # a plugin that does not import was named above; its hook is not env's to fail
        except Exception:
            pass
    from collbench.launch.network.rendezvous import check_variables

    try:
        check_variables(os.environ)
    except UsageError as exc:       # what every run on gloo or nccl would refuse at once
        found["rendezvous"] = f"{exc} (runs on torch backends are refused until then)"
    return {**info, **found}


def _huge_pages() -> str:
    """The kernel's transparent huge page setting, and what runs put their buffers on."""
    from collbench.backends import pages

    setting = pages.kernel_setting()
    kernel = (f"the kernel's transparent huge pages: {setting}"
              if setting else "the kernel does not say")
    return f"{kernel}; buffers on {pages.DEFAULT} pages unless --pages huge"


_LEVEL_PROBE = ("import mpi4py; mpi4py.rc.thread_level = 'multiple'\nfrom mpi4py import MPI; from "
                "collbench.backends.threads import provided; print(provided(MPI))")


def _thread_level() -> str:
    """The level runs ask for, and the highest the library gives (asked of a one-rank job of its
    own: a singleton MPI_Init_thread)."""
    from collbench.backends.threads import DEFAULT, user_default
    try:
        asked = user_default()
    except UsageError as exc:
        return str(exc)
    why = ("collbench's default"
           if asked == DEFAULT and not os.environ.get("MPI4PY_RC_THREAD_LEVEL")
           else "MPI4PY_RC_THREAD_LEVEL")
    if importlib.util.find_spec("mpi4py") is None:
        return f"{asked} asked ({why}; --thread-level chooses)"
    import subprocess
    import sys
    try:
        probe = subprocess.run([sys.executable, "-c", _LEVEL_PROBE], capture_output=True, text=True,
                               timeout=60)
        most = (probe.stdout.split()[-1]
                if probe.returncode == 0 and probe.stdout.split() else "unknown")
    except (OSError, subprocess.TimeoutExpired):
        most = "unknown"
    return f"{asked} asked ({why}; --thread-level chooses); the library gives up to {most}"


def _mpi_library() -> str:
    """The MPI library mpi4py links, read without initialising MPI."""
    if importlib.util.find_spec("mpi4py") is None:
        return "-"
    try:
        import mpi4py
        mpi4py.rc.initialize = False
        from mpi4py import MPI

        from collbench.versions import tidy_library_version
        return tidy_library_version(MPI.Get_library_version())
    except Exception as exc:  # libmpi missing or broken: say so, do not crash
        return f"unusable ({exc.__class__.__name__}: {str(exc).strip().splitlines()[0]})"


def print_report() -> None:
    from collbench.cli.results import print_tables
    from collbench.render.tables import TableModel

    found = tuple(environment_report().items())
    # long reasons wrap
    print_tables([TableModel("collbench env", ("", ""), found, wrapped=(1,))])
