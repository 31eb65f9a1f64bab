"""What a timing is: a ``Timing`` names itself and makes, for one size, a ``Sampler`` that takes
samples. The harness (``collbench.measure.harness``) owns everything around the samples: warm-up,
the budget, the stop rule, the reduction over ranks."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar


#: The host's clock. The loops look it up here as they start (``base.timer``), so that a test
#: can set a clock of its own.
timer = time.perf_counter


@dataclass(frozen=True)
class SamplerContext:
    """What a sampler may use: the bound call, the pace before each sample (a barrier, or nothing
    where the exchange paces its pair), the device's synchronise, the calls per sample ``k`` that
    the harness chose for a batched timing, the buffers' device (its clock and graphs), the host
    channel between ranks, the warm-up calls made, and whether this rank takes part."""

    bound: Any
    pace: Callable[[], None]
    sync: Callable[[], None]
    calls: int
    device: Any
    control: Any
    warmup: int
    taking_part: bool


class Sampler:
    """Takes samples for one size: ``take(n, out)`` appends n samples to ``out``, each the seconds
    of one sample's ``k`` calls divided by k; ``math.inf`` for a sample to take again."""

    #: samples it could not time (``inf``) are taken again, and every rank takes part in each
    #: batch's decision (the device timing's holds)
    retakes: ClassVar[bool] = False
    #: batches in a row with no sample timed after which the size ends without samples
    tries: ClassVar[float] = math.inf
    #: the capture recorded no work on the GPU (a graph of NCCL's in-place calls on one rank)
    empty: bool = False

    def take(self, n: int, out: list) -> None:
        raise NotImplementedError

    def lengthen(self) -> None:
        """Some rank's sample was not timed: make the next ones more likely to be."""

    def close(self) -> None:
        """The size is measured."""


class LatencySampler(Sampler):
    """The pace, then one blocking call, on the host's clock: what a rank outside the pair runs
    too (its calls are nothing)."""

    def __init__(self, run: Callable[[], Any], pace: Callable[[], None]) -> None:
        self.run, self.pace = run, pace

    def take(self, n: int, out: list) -> None:
        run, pace, now, append = self.run, self.pace, timer, out.append
        for _ in range(n):
            pace()
            t0 = now()
            run()
            append(now() - t0)


class Timing:
    """One way of timing a sample (``--timing NAME``): a module of this package (or a plugin's
    entry point in the group ``collbench.timings``) defining ``TIMING``, an instance."""

    name: ClassVar[str]
    summary: ClassVar[str]            # a line for the help and for notes
    #: timed with the device's events: only a backend that lists it in ``timings`` takes it; a
    #: host timing every backend takes
    on_device: ClassVar[bool] = False
    #: a sample is k calls, divided by k: the harness chooses k so that a sample lasts about
    #: ``sample_s``, at most ``max_calls``
    batched: ClassVar[bool] = False
    sample_s: ClassVar[float] = 0.0
    max_calls: ClassVar[int] = 1
    #: a call issued in two steps (``--api nonblocking``) also has its overlap measured
    overlaps: ClassVar[bool] = False

    def sampler(self, ctx: SamplerContext) -> Sampler:
        """The sampler for one size. A rank outside the pair runs the latency loop on nothing
        (it only paces); a timing whose set-up needs every rank overrides this."""
        if not ctx.taking_part:
            return LatencySampler(ctx.bound.run_blocking, ctx.pace)
        return self.own_sampler(ctx)

    def own_sampler(self, ctx: SamplerContext) -> Sampler:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<timing {self.name}>"
