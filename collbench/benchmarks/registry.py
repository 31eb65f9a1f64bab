"""Every benchmark by name: each module of this package that defines ``BENCHMARK``.

Adding a benchmark means adding its module (and its tests): its command, its help, its place
in the command list and in tables, and for a collective its place in ``collbench all``, all
follow from the module. ``position`` orders them.
"""

from __future__ import annotations

import importlib
import pkgutil

from collbench import benchmarks as _package
from collbench.benchmarks.base import COLLECTIVE, Benchmark
from collbench.errors import UsageError

_NOT_BENCHMARKS = {"base", "registry", "dtypes", "ops"}


def _discover() -> dict:
    found = []
    for info in pkgutil.iter_modules(_package.__path__):
        if info.name not in _NOT_BENCHMARKS:
            module = importlib.import_module(f"{_package.__name__}.{info.name}")
            if isinstance(getattr(module, "BENCHMARK", None), Benchmark):
                found.append(module.BENCHMARK)
    return {b.name: b for b in sorted(found, key=lambda b: (b.position, b.name))}


BENCHMARKS: dict[str, Benchmark] = _discover()
#: every benchmark's name, in order: the commands
NAMES = tuple(BENCHMARKS)
COLLECTIVES: dict[str, Benchmark] = {name: b for name, b in BENCHMARKS.items()
                                     if b.kind == COLLECTIVE}
#: the collectives in order that ``collbench all`` measures
ORDER = tuple(name for name, b in COLLECTIVES.items() if b.in_all)


def get_benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise UsageError(f"unknown benchmark {name!r}; choose one of: {', '.join(NAMES)}") from None
