"""Memory guard: estimate what a size needs on each node before allocating it.

Per rank a size needs its send and receive buffers plus, for backends that copy the payload
(pickling), that many extra copies of the larger buffer. Per node that is multiplied by the
ranks sharing the node. Sizes whose need exceeds the budget (a share of the memory available
when the run starts) are skipped with a note instead of letting the kernel kill the job.
"""

from __future__ import annotations

import os

from collbench.measure.sizes import format_size

BUDGET_SHARE = 0.8


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo; falls back to total physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def budget_bytes() -> int:
    override = os.environ.get("COLLBENCH_MEMORY_LIMIT")
    if override:
        from collbench.measure.sizes import parse_bytes
        return parse_bytes(override)
    return int(available_bytes() * BUDGET_SHARE)


def need_per_rank(point, itemsize: int, extra_copies: int) -> int:
    send, recv = point.send_len * itemsize, point.recv_len * itemsize
    return send + recv + extra_copies * max(send, recv)


def split_by_budget(points, itemsize: int, extra_copies: int, ranks_per_node: int, budget: int):
    """(points that fit, points that do not) in the node's memory budget."""
    fits = [p for p in points if need_per_rank(p, itemsize, extra_copies) * ranks_per_node <= budget]
    return fits, [p for p in points if p not in fits]


def skip_note(collective: str, backend: str, point, itemsize: int, extra_copies: int,
              ranks_per_node: int, budget: int) -> str:
    need = need_per_rank(point, itemsize, extra_copies) * ranks_per_node
    return (f"{collective} on {backend} at {format_size(point.size_bytes)}: needs about "
            f"{need / 2**30:.1f} GiB on this node ({ranks_per_node} ranks) or device, more than the "
            f"{budget / 2**30:.1f} GiB available; skipped")
