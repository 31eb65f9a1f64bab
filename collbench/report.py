"""``collbench report``: result files merged into one set of rows, their tables, α–β fits, and
what a comparison of their rounds could detect (``sensitivity_table``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from collbench.fit import MIN_POINTS, GroupFit, fit_rows
from collbench.loader import load_result
from collbench.sizes import format_size
from collbench.tables import TableModel, build_tables, to_markdown

FIT_NOTE = ("t(n) = α + n/β fitted to the median times by least squares on relative errors; "
            "β: algorithm bandwidth (size / time), bus β: β × the bus factor; "
            "n½ = α·β: the size reaching half of β; error: RMS relative error of the model")


@dataclass(frozen=True)
class Report:
    sources: tuple     # file names, in the order given
    rows: tuple        # merged rows
    fits: tuple        # GroupFit per (collective, backend, dtype, op, world size, timing)
    notes: tuple       # what merging replaced, plus the files' own notes


def merge_rows(named_rows) -> tuple:
    """Rows of several files in order; a later row with the same key replaces an earlier one."""
    merged: dict = {}
    origin: dict = {}
    replaced: dict = {}
    for name, rows in named_rows:
        for row in rows:
            key = row.key()
            if key in merged:
                pair = (name, origin[key])
                replaced[pair] = replaced.get(pair, 0) + 1
            merged[key] = row
            origin[key] = name
    notes = tuple(f"{count} row(s) of {old} replaced by the same key in {new}"
                  for (new, old), count in replaced.items())
    return tuple(merged.values()), notes


def build_report(paths) -> Report:
    loaded = [(str(p), load_result(p)) for p in paths]
    rows, notes = merge_rows((name, result.rows) for name, result in loaded)
    file_notes = tuple(f"{name}: {note}" for name, result in loaded for note in result.notes)
    return Report(tuple(name for name, _ in loaded), rows, tuple(fit_rows(rows)), notes + file_notes)


def _setup(g: GroupFit) -> str:
    op = "" if g.field("op") == "none" else f" {g.field('op')}"
    return f"{g.field('dtype')}{op}, {g.field('world_size')} ranks, {g.field('timing')}"


def format_bytes(n: float) -> str:
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


def fit_table(fits) -> TableModel:
    headers = ("collective", "backend", "setup", "α µs", "β GB/s", "bus β GB/s", "n½", "error", "points")
    cells = []
    for g in fits:
        f = g.fit
        values = (f"{f.alpha_us:.2f}", _gbps(f.beta_gbps), _gbps(g.bus_beta_gbps), format_bytes(f.half_peak_bytes),
                  f"{f.rms_rel_error * 100:.1f}%") if f else ("-",) * 5
        cells.append((g.field("collective"), g.field("backend"), _setup(g), *values, str(g.points)))
    notes = [FIT_NOTE]
    if any(g.fit is None for g in fits):
        notes.append(f"-: fewer than {MIN_POINTS} sizes with a time, no fit")
    return TableModel("latency–bandwidth fit", headers, tuple(cells), tuple(notes))


def detectable(row, rows_tested: int, alpha: float) -> float:
    """The change a comparison against another run of as many rounds detects with 80% power
    for this row (its own run-to-run spread, Holm's first step over ``rows_tested`` rows)."""
    from collbench.compare import POWER
    from collbench.runstats import detectable_change, summarize_rounds

    summary = summarize_rounds(row.time_us_round_p50s)
    if summary.rounds < 2:
        return math.nan
    n = summary.rounds
    return detectable_change(summary.log_sd, n, n, 2 * n - 2, alpha / max(1, rows_tested), POWER)


def sensitivity_table(rows, threshold: float, alpha: float) -> TableModel:
    """Per row: rounds, run-to-run spread, the change a comparison of as many rounds detects,
    and whether that is within ``threshold`` (a row that is not cannot be gated on there)."""
    tested = sum(1 for r in rows if r.rounds >= 2)
    headers = ("collective", "backend", "size", "timing", "rounds", "run cv", "detects", f"gate at ±{threshold:.0%}")
    cells = []
    for r in rows:
        found = detectable(r, tested, alpha)
        verdict = ("needs 2+ rounds" if math.isnan(found) else "ok" if found <= threshold else "too noisy")
        cv = "-" if math.isnan(r.run_to_run_cv) else f"{r.run_to_run_cv:.1%}"
        cells.append((r.collective, r.backend, format_size(r.size_bytes) if r.size_bytes else "-", r.timing,
                      str(r.rounds), cv, "-" if math.isnan(found) else f"{found:.0%}", verdict))
    notes = (f"detects: the change that collbench compare, against another run with as many rounds, calls with "
             f"80% power (two-sided Student t on the log round medians, Holm over the {tested} rows with rounds, "
             f"alpha {alpha:g}); rows above the threshold give inconclusive verdicts there, not false alarms",)
    return TableModel("what a comparison of these rounds can detect", headers, tuple(cells), notes)


def to_markdown_report(report: Report, threshold: float = 0.05, alpha: float = 0.05) -> str:
    lines = ["# collbench report", "", "Files: " + ", ".join(f"`{s}`" for s in report.sources), ""]
    lines += [to_markdown(t) for t in build_tables(report.rows)]
    if report.fits:
        lines.append(to_markdown(fit_table(report.fits)))
    lines.append(to_markdown(sensitivity_table(report.rows, threshold, alpha)))
    lines += [f"- {n}" for n in report.notes]
    return "\n".join(lines).rstrip("\n") + "\n"
