"""Reading what a program wrote to a pseudo-terminal until it is done."""

from __future__ import annotations

import os
import select
import time


def read_rest(primary: int, proc, timeout: float, quiet_for: float = 30.0,
              after_exit: float = 2.0) -> bytes:
    """Everything written to the pseudo-terminal ``primary`` until the program closes it, or
    has ended and nothing came for ``after_exit`` seconds (its children may still be writing),
    or nothing came for ``quiet_for`` seconds, or ``timeout`` passed."""
    seen = b""
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([primary], [], [], 0.5)
        if not ready:
            quiet = time.monotonic() - last
            if (proc.poll() is not None and quiet > after_exit) or quiet > quiet_for:
                break
            continue
        try:
            chunk = os.read(primary, 65536)
        except OSError:           # the other side is closed: the program and its children are gone
            break
        if not chunk:
            break
        seen += chunk
        last = time.monotonic()
    return seen
