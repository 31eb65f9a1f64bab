"""Render a ``Comparison``: a TableModel (rich or markdown), a CI job summary, or JSON."""

from __future__ import annotations

import json
import math

from collbench.compare import (MATCH_FIELDS, TEST_CI_OVERLAP, TEST_MANN_WHITNEY, VERDICTS, Comparison,
                               RowComparison)
from collbench.sizes import format_size
from collbench.tables import TableModel, to_markdown

COMPARISON_SCHEMA = "collbench.comparison"
COMPARISON_SCHEMA_VERSION = 1

_CONFIG = (("dtype", "dtype"), ("op", "op"), ("world_size", "ranks"), ("timing", "timing"))
_METRIC_LABEL = {"time_us_p50": "p50 µs", "busbw_gbps": "busbw GB/s"}


def _value(v: float) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    if v >= 100:
        return f"{v:.1f}"
    return f"{v:.3g}" if v < 1 else f"{v:.2f}"


def _ratio(r: RowComparison) -> str:
    return f"{r.ratio:.3f}×" if math.isfinite(r.ratio) else "-"


def _change(r: RowComparison) -> str:
    if not math.isfinite(r.ratio):
        return "-"
    percent = round(r.change * 100, 1)
    return f"{percent if percent else 0.0:+.1f}%"     # never "-0.0%"


def _p(r: RowComparison) -> str:
    if r.test == TEST_MANN_WHITNEY:
        return "<0.0001" if r.p_adjusted < 1e-4 else f"{r.p_adjusted:.4f}"
    if r.test == TEST_CI_OVERLAP:
        return "CIs apart" if r.significant else "CIs overlap"
    return "-"


def _test_header(c: Comparison) -> str:
    used = c.tests_used
    names = (["p (Holm)"] if TEST_MANN_WHITNEY in used else []) + (["CI"] if TEST_CI_OVERLAP in used else [])
    return " / ".join(names) or "test"


def _varying(c: Comparison) -> list:
    return [(field, label) for field, label in _CONFIG if len({r.field(field) for r in c.rows}) > 1]


def summary_line(c: Comparison) -> str:
    counts = c.counts
    parts = [f"{counts[v]} {v}" for v in VERDICTS if v in ("slower", "faster", "same") or counts[v]]
    return ", ".join(parts)


def method_line(c: Comparison) -> str:
    direction = "lower" if c.lower_is_better else "higher"
    parts = [f"metric {c.metric} ({direction} is better), ratio = new / baseline; "
             f"slower or faster only beyond ±{c.threshold * 100:g}% and significant"]
    if TEST_MANN_WHITNEY in c.tests_used:
        parts.append(f"Mann–Whitney U on raw samples (two-sided), Holm–Bonferroni over "
                     f"{c.mann_whitney_count} rows at α = {c.alpha:g}")
    if TEST_CI_OVERLAP in c.tests_used:
        parts.append("without raw samples: non-overlapping 95% CIs of the median")
    return "; ".join(parts)


def comparison_table(c: Comparison) -> TableModel:
    varying = _varying(c)
    varying_fields = {f for f, _ in varying}
    first = c.rows[0]
    fixed = [f"{first.field(f)}{' ranks' if f == 'world_size' else ''}" for f, _ in _CONFIG
             if f not in varying_fields and not (f == "op" and first.field(f) == "none")]
    label = _METRIC_LABEL[c.metric]
    headers = ("collective", "backend", *[lbl for _, lbl in varying], "size", f"baseline {label}",
               f"new {label}", "ratio", "change", _test_header(c), "verdict")
    cells = []
    for r in c.rows:
        size = r.field("size_bytes")
        cells.append((r.field("collective"), r.field("backend"), *[str(r.field(f)) for f, _ in varying],
                      format_size(size) if size else "-", _value(r.baseline_value), _value(r.new_value),
                      _ratio(r), _change(r), _p(r), r.verdict))
    title = f"{c.baseline_name} → {c.new_name}" + (f" · {' · '.join(fixed)}" if fixed else "")
    return TableModel(title, headers, tuple(cells), (method_line(c),))


def _bold_verdicts(table: TableModel, keep) -> TableModel:
    rows = tuple(row[:-1] + (f"**{row[-1]}**" if row[-1] in ("slower", "faster") else row[-1],)
                 for row, r in zip(table.rows, keep) if r)
    return TableModel(table.title, table.headers, rows, table.notes)


def to_summary_markdown(c: Comparison) -> str:
    """A GitHub job summary: heading, verdict counts, warnings, the rows that are not "same",
    then every row in a collapsed block."""
    outcome = "REGRESSION" if c.regression else "no regression"
    lines = [f"## collbench compare: {outcome}", "", f"**{summary_line(c)}**", ""]
    lines += [f"> **Warning:** {w}" for w in c.warnings]
    if c.warnings:
        lines.append("")
    table = comparison_table(c)
    notable = [r.verdict != "same" for r in c.rows]
    if any(notable):
        lines.append(to_markdown(_bold_verdicts(table, notable)).replace("### ", "#### ", 1))
    every_row = _bold_verdicts(table, [True] * len(c.rows))
    untitled = to_markdown(TableModel("", every_row.headers, every_row.rows)).split("\n", 2)[2]
    lines += [f"<details><summary>All {len(c.rows)} rows</summary>", "", untitled, "</details>", ""]
    return "\n".join(lines)


def _number(v):
    return v if v is None or math.isfinite(v) else None


def to_json(c: Comparison) -> str:
    rows = []
    for r in c.rows:
        record = dict(zip(MATCH_FIELDS, r.key))
        record.update(baseline=_number(r.baseline_value), new=_number(r.new_value), ratio=_number(r.ratio),
                      change=_number(r.change), test=r.test, p_value=r.p_value, p_adjusted=r.p_adjusted,
                      significant=r.significant, verdict=r.verdict,
                      baseline_samples=r.baseline.iterations if r.baseline else None,
                      new_samples=r.new.iterations if r.new else None)
        rows.append(record)
    doc = {"schema": COMPARISON_SCHEMA, "schema_version": COMPARISON_SCHEMA_VERSION,
           "baseline": c.baseline_name, "new": c.new_name, "metric": c.metric,
           "lower_is_better": c.lower_is_better, "threshold": c.threshold, "alpha": c.alpha,
           "min_samples": c.min_samples, "multiple_comparisons": "holm", "regression": c.regression,
           "summary": c.counts, "method": method_line(c), "warnings": list(c.warnings), "rows": rows}
    return json.dumps(doc, indent=1) + "\n"
