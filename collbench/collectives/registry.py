"""Every collective by name: each module of this package that defines ``COLLECTIVE``.

Adding a collective means adding its module (and its tests); ``position`` places it in
``collbench all`` and in tables.
"""

from __future__ import annotations

import importlib
import pkgutil

from collbench import collectives as _package
from collbench.collectives.base import Collective
from collbench.errors import UsageError

_NOT_COLLECTIVES = {"base", "registry", "datatypes"}


def _discover() -> dict:
    found = []
    for info in pkgutil.iter_modules(_package.__path__):
        if info.name not in _NOT_COLLECTIVES:
            module = importlib.import_module(f"{_package.__name__}.{info.name}")
            if isinstance(getattr(module, "COLLECTIVE", None), Collective):
                found.append(module.COLLECTIVE)
    return {c.name: c for c in sorted(found, key=lambda c: (c.position, c.name))}


COLLECTIVES: dict[str, Collective] = _discover()
ORDER = tuple(COLLECTIVES)


def get_collective(name: str) -> Collective:
    try:
        return COLLECTIVES[name]
    except KeyError:
        raise UsageError(f"unknown collective {name!r}; choose one of: {', '.join(ORDER)}") from None
