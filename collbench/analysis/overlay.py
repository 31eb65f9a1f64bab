"""Several result files in ``report`` and ``plot``: which are runs of their own, shown side by
side, and which merge into one set of rows; their labels; the tables of runs side by side and
of each run's change against the first (``report --diff``).

Files that share a row (the same ``compare.match_key``: the same setup measured again, a
before/after pair) are each a run of their own, labelled by file name, by the shortest
trailing part of its path that tells it from the others where names clash, or by
``--label``, which also makes runs of files that share nothing. Otherwise files merge: their
rows side by side, as different setups. The same file given twice is read once.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from collbench.analysis.compare import match_key
from collbench.benchmarks import patterns
from collbench.errors import UsageError
from collbench.measure.sizes import format_size
from collbench.results.loader import load_result
from collbench.results.records import backend_label, root_rank
from collbench.results import link_map
from collbench.render.tables import (TableModel, build_tables, format_us, level_word, link_tables,
                                     setup_text)

DIFF_NOTES = (
    "change: of the later run's median time against the first run's (positive: slower); apart: the "
    "two rows' 95% CIs of the median do not overlap, a change beyond either run's own noise — run "
    "to run with 2+ rounds, within one launch with one round",
    "descriptive only: collbench compare FIRST LATER decides on the rounds, with the drift between "
    "runs and every row adjusted together",
)


@dataclass(frozen=True)
class Runs:
    loaded: tuple          # (name, RunResult) per file, each file once, in the order given
    labels: tuple          # per file: --label, its name, or the shortest path part telling it apart
    separate: bool         # each file a run of its own (shared rows, or --label); else merged
    notes: tuple = ()      # files given twice

    def rows(self) -> list:
        return [row for _, result in self.loaded for row in result.rows]

    def row_run_labels(self) -> list:
        """Per row of ``rows()``, its run's label; "" for every row when the files merge."""
        return [label if self.separate else ""
                for label, (_, result) in zip(self.labels, self.loaded) for _ in result.rows]


def file_labels(names) -> tuple:
    """Each file's name; where names clash, the shortest trailing part of their paths that tells
    them apart (before/run.json and after/run.json)."""
    parts = [Path(n).parts or (str(n),) for n in names]
    depth = [1] * len(parts)
    while True:
        labels = [str(Path(*p[-d:])) for p, d in zip(parts, depth)]
        counts = Counter(labels)
        clashing = [i for i, text in enumerate(labels)
                    if counts[text] > 1 and depth[i] < len(parts[i])]
        if not clashing:
            return tuple(labels) if len(counts) == len(labels) else tuple(str(n) for n in names)
        for i in clashing:
            depth[i] += 1


def _check_labels(labels: tuple, files: int) -> None:
    if len(labels) != files:
        raise UsageError(f"--label given {len(labels)} time(s) for {files} file(s): give one per "
                         "file, in order")
    if any(not text.strip() for text in labels):
        raise UsageError("--label must not be empty")
    twice = [text for text, count in Counter(labels).items() if count > 1]
    if twice:
        raise UsageError(f"--label {twice[0]!r} given twice: each run needs a label of its own")


def _share_rows(loaded) -> bool:
    first_file: dict = {}
    for i, (_, result) in enumerate(loaded):
        for row in result.rows:
            if first_file.setdefault(match_key(row), i) != i:
                return True
    return False


def load_runs(paths, labels=()) -> Runs:
    """Read the files once each and decide whether they are separate runs."""
    paths, labels = [str(p) for p in paths], tuple(labels)
    if labels:
        _check_labels(labels, len(paths))
    seen: dict = {}
    kept, notes = [], []
    for i, path in enumerate(paths):
        try:
            resolved = Path(path).resolve()
        # a symlink loop: load_result says what is wrong with it
        except (OSError, RuntimeError):
            resolved = Path(path).absolute()
        if resolved in seen:
            again = "given again" if path == seen[resolved] else f"is {seen[resolved]} again"
            notes.append(f"{path} {again}: read once")
            continue
        seen[resolved] = path
        kept.append(i)
    loaded = tuple((paths[i], load_result(paths[i])) for i in kept)
    for path, result in loaded:
        if not result.rows:
            raise UsageError(f"{path}: holds no rows: nothing was measured, or every row was cut "
                             "off")
        # a matrix pattern's rows, for plot and report
        patterns.take_back(result.metadata.get("matrices"))
    names = tuple(labels[i] for i in kept) if labels else file_labels([paths[i] for i in kept])
    return Runs(loaded, names, bool(labels) or _share_rows(loaded), tuple(notes))


