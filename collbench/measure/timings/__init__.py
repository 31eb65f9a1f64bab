"""How a sample is timed (``--timing``, a comma list measured side by side): each timing is a row
of its own, and ``compare`` matches rows on it. Each is one module of this package that defines
``TIMING`` (``latency``, ``throughput``, ``graph``, ``device``: their docstrings say what a sample
is), or a plugin's entry point in the group ``collbench.timings``; ``base`` says what a timing
provides. ``both`` is latency and throughput.
"""

from __future__ import annotations

import functools

from collbench.errors import UsageError
from collbench.measure.timings import device, graph, latency, throughput
from collbench.measure.timings.base import Timing

ENTRY_POINT_GROUP = "collbench.timings"
#: the built-in timings, each a module of this package, in the order tables and rows keep
_BUILTIN = (latency, throughput, graph, device)
#: What ``--timing both`` stands for.
BOTH = ("latency", "throughput")
#: What ``--timing`` takes without a plugin: checked first, so that plugins load only when named.
BUILTIN_CHOICES = (*(module.TIMING.name for module in _BUILTIN), "both")


def _builtin() -> dict:
    return {module.TIMING.name: module.TIMING for module in _BUILTIN}


@functools.lru_cache(maxsize=None)
def _plugins() -> dict:
    """Installed plugins' timings by name; one that does not load, or is not a Timing, or takes
    a name already taken, is left out (``collbench env`` lists backends, not timings)."""
    from importlib.metadata import entry_points

    try:
        found = entry_points(group=ENTRY_POINT_GROUP)
    except Exception:       # a broken installed distribution must not stop collbench
        return {}
    out = {}
    for ep in sorted(found, key=lambda ep: ep.name):
        try:
            timing = ep.load()
        except Exception:
            continue
        if isinstance(timing, Timing) and timing.name == ep.name and ep.name not in TIMINGS \
                and ep.name != "both" and "," not in ep.name:
            out[ep.name] = timing
    return out


TIMINGS: dict = _builtin()


def get_timing(name: str) -> Timing:
    """The timing called ``name``, built in or a plugin's."""
    timing = TIMINGS.get(name) or _plugins().get(name)
    if timing is None:
        raise UsageError(f"unknown timing {name!r}; choose from {', '.join(choices())}")
    return timing


def choices() -> tuple:
    """What ``--timing`` takes: every timing, then ``both``."""
    return (*TIMINGS, *_plugins(), "both")


def timing_modes(asked_for) -> tuple:
    """The timings of ``--timing`` (a comma list, ``both`` standing for latency and throughput),
    each once, in the order of ``choices``: how tables and rows order them."""
    known = BUILTIN_CHOICES if all(c in BUILTIN_CHOICES for c in asked_for) else choices()
    asked = set()
    for choice in asked_for:
        if choice not in known:
            raise UsageError(f"unknown timing {choice!r}; choose from {', '.join(known)}")
        asked.update(BOTH if choice == "both" else (choice,))
    return tuple(name for name in known if name in asked)


def on_device(name: str) -> bool:
    timing = TIMINGS.get(name) or _plugins().get(name)
    return timing is not None and timing.on_device


def eager_and_own(names) -> tuple:
    """Of the timings ``names``: (the host's, batched ones first: what a call costs with the
    framework's dispatch; the device's own), for the tables that set them side by side. A name
    no timing has here (a plugin's, from another machine's file) is left out."""
    known = [t for t in (TIMINGS.get(n) or (_plugins().get(n) if n not in TIMINGS else None)
                         for n in names) if t]
    host = sorted((t for t in known if not t.on_device), key=lambda t: not t.batched)
    return tuple(t.name for t in host), tuple(t.name for t in known if t.on_device)
