"""The measurement loop for one (benchmark, backend, size): warm-up, check, timed iterations,
stop rule and cross-rank reduction, for every kind of benchmark.

It talks to backends only through ``Bound`` and ``Control`` and takes its statistics from
``collbench.stats.samples``, so that one loop serves every backend and benchmark. The timing
(``collbench.measure.timings``) decides what a sample is; what the benchmark declares
(``collbench.benchmarks.base``) decides the loop's shape: a barrier before each sample or
none, whose clocks count, what a call's time is divided by, how many groups measure at once.
Ranks that take no part run nothing timed and are neither counted nor judged. How it works:
docs/methodology.md, "Timing" and "Iterations".
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from collbench.measure.calls import Bound, Control
from collbench.benchmarks.base import Benchmark, Roles
from collbench.measure.stop import Budget, StopRule, batching, warm_up
from collbench.measure.timings import get_timing
from collbench.measure.timings import base
from collbench.measure.timings.base import SamplerContext
from collbench.stats.samples import relative_ci_halfwidth

TIMER_NAME = "time.perf_counter"


def timer_resolution() -> float:
    """The smallest step the timer actually shows, in seconds (the clock's nominal resolution,
    often 1 ns, says nothing of what a Python call to it can resolve)."""
    steps = []
    for _ in range(200):
        a = base.timer()
        b = base.timer()
        while b == a:
            b = base.timer()
        steps.append(b - a)
    return max(min(steps), time.get_clock_info("perf_counter").resolution)


@dataclass(frozen=True)
class TimingSettings:
    mode: str = "latency"            # a timing's name (``measure.timings.get_timing``)
    iters: Optional[int] = None      # fixed iteration count; None = adaptive
    warmup: int = 5
    min_iters: int = 10
    max_time: float = 1.0            # seconds of timed work per size (adaptive mode)
    precision: float = 0.02          # target relative half-width of the median's 95% CI


@dataclass(frozen=True)
class Measurement:
    """What one size produced, per group (``Benchmark.group_count``): samples (µs, per message), the
    per-iteration maxima over the group's timed ranks, on rank 0 only (empty elsewhere), and
    whether each reached the precision; every rank's mean (NaN for a rank that takes no part)."""

    samples_us: list
    rank_means_us: Optional[list]
    iterations: int
    calls_per_sample: int
    precision_reached: tuple
    #: device timing: samples not counted because a rank's hold ended before its call was queued
    unheld: int = 0
    #: a call started and completed apart (``--api nonblocking``, ``persistent``), at the latency
    #: timing: per group, each overlap sample's whole time from start to complete with the compute
    #: between (µs, the maximum over the timed ranks), and that compute's own (``overlap``)
    overall_us: list = ()
    compute_us: list = ()
    #: adaptive: the budget (the round's share of --max-time) ran out before --min-iters samples
    short: bool = False
    #: graph timing: the capture recorded no work on the GPU (NCCL does nothing for an in-place
    #: collective on one rank): a sample is a replay's own time
    idle_gpu: bool = False


def _nothing() -> None:
    pass


def per_call(m: Measurement, calls: int) -> Measurement:
    """``m`` of a group of ``calls`` calls issued as one (``--coalesce``) as the time per call."""
    if calls == 1:
        return m
    means = ([x / calls if x is not None else None for x in m.rank_means_us]
             if m.rank_means_us else m.rank_means_us)
    return dataclasses.replace(m, samples_us=[s / calls for s in m.samples_us], rank_means_us=means,
                               calls_per_sample=m.calls_per_sample * calls)


#: What a rank outside a pair runs: nothing, and nothing arrives.
IDLE = Bound(run=_nothing, run_blocking=_nothing, checked=lambda: None)


def measure(bound: Bound, *, bench: Benchmark, roles: Roles, barrier: Callable, sync: Callable,
            control: Control, settings: TimingSettings, device=None,
            called: bool = False) -> Measurement:
    """The first call, warm-up, batching, then batches of samples until the stop rule (decided on
    rank 0) says enough, and the overlap where a call has two steps. ``device``: where the
    buffers live, whose clock and graphs the device timings use; ``called``: the check has just
    made the call once on these buffers, which stands for the first call."""
    timing = get_timing(settings.mode)
    part = _Part(bench, roles, control.rank, barrier)
    budget = Budget(settings)
    first_call = 0.0
    if not called or not settings.warmup:     # connection and algorithm set-up
        t0 = base.timer()
        bound.run_blocking()
        first_call = base.timer() - t0
    budget.start()                           # the budget counts from here: set-up is behind
    warm = warm_up(bound.run_blocking, part.pace, control, part.timed, settings, budget)
    k, batch = batching(timing, float(np.median(warm)) if warm else first_call, control, part.timed,
                        settings, budget, bench.self_paced)
    sampler = timing.sampler(SamplerContext(bound, part.pace, sync, k, device, control, len(warm),
                                            part.taking_part))
    rule = StopRule(settings, budget, part.group_count, sampler)
    mine: list = []
    while batch:
        # untimed: brings the pair back into step after the stop rule's messages
        if bench.self_paced:
            bound.run_blocking()
        before = len(mine)
        sampler.take(batch, mine)
        top = _maxima(part, mine[before:], control)
        lengthen = rule.add(top) if control.rank == 0 else False
        if rule.fixed:
            break
        batch, lengthen = control.bcast((rule.decide(len(mine)), lengthen)
                                        if control.rank == 0 else None)
        if lengthen:
            sampler.lengthen()
    sampler.close()
    samples = [np.asarray(m, dtype=np.float64) * 1e6
               for m in rule.maxima] if control.rank == 0 else []
    reached = rule.reached
    if settings.iters and control.rank == 0:
        reached = [relative_ci_halfwidth(m) <= settings.precision for m in samples]
    overall, compute = [], []
    if bound.start is not None and timing.overlaps and device is not None:
        pure = float(np.median(np.concatenate([m for m in samples if len(m)]))) * 1e-6 \
            if control.rank == 0 and any(len(m) for m in samples) else None
        overall, compute = overlap(bound, pace=part.pace, sync=sync, control=control, device=device,
                                   pure_s=pure,
                                   iters=settings.iters or max(settings.min_iters, OVERLAP_SAMPLES),
                                   max_time=settings.max_time / 2, group_count=part.group_count,
                                   group=part.group, timed=part.timed)
    return Measurement(samples, control.gather(part.mean_us(mine)), len(mine), k,
                       tuple(bool(r) for r in reached),
                       rule.unheld, overall, compute, rule.short, sampler.empty)


