"""``collbench report``: result files as one set of rows, or as runs side by side when they
measure the same setup (``overlay``); their tables, α–β fits, and what a comparison of their
rounds could detect (``sensitivity_table``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from collbench.analysis.compare import MAX_COMPARED_ROWS, compare_runs, match_key
from collbench.analysis.compare_render import detection_line, share_text
from collbench.analysis.fit import MIN_POINTS, GroupFit, fit_rows
from collbench.analysis.overlay import Runs, load_runs, run_tables
from collbench.analysis.runs import FileRounds, run_ids
from collbench.errors import UsageError
from collbench.measure.sizes import format_size
from collbench.results.records import RunResult, backend_label, setup_words
from collbench.render.tables import TableModel, setup_text, to_markdown

FIT_NOTE = ("t(n) = α + n/β fitted to the median times by least squares on relative errors; "
            "β: algorithm bandwidth (size / time), bus β: β × the bus factor; "
            "n½ = α·β: the size reaching half of β; error: RMS relative error of the model")


@dataclass(frozen=True)
class Report:
    sources: tuple     # file names, in the order given, each once
    rows: tuple        # every file's rows
    fits: tuple        # GroupFit per (collective, backend, dtype, op, world size, timing), per run
    notes: tuple       # files given twice, plus the files' own notes
    loaded: tuple      # (name, RunResult) per file, for what their rounds can detect
    fit_runs: tuple    # per fit its run's label, when the files are separate runs; else ()
    runs: Runs         # the files, their labels, whether they are separate runs

    def labelled(self) -> list:
        """(label, RunResult) per file."""
        return [(label, result) for label, (_, result) in zip(self.runs.labels, self.loaded)]


def build_report(paths, labels=()) -> Report:
    runs = load_runs(paths, labels)
    if runs.separate:
        fits = [(label, fit) for label, (_, result) in zip(runs.labels, runs.loaded)
                for fit in fit_rows(result.rows)]
    else:
        fits = [("", fit) for fit in fit_rows(runs.rows())]
    file_notes = tuple(line for name, result in runs.loaded
                       for line in _shown_notes(name, result.notes))
    return Report(tuple(name for name, _ in runs.loaded), tuple(runs.rows()),
                  tuple(fit for _, fit in fits),
                  runs.notes + file_notes, runs.loaded,
                  tuple(label for label, _ in fits) if runs.separate else (), runs)


#: A file's own notes shown by report, at most (a crafted file can hold 100,000).
MAX_NOTES_SHOWN = 30


def _shown_notes(name: str, notes: list) -> list:
    """A file's notes as report lists them: each once, at most MAX_NOTES_SHOWN, then how many
    more the file holds."""
    unique = list(dict.fromkeys(notes))
    lines = [f"{name}: {note}" for note in unique[:MAX_NOTES_SHOWN]]
    if len(unique) > MAX_NOTES_SHOWN:
        lines.append(f"{name}: {len(unique) - MAX_NOTES_SHOWN:,} more notes not shown (the file's "
                     "\"notes\" list holds them all)")
    return lines


def _setup(g: GroupFit) -> str:
    """Its dtype, op, ranks and timing, then what else sets its rows apart (a pair, a split's
    group)."""
    words = setup_words(g.columns)
    group = [f"group {g.field('group')}"] * bool(g.field("split"))
    return ", ".join([setup_text(g.field("dtype"), g.field("op"), g.field("world_size"),
                                 g.field("timing")),
                      *words, *group])


def format_approx_size(n: float) -> str:
    """A computed size (n½) to 0.1 of its 1024-based unit: 34.2K, ∞ when unbounded;
    ``measure.sizes.format_size`` labels exact message sizes (1K, 1000)."""
    if math.isinf(n):
        return "∞"
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}"
    return f"{n:.0f}"


def _gbps(v: float) -> str:
    if math.isinf(v):
        return "∞"
    if not math.isfinite(v):
        return "-"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def fit_table(fits, run_labels=()) -> TableModel:
    """The fits; ``run_labels``, when given, is each fit's run label, shown in a column of its
    own."""
    headers = ("collective", "backend") + (("run",) if run_labels else ()) + (
        "setup", "α µs", "β GB/s", "bus β GB/s", "n½", "error", "points")
    cells = []
    for i, g in enumerate(fits):
        f = g.fit
        values = (f"{f.alpha_us:.2f}", _gbps(f.beta_gbps), _gbps(g.bus_beta_gbps),
                  format_approx_size(f.half_peak_bytes),
                  f"{f.rms_rel_error * 100:.1f}%") if f else ("-",) * 5
        cells.append((g.field("collective"), backend_label(g.columns))
                     + ((run_labels[i],) if run_labels else ())
                     + (_setup(g), *values, str(g.points)))
    notes = [FIT_NOTE]
    if any(g.fit is None for g in fits):
        notes.append(f"-: fewer than {MIN_POINTS} sizes with a time, no fit")
    # On a narrow terminal the setup (shared by most rows) and the point count go first.
    priorities = (2, 1) + ((0,) if run_labels else ()) + (5, 0, 0, 3, 2, 1, 4)
    return TableModel("latency–bandwidth fit", headers, tuple(cells), tuple(notes), priorities)


def next_run(result):
    """The run a comparison against ``result`` as the baseline expects next: one more run like its
    last — the file itself for one run; for a file merged from several (``collbench merge``), the
    rounds of its last run that compare keeps (not one set aside as a slow state or as noisy)."""
    ids = run_ids(result)
    runs = list(dict.fromkeys(ids.values()))
    if len(runs) < 2:
        return result
    rounds = FileRounds.of(result)
    kept = [run for run in runs if run not in rounds.slow and run not in rounds.noisy] or runs
    last = {number for number, run in ids.items() if run == kept[-1]}
    records = [r for r in result.metadata.get("rounds", [])
               if isinstance(r, dict) and r.get("round") in last]
    out = RunResult(metadata={**result.metadata, "rounds": records, "run_id": kept[-1]})
    for i, row in enumerate(result.rows):
        medians = tuple(m for n, m in zip(result.round_numbers(i), row.time_us_round_p50s)
                        if n in last)
        data = tuple(d for d in (result.rounds[i] if i < len(result.rounds) else ())
                     if d.round in last)
        out.add(dataclasses.replace(row, time_us_round_p50s=medians, rounds=len(medians)), data)
    return out


def gate_sensitivity(result, alpha: float, threshold: float):
    """(comparison, [(row, detectable change)]) for every row of one file: ``compare`` of this
    file as the baseline against one more run like its last (``next_run``), which meets the
    machine as this one did — one computation with compare's, so the figures are the ones its
    first line gives. nan for a row without two rounds in one run; no comparison (None) where
    compare would refuse the file."""
    try:
        comparison = compare_runs(result, next_run(result), threshold=threshold, alpha=alpha)
    # nothing compare could judge (no round medians, rows it refuses)
    except UsageError:
        return None, [(row, math.nan) for row in result.rows]
    found = {r.key: r.detectable if r.noise not in ("", "assumed") else math.nan
             for r in comparison.rows}
    return comparison, [(row, found.get(match_key(row), math.nan)) for row in result.rows]


NEEDS_ROUNDS = "needs 2+ rounds"


def sensitivity_table(named: list, threshold: float, alpha: float) -> TableModel:
    """Per row of each file: rounds, run-to-run spread, the change a comparison against one more
    run detects, and whether that is within ``threshold`` (rows that are not cannot be gated
    on there: they come out inconclusive, not as false alarms)."""
    several = len(named) > 1
    headers = (("file",) if several else ()) + ("collective", "backend", "size", "timing", "rounds",
                                                "run cv",
                                                "detects", f"gate at ±{threshold:.0%}")
    cells, lines = [], []
    for name, result in named:
        comparison, found_rows = gate_sensitivity(result, alpha, threshold)
        if comparison is not None:
            lines.append(f"{name + ': ' if several else ''}against one more run like this one, "
                         f"compare {detection_line(comparison)}")
        for r, found in found_rows:
            verdict = (NEEDS_ROUNDS if math.isnan(found) else "ok"
                       if found <= threshold else "too noisy")
            cv = "-" if math.isnan(r.run_to_run_cv) else f"{r.run_to_run_cv:.1%}"
            cells.append(((name,) if several else ()) + (
                r.collective + (f" {r.pair}" if r.pair else ""), backend_label(r),
                format_size(r.size_bytes) if r.size_bytes else "-", r.timing, str(r.rounds),
                cv, "-" if math.isnan(found) else share_text(found), verdict))
    notes = tuple(lines) + (
        "detects: the change collbench compare calls with 80% power when this file is the baseline "
        "and the new file one more run like its last, meeting the machine as it did (compare's own "
        "computation): the rounds' spread moderated by its trend, the drift of whole runs between "
        "the two (assumed, or measured in a file merged from 3+ runs), the rows adjusted together "
        f"(max-T), alpha {alpha:g}. A new run that lies as a whole above or below this one reads "
        "as a state of the machine and raises it (compare says by how much). Rows above the "
        "threshold give inconclusive verdicts there, not false alarms; a baseline merged from "
        "several runs (collbench merge), more rounds, or both sides in one job (collbench ab) "
        "lower the figure",)
    priorities = ((0,) if several else ()) + (2, 1, 0, 4, 3, 2, 1, 0)        # the verdict stays
    return TableModel("what a comparison against this baseline can detect", headers, tuple(cells),
                      notes, priorities)


def report_tables(report: Report, threshold: float, alpha: float) -> list:
    """The tables of the rows (merged, or runs side by side), the fits and the sensitivity."""
    tables = run_tables(report.runs)
    if report.fits:
        tables.append(fit_table(report.fits, report.fit_runs))
    if any(len(result.rows) > MAX_COMPARED_ROWS for _, result in report.labelled()):
        return tables           # compare refuses so many rows: there is no comparison to predict
    sensitivity = sensitivity_table(report.labelled(), threshold, alpha)
    if all(line[-1] == NEEDS_ROUNDS for line in sensitivity.cells):     # a table that says nothing
        return tables
    return tables + [sensitivity]


def per_rank_view(report: Report) -> list:
    """``report --per-rank``: the files merged, or each run's own tables when they are runs."""
    from collbench.analysis.per_rank import per_rank_tables

    if not report.runs.separate:
        return per_rank_tables(report.loaded)
    return [dataclasses.replace(table, title=f"{table.title} · {label}")
            for label, loaded in zip(report.runs.labels, report.loaded)
            for table in per_rank_tables([loaded])]


def markdown_document(heading: str, report: Report, tables) -> str:
    """A markdown document: heading, the files (and their run labels), tables, notes."""
    runs = report.runs
    named = [f"`{name}`" + (f" ({label})" if runs.separate and label != name else "")
             for name, label in zip(report.sources, runs.labels)]
    lines = [f"# {heading}", "", "Files: " + ", ".join(named), ""]
    lines += [to_markdown(t) for t in tables]
    lines += [f"- {n}" for n in report.notes]
    return "\n".join(lines).rstrip("\n") + "\n"
