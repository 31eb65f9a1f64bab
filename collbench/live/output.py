"""Rank 0's side of a run: live progress, tables on the terminal, files kept safe as sizes
finish (``files`` and ``journal`` say how)."""

from __future__ import annotations

import sys
import tempfile
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from collbench.errors import printable
from collbench.render.exporters import STDOUT_FORMATS
from collbench.results.paths import remove_partial
from collbench.live.files import OutputFailed, ResultFiles, claim
from collbench.launch.journal import Journal, claimed, orphans, restore
from collbench.results.link_map import placement
from collbench.results.records import root_rank
from collbench.render.console import output_width, print_table
from collbench.render.tables import build_tables


def _asked_for(what: str) -> None:
    """Tell standard output (collbench's guarded stream, ``collbench.cli.streams``) that what
    follows is a document the user asked for, whose loss is an error."""
    mark = getattr(sys.stdout, "asked_for", None)
    if mark is not None:
        mark(what)


@dataclass(frozen=True)
class OutputSettings:
    outputs: tuple = ()            # explicit -o paths; empty = default files in results_dir
    results_dir: str = "results"
    save: bool = True
    force: bool = False
    quiet: bool = False
    print_format: str = "table"
    #: the user's streams as this rank's output reaches them (``collbench.launch.origin.terminal``);
    #: None: this process's own
    terminals: Optional[object] = None


