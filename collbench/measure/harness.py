"""The measurement loop for one (benchmark, backend, size): warm-up, check, timed iterations,
stop rule and cross-rank reduction, for every kind of benchmark. It talks to backends only
through ``Bound`` and ``Control``; statistics come from ``collbench.measure.stats``.

What a benchmark declares (``collbench.benchmarks.base``) decides the loop's shape: a barrier
before each sample, or none where the exchange paces its pair itself; which ranks' clocks make
a sample (the maximum over them); what one call's time is divided by; how many measurements
one call makes (``groups``: each pair of a step of ``collbench pairs`` is one, timed on its own
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

from collbench.backends.base import Bound, Control
from collbench.benchmarks.base import Benchmark, Roles
from collbench.benchmarks.datatypes import CheckPattern
from collbench.measure.stats import relative_ci_halfwidth

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
MAX_SAMPLES = 1_000_000
CHECK_CHUNK = 1 << 22


@dataclass(frozen=True)
class TimingSettings:
    mode: str = "latency"            # "latency" or "throughput"
    iters: Optional[int] = None      # fixed iteration count; None = adaptive
    warmup: int = 5
    min_iters: int = 10
    max_time: float = 1.0            # seconds of timed work per size (adaptive mode)
    precision: float = 0.02          # target relative half-width of the median's 95% CI


@dataclass(frozen=True)
class Measurement:
    """What one size produced, per group (``Benchmark.groups``): samples (µs, per message), the
    per-iteration maxima over the group's timed ranks, on rank 0 only (empty elsewhere), and
    whether each reached the precision; every rank's mean (NaN for a rank that takes no part)."""

    samples_us: list
    rank_means_us: Optional[list]
    iterations: int
    calls_per_sample: int
    precision_reached: tuple


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


def _next_batch(n: int, rel: float, precision: float, elapsed: float, max_time: float) -> int:
    """How many more iterations to run before deciding again."""
    needed = n * (rel / precision) ** 2 if math.isfinite(rel) else 2 * n
    # At most double per round: the estimate from a few noisy samples can be wildly high,
    # and one huge batch would overshoot the precision target by orders of magnitude.
    grow = min(max(int(needed) - n, n // 4, 1), n)
    per_iter = elapsed / n if n else 0.0
    if per_iter > 0:
        grow = min(grow, max(1, int((max_time - elapsed) / per_iter) + 1))
    return min(grow, MAX_SAMPLES - n)


def _nothing() -> None:
    pass


#: What a rank outside a pair runs: nothing, and nothing arrives.
IDLE = Bound(run=_nothing, run_blocking=_nothing, checked=lambda: None)


def count_wrong(bound: Bound, coll: Benchmark, pattern: CheckPattern, n: int, rank: int, roles: Roles,
                elements: int, recv_len: int) -> int:
    """Run the call once outside any timed region and count wrong elements on this rank."""
    got = bound.checked()
    first = coll.expected(pattern, n, rank, roles, elements, np.arange(min(1, recv_len)))
    if got is None or first is None:
        return 0
    got = np.asarray(got).reshape(-1)
    if len(got) != recv_len:
        return recv_len
    wrong = 0
    for start in range(0, recv_len, CHECK_CHUNK):
        idx = np.arange(start, min(recv_len, start + CHECK_CHUNK))
        want = coll.expected(pattern, n, rank, roles, elements, idx).astype(got.dtype)
        wrong += pattern.wrong(got[start:start + len(idx)], want, n)
    return wrong


def measure(bound: Bound, *, bench: Benchmark, roles: Roles, barrier: Callable, sync: Callable,
            control: Control, settings: TimingSettings) -> Measurement:
    """Warm up, then time iterations until the stop rule (decided on rank 0) says enough."""
    is_rank0 = control.rank == 0
    throughput = settings.mode == "throughput"
    taking_part = bench.takes_part(control.rank, roles)
    timed = bench.timed_on(control.rank, roles)
    groups, group = bench.groups(roles), bench.group_of(control.rank, roles)
    per_call = bench.messages_per_call(roles)
    # an exchange that paces its pair (a reply, an acknowledgement) needs no barrier, and one
    # would put the barrier's exit skew into every sample; ranks outside the pair wait
    pace = _nothing if bench.self_paced else barrier

    t0 = timer()
    bound.run_blocking()                      # first call: connection and algorithm setup
    first_call = timer() - t0
    warm: list = []
    _latency_loop(bound.run_blocking, pace, settings.warmup, warm)
    estimate = float(np.median(warm)) if warm else first_call
    k = 1
    if throughput:          # the slowest rank's estimate: an idle rank's says nothing
        longest = control.reduce_max(np.asarray([estimate if timed else 0.0]))
        k = control.bcast(max(1, min(MAX_BATCH, int(THROUGHPUT_SAMPLE_S / max(float(longest[0]), 1e-9))))
                          if is_rank0 else None)

    mine: list = []
    maxima: list = [[] for _ in range(groups)]
    batch = settings.iters if settings.iters else settings.min_iters
    reached = [False] * groups
    start = timer()
    while True:
        if bench.self_paced:        # untimed: brings the pair back into step after the stop rule's messages
            bound.run_blocking()
        before = len(mine)
        if throughput:
            _throughput_loop(bound.run, sync, pace, batch, k, mine)
        else:
            _latency_loop(bound.run_blocking, pace, batch, mine)
        here = np.zeros((groups, len(mine) - before))     # a rank writes its own group's row
        if timed:
            here[group] = np.asarray(mine[before:], dtype=np.float64) / per_call
        top = control.reduce_max(here.ravel())
        if is_rank0:
            for g, row in enumerate(np.asarray(top).reshape(groups, -1)):
                maxima[g].extend(row.tolist())
        if settings.iters:
            break
        decision = None
        if is_rank0:
            rel = [relative_ci_halfwidth(np.asarray(m)) for m in maxima]
            reached = [r <= settings.precision for r in rel]
            elapsed = timer() - start
            count = len(maxima[0])
            done = count >= settings.min_iters and (
                all(reached) or elapsed >= settings.max_time or count >= MAX_SAMPLES)
            decision = 0 if done else _next_batch(count, max(rel), settings.precision, elapsed, settings.max_time)
        batch = control.bcast(decision)
        if not batch:
            break

    mean_here = float(np.mean(mine)) / per_call * 1e6 if mine and taking_part else math.nan
    rank_means = control.gather(mean_here)
    samples = [np.asarray(m, dtype=np.float64) * 1e6 for m in maxima] if is_rank0 else []
    if settings.iters and is_rank0:
        reached = [relative_ci_halfwidth(m) <= settings.precision for m in samples]
    return Measurement(samples, rank_means, len(mine), k, tuple(bool(r) for r in reached))
