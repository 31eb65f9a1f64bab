"""latency: the pace (a barrier), then one call that returns once this rank's part is complete
(on a GPU, followed by a synchronise), on the host's clock: what a training step waits for one
call."""

from collbench.measure.timings.base import LatencySampler, Timing


class Latency(Timing):
    name = "latency"
    summary = "a barrier, then one call that completes (synchronised on a GPU), on the host clock"
    overlaps = True

    def own_sampler(self, ctx):
        return LatencySampler(ctx.bound.run_blocking, ctx.pace)


TIMING = Latency()
