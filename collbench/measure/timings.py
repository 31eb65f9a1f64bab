"""How a sample is timed (``--timing``, a comma list measured side by side): each mode is a row
of its own, and ``compare`` matches rows on it.

* ``latency``: a barrier, then one call that returns once this rank's part is complete (on a
  GPU: followed by a synchronise), timed on the host. What a training step waits for one call.
* ``throughput``: a barrier, then k calls back to back and one synchronise, timed on the host,
  divided by k (k from a ~1 ms sample). On a GPU, the host issues the next call while the
  device runs this one.
* ``graph`` (GPU backends): k calls captured once in a CUDA graph, each sample one replay timed
  with CUDA events and divided by k, as nccl-tests' ``-G``: the library's own time on the
  device, without the framework's per-call dispatch.
* ``device`` (GPU backends): one call timed with CUDA events, the stream held by a short
  spinning kernel until the events and the call are all queued, so that the dispatch cannot
  leak into the interval (NVIDIA nvbench's cold measurement).

``both`` is latency and throughput.
"""

from __future__ import annotations

from dataclasses import dataclass

from collbench.errors import UsageError


@dataclass(frozen=True)
class Timing:
    name: str
    on_device: bool       # timed with the device's events: only a backend that times on a GPU takes it
    batched: bool         # a sample is k calls, divided by k
    summary: str


TIMINGS = {t.name: t for t in (
    Timing("latency", False, False, "a barrier, then one call that completes (synchronised on a GPU), on the host clock"),
    Timing("throughput", False, True, "k calls back to back and one synchronise, on the host clock, / k"),
    Timing("graph", True, True, "k calls captured in a CUDA graph, one replay timed with CUDA events, / k"),
    Timing("device", True, False, "one call timed with CUDA events, the stream held until it is queued"),
)}
#: What ``--timing both`` stands for.
BOTH = ("latency", "throughput")
#: The choices ``--timing`` takes, ``both`` included.
CHOICES = (*TIMINGS, "both")


def timing_modes(choices) -> tuple:
    """The timings of ``--timing`` (a comma list, ``both`` standing for latency and throughput), each
    once, in the order of ``TIMINGS``: how tables and rows order them."""
    asked = set()
    for choice in choices:
        if choice not in CHOICES:
            raise UsageError(f"unknown timing {choice!r}; choose from {', '.join(CHOICES)}")
        asked.update(BOTH if choice == "both" else (choice,))
    return tuple(name for name in TIMINGS if name in asked)


def on_device(name: str) -> bool:
    timing = TIMINGS.get(name)
    return timing is not None and timing.on_device
