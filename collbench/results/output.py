"""Rank 0's side of a run: live progress, tables on the terminal, files after every size."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from collbench.results.exporters import STDOUT_FORMATS, exporter_for, write_atomic
from collbench.results.tables import build_tables, to_rich

@dataclass(frozen=True)
class OutputSettings:
    outputs: tuple = ()            # explicit -o paths; empty = default files in results_dir
    results_dir: str = "results"
    save: bool = True
    force: bool = False
    quiet: bool = False
    print_format: str = "table"


def check_outputs(settings: OutputSettings) -> None:
    """Everything about where results go that can be refused before measuring (UsageError)."""
    from collbench.errors import UsageError
    from collbench.results.exporters import check_writable

    for path in settings.outputs:
        check_writable(path, settings.force)
    if settings.save and not settings.outputs:
        folder = Path(settings.results_dir)
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"--results-dir {settings.results_dir!r} is not a folder")
        parent = folder if folder.exists() else folder.parent
        if not parent.is_dir():
            raise UsageError(f"--results-dir {settings.results_dir!r}: folder {str(parent)!r} does not exist")
        if not os.access(parent, os.W_OK):
            raise UsageError(f"--results-dir {settings.results_dir!r} is not writable")


def _claim(path: Path) -> bool:
    """Create ``path`` if nobody has: another run starting at the same moment gets False."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        return True
    except FileExistsError:
        return False


