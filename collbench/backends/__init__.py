"""Backend registry: names map to modules imported only when a backend is used."""

from __future__ import annotations

import importlib
from typing import Optional

from collbench.backends.base import Backend
from collbench.errors import BackendUnavailable, UsageError

_REGISTRY = {
    "mpi": ("collbench.backends.mpi", "MpiBackend"),
    "mpi-pickle": ("collbench.backends.mpi_pickle", "MpiPickleBackend"),
    "gloo": ("collbench.backends.gloo", "GlooBackend"),
    "nccl": ("collbench.backends.nccl", "NcclBackend"),
}
NAMES = tuple(_REGISTRY)
MPI_BACKENDS = ("mpi", "mpi-pickle")
TORCH_BACKENDS = ("gloo", "nccl")


def backend_class(name: str) -> type[Backend]:
    try:
        module, cls = _REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown backend {name!r}; choose from: {', '.join(NAMES)}, or all") from None
    return getattr(importlib.import_module(module), cls)


def unavailable_reason(name: str) -> Optional[str]:
    """Why a backend cannot run here, or None; imports nothing heavy for the MPI backends."""
    return backend_class(name).unavailable_reason()


def parse_backends(text: str) -> tuple[list[str], list[str]]:
    """``--backend`` value -> (usable names in order, notes about skipped ones).

    Explicitly named backends that cannot run are an error; ``all`` skips them with a note.
    """
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not items:
        raise UsageError("--backend is empty; choose from: " + ", ".join(NAMES) + ", or all")
    chosen: list[str] = []
    notes: list[str] = []
    for item in items:
        names = NAMES if item == "all" else (item,)
        for name in names:
            backend_class(name)  # unknown name -> UsageError
            if name in chosen:
                continue
            reason = unavailable_reason(name)
            if reason is None:
                chosen.append(name)
            elif item == "all":
                notes.append(f"skipping backend {name}: {reason}")
            else:
                raise BackendUnavailable(f"backend {name} is not usable: {reason}")
    if not chosen:
        raise BackendUnavailable("no usable backend: " + "; ".join(notes))
    return chosen, notes
