"""device (GPU backends): one call timed with CUDA events, the stream held by a short spinning
kernel until the events and the call are all queued, so that the dispatch cannot leak into the
interval (NVIDIA nvbench's cold measurement)."""

import math

import numpy as np

from collbench.measure.timings import base
from collbench.measure.timings.base import LatencySampler, Sampler, Timing

#: the stream is held at least MIN_HOLD_S, and HOLD_MARGIN times the longest time a rank took to
#: queue the events and the call during warm-up; a sample whose hold ended before its call was
#: queued is taken again, and the hold doubles, up to MAX_HOLD_S
MIN_HOLD_S = 50e-6
HOLD_MARGIN = 4.0
MAX_HOLD_S = 0.05
#: after this many batches in a row of which no sample was covered (the hold has reached
#: MAX_HOLD_S by then), the size ends without samples: its call waits on the host
HOLD_TRIES = 12


def queue_time(run, events, pace, n: int) -> float:
    """The longest the host took, over ``n`` calls, to queue a start event, the call and a stop
    event (no hold): what a hold must outlast."""
    longest, clock = 0.0, base.timer
    for _ in range(max(n, 1)):
        pace()
        t0 = clock()
        events.begin()
        run()
        events.end()
        longest = max(longest, clock() - t0)
        events.seconds()
    return longest


class HeldSampler(Sampler):
    """One call timed by the device's events, the stream held while the host queues the start
    event, the call and the stop event; a sample whose hold ended first is ``inf`` (the dispatch
    may lie inside it): the maximum over ranks keeps it so, and rank 0 drops it."""

    retakes, tries = True, HOLD_TRIES

    def __init__(self, ctx, events, hold_s: float) -> None:
        self.run, self.pace, self.events = ctx.bound.run, ctx.pace, events
        events.hold_for(hold_s, MAX_HOLD_S)

    def take(self, n: int, out: list) -> None:
        run, pace, events, append = self.run, self.pace, self.events, out.append
        for _ in range(n):
            pace()
            events.hold()
            events.begin()
            run()
            held = events.end()
            seconds = events.seconds()
            append(seconds if held else math.inf)

    def lengthen(self) -> None:
        self.events.lengthen()

    def close(self) -> None:
        self.events.close()


class IdleHeldSampler(LatencySampler):
    """A rank outside the pair: nothing timed, but it joins every batch's decision."""

    retakes, tries = True, HOLD_TRIES


class Device(Timing):
    name = "device"
    summary = "one call timed with CUDA events, the stream held until it is queued"
    on_device = True

    def sampler(self, ctx):
        # every rank holds its stream equally long, or the collective would wait inside the
        # interval for the rank whose hold ends last: all of them agree on the hold
        events = ctx.device.clock() if ctx.taking_part else None
        queued = queue_time(ctx.bound.run, events, ctx.pace, ctx.warmup) if ctx.taking_part else 0.0
        longest = ctx.control.reduce_max(np.asarray([queued]))
        hold = ctx.control.bcast(min(MAX_HOLD_S, max(MIN_HOLD_S, HOLD_MARGIN * float(longest[0])))
                                 if ctx.control.rank == 0 else None)
        if not ctx.taking_part:
            return IdleHeldSampler(ctx.bound.run_blocking, ctx.pace)
        return HeldSampler(ctx, events, hold)


TIMING = Device()
