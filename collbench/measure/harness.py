"""The measurement loop for one (benchmark, backend, size): warm-up, check, timed iterations,
stop rule and cross-rank reduction, for every kind of benchmark. It talks to backends only
through ``Bound`` and ``Control``; statistics come from ``collbench.stats.samples``.

The timing (``collbench.measure.timings``) decides what a sample is: one call timed on the host
(latency), k back-to-back calls (throughput), a replay of k calls captured in a CUDA graph
(graph), or one call timed by the device's own events with its stream held until the call is
queued (device); the device timings ask the buffers' device for its clock and its graphs.

What a benchmark declares (``collbench.benchmarks.base``) decides the loop's shape: a barrier
before each sample, or none where the exchange paces its pair itself; which ranks' clocks make
a sample (the maximum over them); what one call's time is divided by; how many measurements
one call makes (``group_count``: each pair of a step of ``collbench pairs`` is one, timed on its own
first rank, and the stop rule waits for the least precise). Ranks that take no part run nothing
timed: they join the stop rule's messages between batches, and their per-rank time is NaN, so
that they are neither counted nor judged.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from collbench.measure.calls import Bound, Control
from collbench.benchmarks.base import Benchmark, Roles
from collbench.stats.samples import relative_ci_halfwidth
from collbench.measure.timings import TIMINGS

timer = time.perf_counter
TIMER_NAME = "time.perf_counter"


def timer_resolution() -> float:
    """The smallest step the timer actually shows, in seconds (the clock's nominal resolution,
    often 1 ns, says nothing of what a Python call to it can resolve)."""
    steps = []
    for _ in range(200):
        a = timer()
        b = timer()
        while b == a:
            b = timer()
        steps.append(b - a)
    return max(min(steps), time.get_clock_info("perf_counter").resolution)

#: A throughput sample is this many back-to-back calls' worth of time (at most MAX_BATCH calls).
THROUGHPUT_SAMPLE_S = 1e-3
MAX_BATCH = 1000
#: A CUDA graph captures at most this many calls (nccl-tests' -G replays a graph of its -n, 20 by
#: default, 50 in its docs' examples), as many as make a replay of about GRAPH_SAMPLE_S by the
#: host's time per call, which is far above the graph's where the dispatch dominates: small
#: messages get the most calls, and a replay's own launch is a small share of each.
MAX_GRAPH_CALLS = 100
GRAPH_SAMPLE_S = 5e-3
MAX_SAMPLES = 1_000_000
#: device timing: the stream is held at least this long, and this many times the longest time a
#: rank took to queue the events and the call during warm-up; a sample whose hold ended before
#: its call was queued is not counted, and the hold doubles, up to MAX_HOLD_S.
MIN_HOLD_S = 50e-6
HOLD_MARGIN = 4.0
MAX_HOLD_S = 0.05
#: device timing: after this many batches in a row of which no sample was covered (the hold has
#: reached MAX_HOLD_S by then), the size ends without samples: its call waits on the host.
HOLD_TRIES = 12


@dataclass(frozen=True)
class TimingSettings:
    mode: str = "latency"            # a name of ``timings.TIMINGS``
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


def _latency_loop(run: Callable, barrier: Callable, n: int, out: list) -> None:
    append = out.append
    clock = timer
    for _ in range(n):
        barrier()
        t0 = clock()
        run()
        append(clock() - t0)


def _throughput_loop(run: Callable, sync: Callable, barrier: Callable, n: int, k: int, out: list) -> None:
    append = out.append
    clock = timer
    calls = range(k)
    for _ in range(n):
        barrier()
        t0 = clock()
        for _ in calls:
            run()
        sync()
        append((clock() - t0) / k)


def _graph_loop(replay: Callable, clock, barrier: Callable, n: int, k: int, out: list) -> None:
    """Samples of one replay of a graph of k calls, timed by the device's events, / k."""
    append = out.append
    for _ in range(n):
        barrier()
        clock.begin()
        replay()
        clock.end()
        append(clock.seconds() / k)


def _held_loop(run: Callable, clock, barrier: Callable, n: int, out: list) -> None:
    """Samples of one call timed by the device's events, the stream held while the host queues the
    start event, the call and the stop event; a sample whose hold ended first is ``inf`` (the
    dispatch may lie inside it): the maximum over ranks keeps it so, and rank 0 drops it."""
    append = out.append
    for _ in range(n):
        barrier()
        clock.hold()
        clock.begin()
        run()
        held = clock.end()
        seconds = clock.seconds()
        append(seconds if held else math.inf)


