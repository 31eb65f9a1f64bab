"""The line the guardians and the coordinator speak: one JSON object per line over a socket;
and what every side of it agrees on: its beat and patience, the grace a stopped rank gets, and
the exit codes by which collbench ends a rank or a job.

Only the standard library: this runs in the guardian.
"""

from __future__ import annotations

import json
import socket
from typing import Optional

BEAT_S = 1.0
LOST_AFTER = 6.0          # seconds of silence before a peer counts as lost
CONNECT_TIMEOUT = 3.0
STOP_GRACE = 3.0          # seconds a rank told to stop gets before SIGKILL
EARLY_EXIT_GRACE = 5.0    # seconds the others get to follow a rank that left with an error

#: A size ran past ``--timeout``.
EXIT_TIMEOUT = 124
#: A rank or host lost: as if killed (128 + SIGKILL).
EXIT_LOST = 137
#: A bad environment (MPI refused to start, and said why), as a bad option: usage.
EXIT_BAD_ENVIRONMENT = 2
#: Exit codes collbench itself ends a rank with (done, failed, usage, timeout, 128 + SIGHUP,
#: SIGINT, SIGTERM); any other exit of a rank counts as a crash.
RANK_EXIT_CODES = frozenset({0, 1, 2, EXIT_TIMEOUT, 129, 130, 143})
#: Exit codes a job may end with by collbench's own doing: a rank's, and a lost rank's.
JOB_EXIT_CODES = RANK_EXIT_CODES | {EXIT_LOST}


def send_message(sock: socket.socket, message: dict) -> bool:
    try:
        sock.sendall((json.dumps(message) + "\n").encode())
        return True
    except OSError:
        return False


class MessageReader:
    """Reads whole JSON lines off a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""

    def feed(self) -> Optional[list]:
        """What one ``recv`` brought, as messages; None at end of stream."""
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, socket.timeout):
            return []
        except OSError:
            return None
        if not data:
            return None
        self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\n")
        out = []
        for line in complete:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                out.append(message)
        return out
