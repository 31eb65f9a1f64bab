"""Turns, size by size, between the two sides of one ``collbench ab`` pair.

The two launches of a pair run at once; before each size every rank asks the job's referee
(a thread of the ``ab`` process, on a Unix socket named by ``COLLBENCH_AB_TURNS``) for its turn
and blocks in the kernel until it comes, so one side measures while the other's ranks sleep.
A size's two measurements then lie milliseconds apart instead of a whole sweep apart, so a
state of the machine that lasts seconds meets both (benchmarks/README.md, "Turns size by
size"). The line protocol: a rank says ``R`` when it is
ready for a turn and reads ``G`` to go; a side is out of turns when all its ranks have closed
their connections (they end, or their job is stopped), and a rank whose referee is gone goes on
without turns.
"""

from __future__ import annotations

import os
import random
import selectors
import socket
import threading
import time
from typing import Optional

from collbench import environment

#: How long the referee waits for the other side's ranks to reach their first size (their
#: start-up) before it lets a ready side go alone.
FIRST_TURN_WAIT_S = 60.0
#: How long a side that lost a rank during its turn (it ended, or died) holds the other back for
#: its other ranks to end the turn: a side's ranks leave one by one after their last size, and
#: one that died leaves the others in a collective that never ends.
BROKEN_GRACE_S = 1.0


class Turns:
    """One rank's end: ``take`` blocks until this side may measure its next size. ``meter``
    (a ``cpuload.CpuMeter``) is paused while the rank waits, so that a round's load is what the
    machine did while the side measured."""

    def __init__(self, path: str, side: str, rank: int, meter=None) -> None:
        self.meter = meter
        # turns taken, and the time spent waiting for them
        self.taken, self.waited_s = 0, 0.0
        self._sock: Optional[socket.socket] = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(path)
            self._sock.sendall(f"H {side} {rank}\n".encode())
        except OSError:                 # no referee (it ended): measure without turns
            self.close()

    def take(self) -> None:
        if self._sock is None:
            return
        if self.meter is not None:
            self.meter.pause()
        began = time.monotonic()
        try:
            self._sock.sendall(b"R\n")
            if self._sock.recv(1) == b"G":
                self.taken += 1
            else:                               # the referee ended: no more turns
                self.close()
        except OSError:
            self.close()
        finally:
            self.waited_s += time.monotonic() - began
            if self.meter is not None:
                self.meter.resume()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def from_environment(rank: int, meter=None) -> Optional[Turns]:
    """This rank's turns when it measures one side of an ab pair taken size by size, else None."""
    path = os.environ.get(environment.AB_TURNS, "")
    if not path:
        return None
    from collbench.launch.notes import ab_side

    return Turns(path, (ab_side() or {}).get("side", "?"), rank, meter)


class Referee:
    """The ``ab`` process's end: a thread that gives the two sides turns, size by size, in an
    order drawn from ``seed``. ``ended(side)`` says that a side's launch is over (its ranks
    may never connect). ``turns`` counts the turns each side was given."""

    def __init__(self, path: str, ranks: int, seed: int) -> None:
        self.path, self.ranks = path, ranks
        self.turns = {"A": 0, "B": 0}
        self._rng = random.Random(seed)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(4 * ranks)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._sides: dict = {"A": {}, "B": {}}     # side -> {connection: ready}
        self._unknown: set = set()                 # connections not yet introduced
        self._buffers: dict = {}
        self._ended: set = set()
        self._complete: set = set()                # sides all of whose ranks were there at once
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="collbench-ab-referee", daemon=True)
        self._thread.start()

    def ended(self, side: str) -> None:
        with self._lock:
            self._ended.add(side)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5.0)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    # -- the thread -----------------------------------------------------------------------

    def _out(self, side: str) -> bool:
        """Whether ``side`` takes no more turns: its launch ended and none of its ranks is
        connected."""
        with self._lock:
            ended = side in self._ended
        return ended and not self._sides[side]

    def _ready(self, side: str) -> bool:
        ranks = self._sides[side]
        if len(ranks) == self.ranks:
            self._complete.add(side)
        return len(ranks) == self.ranks and all(ranks.values())

    def _run(self) -> None:
        started = time.monotonic()
        idle = False
        while not self._stop.is_set():
            # after a round of turns both sides are ready: no wait
            self._poll(0.05 if idle else 0.0)
            idle = True
            waiting = [s for s in ("A", "B") if not self._out(s)]
            ready = [s for s in waiting if self._ready(s)]
            for side in waiting:
                if self._broken(side):          # its job is ending: what is left of it goes freely
                    self._release(side)
            # Both sides go turn by turn once both are there. One still starting holds the other
            # back for FIRST_TURN_WAIT_S at most (its start-up would disturb the other's sizes);
            # one whose ranks are all there but not ready has finished its sizes and is writing
            # its files: it is waited for until they end.
            late = [s for s in waiting if s not in ready and not self._broken(s)]
            if not ready or any(len(self._sides[s]) == self.ranks if s in self._complete
                                else time.monotonic() - started < FIRST_TURN_WAIT_S for s in late):
                continue
            self._rng.shuffle(ready)
            for side in ready:
                self._give(side)
            idle = False

    def _broken(self, side: str) -> bool:
        """Whether ``side`` lost a rank after all of them were there (a rank ended)."""
        return side in self._complete and len(self._sides[side]) < self.ranks

    def _release(self, side: str) -> None:
        for conn, ready in list(self._sides[side].items()):
            if ready:
                self._sides[side][conn] = False
                try:
                    conn.sendall(b"G")
                except OSError:
                    self._drop(conn)

    def _give(self, side: str) -> None:
        """A turn to ``side``: go to each of its ranks, then wait until all of them are ready
        again or gone."""
        ranks = self._sides[side]
        for conn in list(ranks):
            ranks[conn] = False
            try:
                conn.sendall(b"G")
            except OSError:
                self._drop(conn)
        self.turns[side] += 1
        # a rank of the side ended: the others get BROKEN_GRACE_S to end their turn
        lost_at = None
        while not self._stop.is_set() and ranks and not all(ranks.values()):
            if self._broken(side):
                lost_at = lost_at or time.monotonic()
                if time.monotonic() - lost_at > BROKEN_GRACE_S:
                    break
            self._poll(0.05)

    def _poll(self, timeout: float) -> None:
        for key, _ in self._selector.select(timeout):
            sock = key.fileobj
            if sock is self._listener:
                try:
                    conn, _ = self._listener.accept()
                except OSError:
                    continue
                self._unknown.add(conn)
                self._selector.register(conn, selectors.EVENT_READ)
                continue
            try:
                data = sock.recv(256)
            except OSError:
                data = b""
            if not data:
                self._drop(sock)
                continue
            self._read(sock, data)

    def _read(self, conn, data: bytes) -> None:
        buffer = self._buffers.get(conn, b"") + data
        *lines, rest = buffer.split(b"\n")
        self._buffers[conn] = rest
        for line in lines:
            if line.startswith(b"H "):
                parts = line.decode(errors="replace").split()
                side = parts[1] if len(parts) > 1 and parts[1] in self._sides else None
                self._unknown.discard(conn)
                if side is None:            # not one of ours: it gets no turns
                    self._drop(conn)
                    return
                self._sides[side][conn] = False
            elif line == b"R":
                for ranks in self._sides.values():
                    if conn in ranks:
                        ranks[conn] = True

    def _drop(self, conn) -> None:
        self._unknown.discard(conn)
        self._buffers.pop(conn, None)
        for ranks in self._sides.values():
            ranks.pop(conn, None)
        try:
            self._selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()