def run_tables(runs: Runs) -> list:
    """The result tables. Merged files: ``build_tables`` of their rows. Separate runs: each run's
    link maps, then one table per setup and backend, a column group per run and each run's median
    time against the first run's (the run's label stands where ``build_tables`` puts a backend)."""
    if not runs.separate:
        metadata = runs.loaded[0][1].metadata
        return build_tables(runs.rows(), root_rank(metadata), link_map.placement(metadata))
    parts: dict = {}
    roots = {}
    tables = []
    for label, (_, result) in zip(runs.labels, runs.loaded):
        roots[label] = root_rank(result.metadata)
        # each run's map apart
        maps, rest = link_map.split(list(result.rows), link_map.placement(result.metadata))
        tables += [dataclasses.replace(t, title=f"{t.title} · {label}") for lmap in maps
                   for t in link_tables(lmap)]
        for row in rest:
            key = (row.collective, row.dtype, row.op, row.timing, row.world_size, roots[label],
                   backend_label(row))
            parts.setdefault(key, {}).setdefault(label, []).append(row)
    for key, by_run in parts.items():
        if len(by_run) == 1:
            (label, rows), = by_run.items()
            table = build_tables(rows, roots[label])[0]
            tables.append(dataclasses.replace(table, title=f"{table.title} · {label}"))
        else:
            rows = [dataclasses.replace(r, backend=label) for label, rows in by_run.items()
                    for r in rows]
            table = build_tables(rows, roots[next(iter(by_run))])[0]
            level = level_word(rows)            # the backend's, said after it
            title = table.title[:len(table.title) - len(level)] if level else table.title
            tables.append(dataclasses.replace(table, title=f"{title} · {key[-1]}{level}"))
    return tables


def _setup(row) -> str:
    return setup_text(row.dtype, row.op, row.world_size, row.timing)


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _apart(first, later) -> str:
    """Whether the two rows' 95% CIs of the median are apart: above, below, or overlap."""
    bounds = (first.time_us_ci_low, first.time_us_ci_high, later.time_us_ci_low,
              later.time_us_ci_high)
    if not all(math.isfinite(b) for b in bounds):
        return "-"
    if later.time_us_ci_low > first.time_us_ci_high:
        return "apart ↑"
    if later.time_us_ci_high < first.time_us_ci_low:
        return "apart ↓"
    return "overlap"


def _diff_table(first_label: str, first_rows, label: str, rows) -> TableModel:
    firsts = {match_key(r): r for r in first_rows}
    laters = {match_key(r): r for r in rows}
    if not firsts.keys() & laters.keys():
        raise UsageError(f"{label} and {first_label} have no row in common: --diff compares runs "
                         "of one setup")
    keys = list(firsts) + [k for k in laters if k not in firsts]
    several = len({_setup(r) for r in (*first_rows, *rows)}) > 1
    headers = ("collective", "backend") + (("setup",) if several else ()) + (
        "size", f"{first_label} p50 µs", f"{label} p50 µs", "change", "95% CIs")
    cells, changes, moved = [], [], Counter()
    for key in keys:
        first, later = firsts.get(key), laters.get(key)
        row = first or later
        if first and later and _positive(first.time_us_p50) and _positive(later.time_us_p50):
            change = later.time_us_p50 / first.time_us_p50 - 1.0
            changes.append(change)
            verdict = _apart(first, later)
            moved[verdict] += 1
            shown = f"{round(change * 100, 1) or 0.0:+.1f}%"
        else:
            shown, verdict = ("-", "-" if first and later
                              else f"only in {first_label if first else label}")
        cells.append((row.collective, backend_label(row)) + ((_setup(row),) if several else ()) + (
            format_size(row.size_bytes) if row.size_bytes else "-",
            format_us(first.time_us_p50) if first else "-",
            format_us(later.time_us_p50) if later else "-", shown, verdict))
    summary = (f"{moved['apart ↑']} row(s) slower and {moved['apart ↓']} faster beyond both CIs, "
               f"of {len(changes)} compared; median change {median(changes) * 100:+.1f}%"
               if changes else "no row to compare")
    # On a narrow terminal the setup and the medians go before the change and whether it is beyond
    # the CIs.
    priorities = (0, 0) + ((3,) if several else ()) + (0, 2, 1, 0, 0)
    return TableModel(f"{label} against {first_label}: median time", headers, tuple(cells),
                      (summary,) + DIFF_NOTES, priorities=priorities)


def diff_tables(runs: Runs) -> list:
    """Per later file, each row's median time against the first file's, and whether their CIs
    are apart."""
    if len(runs.loaded) < 2:
        raise UsageError("--diff needs two or more files: runs of one setup, the first the "
                         "reference")
    (_, first), others = runs.loaded[0], runs.loaded[1:]
    return [_diff_table(runs.labels[0], first.rows, label, result.rows)
            for label, (_, result) in zip(runs.labels[1:], others)]
