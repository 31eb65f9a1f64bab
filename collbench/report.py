"""``collbench report``: result files merged into one set of rows, their tables and α–β fits."""

from __future__ import annotations

import math
from dataclasses import dataclass

from collbench.fit import MIN_POINTS, GroupFit, fit_rows
from collbench.loader import load_result
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


def to_markdown_report(report: Report) -> str:
    lines = ["# collbench report", "", "Files: " + ", ".join(f"`{s}`" for s in report.sources), ""]
    lines += [to_markdown(t) for t in build_tables(report.rows)]
    if report.fits:
        lines.append(to_markdown(fit_table(report.fits)))
    lines += [f"- {n}" for n in report.notes]
    return "\n".join(lines).rstrip("\n") + "\n"
