"""A guardian's line to the job's coordinator: connecting through the first address that
answers, and the connection's life afterwards (beats both ways, the roster of hosts, a stop
when told, and a stop with one line per host when rank 0's side falls silent).

See ``supervise`` and ``coordinator`` for the whole picture. Only the standard library is used.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable

from collbench.launch import notes, processes
from collbench.launch.liveness.wire import (BEAT_S, CONNECT_TIMEOUT, EXIT_LOST, LOST_AFTER,
                                            MessageReader, send_message)


def connect(candidates: list, port: int, hello: dict) -> tuple:
    """Connect to the coordinator through the first candidate address that answers with a
    welcome: (socket, the address used, this end's address). Raises OSError naming every
    address tried."""
    tried = []
    for address in dict.fromkeys(candidates):
        try:
            sock = socket.create_connection((address, port), timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            tried.append(f"{address}: {exc.strerror or exc}")
            continue
        sock.settimeout(CONNECT_TIMEOUT)
        lines = MessageReader(sock)
        if send_message(sock, hello):
            deadline = time.monotonic() + CONNECT_TIMEOUT
            while time.monotonic() < deadline:
                messages = lines.feed()
                if messages is None:
                    break
                kinds = [m.get("t") for m in messages]
                if "welcome" in kinds:
                    # a roster may follow at once
                    lines.early = messages[kinds.index("welcome") + 1:]
                    return sock, address, sock.getsockname()[0], lines
        tried.append(f"{address}: no answer from a collbench coordinator")
        sock.close()
    raise OSError(f"cannot reach rank 0's coordinator on port {port} (tried " + "; ".join(tried)
                  + ")")


#: How long a guardian waits, once rank 0's end of its line closed, before it says so: a
#: launcher ending the job after a rank died kills every process, rank 0's guardian first
#: (seen under a user's mpiexec on a loaded machine: a second line, "lost contact with rank 0").
CLOSED_GRACE_S = 1.0


class Link:
    """A guardian's connection to the coordinator, once its rank has joined the job."""

    def __init__(self, sock: socket.socket, lines: MessageReader, rank: int, child: int,
                 where: Callable[[], str], stop: Callable[[int], None]) -> None:
        self.sock, self.lines, self.rank, self.child = sock, lines, rank, child
        self.where, self.stop = where, stop
        self.roster: dict = {}
        self.ended = False
        # the coordinator ended the job: its guardian still has to leave
        self.aborted = False
        # the guardian is already stopping its rank
        self.ending: Callable[[], bool] = lambda: False
        self._acked = threading.Event()
        self._send_lock = threading.Lock()
        sock.settimeout(BEAT_S)
        threading.Thread(target=self._loop, name="collbench-link", daemon=True).start()

    def send(self, message: dict) -> bool:
        with self._send_lock:
            return send_message(self.sock, message)

    def _loop(self) -> None:
        last_heard = last_beat = time.monotonic()
        early, self.lines.early = getattr(self.lines, "early", []), []
        while not self.ended:
            messages = early or self.lines.feed()
            early = []
            now = time.monotonic()
            if messages is None:
                self._lost("its connection closed", closed=True)
                return
            for message in messages:
                last_heard = now
                kind = message.get("t")
                if kind == "abort":
                    self.ended = self.aborted = True
                    self.stop(int(message.get("code", EXIT_LOST)))
                    return
                if kind == "end":
                    self.ended = True
                    self._acked.set()
                    return
                if kind == "roster":
                    self.roster = {int(r): h for r, h in message.get("hosts", {}).items()}
                if kind == "ack":
                    self._acked.set()
            if now - last_heard > LOST_AFTER:
                self._lost(f"it was silent for {LOST_AFTER:g} s")
                return
            if now - last_beat >= BEAT_S:
                last_beat = now
                self.send({"t": "beat", "where": self.where(),
                           "state": processes.state(self.child)})

    def _lost(self, how: str, closed: bool = False) -> None:
        if self.ended:
            return
        self.ended = True
        if closed:
            # A launcher ending the job (mpiexec after a rank died) kills rank 0's guardian and
            # then this one a moment later: a closed line is news only if this guardian
            # outlives that moment, and is not already stopping.
            deadline = time.monotonic() + CLOSED_GRACE_S
            while time.monotonic() < deadline and not self.ending():
                time.sleep(0.05)
        here = socket.gethostname()
        mine = [r for r, h in self.roster.items() if h == self.roster.get(self.rank) and r != 0]
        # told to stop from outside (Ctrl-C reached every process): no news
        if self.ending():
            pass
        elif self.rank != 0 and (not mine or self.rank == min(mine)):       # one line per host
            notes.say(f"collbench: rank {self.rank} on {here}: lost contact with rank 0 on "
                      f"{self.roster.get(0, 'its host')} ({how}): rank 0's guardian was killed, or "
                      "its host is down or cut off; stopping the ranks here")
        self.stop(EXIT_LOST)

    def wait_for_coordinator_exit(self, seconds: float) -> None:
        """After the job's abort: return once rank 0's guardian, which hosts the coordinator, has
        left (its end of the line closes), or after ``seconds`` (``Guardian.run`` says why)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.lines.feed() is None:
                return

    def tell_and_wait(self, message: dict, seconds: float = 3.0) -> bool:
        """Send ``message`` and wait for the coordinator's ack; False if none came."""
        self._acked.clear()
        if not self.send(message):
            return False
        return self._acked.wait(seconds)


def hello_message(token: str, rank: int, size: int, pid: int) -> dict:
    return {"t": "hello", "token": token, "rank": rank, "size": size, "host": socket.gethostname(),
            "pid": pid}
