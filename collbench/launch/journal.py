"""The run's journal: every measurement, note and round appended as one JSON line as it
happens, so that the cost of keeping a size safe does not grow with the sizes before it.

The result files are rewritten from the collector on a schedule (``live.files``); the journal is
what holds everything in between. It lives in a folder of its own: the self-launching parent's
(its launches, one per round, append to it in turn, and each rank 0 reads the earlier rounds
back), or, under a user's launcher, one rank 0 makes and removes when the run ends. If rank 0
dies before it could rewrite the files, ``collbench.live.recover`` rebuilds them from here.

Standard library only: the guardian and the self-launching parent read it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from collbench.launch import processes

NAME = "journal.jsonl"
#: The folders of journals made for one run under a user's launcher, in the temporary folder.
PREFIX = "collbench-journal-"
#: "HOST PID START PPID PSTART": the rank 0 that made such a journal, and its guardian (its parent).
OWNER = "owner"


class Journal:
    """Append-only lines of JSON in ``folder``; ``entries``: what was there when opened."""

    def __init__(self, folder: Path, *, owned: bool = False) -> None:
        self.folder = Path(folder)
        self.path = self.folder / NAME
        self.owned = owned            # made for this run alone: removed when it ends
        self.entries: list = []
        self._fh = None

    @classmethod
    def open(cls, folder) -> "Journal":
        journal = cls(Path(folder))
        try:
            with open(journal.path, encoding="utf-8") as fh:
                for line in fh:
                    try:
                        journal.entries.append(json.loads(line))
                    # a line cut short by a crash: the rest is gone too
                    except json.JSONDecodeError:
                        break
        except (FileNotFoundError, NotADirectoryError):
            pass
        return journal

    @classmethod
    def create(cls) -> "Journal":
        """A journal of its own for a run under a user's launcher (rank 0), with its owner's
        name: a later run on this host tells from it whether the run is over."""
        folder = Path(tempfile.mkdtemp(prefix=PREFIX))
        me, parent = os.getpid(), os.getppid()
        (folder / OWNER).write_text(f"{socket.gethostname()} {me} {processes.started_at(me)} "
                                    f"{parent} {processes.started_at(parent)}\n", encoding="utf-8")
        return cls(folder, owned=True)

    def of_type(self, kind: str) -> list:
        return [e for e in self.entries if e.get("type") == kind]

    def append(self, entry: dict) -> None:
        """One line, flushed at once (an OSError, such as a full disk, reaches the caller)."""
        if self._fh is None:
            self._fh = open(self.path, "a", encoding="utf-8")
        self._fh.write(json.dumps(entry, default=str) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None

    def remove(self) -> None:
        """The run is over and its files are whole: a journal of its own goes."""
        self.close()
        if self.owned:
            shutil.rmtree(self.folder, ignore_errors=True)


def orphans(folder=None) -> list:
    """Journals of runs on this host that lost both their rank 0 and its guardian before either
    could make the files whole and take the journal away: a launcher that kills a job's
    processes all at once does that. Their files may lack what only the journal holds."""
    host, found = socket.gethostname(), []
    for path in sorted(Path(folder or tempfile.gettempdir()).glob(PREFIX + "*")):
        try:
            name, *owners = (path / OWNER).read_text(encoding="utf-8").split()
            pids = [(int(pid), start) for pid, start in zip(owners[::2], owners[1::2])]
        except (OSError, ValueError, UnicodeDecodeError):
            continue                  # being made, or not one of ours: not ours to judge
        if name == host and len(pids) == 2 and (path / NAME).is_file() and not any(
                processes.alive(pid) and str(processes.started_at(pid)) == start
                for pid, start in pids):
            found.append(path)
    return found


def claimed(journal: Journal) -> Optional[list]:
    """The result files the self-launching process claimed for the run before its first launch
    (so that a run started beside it with the same ``-o`` is refused before either measures);
    None when it claimed none."""
    entries = journal.of_type("claimed")
    return [Path(p) for p in entries[0]["paths"]] if entries else None


def release_claims(journal: Journal) -> None:
    """A run that ended before its rank 0 took up the files claimed for it: those still empty
    go (a file something was written to stays)."""
    if journal.of_type("outputs"):
        return
    for path in claimed(journal) or []:
        try:
            if path.stat().st_size == 0:
                path.unlink()
        except OSError:
            pass


def restore(journal: Journal, collector) -> Optional[list]:
    """Replay what earlier launches of this run recorded into ``collector``: rows, notes and
    rounds. Returns the result paths they claimed, or None when the journal holds no run yet."""
    outputs = journal.of_type("outputs")
    if not outputs:
        return None
    for entry in journal.of_type("measure"):
        collector.replay(entry)
    for entry in journal.of_type("note"):
        collector.notes.append(entry["text"])
    for entry in journal.of_type("round"):
        collector.metadata.setdefault("rounds", []).append(entry["record"])
    collector.round_ended()
    return [Path(p) for p in outputs[0]["paths"]]


def rebuild(folder, *, remove: bool = False, python: str = sys.executable,
            seconds: float = 120.0) -> int:
    """Rewrite the result files from the journal in ``folder`` (and, with ``remove``, take the
    folder away), in a process of its own: ``python -m collbench.live.recover``, the
    results' writer, which needs numpy where the guardian, the stand-in and this room import
    only the standard library. It says in one line if it cannot; returns its exit code (2 when
    it could not run)."""
    try:
        return subprocess.run([python, "-m", "collbench.live.recover", str(folder),
                               *(["--remove"] if remove else [])],
                              stdin=subprocess.DEVNULL, timeout=seconds).returncode
    except (OSError, subprocess.SubprocessError):
        return 2