class _Part:
    """This rank's part in a size's calls: whether it takes part and is timed, its group of the
    call's measurements and how many there are, what one call's time is divided by, and the pace
    before each sample: the barrier, or nothing where the exchange paces its pair itself (a
    reply, an acknowledgement), where a barrier would put its exit skew into every sample."""

    def __init__(self, bench: Benchmark, roles: Roles, rank: int, barrier: Callable) -> None:
        self.taking_part, self.timed = bench.takes_part(rank, roles), bench.timed_on(rank, roles)
        self.group_count, self.group = bench.group_count(roles), bench.group_of(rank, roles)
        # a slow pair's window may be its own
        self.per_call = bench.messages_per_call(roles.as_sent(self.group))
        self.pace = _nothing if bench.self_paced else barrier

    def mean_us(self, taken: list) -> float:
        """This rank's mean per message over the samples it timed (NaN outside the pair)."""
        done = [x for x in taken if math.isfinite(x)]
        return float(np.mean(done)) / self.per_call * 1e6 if done and self.taking_part else math.nan


def _maxima(part: _Part, taken: list, control: Control) -> np.ndarray:
    """A batch's samples per message, the maximum over each group's timed ranks (groups ×
    samples, on rank 0): a rank writes its own group's row, zeros elsewhere."""
    here = np.zeros((part.group_count, len(taken)))
    if part.timed:
        here[part.group] = np.asarray(taken, dtype=np.float64) / part.per_call
    top = control.reduce_max(here.ravel())
    return np.asarray(top).reshape(part.group_count, -1) if control.rank == 0 else here


#: The overlap's samples (with compute between start and complete) at most, unless --iters says;
#: fewer where they would outlast half of --max-time.
OVERLAP_SAMPLES = 50


def overlap(bound: Bound, *, pace: Callable, sync: Callable, control: Control, device,
            pure_s: Optional[float],
            iters: int, max_time: float, group_count: int, group: Optional[int],
            timed: bool) -> tuple:
    """OSU's overlap of a non-blocking call (osu_iallreduce …): work from ``device.compute()`` that
    lasts at least the pure call's time (``pure_s``, rank 0's median of the samples; each rank
    calibrates its own, and once more, longer, where its samples' compute fell short of the call)
    is put between ``start`` and ``complete``; the calibration and the samples cost a few times
    the call's time, and the samples at most ``max_time`` (twice that where calibrated again).
    Returns, on rank 0, per group, each sample's overall time (start to complete) and its compute's
    time (µs, maxima over the timed ranks); empty lists elsewhere. The overlap is then 100 · max(0,
    1 − (overall − compute) / pure)."""
    pure_s = control.bcast(pure_s)
    if pure_s is None or not math.isfinite(pure_s) or pure_s <= 0:     # no samples to calibrate by
        return [], []
    n = control.bcast(max(1, min(iters, int(max_time / (2 * pure_s))))
                      if control.rank == 0 else None)
    work = device.compute()                    # the buffers' device says what compute is
    target = pure_s
    for attempt in range(2):
        work.calibrate(target)
        bound.run_blocking()                    # back in step after the calibration
        overall_here, compute_here = [], []
        for _ in range(n):
            pace()
            t0 = base.timer()
            handle = bound.start()
            work.run()
            bound.complete(handle)
            sync()
            overall_here.append(base.timer() - t0)
            compute_here.append(work.seconds())
        # a calibration that a busy moment slowed gives compute shorter than the call (12.9 ms
        # for a 20 ms call was seen): once, such a rank lengthens it by what it fell short, and
        # every rank takes its samples again
        ran = float(np.median(compute_here)) if timed else pure_s
        again = control.reduce_max(np.asarray([1.0 if ran < pure_s else 0.0]))
        if attempt or not control.bcast(bool(again[0]) if control.rank == 0 else None):
            break
        target = target * pure_s / max(ran, 1e-9) * 1.05
    out = []
    for values in (overall_here, compute_here):
        here = np.zeros((group_count, n))
        if timed:
            here[group] = np.asarray(values, dtype=np.float64) * 1e6
        top = control.reduce_max(here.ravel())
        out.append([row.tolist() for row in np.asarray(top).reshape(group_count, -1)]
                   if control.rank == 0 else [])
    return out[0], out[1]
