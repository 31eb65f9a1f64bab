"""The line the guardians and the coordinator speak: one JSON object per line over a socket.

Only the standard library: this runs in the guardian.
"""

from __future__ import annotations

import json
import socket
from typing import Optional


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
