"""Did the kernel's out-of-memory killer end a rank? A SIGKILL alone does not say who sent it.

The kernel counts its OOM kills: machine-wide (``oom_kill`` in /proc/vmstat) and per memory
cgroup (``oom_kill`` in ``memory.oom_control`` under cgroup v1, in ``memory.events`` under v2).
A guardian notes the counts when it starts; when its rank dies of SIGKILL and a count has grown
since, the out-of-memory killer most likely sent it (another process's OOM kill at the same
moment is possible, hence "most likely"). Standard library only: the guardian must stay small.
"""

from __future__ import annotations

import os
import signal
from typing import Optional

VMSTAT = "/proc/vmstat"


def _cgroup_counter_file(proc_cgroup: str = "/proc/self/cgroup",
                         root: str = "/sys/fs/cgroup") -> Optional[str]:
    """The file that counts OOM kills in this process's memory cgroup (v1 or v2), if any."""
    try:
        with open(proc_cgroup, encoding="ascii") as fh:
            lines = [line.rstrip("\n").split(":", 2) for line in fh]
    except OSError:
        return None
    for number, controllers, path in (p for p in lines if len(p) == 3):
        if "memory" in controllers.split(","):
            mount, name = os.path.join(root, "memory"), "memory.oom_control"
        elif number == "0" and controllers == "":
            mount, name = root, "memory.events"
        else:
            continue
        # a container sees its own as "/"
        for folder in (os.path.join(mount, path.lstrip("/")), mount):
            if os.path.isfile(os.path.join(folder, name)):
                return os.path.join(folder, name)
    return None


def _count(path: Optional[str]) -> int:
    """The ``oom_kill`` line of ``path`` (0 when absent or unreadable)."""
    if path is None:
        return 0
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


class OomWatch:
    """The kernel's OOM-kill counts when this guardian started, to compare with at its rank's
    death."""

    def __init__(self) -> None:
        self.files = (VMSTAT, _cgroup_counter_file())
        self.start = [_count(f) for f in self.files]

    def fired(self) -> bool:
        """Whether the kernel has OOM-killed a process, here or in this cgroup, since the start."""
        return any(_count(f) > was for f, was in zip(self.files, self.start))

    def explain(self, sig: int) -> str:
        """What to add after "was killed by signal N (NAME)": the likely sender of a SIGKILL."""
        if sig == signal.SIGKILL and self.fired():
            return (", most likely by the kernel's out-of-memory killer (its host or memory "
                    "cgroup ran out of memory)")
        return ""