class Output:
    """Collects rounds of rows, keeps them safe, prints a table per collective.

    With several rounds, only the process that measures the final round prints tables (they
    combine every round) and the "wrote" line; the others show progress and notes. ``journal``
    (self-launched rounds): where this launch appends what it measured, and where the earlier
    launches' rows, notes and output paths come from; under a user's launcher the output keeps
    a journal of its own. ``add`` and ``save_now`` may run on different threads (a signal ends
    the rank while the main thread is inside a collective): a lock keeps them apart.
    """

    def __init__(self, settings: OutputSettings, collector, *, total_steps: int,
                 done_steps: int = 0,
                 prints_final: bool = True, round_label: str = "", journal=None,
                 round_steps: int = 0) -> None:
        from rich.console import Console

        self.settings = settings
        self.collector = collector
        self.journal = journal
        self.prints_final = prints_final
        self.round_label = round_label
        self._lock = threading.Lock()
        self._dirty = False
        # The user's streams as this rank's output reaches them (collbench.launch.origin.terminal):
        # a rank under a launcher writes through the launcher's pipes. None: this process's own.
        seen = settings.terminals
        out_tty = seen.stdout if seen else sys.stdout.isatty()
        err_tty = seen.stderr if seen else sys.stderr.isatty()
        columns, tables_on_stderr = (seen.columns, seen.tables_on_stderr) if seen else (None, False)
        self.plain = not out_tty
        if self.plain:   # piped: never squeeze columns to a guessed 80-character terminal
            self.console = Console(file=sys.stdout, highlight=False, soft_wrap=False, width=400,
                                   no_color=True, force_terminal=False)
        else:
            # One terminal behind both streams: the tables share stderr's pipe with the progress
            # bar, so that the launcher, copying each stream on its own, cannot reorder them.
            self.console = Console(file=sys.stderr if tables_on_stderr else sys.stdout,
                                   highlight=False,
                                   soft_wrap=False, force_terminal=True, width=columns)
        # soft_wrap: what others write to stderr while the bar redirects it goes out as written
        self.err = Console(file=sys.stderr, highlight=False, soft_wrap=True, force_terminal=err_tty,
                           width=columns)
        self._open_files()
        self.total_rounds = max(total_steps // round_steps, 1) if round_steps else 1
        self.table_order: tuple = ()     # collectives in the plan's order: how their tables print
        self._finished: list = []
        self._printed: set = set()
        # the notes printed under a table so far: each is said once
        self._said: set = set()
        self.progress = None
        if not settings.quiet and self.err.is_terminal and total_steps > 0:
            from collbench.live.progress import ProgressBar

            per_round = round_steps or total_steps
            self.progress = ProgressBar(self.err, total_steps, done_steps, per_round,
                                        max((total_steps - done_steps) // per_round - 1, 0),
                                        list(self.collector.metadata.get("rounds", [])))

    def _open_files(self) -> None:
        """The earlier rounds' files and journal, or this run's, claimed now; either way written
        once before anything is measured (a file that cannot be written refuses the run, and
        what it claimed goes)."""
        if self.journal is None:
            _rebuild_orphans()
            try:
                self.journal = Journal.create()
            except OSError as exc:
                raise OutputFailed(Path(tempfile.gettempdir()), exc,
                                   "the run's journal goes there") from None
        earlier = restore(self.journal, self.collector)
        self._known_notes = set(self.collector.notes)
        self.files = ResultFiles(earlier if earlier is not None else claimed(self.journal)
                                 or claim(self.settings))
        try:
            if earlier is None:
                self._append({"type": "run", "metadata": self.collector.metadata})
                self._append({"type": "outputs", "paths": [str(p) for p in self.files.paths],
                              "journal_owned": self.journal.owned})
            self.files.save(self.collector.run_result())
        except OutputFailed:
            if earlier is None:
                self.files.discard()
                self.journal.remove()
            raise

    @property
    def paths(self) -> list:
        return self.files.paths

    @property
    def run_id(self) -> str:
        return str(self.collector.metadata.get("run_id", ""))

    def note(self, text: str) -> None:
        if text in self._known_notes:          # an earlier round said it already
            return
        self._known_notes.add(text)
        with self._lock:
            self.collector.notes.append(text)
            self._record({"type": "note", "text": text})
        if not self.settings.quiet:
            line = f"collbench: {text}"
            if self.err.is_terminal:      # wrapped between words, not by the terminal mid-word
                line = "\n".join(textwrap.wrap(line, self.err.width, break_on_hyphens=False))
            self.err.print(line, markup=False, highlight=False)

    def step(self, description: str) -> None:
        if self.progress:
            self.progress.describe(self.round_label + description)

    def add(self, identity, sort_key: tuple, data) -> None:
        with self._lock:
            self.collector.add(identity, sort_key, data)
            self._record(self.collector.entry(identity, sort_key, data))
        if self.progress:
            self.progress.advance()

    def measured(self, identity) -> list:
        """What the run's earlier rounds measured for a row (``Collector.rounds_of``)."""
        with self._lock:
            return self.collector.rounds_of(identity)

    def round_done(self, record: dict) -> None:
        """The round's own metadata (number, kind, order, load), kept in ``metadata["rounds"]``."""
        with self._lock:
            self.collector.metadata.setdefault("rounds", []).append(record)
            self.collector.round_ended()
            self._record({"type": "round", "record": record}, save=True)
        if self.progress:
            self.progress.round_done(float(record.get("seconds", 0.0)))
            total = self.progress.total_rounds
            if (self.round_label and isinstance(record.get("round"), int)
                and record["round"] < total):
                self.round_label = f"round {record['round'] + 1}/{total} · "     # rounds in one job

    def _append(self, entry: dict) -> None:
        try:
            self.journal.append(entry)
        except OSError as exc:
            raise OutputFailed(self.journal.path, exc,
                               "the run's journal; the result files keep what was "
                                                       "written to them before") from None

    def _record(self, entry: dict, save: bool = False) -> None:
        """Journal ``entry`` (a cost flat in the run's length); rewrite the files when due."""
        self._append(entry)
        self._dirty = True
        if save or self.files.due(self.collector.rows_held):
            self.files.save(self.collector.run_result())
            self._dirty = False

    def save_now(self) -> None:
        """The rank is ending early (signal, timeout, abort; maybe on another thread): make the
        files whole with everything measured, if the main thread lets go of them in time."""
        if not self._lock.acquire(timeout=1.0):
            remove_partial()
            return
        try:
            if self._dirty:
                self.files.save(self.collector.run_result())
                self._dirty = False
            self.journal.remove()
        except OutputFailed:
            pass
        finally:
            self._lock.release()
            remove_partial()

    def collective_done(self, collective: str, final_round: bool) -> None:
        """One collective's final round is measured. With one round, its tables print now (once
        those of the collectives before it in the plan have); with several, the tables wait for
        the round's end: a row's run-to-run CI is moderated by the spread of every row's rounds,
        which is only known then, and the tables must show what the files keep."""
        if not (final_round and self.prints_final):
            return
        self._finished.append(collective)
        if self.total_rounds == 1:
            self._print_ready()

    def _print_ready(self, everything: bool = False) -> None:
        """The tables of finished collectives, in the plan's order (the run's order is shuffled)."""
        order = list(self.table_order) or list(dict.fromkeys(self._finished))
        for collective in order + [c for c in self._finished if c not in order]:
            if collective in self._printed:
                continue
            if collective not in self._finished and not everything:
                return
            self._printed.add(collective)
            self._print_tables(collective)

    def _print_tables(self, collective: str) -> None:
        rows = self.collector.rows_of(collective)
        exporter = STDOUT_FORMATS[self.settings.print_format]
        # tables as collectives finish
        streams = exporter is None or hasattr(exporter, "render_tables")
        if not self._prints_stdout() or not rows or not streams:
            return
        if self.progress:                # the bar (stderr) steps aside while tables print (stdout)
            self.progress.stop()
        root, where = root_rank(self.collector.metadata), placement(self.collector.metadata)
        if exporter is not None:
            _asked_for(f"-f {self.settings.print_format}")
            self._print_line(exporter.render_tables(rows, root, where))
        else:
            width = output_width(not self.plain, self.console.width)
            for table in build_tables(rows, root, where):
                print_table(self.console, table, width, self.plain, self._said)
        if self.progress:
            self.progress.start()

    def _prints_stdout(self) -> bool:
        """-q keeps the terminal quiet; a format asked for with -f is printed all the same."""
        return not self.settings.quiet or self.settings.print_format != "table"

    def _print_line(self, text: str) -> None:
        self.console.file.write(text + "\n")
        self.console.file.flush()

    def end_progress(self) -> None:
        """The job ends, on whichever thread says so (a signal, a timeout): the bar goes for
        good, before the line that says why (``notes.before_saying``)."""
        progress = self.progress
        if progress:
            progress.end()

    def abandon(self) -> None:
        """This process's rounds end early (an error, a stop): files whole, nothing printed."""
        if self.progress:
            self.progress.stop()
            self.progress = None
        self.save_now()

    def finish(self) -> None:
        """This process's rounds ran to their end."""
        if self.progress:
            self.progress.stop()
            # gone for good: printing the tables must not bring it back
            self.progress = None
        with self._lock:
            if self._dirty:
                self.files.save(self.collector.run_result())
                self._dirty = False
            self.journal.remove()            # one of its own: the files are whole now
        if not self.prints_final:
            return
        self._print_ready(everything=True)
        exporter = STDOUT_FORMATS[self.settings.print_format]
        # one document at the end
        whole = exporter is not None and not hasattr(exporter, "render_tables")
        if self._prints_stdout() and whole:
            _asked_for(f"-f {self.settings.print_format}")
            self._print_line(exporter.render(self.collector.run_result()).rstrip("\n"))
        written = self.files.written()
        if written and not self.settings.quiet:
            # a name's ESC or line end
            line = "collbench: wrote " + ", ".join(printable(str(p)) for p in written)
            # one file a line, not a wrapped one
            if self.err.is_terminal and len(line) > self.err.width:
                for path in written:
                    self.err.print(f"collbench: wrote {printable(str(path))}", markup=False,
                                   highlight=False)
            else:
                self.err.print(line, markup=False, highlight=False)


class NullOutput:
    """What ranks other than 0 use: they print and write nothing."""

    paths: list = []
    run_id = ""

    def note(self, text: str) -> None: ...
    def step(self, description: str) -> None: ...
    def add(self, identity, sort_key, data) -> None: ...
    def measured(self, identity) -> list: return []
    def round_done(self, record: dict) -> None: ...
    def collective_done(self, collective: str, final_round: bool) -> None: ...
    def finish(self) -> None: ...
    def abandon(self) -> None: ...
    def save_now(self) -> None: ...


def _rebuild_orphans() -> None:
    """An earlier run on this host whose launcher killed its rank 0 and that rank's guardian at
    once left its journal, the only copy of what its files may lack: its files are made whole
    from it, and said in one line, before this run makes a journal of its own."""
    from collbench.live import recover

    for folder in orphans():
        try:
            paths = recover.rebuild(folder, remove=True)
        except recover.FAILURES as exc:
            sys.stderr.write(printable(f"collbench: an earlier run left its journal in {folder}, "
                                       f"and its files could not be rebuilt from it: {exc} (remove "
                                       "the folder if they are not wanted)") + "\n")
            continue
        if paths:
            sys.stderr.write(printable("collbench: an earlier run on this host ended before it "
                                       "could finish its files: rebuilt "
                                       f"{', '.join(map(str, paths))} from its journal") + "\n")
