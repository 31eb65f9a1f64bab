"""collbench's own channel between the ranks of a job, outside MPI and torch.

A launcher cannot be trusted to end a job when one rank dies on another host, and MPI or gloo
cannot say which rank a hung collective waits for. So every rank's guardian (``supervise``)
keeps a TCP connection to a small **coordinator** in rank 0's guardian, beating every second
with its rank's position and state. When a rank dies, a host goes silent or a watchdog fires,
the coordinator says which ranks and where, and ends the job on every host. The protocol and
its token: docs/development.md, "Inside a launch"; each failure: docs/failures.md.

Only the standard library is used: this runs in the guardian.
"""

from __future__ import annotations

import selectors
import signal
import socket
import threading
import time
from typing import Callable, Optional

from collbench.launch import notes
from collbench.launch.liveness.wire import (BEAT_S, EARLY_EXIT_GRACE, EXIT_LOST, EXIT_TIMEOUT,
                                            LOST_AFTER, MessageReader,
                                           send_message)



def rank_ranges(ranks) -> str:
    """0-3,5 for [0, 1, 2, 3, 5]."""
    ranks = sorted(ranks)
    spans, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            spans.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ",".join(spans)


def _during(where: str) -> str:
    """"during allreduce on mpi at 8K": when a rank ended, from its last position."""
    return "after its last size, on its way out" if where == notes.SHUTDOWN else f"during {where}"


def _by_signal(code: int) -> str:
    """" by SIGTERM" for 143, the code of a rank that a signal ended through collbench's own
    handling of it; "" for other codes."""
    try:
        return f" by {signal.Signals(code - 128).name}" if code > 128 else ""
    except ValueError:
        return ""


class _Peer:
    def __init__(self, sock: socket.socket, address) -> None:
        self.sock = sock
        self.lines = MessageReader(sock)
        self.address = address[0] if address else "?"
        self.rank: Optional[int] = None
        self.host = "?"
        self.pid = 0
        self.position = ""
        self.state = ""
        self.last_seen = time.monotonic()
        self.done = False
        self.settled = False          # after an abort: its rank has ended, or it is gone

    def name(self) -> str:
        return f"rank {self.rank} (pid {self.pid} on {self.host})"