def _queue_time(run: Callable, clock, barrier: Callable, n: int) -> float:
    """The longest the host took, over ``n`` calls, to queue a start event, the call and a stop
    event (no hold): what a hold must outlast."""
    longest = 0.0
    for _ in range(max(n, 1)):
        barrier()
        t0 = timer()
        clock.begin()
        run()
        clock.end()
        longest = max(longest, timer() - t0)
        clock.seconds()
    return longest


def _next_batch(n: int, rel: float, precision: float, per_iter: float, left: float, min_iters: int) -> int:
    """How many more iterations to run before deciding again: ``per_iter`` seconds each, ``left``
    seconds of the budget to go; up to ``min_iters`` where time allows."""
    needed = n * (rel / precision) ** 2 if math.isfinite(rel) else 2 * n
    # At most double per round: the estimate from a few noisy samples can be wildly high,
    # and one huge batch would overshoot the precision target by orders of magnitude.
    grow = max(min(max(int(needed) - n, n // 4, 1), n), min_iters - n)
    if per_iter > 0:
        grow = min(grow, max(1, int(left / per_iter)))
    return max(1, min(grow, MAX_SAMPLES - n))


#: Where calls are slow, warm-up takes at most this share of a size's budget (``--max-time``, a
#: round's share of it); the rest is the samples'.
WARMUP_SHARE = 1 / 3


def _first_batch(per_sample: float, left: float, min_iters: int) -> int:
    """The samples to take before the stop rule first decides: ``min_iters``, or as many as
    ``left`` seconds of the budget hold at ``per_sample`` seconds each (one at least)."""
    if per_sample <= 0 or not math.isfinite(per_sample):
        return min_iters
    return max(1, min(min_iters, int(left / per_sample)))


def _warmups_within(bound: Bound, pace: Callable, control: Control, timed: bool, warmups: int, share: float,
                    warm: list) -> int:
    """The warm-up calls still to make, of ``warmups``, for all of them, those made here included,
    to take ``share`` seconds at most: the first call, timed on every rank, says how long one
    takes on the slowest; where only some of the rest fit, a second says it again (the first
    after the check's can be slow). Their times go to ``warm``. Every rank gets rank 0's answer."""
    used, fastest = 0.0, math.inf
    for attempt in range(2):
        if not warmups:
            return 0
        _latency_loop(bound.run_blocking, pace, 1, warm)
        warmups -= 1
        longest = control.reduce_max(np.asarray([warm[-1] if timed else 0.0]))
        answer = None
        if control.rank == 0:
            used += float(longest[0])
            fastest = min(fastest, float(longest[0]))
            more = min(warmups, int(max(0.0, share - used) / max(fastest, 1e-9)))
            answer = (more in (0, warmups) or attempt == 1, more)
        settled, more = control.bcast(answer)
        if settled:
            return more
    return 0


def _nothing() -> None:
    pass


#: What a rank outside a pair runs: nothing, and nothing arrives.
IDLE = Bound(run=_nothing, run_blocking=_nothing, checked=lambda: None)


def measure(bound: Bound, *, bench: Benchmark, roles: Roles, barrier: Callable, sync: Callable,
            control: Control, settings: TimingSettings, device=None, called: bool = False) -> Measurement:
    """Warm up, then time iterations until the stop rule (decided on rank 0) says enough.
    ``device``: where the buffers live, whose clock and graphs the device timings use; ``called``:
    the check has just made the call once on these buffers, which stands for the first call."""
    is_rank0 = control.rank == 0
    timing = TIMINGS[settings.mode]
    taking_part = bench.takes_part(control.rank, roles)
    timed = bench.timed_on(control.rank, roles)
    group_count, group = bench.group_count(roles), bench.group_of(control.rank, roles)
    per_call = bench.messages_per_call(roles.as_sent(group))     # a slow pair's window may be its own
    # an exchange that paces its pair (a reply, an acknowledgement) needs no barrier, and one
    # would put the barrier's exit skew into every sample; ranks outside the pair wait
    pace = _nothing if bench.self_paced else barrier

    budgeted = not settings.iters        # adaptive: the budget bounds warm-up and samples
    budget = settings.max_time
    first_call = 0.0
    if not called or not settings.warmup:
        t0 = timer()
        bound.run_blocking()                  # first call: connection and algorithm setup
        first_call = timer() - t0
    begin = timer()                           # the budget counts from here: set-up is behind
    warm: list = []
    warmups = settings.warmup
    if budgeted:
        warmups = _warmups_within(bound, pace, control, timed, warmups, budget * WARMUP_SHARE, warm)
    _latency_loop(bound.run_blocking, pace, warmups, warm)
    estimate = float(np.median(warm)) if warm else first_call
    k = 1
    batch = settings.iters if settings.iters else settings.min_iters
    if timing.batched or budgeted:      # the slowest rank's estimate: an idle rank's says nothing
        most = MAX_GRAPH_CALLS if timing.on_device else MAX_BATCH
        longest = control.reduce_max(np.asarray([estimate if timed else 0.0]))
        if is_rank0:
            slowest = float(longest[0])
            if timing.batched:
                sample_s = GRAPH_SAMPLE_S if timing.on_device else THROUGHPUT_SAMPLE_S
                k = max(1, min(most, int(sample_s / max(slowest, 1e-9))))
            if budgeted:      # a self-paced pair's batch starts with a call that brings it back in step
                batch = _first_batch(slowest * k, budget - (timer() - begin) - slowest * bench.self_paced,
                                     settings.min_iters)
        k, batch = control.bcast((k, batch) if is_rank0 else None)
    holds = timing.name == "device"           # every rank then takes part in the hold's messages
    sample, held, idle_gpu = _sampler(timing.name, bound, pace, sync, k, device, control, warmups, taking_part)

    mine: list = []
    maxima: list = [[] for _ in range(group_count)]
    reached = [False] * group_count
    unheld = 0
    uncovered = 0             # device timing: batches in a row of which no sample was covered
    short = False
    start = timer()
    while True:
        if bench.self_paced:        # untimed: brings the pair back into step after the stop rule's messages
            bound.run_blocking()
        before = len(mine)
        sample(batch, mine)
        here = np.zeros((group_count, len(mine) - before))     # a rank writes its own group's row
        if timed:
            here[group] = np.asarray(mine[before:], dtype=np.float64) / per_call
        top = control.reduce_max(here.ravel())
        lengthen = False
        if is_rank0:
            top = np.asarray(top).reshape(group_count, -1)
            dropped = int((~np.isfinite(top)).any(axis=0).sum())   # a sample some rank's hold did not cover
            unheld += dropped
            lengthen = dropped > 0
            uncovered = uncovered + 1 if dropped and dropped == top.shape[1] else 0
            for g, row in enumerate(top):
                maxima[g].extend(row[np.isfinite(row)].tolist())
        if settings.iters and not holds:
            break
        decision = None
        if is_rank0:
            rel = [relative_ci_halfwidth(np.asarray(m)) for m in maxima]
            reached = [r <= settings.precision for r in rel]
            count = len(maxima[0])
            if uncovered >= HOLD_TRIES:  # no hold covers the call: it waits on the host (nothing to time)
                decision = 0
            elif settings.iters:         # device timing: the samples a hold did not cover, again
                decision = max(0, settings.iters - count)
            else:
                # a budget is a budget: spent, it ends the size whatever the count (one at least);
                # a row whose round took fewer than --min-iters says so
                spent = timer() - begin
                per_iter = (timer() - start) / max(len(mine), 1)
                # a sample that cannot end within the budget is not begun
                done = count >= MAX_SAMPLES or (count >= 1 and spent + per_iter > budget) or (
                    count >= settings.min_iters and all(reached))
                short = done and count < settings.min_iters
                decision = 0 if done else _next_batch(count, max(rel), settings.precision, per_iter,
                                                      budget - spent, settings.min_iters)
            if holds:
                decision = (decision, lengthen)
        decision = control.bcast(decision)
        if holds:
            decision, lengthen = decision
            if lengthen and held is not None:
                held.lengthen()
        batch = decision
        if not batch:
            break

    done_here = [x for x in mine if math.isfinite(x)]
    mean_here = float(np.mean(done_here)) / per_call * 1e6 if done_here and taking_part else math.nan
    rank_means = control.gather(mean_here)
    samples = [np.asarray(m, dtype=np.float64) * 1e6 for m in maxima] if is_rank0 else []
    if settings.iters and is_rank0:
        reached = [relative_ci_halfwidth(m) <= settings.precision for m in samples]
    if held is not None:
        held.close()
    overall, compute = [], []
    if bound.start is not None and timing.name == "latency" and device is not None:
        pure = float(np.median(np.concatenate([m for m in samples if len(m)]))) * 1e-6 \
            if is_rank0 and any(len(m) for m in samples) else None
        overall, compute = overlap(bound, pace=pace, sync=sync, control=control, device=device, pure_s=pure,
                                   iters=settings.iters or max(settings.min_iters, OVERLAP_SAMPLES),
                                   max_time=settings.max_time / 2, group_count=group_count, group=group, timed=timed)
    return Measurement(samples, rank_means, len(mine), k, tuple(bool(r) for r in reached), unheld,
                       overall, compute, short, idle_gpu)


#: The overlap's samples (with compute between start and complete) at most, unless --iters says;
#: fewer where they would outlast half of --max-time.
OVERLAP_SAMPLES = 50


def overlap(bound: Bound, *, pace: Callable, sync: Callable, control: Control, device, pure_s: Optional[float],
            iters: int, max_time: float, group_count: int, group: Optional[int], timed: bool) -> tuple:
    """OSU's overlap of a non-blocking call (osu_iallreduce …): work from ``device.compute()`` that
    lasts at least the pure call's time (``pure_s``, rank 0's median of the samples; each rank
    calibrates its own, and once more, longer, where its samples' compute fell short of the call)
    is put between ``start`` and ``complete``; the calibration and the samples cost a few times
    the call's time, and the samples at most ``max_time`` (twice that where calibrated again). Returns, on rank 0, per group, each sample's overall time
    (start to complete) and its compute's time (µs, maxima over the timed ranks); empty lists
    elsewhere. The overlap is then 100 · max(0, 1 − (overall − compute) / pure)."""
    pure_s = control.bcast(pure_s)
    if pure_s is None or not math.isfinite(pure_s) or pure_s <= 0:     # no samples to calibrate by
        return [], []
    n = control.bcast(max(1, min(iters, int(max_time / (2 * pure_s)))) if control.rank == 0 else None)
    work = device.compute()                    # the buffers' device says what compute is
    target = pure_s
    for attempt in range(2):
        work.calibrate(target)
        bound.run_blocking()                    # back in step after the calibration
        overall_here, compute_here = [], []
        for _ in range(n):
            pace()
            t0 = timer()
            handle = bound.start()
            work.run()
            bound.complete(handle)
            sync()
            overall_here.append(timer() - t0)
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
        out.append([row.tolist() for row in np.asarray(top).reshape(group_count, -1)] if control.rank == 0 else [])
    return out[0], out[1]


def _sampler(mode: str, bound: Bound, pace: Callable, sync: Callable, k: int, device, control: Control,
             warmup: int, taking_part: bool) -> tuple:
    """(sample(n, out): n samples of ``mode`` appended to ``out``, the device clock that holds the
    stream for device timing, else None, whether a graph's capture recorded no GPU work). A rank
    outside a pair times nothing: it only waits."""
    idle = (lambda n, out: _latency_loop(bound.run_blocking, pace, n, out)), None, False
    if mode == "latency" or (not taking_part and mode != "device"):
        return idle
    if mode == "throughput":
        return (lambda n, out: _throughput_loop(bound.run, sync, pace, n, k, out)), None, False
    clock = device.clock() if taking_part else None
    if mode == "graph":
        captured = device.capture(bound.run, k)
        # (replay, empty); a plugin's device written before the second answer returns the replay alone
        replay, empty = (captured, False) if callable(captured) else captured
        return (lambda n, out: _graph_loop(replay, clock, pace, n, k, out)), None, empty
    # device: every rank holds its stream equally long, or the collective would wait inside the
    # interval for the rank whose hold ends last
    queued = _queue_time(bound.run, clock, pace, warmup) if taking_part else 0.0
    longest = control.reduce_max(np.asarray([queued]))
    hold = control.bcast(min(MAX_HOLD_S, max(MIN_HOLD_S, HOLD_MARGIN * float(longest[0])))
                         if control.rank == 0 else None)
    if not taking_part:
        return idle
    clock.hold_for(hold, MAX_HOLD_S)
    return (lambda n, out: _held_loop(bound.run, clock, pace, n, out)), clock, False
