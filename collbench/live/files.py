"""A run's result files: claimed before anything is measured, rewritten on a schedule whose
cost stays flat however many sizes came before, and never left half written.

Claiming the names at once keeps two runs that start together apart. The files are rewritten
after every size while that is cheap, then only often enough to take a small share of the
run's time (``EVERY_SIZE_ROWS``, ``EVERY_SIZE_S``, ``SAVE_SHARE``), with the journal holding
what they do not hold yet. Every write is atomic, and a failed one names the file and the rows
it still holds. The schedule and why: docs/results-format.md, "When files are written"; its
cost: benchmarks/README.md, "Saving after every size" and "files at the 40th round".
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Optional

from collbench.errors import UsageError
from collbench.render.exporters import exporter_for
from collbench.results.paths import refuse_special, remove_partial, write_atomic

EVERY_SIZE_ROWS = 500
EVERY_SIZE_S = 0.05
SAVE_SHARE = 0.05


class OutputFailed(UsageError):
    """A result file could not be written: a bad environment (exit 2), said in one line."""

    def __init__(self, path: Path, error: OSError, kept: str) -> None:
        super().__init__(f"cannot write {path}: {error.strerror or error}; {kept}")
        self.path = path


def _kept(rows: Optional[int]) -> str:
    if rows is None:
        return "nothing was written to it"
    return f"it keeps the {rows} row(s) written before" if rows else "it holds no rows yet"


def check_output_settings(settings) -> None:
    """Everything about where results go that can be refused before measuring (UsageError):
    each ``-o`` file, no file named twice, the ``--results-dir`` folder."""
    from collbench.render.exporters import check_result_path

    seen = {}
    for path in settings.outputs:
        check_result_path(path, settings.force)
        real = os.path.realpath(path)
        if real in seen:
            raise UsageError(f"-o {path!r} names the same file as -o {seen[real]!r}; give each "
                             "file once")
        seen[real] = path
    if settings.save and not settings.outputs:
        folder = Path(settings.results_dir)
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"--results-dir {settings.results_dir!r} is not a folder")
        parent = folder if folder.exists() else folder.parent
        if not parent.is_dir():
            raise UsageError(f"--results-dir {settings.results_dir!r}: folder {str(parent)!r} does "
                             "not exist")
        if not os.access(parent, os.W_OK):
            raise UsageError(f"--results-dir {settings.results_dir!r} is not writable")


#: the locks this process holds on its ``-o`` files, for as long as it lives: (lock file,
#: descriptor)
_locks: list = []


def _lock(path: Path) -> None:
    """Hold ``path`` for this run: a lock on a file beside it (``.NAME.lock``: the file itself is
    replaced whole at each write), taken without waiting and released when this process ends,
    however it ends. Two runs with the same ``-o`` and ``--force`` both said "wrote" and the file
    held one of them; with ``-o a.json -o a.csv`` against ``-o a.csv`` the two files came from
    different runs. Now the second is refused."""
    import atexit
    import fcntl

    lock = path.with_name(f".{path.name}.lock")
    fd = os.open(lock, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        owner = os.pread(fd, 16, 0).decode("ascii", "replace").strip()
        os.close(fd)
        by = f" (pid {owner})" if owner.isdigit() else ""
        raise UsageError(f"output {str(path)!r} is being written by another collbench run{by}: "
                         "wait for it to end, or give another -o") from None
    if not _locks:
        atexit.register(_unlock)
    _locks.append((lock, fd))
    try:                                  # who holds it, for the line that refuses another run
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError:                       # a full disk: the lock holds without it
        pass


def _unlock() -> None:
    while _locks:
        lock, fd = _locks.pop()
        try:
            os.unlink(lock)
        except OSError:
            pass
        os.close(fd)


def release_stale_lock(path: Path) -> None:
    """The lock beside ``path`` removed, if no process holds it: what a run killed outright
    (SIGKILL) leaves, for whoever finishes its files (``recover``)."""
    import fcntl

    lock = Path(path).with_name(f".{Path(path).name}.lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.unlink()
    except OSError:
        pass                              # held: another run's, live
    finally:
        os.close(fd)


def release_half_claimed(claiming) -> None:
    """``claiming``: (path, pid) of the ``-o`` files that process pid, now killed, was claiming
    (``claim``'s ``noted``) and had not recorded as claimed: each that it locked, and made empty
    if it got that far, goes with its lock, so that the next run with that ``-o`` is not
    refused."""
    for path, pid in claiming:
        path = Path(path)
        lock = path.with_name(f".{path.name}.lock")
        try:
            if lock.read_text().strip() != str(pid):     # not that process's hold
                continue
        except OSError:
            continue
        release_stale_lock(path)
        if lock.exists():                                 # held: a live run's after all
            continue
        try:
            if path.stat().st_size == 0:
                path.unlink()
        except OSError:
            pass


def _claim(path: Path) -> bool:
    """Create ``path`` if nobody has: another run starting at the same moment gets False."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        return True
    except FileExistsError:
        return False


#: the result files this process claimed (a line about an interruption says whether any was)
claimed_here: list = []


def claim(settings, noted: Callable[[Path], None] = lambda path: None) -> list:
    """The run's result files, claimed now: the ``-o`` files, or a fresh JSON and CSV pair in
    the results folder. A ``-o`` file that appeared since the check is not overwritten.
    ``noted(path)`` is called once its lock is taken and before the file is made, so that a
    process killed in between leaves word of it (``release_half_claimed``)."""
    paths = _claim_all(settings, noted)
    claimed_here.extend(paths)
    return paths


def _claim_all(settings, noted) -> list:
    if not settings.save:
        return []
    if not settings.outputs:
        return _default_paths(settings.results_dir)
    paths, created = [Path(p) for p in settings.outputs], []
    try:
        for path in paths:
            refuse_special(path)
            _lock(path)
            noted(path)
            if _claim(path):
                created.append(path)
            elif not settings.force:
                raise UsageError(f"output {str(path)!r} exists; use --force to overwrite it")
    except (UsageError, OSError) as exc:
        for done in created:             # only what this run created: never a file --force kept
            done.unlink(missing_ok=True)
        _unlock()
        if isinstance(exc, OSError):
            raise UsageError(f"cannot create {str(path)!r}: {exc.strerror or exc}") from None
        raise
    return paths


def _default_paths(results_dir: str) -> list:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = Path(results_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot make --results-dir {results_dir!r}: {exc.strerror}") from None
    i = 1
    while True:
        base = folder / (f"collbench-{stamp}" + (f"-{i}" if i > 1 else ""))
        json_path, csv_path = base.with_suffix(".json"), base.with_suffix(".csv")
        try:
            if _claim(json_path):
                if _claim(csv_path):
                    return [json_path, csv_path]
                json_path.unlink()
        except OSError as exc:
            json_path.unlink(missing_ok=True)
            raise UsageError(f"cannot create result files in {results_dir!r}: "
                             f"{exc.strerror or exc}") from None
        i += 1


class ResultFiles:
    """The run's files and when each was last written whole."""

    def __init__(self, paths) -> None:
        self.paths = [Path(p) for p in paths]
        # rows each file held at its last whole write
        self.rows_in: dict = {p: None for p in self.paths}
        self._cost = 0.0
        self._done_at = 0.0

    def due(self, rows: int) -> bool:
        """Whether a rewrite of ``rows`` rows now keeps within the schedule (module docstring)."""
        return (rows <= EVERY_SIZE_ROWS and self._cost <= EVERY_SIZE_S) or \
            time.monotonic() - self._done_at >= self._cost / SAVE_SHARE

    def save(self, result) -> None:
        """Rewrite every file from ``result``; OutputFailed names the first that fails."""
        started = time.monotonic()
        # the first write, made before anything is measured, pays for first use (a loaded host
        # took long enough that the next writes waited out the whole run): it sets no schedule
        first = all(rows is None for rows in self.rows_in.values())
        for path in self.paths:
            try:
                write_atomic(path, exporter_for(path).render(result))
            except OSError as exc:
                raise OutputFailed(path, exc, _kept(self.rows_in[path])) from None
            self.rows_in[path] = len(result.rows)
        self._done_at = time.monotonic()
        if not first:
            self._cost = self._done_at - started

    def written(self) -> list:
        return [p for p in self.paths if self.rows_in[p] is not None]

    def discard(self) -> None:
        """The run was refused before it measured anything: the empty files it claimed go (a
        file ``--force`` was to overwrite keeps what it held)."""
        for path in self.paths:
            try:
                if self.rows_in[path] is None and path.stat().st_size == 0:
                    path.unlink()
            except OSError:
                pass
        remove_partial()
