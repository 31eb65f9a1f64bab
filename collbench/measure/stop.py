"""One size's budget, warm-up, batching and stop rule: the steps around a timing's samples
(``collbench.measure.harness.measure`` runs them in order).

* ``Budget``: adaptive sizes (no ``--iters``) spend at most ``--max-time`` (a round's share) past
  the first call, warm-up included.
* ``warm_up``: ``--warmup`` calls, cut where slow calls would take more than WARMUP_SHARE of it.
* ``batching``: the calls per sample of a batched timing, and the first batch of samples.
* ``StopRule``: after each batch, on rank 0, whether the samples are enough (the median's CI
  within ``--precision`` after ``--min-iters``, or the budget spent) and how many more to take;
  as nvbench's stopping criteria, one object that sees every batch.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from collbench.measure.timings import base
from collbench.measure.timings.base import LatencySampler, Sampler, Timing
from collbench.stats.samples import relative_ci_halfwidth

#: Where calls are slow, warm-up takes at most this share of a size's budget; the rest is the
#: samples'.
WARMUP_SHARE = 1 / 3
MAX_SAMPLES = 1_000_000


class Budget:
    """The seconds of timed work one size may take (adaptive mode), counted from ``start``: the
    first call (connections, algorithm set-up) lies before it."""

    def __init__(self, settings) -> None:
        self.seconds, self.on = settings.max_time, not settings.iters
        self.began = base.timer()

    def start(self) -> None:
        self.began = base.timer()

    def spent(self) -> float:
        return base.timer() - self.began

    def left(self) -> float:
        return self.seconds - self.spent()


def warm_up(run: Callable, pace: Callable, control, timed: bool, settings, budget: Budget) -> list:
    """The warm-up calls' times: ``settings.warmup`` calls, or, budgeted, as many as take
    WARMUP_SHARE of it (``warmups_within``)."""
    warm: list = []
    loop = LatencySampler(run, pace)
    count = settings.warmup
    if budget.on:
        count = warmups_within(loop, control, timed, count, budget.seconds * WARMUP_SHARE, warm)
    loop.take(count, warm)
    return warm


def warmups_within(loop: LatencySampler, control, timed: bool, warmups: int, share: float,
                   warm: list) -> int:
    """The warm-up calls still to make, of ``warmups``, for all of them, those made here included,
    to take ``share`` seconds at most: the first call, timed on every rank, says how long one
    takes on the slowest; where only some of the rest fit, a second says it again (the first
    after the check's can be slow). Their times go to ``warm``. Every rank gets rank 0's answer."""
    used, fastest = 0.0, math.inf
    for attempt in range(2):
        if not warmups:
            return 0
        loop.take(1, warm)
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


def batching(timing: Timing, estimate: float, control, timed: bool, settings, budget: Budget,
             self_paced: bool) -> tuple:
    """(calls per sample, samples in the first batch), the same on every rank, from the slowest
    rank's ``estimate`` of one call: a batched timing's sample lasts about ``timing.sample_s``;
    budgeted, the first batch fits what the budget has left."""
    k, batch = 1, settings.iters or settings.min_iters
    if not (timing.batched or budget.on):
        return k, batch
    # an idle rank's says nothing
    longest = control.reduce_max(np.asarray([estimate if timed else 0.0]))
    if control.rank == 0:
        slowest = float(longest[0])
        if timing.batched:
            k = max(1, min(timing.max_calls, int(timing.sample_s / max(slowest, 1e-9))))
        # a self-paced pair's batch starts with a call that brings it back in step
        if budget.on:
            batch = first_batch(slowest * k, budget.left() - slowest * self_paced,
                                settings.min_iters)
    return control.bcast((k, batch) if control.rank == 0 else None)


def first_batch(per_sample: float, left: float, min_iters: int) -> int:
    """The samples to take before the stop rule first decides: ``min_iters``, or as many as
    ``left`` seconds of the budget hold at ``per_sample`` seconds each (one at least)."""
    if per_sample <= 0 or not math.isfinite(per_sample):
        return min_iters
    return max(1, min(min_iters, int(left / per_sample)))


def next_batch(n: int, rel: float, precision: float, per_iter: float, left: float,
               min_iters: int) -> int:
    """How many more iterations to run before deciding again: ``per_iter`` seconds each, ``left``
    seconds of the budget to go; up to ``min_iters`` where time allows."""
    needed = n * (rel / precision) ** 2 if math.isfinite(rel) else 2 * n
    # At most double per round: the estimate from a few noisy samples can be wildly high,
    # and one huge batch would overshoot the precision target by orders of magnitude.
    grow = max(min(max(int(needed) - n, n // 4, 1), n), min_iters - n)
    if per_iter > 0:
        grow = min(grow, max(1, int(left / per_iter)))
    return max(1, min(grow, MAX_SAMPLES - n))


class StopRule:
    """Rank 0's view of the samples, per group (``Benchmark.group_count``): ``add`` takes a batch's
    maxima over the timed ranks, ``decide`` the next batch (0: enough). With ``--iters`` the
    count is fixed, but a sampler that ``retakes`` its untimed samples takes them again, and
    gives up after ``sampler.tries`` batches in a row of which none was timed."""

    def __init__(self, settings, budget: Budget, groups: int, sampler: Sampler) -> None:
        self.settings, self.budget, self.sampler = settings, budget, sampler
        self.maxima: list = [[] for _ in range(groups)]
        self.reached = [False] * groups
        self.unheld = 0               # samples some rank did not time
        self.uncovered = 0            # batches in a row of which none was
        self.short = False
        self.started = base.timer()

    @property
    def fixed(self) -> bool:
        """``--iters`` with nothing to take again: one batch and done, no message between ranks."""
        return bool(self.settings.iters) and not self.sampler.retakes

    def add(self, top: np.ndarray) -> bool:
        """A batch's maxima (groups × samples); whether some sample went untimed."""
        dropped = int((~np.isfinite(top)).any(axis=0).sum())
        self.unheld += dropped
        self.uncovered = self.uncovered + 1 if dropped and dropped == top.shape[1] else 0
        for g, row in enumerate(top):
            self.maxima[g].extend(row[np.isfinite(row)].tolist())
        return dropped > 0

    def decide(self, taken: int) -> int:
        """The samples of the next batch, ``taken`` samples on this rank so far; 0 when done."""
        s = self.settings
        rel = [relative_ci_halfwidth(np.asarray(m)) for m in self.maxima]
        self.reached = [r <= s.precision for r in rel]
        count = len(self.maxima[0])
        # nothing is timed: the size ends without samples
        if self.uncovered >= self.sampler.tries:
            return 0
        if s.iters:                                   # the samples not timed, again
            return max(0, s.iters - count)
        # a budget is a budget: spent, it ends the size whatever the count (one at least); a row
        # whose round took fewer than --min-iters says so. A sample that cannot end within the
        # budget is not begun.
        spent = self.budget.spent()
        per_iter = (base.timer() - self.started) / max(taken, 1)
        done = count >= MAX_SAMPLES or (count >= 1 and spent + per_iter > self.budget.seconds) or (
            count >= s.min_iters and all(self.reached))
        self.short = done and count < s.min_iters
        return 0 if done else next_batch(count, max(rel), s.precision, per_iter,
                                         self.budget.seconds - spent, s.min_iters)
