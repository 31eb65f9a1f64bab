"""The ``--timeout`` watchdog: one thread per rank, asleep until the deadline of the size in hand.

When a size runs past it, the watchdog tells the coordinator through this rank's guardian
(``supervise``); the coordinator names the ranks still in the collective and the ones stopped or
elsewhere, and ends the job on every host. Without a coordinator the rank ends the job itself.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Optional

from collbench.launch import processes
from collbench.launch.liveness import supervise
from collbench.launch.liveness.wire import EXIT_TIMEOUT, LOST_AFTER, STOP_GRACE

#: how often, where a step watches for a stopped rank, the watchdog looks at this host's ranks
STOPPED_POLL_S = 0.5


class Watchdog:
    """Aborts the job when one size runs past its deadline. One thread per rank, mostly asleep."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._deadline: Optional[float] = None
        self._what = ""
        self._limit = 0.0
        self._stopped_for = 0.0         # a rank of this host stopped this long ends the step
        self._stopped = processes.StoppedRanks()
        self._thread = threading.Thread(target=self._loop, name="collbench-watchdog", daemon=True)
        self._thread.start()

    def arm(self, seconds: float, what: str, stopped_for: float = 0.0) -> None:
        """Abort the job if ``what`` has not finished ``seconds`` from now (0: never) — or, with
        ``stopped_for``, once a rank of this host has been stopped (SIGSTOP, a debugger) that
        long: a limit that allows for slow steps need not wait for a rank that makes none."""
        with self._lock:
            self._deadline = time.monotonic() + seconds if seconds > 0 else None
            self._what, self._limit = what, seconds
            self._stopped_for = (stopped_for if 0 < stopped_for < seconds
                                 and supervise.has_guardian() else 0.0)
            self._stopped = processes.StoppedRanks()
        self._wake.set()

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None
        self._wake.set()

    def _loop(self) -> None:
        while True:
            with self._lock:
                deadline, stopped_for = self._deadline, self._stopped_for
            wait = None if deadline is None else min(max(0.0, deadline - time.monotonic()), 3600.0)
            if wait is not None and stopped_for:
                wait = min(wait, STOPPED_POLL_S)
            if self._wake.wait(wait):
                self._wake.clear()
                continue
            with self._lock:
                expired = self._deadline is not None and time.monotonic() >= self._deadline
                what, limit = self._what, self._limit
            if not expired and stopped_for and self._stopped_host_rank(stopped_for):
                expired, limit = True, stopped_for
            if expired and _report(what, limit):     # the coordinator ends the job; wait for it
                time.sleep(LOST_AFTER + 2 * STOP_GRACE)
            if expired:
                sys.stderr.write(f"collbench: {supervise.rank_label()}: timeout: {what} did not "
                                 f"finish within {limit:g} s (--timeout); aborting the job; "
                                 f"{supervise.saved_results_clause()}\n")
                sys.stderr.flush()
                supervise.abort_job(EXIT_TIMEOUT)

    def _stopped_host_rank(self, seconds: float) -> bool:
        """Whether a rank of this host's part of the job (below this rank's guardian's parent)
        has been seen stopped at every look for ``seconds``."""
        with self._lock:
            stopped = self._stopped
        return stopped.longest(processes.parent(os.getppid())) >= seconds


def _report(what: str, limit: float) -> bool:
    message = {"t": "timeout", "what": what, "limit": limit, "where": supervise.current_position()}
    answer = supervise.ask_guardian(message, 2.0)
    return answer is not None and answer.get("t") == "taken"
