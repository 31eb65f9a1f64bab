"""What the harness drives: one collective call bound to buffer slices (``Bound``) and the
ranks' control channel outside timed regions (``Control``). Each backend makes both
(``collbench.backends.base``); the harness needs nothing else of it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np


class Control(ABC):
    """Small host-side messages between ranks, outside timed regions (stop decisions, samples)."""

    rank: int
    size: int
    #: how to end the whole job from this rank (MPI_Abort); None where the channel has no way
    abort: Optional[Callable[[int], None]] = None

    @abstractmethod
    def barrier(self) -> None: ...

    @abstractmethod
    def bcast(self, obj: Any, root: int = 0) -> Any: ...

    @abstractmethod
    def gather(self, obj: Any, root: int = 0) -> Optional[list]: ...

    @abstractmethod
    def reduce_max(self, values: np.ndarray, root: int = 0) -> Optional[np.ndarray]:
        """Element-wise max over ranks of a float64 array; the result on ``root`` only."""


def _nothing(*_) -> None:
    pass


@dataclass
class Bound:
    """One collective call bound to buffer slices.

    ``run`` issues the call; ``run_blocking`` returns only once this rank's part is complete
    (the same function for host-synchronous backends). ``checked`` overwrites the receive side,
    makes one blocking call and returns what arrived where it lies (the receive buffer's view on
    its device; the pickle API's objects as values on the host), or None if nothing arrives here.

    A call issued in two steps (``--api nonblocking`` or ``persistent``) also has ``start``, which
    begins it and returns what ``complete`` waits on (a request, torch's work), so that the
    harness can put work between them (the overlap: ``collbench.measure.harness``);
    ``run_blocking`` is then ``complete(start())``. ``release`` gives back what binding made (a
    persistent request), once no sample calls it again. ``reset`` and ``result`` are a two-step
    call's own (what ``checked`` does around it), for a group of such calls to check each.

    A group of ``calls`` calls issued as one (``--coalesce``: ``Backend.coalesced``) runs them all
    in ``run``; ``checked_all`` resets every call's receive side, runs the group once and returns
    what arrived for each, in order.
    """

    run: Callable[[], Any]
    run_blocking: Callable[[], Any]
    checked: Callable[[], Any]
    start: Optional[Callable[[], Any]] = None
    complete: Callable[[Any], None] = _nothing
    release: Callable[[], None] = _nothing
    reset: Callable[[], None] = _nothing
    result: Optional[Callable[[], Any]] = None
    checked_all: Optional[Callable[[], list]] = None
    calls: int = 1

    @classmethod
    def two_step(cls, start: Callable[[], Any], complete: Callable[[Any], None],
                 reset: Callable[[], None],
                 result: Callable[[], Any], release: Callable[[], None] = _nothing) -> "Bound":
        """A call started and completed apart: ``checked`` resets, runs it whole and returns
        ``result()``."""
        def whole():
            complete(start())

        def checked():
            reset()
            whole()
            return result()

        return cls(run=whole, run_blocking=whole, checked=checked, start=start, complete=complete,
                   release=release, reset=reset, result=result)


def grouped(bounds: list, issue: Callable[[list], None]) -> Bound:
    """One group of the two-step calls ``bounds`` (each a ``Bound.two_step``): ``issue(starts)``
    starts them all as one group and returns once every one is complete."""
    starts = [b.start for b in bounds]

    def whole() -> None:
        issue(starts)

    def checked_all() -> list:
        for b in bounds:
            b.reset()
        whole()
        return [b.result() for b in bounds]

    def release() -> None:
        for b in bounds:
            b.release()

    return Bound(run=whole, run_blocking=whole, checked=lambda: checked_all()[0], release=release,
                 checked_all=checked_all, calls=len(bounds))
