"""Backend registry: built-in names and plugins, each imported only when a backend is used.

A plugin is a class implementing :class:`collbench.backends.base.Backend`, announced under the
entry point group ``collbench.backends``; the names it may take and what a broken one does:
docs/plugins.md.

Here: ``base`` (the interface and the control channel), ``devices`` (where buffers live),
``mpi``, ``mpi_pickle``, ``gloo``, ``nccl``, and what they share: ``_mpi`` (mpi4py, MPI's
names of reductions and pair types, the MPI control channel), ``_torch`` (torch.distributed's
set-up, the torch control channel), ``torchdist`` (the torch backends' calls).

May import: ``collbench.errors``, ``collbench.versions``, ``collbench.benchmarks``,
``collbench.measure`` (the bound call and the control channel a backend makes),
``collbench.launch`` (where the rank is, rendezvous), numpy; mpi4py and torch only inside the
functions that set a backend up.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Optional

from collbench.backends.base import Backend, BackendOptions, Control
from collbench.errors import BackendUnavailable, UsageError

ENTRY_POINT_GROUP = "collbench.backends"

_BUILTIN = {
    "mpi": ("collbench.backends.mpi", "MpiBackend"),
    "mpi-pickle": ("collbench.backends.mpi_pickle", "MpiPickleBackend"),
    "gloo": ("collbench.backends.gloo", "GlooBackend"),
    "nccl": ("collbench.backends.nccl", "NcclBackend"),
}
BUILTIN_NAMES = tuple(_BUILTIN)


@functools.lru_cache(maxsize=None)
def plugins() -> dict:
    """Installed plugins' entry points by name (not imported), built-in names left out."""
    from importlib.metadata import entry_points

    try:
        found = entry_points(group=ENTRY_POINT_GROUP)
    except Exception:       # a broken installed distribution must not stop collbench
        return {}
    return {ep.name: ep for ep in sorted(found, key=lambda ep: ep.name)
            if ep.name not in _BUILTIN and ep.name != "all" and ep.name.strip() == ep.name
            and "," not in ep.name}


def names() -> tuple:
    """Every backend name: the built-in ones, then the plugins."""
    return BUILTIN_NAMES + tuple(plugins())


@functools.lru_cache(maxsize=None)
def backend_class(name: str) -> type[Backend]:
    """The class of backend ``name``; UsageError when unknown, BackendUnavailable when a plugin
    does not import or is not a Backend."""
    if name in _BUILTIN:
        module, cls = _BUILTIN[name]
        return getattr(importlib.import_module(module), cls)
    ep = plugins().get(name)
    if ep is None:
        raise UsageError(f"unknown backend {name!r}; choose from: {', '.join(names())}, or all")
    try:
        cls = ep.load()
    except Exception as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise BackendUnavailable(f"plugin {ep.value} did not import ({type(exc).__name__}"
                                 f"{': ' + detail if detail else ''})") from None
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendUnavailable(f"plugin {ep.value} is not a subclass of "
                                 "collbench.backends.base.Backend")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise BackendUnavailable(f"plugin {ep.value} does not implement {missing}")
    return cls


def unavailable_reason(name: str) -> Optional[str]:
    """Why a backend cannot run here, or None; imports nothing heavy for the MPI backends."""
    try:
        return backend_class(name).unavailable_reason()
    except BackendUnavailable as exc:
        return str(exc)
    except Exception as exc:          # a plugin's own check failed: say so in one line
        if name in _BUILTIN:
            raise
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return ("its availability check failed "
                f"({type(exc).__name__}{': ' + detail if detail else ''})")


class PluginFault(UsageError):
    """A plugin's method raised, or answered what it cannot: the plugin's fault, one line."""


def asked_of(name: str, method: str, **kwargs):
    """``backend_class(name).<method>(**kwargs)`` (a classmethod the plan asks before any rank
    starts). A plugin's method that raises is the plugin's fault, said in one line as its
    (PluginFault); a built-in's is a bug and raises as it is."""
    cls = backend_class(name)
    try:
        return getattr(cls, method)(**kwargs)
    except Exception as exc:
        if name in _BUILTIN:
            raise
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise PluginFault(f"backend plugin {name}: its {method}() failed ({type(exc).__name__}"
                         f"{': ' + detail if detail else ''})") from None


def self_launch_ranks(name: str) -> Optional[int]:
    """How many ranks backend ``name`` asks for when collbench launches itself (None: no
    preference); a plugin's answer that is not a count of ranks is refused in one line."""
    asked = asked_of(name, "self_launch_ranks")
    if asked is not None and (isinstance(asked, bool) or not isinstance(asked, int) or asked < 1):
        raise PluginFault(f"backend plugin {name}: its self_launch_ranks() gave {asked!r}, not a "
                          "number of ranks (1 or more) or None")
    return asked


def uses_mpi(name: str) -> bool:
    return backend_class(name).uses_mpi


def make_control(mpi_launcher: bool, backends,
                 options: BackendOptions = BackendOptions()) -> Control:
    """The ranks' channel for small messages outside timed regions: MPI when the launcher is an
    MPI one or a backend uses MPI, else a gloo process group of its own, on the default group,
    which meets as ``options.init_method`` says."""
    if mpi_launcher or any(uses_mpi(b) for b in backends):
        from collbench.backends._mpi import MpiControl
        return MpiControl()
    from collbench.backends._torch import TorchControl
    return TorchControl(options.init_method)


def abort_mpi_job(code: int) -> bool:
    """MPI_Abort on the world, initialising MPI first if need be (ranks of the job may be waiting
    in its start-up); False when no MPI library can be used here."""
    from collbench.backends._mpi import abort_world
    return abort_world(code)


def parse_backends(text: str) -> tuple[list[str], list[str]]:
    """``--backend`` value -> (usable names in order, notes about skipped ones).

    Explicitly named backends that cannot run are an error; ``all`` skips them with a note.
    """
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not items:
        raise UsageError("--backend is empty; choose from: " + ", ".join(names()) + ", or all")
    chosen: list[str] = []
    skipped: dict = {}                  # reason -> backends skipped for it (said once)
    for item in items:
        for name in names() if item == "all" else (item,):
            if name not in names():
                raise UsageError(f"unknown backend {name!r}; choose from: {', '.join(names())}, or "
                                 "all")
            if name in chosen:
                continue
            reason = unavailable_reason(name)
            if reason is None:
                chosen.append(name)
            elif item == "all":
                skipped.setdefault(reason, []).append(name)
            else:
                raise BackendUnavailable(f"backend {name} is not usable: {reason}")
    notes = [f"skipping backend{'s' if len(which) > 1 else ''} {', '.join(which)}: {reason}"
             for reason, which in skipped.items()]
    if not chosen:
        raise BackendUnavailable("no usable backend: " + "; ".join(notes))
    return chosen, notes
