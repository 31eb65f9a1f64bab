"""One rank's run: set up backends, sweep collectives x backends x sizes, hand rows to rank 0's
output. The measurement itself is ``harness.measure``; this module only sequences it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from collbench import harness, memory, supervise, testhooks
from collbench.backends import backend_class
from collbench.collectives import Collective, get_collective
from collbench.datatypes import NO_OP, OPS, dtype_of
from collbench.errors import UsageError
from collbench.launch import Launcher
from collbench.metadata import collect, hostname, ranks_per_node
from collbench.output import NullOutput, Output, OutputSettings, check_outputs
from collbench.results import Row, RunResult, bandwidths
from collbench.sizes import format_size
from collbench.stats import summarize

FILL_CHUNK = 1 << 22
#: Start-up (imports, MPI initialisation, torch rendezvous) may take longer than a short
#: --timeout meant for one size; it gets at least this many seconds.
STARTUP_TIMEOUT = 120.0


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
    timeout: float = 300.0          # seconds one size may take before the job is aborted; 0 = never


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
            why = (f"smaller than one {itemsize}-byte element" if granule == 1 else
                   f"too small to split over {n} ranks in {itemsize}-byte elements")
            notes.append(f"{coll.name}: size {format_size(size)} is {why}; skipped")
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
    checked = checked and coll.moves_data        # a barrier carries nothing to check
    return Row(
        collective=coll.name, backend=backend_name, dtype=plan.dtype,
        op=plan.op if coll.reduces else NO_OP, world_size=n, ranks_per_node=rpn,
        size_bytes=point.size_bytes, per_rank_bytes=point.per_rank_bytes, count=point.elements,
        timing=timing, iterations=s.n, time_us_p50=s.p50, time_us_ci_low=s.ci_low,
        time_us_ci_high=s.ci_high, time_us_mean=s.mean, time_us_min=s.min, time_us_p95=s.p95,
        time_us_p99=s.p99, time_us_max=s.max,
        time_us_rank_avg=float(np.mean(means)) if means else math.nan,
        algbw_gbps=algbw, busbw_gbps=busbw,
        check="skipped" if not checked else ("ok" if wrong == 0 else f"wrong:{wrong}"),
        precision_reached=m.precision_reached)


class Sweep:
    """One rank's walk over collectives x backends x sizes, with rank 0's output."""

    def __init__(self, plan: Plan, control, backends: dict, rpn: int, watchdog: supervise.Watchdog) -> None:
        self.plan, self.control, self.backends, self.rpn = plan, control, backends, rpn
        self.watchdog = watchdog
        self.out = None
        self.failures: list = []
        self.hooks = testhooks.from_env()
        self.dtype = dtype_of(plan.dtype)
        budget = control.bcast(memory.budget_bytes() if control.rank == 0 else None)
        self.points: dict = {}
        self.notes: list = []
        for cname in plan.collectives:
            for name, backend in backends.items():
                self.points[cname, name] = self._points(get_collective(cname), name, backend, budget)

    def _points(self, coll: Collective, name: str, backend, budget: int) -> list:
        """The sizes this (collective, backend) will measure; notes say why others are skipped."""
        op_name = self.plan.op if coll.reduces else NO_OP
        reason = backend.supports(collective=coll.name, dtype=self.dtype, op=op_name)
        if reason:
            self.notes.append(f"{coll.name} on {name}: {reason}; skipped")
            return []
        itemsize = self.dtype.itemsize
        points, notes = size_points(coll, self.plan.sizes, itemsize, self.control.size)
        self.notes += notes
        limit = backend.max_message_bytes()
        if limit is not None:
            over = [p for p in points if max(p.send_len, p.recv_len) * itemsize > limit]
            self.notes += [f"{coll.name} on {name} at {format_size(p.size_bytes)}: a message beyond "
                           f"{name}'s {format_size(limit)} limit; skipped" for p in over]
            points = [p for p in points if p not in over]
        sharing = self.rpn
        device_free = backend.device_memory_bytes()
        if device_free is not None:           # one device per rank: the fullest device decides for all
            gathered = self.control.gather(device_free)
            budget = self.control.bcast(int(min(gathered) * memory.BUDGET_SHARE) if gathered else None)
            sharing = 1
        fits, too_big = memory.split_by_budget(points, itemsize, backend.extra_copies, sharing, budget)
        self.notes += [memory.skip_note(coll.name, name, p, itemsize, backend.extra_copies, sharing, budget)
                       for p in too_big]
        return fits

    @property
    def steps(self) -> int:
        return sum(len(p) for p in self.points.values()) * len(self.plan.timings)

    def run(self, out) -> None:
        self.out = out
        for note in dict.fromkeys(self.notes):      # once each, though every backend found it
            self.out.note(note)
        for cname in self.plan.collectives:
            coll = get_collective(cname)
            for name, backend in self.backends.items():
                self._collective(coll, name, backend, self.points[cname, name])
                self.control.barrier()
            self.out.collective_done()
        self.watchdog.disarm()
        supervise.at("shutdown")

    def _collective(self, coll: Collective, name: str, backend, points: list) -> None:
        if not points:
            return
        plan, control = self.plan, self.control
        n, rank = control.size, control.rank
        op = OPS[plan.op] if coll.reduces else OPS["sum"]
        op_name = plan.op if coll.reduces else NO_OP
        top = points[-1]
        where = f"allocation for {coll.name} on {name}"
        supervise.at(where)
        self.watchdog.arm(plan.timeout, where)
        buffers = backend.allocate(send_len=top.send_len, recv_len=top.recv_len, dtype=self.dtype,
                                   in_place=coll.in_place)
        _fill(backend, buffers, coll, op, rank, n, top.send_len, self.dtype)
        for point in points:
            label = format_size(point.size_bytes) if point.size_bytes else "-"
            where = f"{coll.name} on {name} at {label}" if point.size_bytes else f"{coll.name} on {name}"
            supervise.at(where)
            self.watchdog.arm(plan.timeout, where)
            self.out.step(where)
            if self.hooks.pause_s:
                time.sleep(self.hooks.pause_s)
            if self.hooks.hangs(rank, coll.name, point.size_bytes):
                time.sleep(1e9)
            bound = backend.bind(buffers, collective=coll.name, send_len=point.send_len,
                                 recv_len=point.recv_len, op=op_name, root=plan.root)
            wrong = 0
            if plan.check:
                mine = harness.count_wrong(bound, coll, op, n, rank, plan.root, point.elements, point.recv_len,
                                           corrupt=self.hooks.corrupts(rank))
                wrong = control.allreduce_sum(mine)
                if wrong:
                    self.failures.append(f"{where}: {wrong} wrong elements")
            for timing in plan.timings:
                settings = dataclasses.replace(plan.timing, mode=timing)
                m = harness.measure(bound, barrier=backend.barrier, sync=backend.synchronize, control=control,
                                    settings=settings)
                if rank == 0:
                    self.out.add(_row(plan, coll, name, point, m, timing, wrong, plan.check, n, self.rpn),
                                 m.samples_us.tolist(), m.rank_means_us, {"calls_per_sample": m.calls_per_sample})
        backend.release(buffers)


def run(plan: Plan, launcher: Launcher) -> int:
    """Run the plan on this rank; returns the process exit code."""
    supervise.handle_signals(launcher.rank)
    try:
        return _run(plan, launcher)
    except UsageError:
        raise          # every rank meets the same bad input and exits 2 on its own
    except Exception as exc:
        # A failure on some ranks only (a rendezvous that cannot start, a library error):
        # the others would wait for this one forever, so end the whole job.
        text = str(exc).strip().splitlines()
        print(f"collbench: rank {launcher.rank} failed at {supervise.where() or 'start-up'}: "
              f"{type(exc).__name__}: {text[-1] if text else ''}", file=sys.stderr)
        if plan.verbose:
            import traceback
            traceback.print_exc()
        supervise.abort_job(1)


def _run(plan: Plan, launcher: Launcher) -> int:
    # Start-up (MPI initialisation, torch rendezvous) is under the same --timeout as each size.
    watchdog = supervise.Watchdog()
    where = "start-up (MPI or torch initialisation)"
    supervise.at(where)
    startup_limit = max(plan.timeout, STARTUP_TIMEOUT) if plan.timeout else 0
    watchdog.arm(startup_limit, where)
    control = make_control(launcher, plan.backends)
    supervise.set_job_abort(getattr(control, "abort", None))
    if plan.root >= control.size:
        raise UsageError(f"--root {plan.root} is outside the world of {control.size} ranks (0..{control.size - 1})")
    problem = control.bcast(_output_problem(plan.output) if control.rank == 0 else None)
    if problem:                      # rank 0 alone can judge its paths; every rank must stop
        raise UsageError(problem)
    backends: dict = {}
    try:
        return _measure(plan, launcher, control, backends, watchdog, startup_limit)
    finally:
        for backend in backends.values():
            backend.close()


def _output_problem(settings) -> Optional[str]:
    try:
        check_outputs(settings)
    except UsageError as exc:
        return str(exc)
    return None


def _measure(plan: Plan, launcher: Launcher, control, backends: dict, watchdog, startup_limit: float) -> int:
    for name in plan.backends:
        where = f"set-up of backend {name}"
        supervise.at(where)
        watchdog.arm(startup_limit, where)
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
        timing = {k: v for k, v in dataclasses.asdict(plan.timing).items() if k != "mode"}
        settings = {**timing, "timings": list(plan.timings), "check": plan.check,
                    "timer": harness.TIMER_NAME, "timer_resolution_s": harness.timer_resolution(),
                    "root": plan.root, "backends": list(plan.backends), "timeout_s": plan.timeout}
        result = RunResult(collect(hostnames=hosts, launcher=launcher.name, argv=list(plan.argv),
                                   settings=settings, versions=versions))
    sweep = Sweep(plan, control, backends, rpn, watchdog)
    if not sweep.steps:
        raise UsageError("nothing to measure: " + ("; ".join(sweep.notes[-2:]) or "no sizes"))
    out, problem = NullOutput(), None
    if is_root:
        try:
            out = Output(plan.output, result, sweep.steps)
        except UsageError as exc:        # an output file that appeared since the check
            problem = str(exc)
    problem = control.bcast(problem)
    if problem:
        raise UsageError(problem)
    for note in plan.notes:
        out.note(note)
    try:
        sweep.run(out)
        _warn_resolution(out, result)
    finally:
        out.finish()
    if sweep.failures and is_root:
        for failure in sweep.failures:
            print(f"collbench: CHECK FAILED: {failure}", file=sys.stderr)
    return 1 if sweep.failures else 0


def _warn_resolution(out, result: Optional[RunResult]) -> None:
    if result is None:
        return
    limit = 10 * result.metadata["settings"]["timer_resolution_s"] * 1e6
    low = [r for r in result.rows if r.time_us_p50 < limit]
    if low:
        out.note(f"{len(low)} median(s) are under 10x the timer resolution ({limit:.3f} µs); treat them with care")
