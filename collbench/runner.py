"""One rank's run: set up backends, sweep collectives x backends x sizes, hand rows to rank 0's
output. The measurement itself is ``harness.measure``; this module only sequences it.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

from collbench import harness, memory
from collbench.backends import backend_class
from collbench.collectives import Collective, get_collective
from collbench.datatypes import NO_OP, OPS, dtype_of
from collbench.errors import UsageError
from collbench.launch import Launcher
from collbench.metadata import collect, hostname, ranks_per_node
from collbench.output import OutputSettings, make_output
from collbench.results import Row, RunResult, bandwidths
from collbench.sizes import format_size
from collbench.stats import summarize

FILL_CHUNK = 1 << 22


@dataclass(frozen=True)
class Plan:
    collectives: tuple
    backends: tuple
    sizes: tuple
    dtype: str = "float32"
    op: str = "sum"
    root: int = 0
    timings: tuple = ("latency",)
    timing: harness.TimingSettings = harness.TimingSettings()
    check: bool = True
    output: OutputSettings = OutputSettings()
    argv: tuple = ()
    notes: tuple = ()
    verbose: bool = False


@dataclass(frozen=True)
class SizePoint:
    requested: int
    elements: int        # elements in size_bytes
    size_bytes: int
    per_rank_bytes: int
    send_len: int
    recv_len: int


def size_points(coll: Collective, sizes, itemsize: int, n: int) -> tuple[list, list]:
    """Round each size down to whole elements that split evenly over n ranks."""
    if not coll.moves_data:
        return [SizePoint(0, 0, 0, 0, 0, 0)], []
    points, notes, seen = [], [], set()
    granule = coll.granule(n)
    for size in sizes:
        elements = (size // itemsize) // granule * granule
        if elements == 0:
            notes.append(f"{coll.name}: size {format_size(size)} is too small for {n} ranks of "
                         f"{itemsize}-byte elements; skipped")
            continue
        if elements in seen:
            continue
        seen.add(elements)
        send, recv = coll.lengths(elements, n)
        per_rank = elements * itemsize if coll.size_is_per_rank else elements * itemsize // n
        points.append(SizePoint(size, elements, elements * itemsize, per_rank, send, recv))
    return points, notes


def make_control(launcher: Launcher, backends: tuple):
    uses_mpi = launcher.mpi or any(backend_class(b).uses_mpi for b in backends)
    if uses_mpi:
        from collbench.backends._mpi import MpiControl
        return MpiControl()
    from collbench.backends._torch import TorchControl
    return TorchControl(launcher)


def _fill(backend, buffers, coll: Collective, op, rank: int, n: int, send_len: int, dtype) -> None:
    for start in range(0, send_len, FILL_CHUNK):
        k = np.arange(start, min(send_len, start + FILL_CHUNK))
        backend.fill(buffers, start=start, values=np.asarray(op.value(rank, k, n)).astype(dtype))


def _row(plan, coll, backend_name, point, m, timing, wrong, checked, n, rpn) -> Row:
    s = summarize(m.samples_us)
    algbw, busbw = bandwidths(point.size_bytes, s.p50, coll.bus_factor(n))
    means = [x for x in (m.rank_means_us or []) if x is not None and not math.isnan(x)]
    check = "skipped" if not checked else ("ok" if wrong == 0 else f"wrong:{wrong}")
    return Row(coll.name, backend_name, plan.dtype, plan.op if coll.reduces else NO_OP, n, rpn,
               point.size_bytes, point.per_rank_bytes, point.elements, timing, s.n, s.p50, s.ci_low,
               s.ci_high, s.mean, s.min, s.p95, s.p99, s.max, float(np.mean(means)) if means else math.nan,
               algbw, busbw, check, m.precision_reached)


def _sweep(plan, coll, name, backend, control, out, rpn, failures) -> None:
    n, rank = control.size, control.rank
    dtype = dtype_of(plan.dtype)
    op = OPS[plan.op] if coll.reduces else OPS["sum"]
    op_name = plan.op if coll.reduces else NO_OP
    reason = backend.supports(collective=coll.name, dtype=dtype, op=op_name)
    if reason:
        out.note(f"{coll.name} on {name}: {reason}; skipped")
        return
    points, notes = size_points(coll, plan.sizes, dtype.itemsize, n)
    budget = control.bcast(memory.budget_bytes() if rank == 0 else None)
    fits, too_big = memory.split_by_budget(points, dtype.itemsize, backend.extra_copies, rpn, budget)
    for note in notes + [memory.skip_note(coll.name, name, p, dtype.itemsize, backend.extra_copies, rpn, budget)
                         for p in too_big]:
        out.note(note)
    if not fits:
        return
    top = fits[-1]
    buffers = backend.allocate(send_len=top.send_len, recv_len=top.recv_len, dtype=dtype, in_place=coll.in_place)
    _fill(backend, buffers, coll, op, rank, n, top.send_len, dtype)
    for point in fits:
        out.step(f"{coll.name} {name} {format_size(point.size_bytes) if point.size_bytes else ''}")
        bound = backend.bind(buffers, collective=coll.name, send_len=point.send_len, recv_len=point.recv_len,
                             op=op_name, root=plan.root)
        wrong = 0
        if plan.check:
            mine = harness.count_wrong(bound, coll, op, n, rank, plan.root, point.elements, point.recv_len)
            wrong = control.allreduce_sum(mine)
            if wrong:
                failures.append(f"{coll.name} on {name} at {format_size(point.size_bytes)}: {wrong} wrong elements")
        for timing in plan.timings:
            settings = dataclasses.replace(plan.timing, mode=timing)
            m = harness.measure(bound, barrier=backend.barrier, sync=backend.synchronize, control=control,
                                settings=settings)
            if rank == 0:
                out.add(_row(plan, coll, name, point, m, timing, wrong, plan.check, n, rpn),
                        m.samples_us.tolist(), m.rank_means_us)
    backend.release(buffers)


def run(plan: Plan, launcher: Launcher) -> int:
    """Run the plan on this rank; returns the process exit code."""
    control = make_control(launcher, plan.backends)
    if plan.root >= control.size:
        raise UsageError(f"--root {plan.root} is outside the world of {control.size} ranks (0..{control.size - 1})")
    backends = {}
    for name in plan.backends:
        backend = backend_class(name)()
        backend.setup(control=control)
        backends[name] = backend
    hosts = control.gather(hostname())
    hosts = control.bcast(hosts)
    rpn = ranks_per_node(hosts)
    is_root = control.rank == 0
    result = None
    if is_root:
        versions = {}
        for backend in backends.values():
            versions.update(backend.versions())
        settings = {**dataclasses.asdict(plan.timing), "timings": list(plan.timings), "check": plan.check,
                    "timer": harness.TIMER_NAME, "timer_resolution_s": harness.TIMER_RESOLUTION_S,
                    "root": plan.root, "backends": list(plan.backends)}
        result = RunResult(collect(hostnames=hosts, launcher=launcher.name, argv=list(plan.argv),
                                   settings=settings, versions=versions))
    steps = sum(len(size_points(get_collective(c), plan.sizes, dtype_of(plan.dtype).itemsize, control.size)[0])
                for c in plan.collectives) * len(plan.backends) * len(plan.timings)
    out = make_output(is_root, plan.output, result, steps)
    for note in plan.notes:
        out.note(note)
    failures: list = []
    try:
        for cname in plan.collectives:
            coll = get_collective(cname)
            for name, backend in backends.items():
                _sweep(plan, coll, name, backend, control, out, rpn, failures)
                control.barrier()
            out.collective_done()
        _warn_resolution(out, result)
    finally:
        out.finish()
    for backend in backends.values():
        backend.close()
    if failures and is_root:
        for failure in failures:
            print(f"collbench: CHECK FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _warn_resolution(out, result: Optional[RunResult]) -> None:
    if result is None:
        return
    limit = 10 * harness.TIMER_RESOLUTION_S * 1e6
    low = [r for r in result.rows if r.time_us_p50 < limit]
    if low:
        out.note(f"{len(low)} median(s) are under 10x the timer resolution ({limit:.3f} µs); treat them with care")
