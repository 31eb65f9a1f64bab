"""Cache-cold buffers (``--cache cold``, IMB's ``-off_cache``): each timed call works on the next
of a pool of buffer sets that together span more than the last-level cache, so that no call
finds its data where the one before left it.

The pool spans ``SPAN`` times the cache a rank's buffers sit behind: the last-level cache of the
host (read from ``/sys``), or a GPU's L2 for device buffers. A set's buffers start on a page of
their own, so that small messages do not share cache lines either. A pool has at most
``MOST_SETS`` sets: below ``SPAN`` × cache / ``MOST_SETS`` per set (32 KiB for a 32 MiB cache)
it spans less than the cache, and such rows may still find their data there (each row's
``cache_span_bytes`` says what its pool spanned).
"""

from __future__ import annotations

import math
import os
from typing import Any

from collbench.measure.calls import Bound

HOT, COLD = "hot", "cold"
CACHES = (HOT, COLD)
#: how many times the cache the pool spans: a set is used again only after the sets between
#: have passed through more than the cache holds (least recently used goes first)
SPAN = 2
#: the most buffer sets of one pool: each is bound once (a persistent request, for --api
#: persistent), so that small sizes stay cheap to set up
MOST_SETS = 1024
#: each set's buffers start on a page of their own
PAGE = 4096
#: taken where the machine does not say (a container without /sys, say), and said so
ASSUMED_BYTES = 32 << 20
_SYSFS = "/sys/devices/system/cpu/cpu0/cache"


def host_cache() -> tuple:
    """(bytes, where the figure came from) of the host's last-level cache: the highest level of
    cpu0's caches that holds data, from sysfs; ``ASSUMED_BYTES`` where it says nothing."""
    best = (0, 0)
    try:
        entries = sorted(os.listdir(_SYSFS))
    except OSError:
        entries = []
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            with open(os.path.join(_SYSFS, entry, "level")) as f:
                level = int(f.read().strip())
            with open(os.path.join(_SYSFS, entry, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(_SYSFS, entry, "size")) as f:
                size = _bytes(f.read().strip())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and size > 0 and (level, size) > best:
            best = (level, size)
    if best[1] > 0:
        return best[1], f"L{best[0]}, {_SYSFS}"
    return ASSUMED_BYTES, "assumed: the machine does not say"


def of_device(device) -> tuple:
    """(bytes, where from) of the cache a device's buffers sit behind: what the device says
    (``cache_size``: a GPU's L2), else the host's last level."""
    asked = getattr(device, "cache_size", None)
    return asked() if asked is not None else host_cache()


def is_cold(coll, backend) -> bool:
    """Whether ``backend``'s setup gives each call of ``coll`` the next set of a cold pool
    (``--cache cold``; a collective that moves no data has none)."""
    return coll.moves_data and getattr(backend.options, "cache", HOT) == COLD


def _bytes(text: str) -> int:
    """sysfs's cache size ("32768K", "2M") in bytes."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if text[-1:].upper() in "KMG" else text
    return int(digits) * scale


def sets(set_bytes: int, cache_bytes: int) -> int:
    """How many buffer sets of ``set_bytes`` (a rank's send and receive buffers at one size) a
    cold pool holds: enough to span ``SPAN`` × ``cache_bytes``, at least 2, at most
    ``MOST_SETS``."""
    stride = padded(set_bytes)
    return min(MOST_SETS, max(2, math.ceil(SPAN * cache_bytes / stride)))


def padded(set_bytes: int) -> int:
    """A set's bytes, its buffers starting on pages of their own."""
    return max(PAGE, -(-set_bytes // PAGE) * PAGE)


def rotating(bounds: list) -> Bound:
    """One bound call that issues each call on the next of ``bounds`` (the same call over the
    pool's buffer sets), in turn; ``checked`` is the first's, ``release`` releases them all.
    A call started and completed apart completes on the set it started on."""
    runs = [b.run for b in bounds]
    blocking = [b.run_blocking for b in bounds]
    count = len(bounds)
    turn = [0]

    def step() -> int:
        k = turn[0]
        turn[0] = k + 1 if k + 1 < count else 0
        return k

    def run() -> Any:
        return runs[step()]()

    def run_blocking() -> Any:
        return blocking[step()]()

    def release() -> None:
        for b in bounds:
            b.release()

    if bounds[0].start is None:
        return Bound(run=run, run_blocking=run_blocking, checked=bounds[0].checked, release=release)
    starts = [b.start for b in bounds]
    completes = [b.complete for b in bounds]

    def start() -> tuple:
        k = step()
        return k, starts[k]()

    def complete(started: tuple) -> None:
        completes[started[0]](started[1])

    return Bound(run=run, run_blocking=run_blocking, checked=bounds[0].checked, start=start,
                 complete=complete, release=release)
