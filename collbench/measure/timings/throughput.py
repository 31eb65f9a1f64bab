"""throughput: the pace, then k calls back to back and one synchronise, on the host's clock,
divided by k (k from a sample of about a millisecond). On a GPU the host issues the next call
while the device runs this one."""

from collbench.measure.timings import base
from collbench.measure.timings.base import Sampler, Timing


class ThroughputSampler(Sampler):
    def __init__(self, ctx) -> None:
        self.run, self.sync, self.pace, self.k = ctx.bound.run, ctx.sync, ctx.pace, ctx.calls

    def take(self, n: int, out: list) -> None:
        run, sync, pace, k, now, append = (self.run, self.sync, self.pace, self.k, base.timer,
                                           out.append)
        calls = range(k)
        for _ in range(n):
            pace()
            t0 = now()
            for _ in calls:
                run()
            sync()
            append((now() - t0) / k)


class Throughput(Timing):
    name = "throughput"
    summary = "k calls back to back and one synchronise, on the host clock, / k"
    batched = True
    #: a sample is this many back-to-back calls' worth of time, at most ``max_calls`` calls
    sample_s = 1e-3
    max_calls = 1000

    def own_sampler(self, ctx):
        return ThroughputSampler(ctx)


TIMING = Throughput()
