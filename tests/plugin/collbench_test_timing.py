"""A toy timing, installed as a plugin through the ``collbench.timings`` entry point (see
pyproject.toml): what a new timing takes, one module and one registry entry. ``two``: a barrier,
then two blocking calls back to back, on the host's clock, divided by two."""

from collbench.measure.timings import base


class TwoSampler(base.Sampler):
    def __init__(self, ctx) -> None:
        self.run, self.pace, self.k = ctx.bound.run_blocking, ctx.pace, ctx.calls

    def take(self, n, out):
        now = base.timer
        for _ in range(n):
            self.pace()
            t0 = now()
            for _ in range(self.k):
                self.run()
            out.append((now() - t0) / self.k)


class Two(base.Timing):
    name = "two"
    summary = "a barrier, then two blocking calls back to back, on the host clock, / 2"
    # k = 2 wherever a call takes under half a second
    batched, sample_s, max_calls = True, 1.0, 2

    def own_sampler(self, ctx):
        return TwoSampler(ctx)


TIMING = Two()