class Coordinator:
    """The job's referee, in rank 0's guardian. ``stop_here(code)`` ends rank 0 (its guardian
    and rank) once the others have been told."""

    def __init__(self, listener: socket.socket, token: str,
                 stop_here: Callable[[int], None]) -> None:
        self.listener = listener
        self.token = token
        self.stop_here = stop_here
        self.peers: dict = {}            # rank -> _Peer
        self.size: Optional[int] = None
        self.finished = False
        self.aborted = False
        self.files: list = []            # rank 0's result files, to name in the line
        self.kept = notes.EVERY_SIZE     # and what they hold (notes.kept_after_rounds)
        # rank -> (when to act, code): ranks that left with an error
        self._early: dict = {}
        self._selector = selectors.DefaultSelector()

    def start(self) -> None:
        self.listener.setblocking(False)
        self._selector.register(self.listener, selectors.EVENT_READ)
        threading.Thread(target=self._loop, name="collbench-coordinator", daemon=True).start()

    def _loop(self) -> None:
        last_beat = 0.0
        while True:
            for key, _ in self._selector.select(timeout=BEAT_S / 2):
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._read(key.data)
            now = time.monotonic()
            if now - last_beat >= BEAT_S:
                last_beat = now
                for peer in list(self.peers.values()):
                    if not peer.done:
                        send_message(peer.sock, {"t": "beat"})
                self._check_silence(now)

    def _accept(self) -> None:
        try:
            sock, address = self.listener.accept()
        except OSError:
            return
        sock.settimeout(2.0)
        self._selector.register(sock, selectors.EVENT_READ, _Peer(sock, address))

    def _drop(self, peer: _Peer) -> None:
        peer.settled = True
        try:
            self._selector.unregister(peer.sock)
        except (KeyError, ValueError):
            pass
        peer.sock.close()

    def _read(self, peer: _Peer) -> None:
        messages = peer.lines.feed()
        if messages is None:
            self._drop(peer)
            if peer.rank is not None and not peer.done and not self.finished:
                self.abort(EXIT_LOST,
                           f"{peer.name()} was lost: its guardian's connection closed without "
                                      "a word (the process was killed, or its host went down)")
            return
        for message in messages:
            self._handle(peer, message)

    def _handle(self, peer: _Peer, message: dict) -> None:
        kind = message.get("t")
        if peer.rank is None:
            if kind != "hello" or message.get("token") != self.token:
                self._drop(peer)        # not one of ours
                return
            peer.rank, peer.host, peer.pid = (int(message["rank"]), str(message["host"]),
                                              int(message["pid"]))
            self.size = int(message["size"])
            self.peers[peer.rank] = peer
            send_message(peer.sock, {"t": "welcome", "observed": peer.address})
            if len(self.peers) == self.size:
                roster = {str(r): p.host for r, p in self.peers.items()}
                for p in self.peers.values():
                    send_message(p.sock, {"t": "roster", "hosts": roster})
            return
        peer.last_seen = time.monotonic()
        if kind == "beat":
            peer.position, peer.state = str(message.get("where", "")), str(message.get("state", ""))
        elif kind == "died":
            self.abort(int(message.get("code", EXIT_LOST)),
                       f"{peer.name()} {message.get('how', 'died')} "
                       f"{_during(str(message.get('where') or 'start-up'))}", told=peer)
            peer.settled = True          # its rank has ended; its guardian waits for ours to leave
        elif kind == "abort-job":
            # The rank printed why itself, and waits to be stopped like the others: told as
            # they are, not merely acknowledged (its link must not take rank 0's end for a loss).
            self.abort(int(message.get("code", 1)), None)
        # after an abort: its rank has ended, its guardian waits for ours
        elif kind == "stopped":
            peer.settled = True
        elif kind == "signalled":        # the job is ended from outside (Ctrl-C, a signal to the
            peer.done = True             # launcher), which rank 0 says: its end is no loss
        elif kind == "timeout":
            peer.position = str(message.get("where", peer.position))
            self.abort(EXIT_TIMEOUT, self._timeout_line(peer, message))
        elif kind == "bye":
            peer.done = True
            code = int(message.get("code", 0))
            if peer.rank == 0 and code not in (0, 1):
                # rank 0 left before the end and said why (a signal sent to it alone, an error
                # of its own): the others may be inside a collective that waits for it, forever
                self.abort(code, None, told=peer)
                return
            if peer.rank != 0 and code not in (0, 1):    # the others may be on their way out too
                self._early[peer.rank] = (time.monotonic() + EARLY_EXIT_GRACE, code,
                                          str(message.get("where", peer.position)))
            if peer.rank == 0:          # rank 0 ended on its own terms: so does the job
                self.finished = True
                for p in self.peers.values():
                    if p is not peer:
                        send_message(p.sock, {"t": "end"})
            send_message(peer.sock, {"t": "ack"})

    def _check_silence(self, now: float) -> None:
        if self.finished or self.aborted or self.size is None:
            return
        for rank, (deadline, code, where) in list(self._early.items()):
            if now >= deadline:
                peer = self.peers[rank]
                self.abort(code,
                           f"{peer.name()} ended{_by_signal(code)} with code {code} "
                           + (_during(where) if where == notes.SHUTDOWN
                              else "while the other ranks went on"))
                return
        lost_hosts = {p.host for p in self.peers.values()
                      if not p.done and now - p.last_seen > LOST_AFTER}
        if not lost_hosts:
            return
        # A host that went down stopped every guardian on it within the same beat: name them
        # all, not only the first whose silence passed the limit.
        by_host: dict = {}
        for p in sorted(self.peers.values(), key=lambda p: p.rank):
            if p.host in lost_hosts and not p.done and now - p.last_seen > 2 * BEAT_S:
                by_host.setdefault(p.host, []).append(p.rank)
        hosts = "; ".join(f"{host} (rank{'s' if len(r) > 1 else ''} {rank_ranges(r)})"
                          for host, r in by_host.items())
        self.abort(EXIT_LOST,
                   f"lost contact with {hosts} for {LOST_AFTER:g} s: the host is down, cut off, "
                   f"or its guardian is stopped ({self._last_heard(by_host)})")

    def _last_heard(self, by_host: dict) -> str:
        """"rank 2 was last at allreduce on gloo at 8": where the silent ranks' guardians last
        said their ranks were, so that a silence can be placed."""
        at: dict = {}
        for ranks in by_host.values():
            for rank in ranks:
                at.setdefault(self.peers[rank].position or "start-up", []).append(rank)
        return "; ".join(f"rank{'s' if len(r) > 1 else ''} {rank_ranges(r)} "
                         f"{'were' if len(r) > 1 else 'was'} last at {where}"
                         for where, r in at.items())

    def _timeout_line(self, reporter: _Peer, message: dict) -> str:
        what, limit = message.get("what", "a size"), message.get("limit", 0)
        groups: dict = {}
        for p in sorted(self.peers.values(), key=lambda p: p.rank):
            if p.done:
                continue
            if p.state.startswith("T"):
                label = f"stopped (SIGSTOP or a debugger) at {p.position or 'start-up'}"
            elif p.position == reporter.position:
                label = f"still in {p.position}"
            else:
                label = f"at {p.position or 'start-up'}"
            groups.setdefault(label, []).append(p)
        parts = []
        for label, peers in groups.items():
            hosts = ", ".join(dict.fromkeys(p.host for p in peers))
            plural = "s" if len(peers) > 1 else ""
            parts.append(f"rank{plural} {rank_ranges([p.rank for p in peers])} on {hosts} {label}")
        absent = sorted(set(range(self.size or 0)) - set(self.peers))
        if absent:          # in start-up: ranks that never reached the job's channel
            parts.append(f"rank{'s' if len(absent) > 1 else ''} {rank_ranges(absent)} not joined "
                         "yet (still starting, or never started)")
        return f"timeout: {what} did not finish within {limit:g} s (--timeout): " + "; ".join(parts)

    def abort(self, code: int, why: Optional[str], told: Optional[_Peer] = None) -> None:
        """End the job everywhere: one line here (unless the rank that asked printed it), then
        every guardian stops its rank."""
        if self.aborted or self.finished:
            if told is not None:
                send_message(told.sock, {"t": "ack"})
            return
        self.aborted = True
        notes.leave(notes.JOB_CODE, str(code))      # the launch ends with it should a rank not end
        now = time.monotonic()
        for p in self.peers.values():      # lost already: nothing more will come from them
            if now - p.last_seen > 2 * BEAT_S:
                p.settled = True
        if notes.end_said():        # a later failure is the echo of the one said (its line is
            pass                      # kept, for the launching process to print should it be lost)
        elif why:
            notes.say(f"collbench: {why}; the job is stopped; "
                      f"{notes.files_clause(self.files, self.kept)}")
        else:                               # the rank that asked printed why
            notes.leave(notes.EXPLAINED)
        if told is not None:
            send_message(told.sock, {"t": "ack"})
        for p in self.peers.values():
            if p.rank != 0 and p is not told:
                send_message(p.sock, {"t": "abort", "code": code})
        self.stop_here(code)


    def wait_for_peers(self, seconds: float) -> None:
        """After an abort: return once every other rank has ended (or is gone), or after
        ``seconds``, so that this guardian, whose leaving releases the others, leaves last."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if all(p.settled or p.done for p in list(self.peers.values()) if p.rank != 0):
                return
            time.sleep(0.02)


def open_listener() -> socket.socket:
    """Rank 0's coordinator socket, on every IPv4 address of its host (the token keeps
    strangers out), on a port the kernel picks."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", 0))
    listener.listen(1024)
    return listener