def default_paths(results_dir: str) -> list:
    """Fresh names for this run's JSON and CSV, claimed at once so no concurrent run takes them."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = Path(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    i = 1
    while True:
        base = folder / (f"collbench-{stamp}" + (f"-{i}" if i > 1 else ""))
        json_path, csv_path = base.with_suffix(".json"), base.with_suffix(".csv")
        if _claim(json_path):
            if _claim(csv_path):
                return [json_path, csv_path]
            json_path.unlink()
        i += 1


def claim_outputs(paths, force: bool) -> None:
    """-o files: checked before the run, claimed now; one that appeared since is not overwritten."""
    from collbench.errors import UsageError

    for path in paths:
        if not force and not _claim(Path(path)):
            raise UsageError(f"output {str(path)!r} exists; use --force to overwrite it")


class Output:
    """Collects rounds of rows, rewrites the files after each one, prints a table per collective.

    With several rounds, only the process that measures the final round prints tables (they
    combine every round) and the "wrote" line; the others show progress and notes. ``journal``
    (self-launched rounds): where this launch appends what it measured, and where the earlier
    launches' rows, notes and output paths come from.
    """

    def __init__(self, settings: OutputSettings, collector, *, total_steps: int, done_steps: int = 0,
                 prints_final: bool = True, round_label: str = "", journal=None) -> None:
        from rich.console import Console

        self.settings = settings
        self.collector = collector
        self.journal = journal
        self.prints_final = prints_final
        self.round_label = round_label
        # Self-launched ranks write through the launcher's pipes; the parent says whether the
        # user's stdout and stderr are terminals.
        out_tty, err_tty = _terminals()
        self.plain = not out_tty
        if self.plain:   # piped: never squeeze columns to a guessed 80-character terminal
            self.console = Console(file=sys.stdout, highlight=False, soft_wrap=False, width=400,
                                   no_color=True, force_terminal=False)
        else:
            self.console = Console(file=sys.stdout, highlight=False, soft_wrap=False, force_terminal=True)
        self.err = Console(file=sys.stderr, highlight=False, soft_wrap=True, force_terminal=err_tty)
        self._known_notes = set()
        earlier = journal.of_type("outputs") if journal is not None else []
        if earlier:                          # an earlier round of this run claimed the files
            self.paths = [Path(p) for p in earlier[0]["paths"]]
            for entry in journal.of_type("measure"):
                collector.replay(entry)
            for entry in journal.of_type("note"):
                self._known_notes.add(entry["text"])
                collector.notes.append(entry["text"])
            for entry in journal.of_type("round"):
                collector.metadata.setdefault("rounds", []).append(entry["record"])
        else:
            if settings.outputs:
                claim_outputs(settings.outputs, settings.force)
                self.paths = [Path(p) for p in settings.outputs]
            elif settings.save:
                self.paths = default_paths(settings.results_dir)
            else:
                self.paths = []
            if journal is not None:
                journal.append({"type": "run", "metadata": collector.metadata})
                journal.append({"type": "outputs", "paths": [str(p) for p in self.paths]})
        self.save()                      # a claimed file is a valid, empty result from the start
        self.progress = None
        if not settings.quiet and self.err.is_terminal and total_steps > 0:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("{task.completed}/{task.total}"), TimeRemainingColumn(),
                                     console=self.err, transient=True)
            self.task = self.progress.add_task("collbench", total=total_steps, completed=done_steps)
            self.progress.start()

    def note(self, text: str) -> None:
        if text in self._known_notes:          # an earlier round said it already
            return
        self._known_notes.add(text)
        self.collector.notes.append(text)
        if self.journal is not None:
            self.journal.append({"type": "note", "text": text})
        if self.collector.result.rows:
            self.save()
        if not self.settings.quiet:
            self.err.print(f"collbench: {text}", markup=False, highlight=False)

    def step(self, description: str) -> None:
        if self.progress:
            self.progress.update(self.task, description=self.round_label + description)

    def add(self, identity, sort_key: tuple, data) -> None:
        self.collector.add(identity, sort_key, data)
        if self.journal is not None:
            self.journal.append(self.collector.entry(identity, sort_key, data))
        self.save()
        if self.progress:
            self.progress.advance(self.task)

    @property
    def run_id(self) -> str:
        return str(self.collector.metadata.get("run_id", ""))

    def round_done(self, record: dict) -> None:
        """The round's own metadata (number, kind, order, load), kept in ``metadata["rounds"]``."""
        self.collector.metadata.setdefault("rounds", []).append(record)
        self.collector.round_ended()
        if self.journal is not None:
            self.journal.append({"type": "round", "record": record})
        self.save()

    def save(self) -> None:
        result = self.collector.run_result()
        for path in self.paths:
            write_atomic(path, exporter_for(path).render(result))

    def collective_done(self, collective: str, final_round: bool) -> None:
        """Print the tables of one collective (all its backends, every round so far)."""
        if not (final_round and self.prints_final):
            return
        rows = self.collector.rows_of(collective)
        exporter = STDOUT_FORMATS[self.settings.print_format]
        streams = exporter is None or hasattr(exporter, "render_tables")     # tables as collectives finish
        if self.settings.quiet or not rows or not streams:
            return
        if self.progress:                # the bar (stderr) steps aside while tables print (stdout)
            self.progress.stop()
        if exporter is not None:
            self._print_line(exporter.render_tables(rows))
        else:
            for table in build_tables(rows):
                rendered = to_rich(table, plain=self.plain)
                # Wider than the terminal: let it run past the edge rather than cut cells.
                natural = self.console.measure(rendered, options=self.console.options.update_width(10_000)).maximum
                if natural > self.console.width:
                    from rich.console import Console
                    Console(file=sys.stdout, highlight=False, force_terminal=not self.plain,
                            no_color=self.plain, width=natural).print(rendered)
                else:
                    self.console.print(rendered)
        if self.progress:
            self.progress.start()

    def _print_line(self, text: str) -> None:
        self.console.file.write(text + "\n")
        self.console.file.flush()

    def finish(self, completed: bool) -> None:
        """End of this process's rounds; ``completed``: the final round ran to its end."""
        if self.progress:
            self.progress.stop()
        if not self.prints_final:
            return
        exporter = STDOUT_FORMATS[self.settings.print_format]
        whole = exporter is not None and not hasattr(exporter, "render_tables")   # one document at the end
        if completed and not self.settings.quiet and whole:
            self._print_line(exporter.render(self.collector.run_result()).rstrip("\n"))
        if self.paths and not self.settings.quiet:
            self.err.print("collbench: wrote " + ", ".join(str(p) for p in self.paths), markup=False)


def _terminals() -> tuple:
    """Whether stdout and stderr reach a terminal. Self-launched ranks ask the parent, which
    saw the user's terminal: what they see themselves is the launcher's pipe (MPICH) or a
    pseudo-terminal (Open MPI), whatever the user did with the output."""
    if os.environ.get("COLLBENCH_LAUNCHED"):
        return (os.environ.get("COLLBENCH_STDOUT_TTY") == "1", os.environ.get("COLLBENCH_STDERR_TTY") == "1")
    return sys.stdout.isatty(), sys.stderr.isatty()


class NullOutput:
    """What ranks other than 0 use: they print and write nothing."""

    paths: list = []
    run_id = ""

    def note(self, text: str) -> None: ...
    def step(self, description: str) -> None: ...
    def add(self, identity, sort_key, data) -> None: ...
    def round_done(self, record: dict) -> None: ...
    def collective_done(self, collective: str, final_round: bool) -> None: ...
    def finish(self, completed: bool) -> None: ...
