"""graph (GPU backends): k calls captured once in a CUDA graph, each sample one replay timed
with CUDA events and divided by k, as nccl-tests' ``-G``: the library's own time on the device,
without the framework's per-call dispatch."""

from collbench.measure.timings.base import Sampler, Timing


class GraphSampler(Sampler):
    def __init__(self, ctx) -> None:
        self.clock, self.pace, self.k = ctx.device.clock(), ctx.pace, ctx.calls
        captured = ctx.device.capture(ctx.bound.run, self.k)
        # (replay, empty); a plugin's device written before the second answer returns the replay
        # alone
        self.replay, self.empty = (captured, False) if callable(captured) else captured

    def take(self, n: int, out: list) -> None:
        replay, events, pace, k, append = self.replay, self.clock, self.pace, self.k, out.append
        for _ in range(n):
            pace()
            events.begin()
            replay()
            events.end()
            append(events.seconds() / k)


class Graph(Timing):
    name = "graph"
    summary = "k calls captured in a CUDA graph, one replay timed with CUDA events, / k"
    on_device = batched = True
    #: as many calls as make a replay of about ``sample_s`` by the host's time per call, at most
    #: ``max_calls`` (nccl-tests' -G replays a graph of its -n, 20 by default, 50 in its docs'
    #: examples); the host's time is far above the graph's where the dispatch dominates, so small
    #: messages get the most calls, and a replay's own launch is a small share of each
    sample_s = 5e-3
    max_calls = 100

    def own_sampler(self, ctx):
        return GraphSampler(ctx)


TIMING = Graph()
