"""How much CPU other processes took while a round was measured, on each host.

Each rank meters its round (``CpuMeter``): its own CPU time, the whole host's busy and steal
time from /proc/stat, and how long tasks waited for a CPU (Linux pressure stall information).
Rank 0 sums them up per host (``round_load``): a round during which other processes wanted more
than the cores the ranks left idle is marked busy, and ``collbench compare`` weighs its numbers
with that in mind. Each host's ``cpu_share`` says how much of the cores its ranks could use
(their affinity, at most one each) they did use: beside a neighbour that takes their cores it
falls, and compare does not blame the code for a slowdown that the CPU the ranks lacked can
explain (``analysis.compare``).
"""

from __future__ import annotations

import math
import os
import time
from typing import Optional

#: CPU (in cores) that other processes may use beyond the idle cores before a round is busy,
#: on top of the measurement's own resolution (whole ticks of /proc/stat over the round).
BUSY_MARGIN_CORES = 0.25
#: Share of a round's wall time during which some task waited for a CPU (Linux PSI) beyond which
#: the round is busy, when the host has a core for every rank.
BUSY_WAIT_SHARE = 0.25


def _host_cpu() -> Optional[tuple]:
    """(busy seconds, steal seconds, seconds per tick) of the whole host since boot, from
    /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
        if fields[0] != "cpu":
            return None
        ticks = [int(v) for v in fields[1:]]
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / hz, steal / hz, 1.0 / hz


def _cpu_pressure() -> Optional[float]:
    """Seconds since boot during which some runnable task of the host waited for a CPU (Linux
    pressure stall information, /proc/pressure/cpu, microsecond resolution); None without it."""
    try:
        with open("/proc/pressure/cpu", encoding="ascii") as fh:
            some = fh.readline().split()
        return int(dict(f.split("=", 1) for f in some[1:])["total"]) / 1e6
    except (OSError, ValueError, KeyError, IndexError):
        return None


def affinity() -> set:
    """The cores this process may run on (empty where the platform does not say)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set()


def _usable(reports: list) -> Optional[int]:
    """How many cores the ranks of one host may use between them: the union of their masks
    (``cpu_set``, hexadecimal: each rank bound to its own core, or all sharing one), None where
    a rank did not say."""
    mask = 0
    for report in reports:
        try:
            mask |= int(report["cpu_set"], 16)
        except (KeyError, TypeError, ValueError):
            return None
    return bin(mask).count("1") or None


class CpuMeter:
    """What this rank and its whole host spent on the CPU during a round, and how long tasks
    waited for a CPU (which, unlike /proc/stat's ticks, a round of 50 ms can still tell)."""

    def start(self) -> None:
        self._spent = {"wall": 0.0, "own": 0.0, "busy": 0.0, "steal": 0.0, "wait": 0.0}
        self._segments, self._tick, self._unknown = 0, 0.01, set()
        self.resume()

    def resume(self) -> None:
        """Counts again after ``pause``: a side of an ab pair counts only while it measures."""
        self._wall = time.monotonic()
        self._own = time.process_time()
        self._host = _host_cpu()
        self._pressure = _cpu_pressure()

    def pause(self) -> None:
        host, pressure = _host_cpu(), _cpu_pressure()
        spent = self._spent
        spent["wall"] += time.monotonic() - self._wall
        spent["own"] += time.process_time() - self._own
        if host is not None and self._host is not None:
            spent["busy"] += host[0] - self._host[0]
            spent["steal"] += host[1] - self._host[1]
            self._tick = host[2]
        else:
            self._unknown.add("host")
        if pressure is not None and self._pressure is not None:
            spent["wait"] += pressure - self._pressure
        else:
            self._unknown.add("wait")
        self._segments += 1

    def stop(self) -> dict:
        self.pause()
        spent = self._spent
        cores = affinity()
        report = {"wall_s": spent["wall"], "own_cpu_s": spent["own"],
                  "host_busy_s": None, "host_steal_s": None, "cpus": os.cpu_count() or 1,
                  "cpu_set": format(sum(1 << c for c in cores), "x") if cores else None,
                  "cpu_wait_s": spent["wait"] if "wait" not in self._unknown else None}
        if "host" not in self._unknown:
            report["host_busy_s"] = spent["busy"]
            report["host_steal_s"] = spent["steal"]
            # /proc/stat counts whole ticks, at both ends of every stretch counted: their errors
            # add up as a random walk over the stretches
            report["tick_s"] = self._tick * math.sqrt(self._segments)
        return report


def round_load(reports: list, hosts: list) -> dict:
    """Rank 0's summary of every rank's ``CpuMeter.stop()``: per host, the cores other processes
    used on average, and whether that was more than the ranks' idle cores (busy)."""
    per_host: dict = {}
    for rank, (report, host) in enumerate(zip(reports, hosts)):
        entry = per_host.setdefault(host,
                                    {"ranks": 0, "own_cpu_s": 0.0, "reader": report, "reports": []})
        entry["ranks"] += 1
        entry["own_cpu_s"] += report["own_cpu_s"]
        entry["reports"].append(report)
    summary = {}
    busy = False
    worst = 0.0
    for host, entry in per_host.items():
        reader = entry["reader"]
        if reader["host_busy_s"] is None or reader["wall_s"] <= 0:
            summary[host] = {"other_cpu_cores": None}
            continue
        other = max(0.0, reader["host_busy_s"] - entry["own_cpu_s"]) / reader["wall_s"]
        idle = max(0, reader["cpus"] - entry["ranks"])
        # /proc/stat counts whole ticks: each CPU's count may be off by one at either end,
        # which in a short round is a lot of cores. Only what lies beyond that counts.
        resolution = 2.0 * reader["cpus"] * reader.get("tick_s", 0.01) / reader["wall_s"]
        host_busy = other > idle + BUSY_MARGIN_CORES + resolution
        # Tasks waiting for a CPU most of the round, where the ranks alone fit the cores they may
        # use (taskset): a neighbour, however short the round.
        waited = reader.get("cpu_wait_s")
        wait_share = waited / reader["wall_s"] if waited is not None else None
        joined = _usable(entry["reports"])
        usable = joined or reader["cpus"]
        if wait_share is not None and entry["ranks"] <= usable and wait_share > BUSY_WAIT_SHARE:
            host_busy = True
        busy = busy or host_busy
        worst = max(worst, other)
        summary[host] = {"other_cpu_cores": round(other, 3),
                         "cpu_wait_share": round(wait_share, 3) if wait_share is not None else None,
                         "steal_cores": round(reader["host_steal_s"] / reader["wall_s"], 3),
                         "own_cpu_cores": round(entry["own_cpu_s"] / reader["wall_s"], 3),
                         "cpus": reader["cpus"],
                         "ranks": entry["ranks"], "resolution_cores": round(resolution, 3),
                         "busy": host_busy, **({"usable_cpus": joined,
                             "cpu_share": round(entry["own_cpu_s"] / reader["wall_s"]
                                                / min(entry["ranks"], joined), 3)}
                            if joined else {})}
    return {"busy": busy, "other_cpu_cores": round(worst, 3), "hosts": summary}
