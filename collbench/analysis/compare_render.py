"""Render a ``Comparison``: a TableModel (rich or markdown), a CI job summary, or JSON."""

from __future__ import annotations

import dataclasses
import json
import math

from collbench.analysis.compare import MATCH_FIELDS, VERDICTS, Comparison, RowComparison
from collbench.measure.sizes import format_size
from collbench.results.records import SAID_FIELDS, setup_words
from collbench.render.tables import TableModel, rank_count_text, to_markdown
from collbench.stats.calibration import POWER
from collbench.stats.verdict import CAUSES

COMPARISON_SCHEMA = "collbench.comparison"
# 3: status, decided, each row's cause (confidence added beside it)
COMPARISON_SCHEMA_VERSION = 3

_CONFIG = (("dtype", "dtype"), ("op", "op"), ("world_size", "ranks"), ("timing", "timing"))
_METRIC_LABEL = {"time_us_p50": "p50 µs", "busbw_gbps": "busbw GB/s"}
_NOISE = {"both": "both files' rounds", "baseline": "the baseline's rounds",
          "new": "the new file's rounds",
          "assumed": "an assumed spread", "paired": "the log ratios within the job's pairs"}


def _value(v: float) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    if v >= 100:
        return f"{v:.1f}"
    return f"{v:.3g}" if v < 1 else f"{v:.2f}"


def _percent(v: float) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    percent = round(v * 100, 1)
    return f"{percent if percent else 0.0:+.1f}%"     # never "-0.0%"


def _change(r: RowComparison) -> str:
    return _percent(r.change) if math.isfinite(r.ratio) else "-"


def _interval(r: RowComparison) -> str:
    if not math.isfinite(r.change_low):
        return "-"
    return f"{_percent(r.change_low)}…{_percent(r.change_high)}"


def _p(r: RowComparison) -> str:
    if r.p_adjusted is None:
        return "-"
    return "<0.0001" if r.p_adjusted < 1e-4 else f"{r.p_adjusted:.4f}"


def _rounds(r: RowComparison) -> str:
    return f"{r.rounds_baseline}/{r.rounds_new}" if r.rounds_baseline else "-"


def _varying(c: Comparison) -> list:
    return [(field, label) for field, label in _CONFIG if len({r.field(field) for r in c.rows}) > 1]


def _where(r: RowComparison) -> str:
    size = r.field("size_bytes")
    return f"{r.field('collective')}/{r.backend}" + (f" {format_size(size)}" if size else "")


def outcome(c: Comparison) -> str:
    """REGRESSION (a row slower), INCOMPLETE (rows the new run lacks or could not measure, not
    allowed), UNDECIDED (too few rows decided, or any undecided with --fail-on-inconclusive) or
    no regression: the gate's answer, as the first word of every output."""
    if c.regression:
        return "REGRESSION"
    if c.unjudged and not c.allow_missing:
        return "INCOMPLETE"
    return "UNDECIDED" if not c.passed or c.blind else "no regression"


def decided_text(c: Comparison) -> str:
    """"decided 0 of 145 rows, 80% needed": how much of the comparison the gate could see."""
    return f"decided {c.decided} of {len(c.compared)} rows, {c.min_decided:.0%} needed"


def undecided_line(c: Comparison) -> str:
    """Why rows were left undecided, counted (the ``why`` column is the first to go at 80
    columns), and what would decide them; empty when every compared row was decided."""
    causes = c.causes()
    if not causes:
        return ""
    counted = "; ".join(f"{n} {CAUSES.get(cause, cause)}" for cause, n in causes.items())
    if c.drift_source.startswith("none: both sides took turns"):        # already one job
        advice = ("measure again on a quieter machine, or more rounds" if "pairs" in causes
                  else "measure more rounds")
    elif set(causes) & {"state", "starved", "drift", "floor", "family"}:
        advice = "measure both sides in one job (collbench ab)"
    else:
        advice = "measure more rounds"
    return f"undecided rows, why: {counted}; {advice}"


def _percent_digits(v: float) -> str:
    return f"{v * 100:.1f}" if v < 0.9995 else f"{v * 100:.0f}"


def share_text(v: float) -> str:
    """A relative change as a percentage, to a tenth of a percent below 100%: "0.4%", "18.2%"."""
    return f"{_percent_digits(v)}%"


def _shares(values: list) -> str:
    """"0.4–3.1%", "18.2–22.0%", "6.0%": a range of relative changes."""
    low, high = _percent_digits(min(values)), _percent_digits(max(values))
    return f"{low}%" if low == high else f"{low}–{high}%"


def detection_line(c: Comparison) -> str:
    """What this comparison can detect: the range of the changes its rows detect with POWER (rows
    adjusted together), those within the threshold apart from the others — the rows that can be
    gated at it, and those that cannot."""
    able, unable = c.detection()
    threshold = f"threshold {c.threshold * 100:g}%"
    power = f"at {POWER:.0%} power"
    if not able and not unable:
        return f"no row has rounds to detect a change with; {threshold}"
    if not unable:
        return f"detects changes of {_shares(able)} {power} on {len(able)} row(s); {threshold}"
    if not able:
        return (f"detects changes of {_shares(unable)} {power} on {len(unable)} row(s); "
                f"{threshold}: none can be gated at it")
    return (f"detects changes of {_shares(able)} {power} on {len(able)} of "
            f"{len(able) + len(unable)} rows, {_shares(unable)} on the other {len(unable)}; "
            f"{threshold}")


def first_line(c: Comparison) -> str:
    """The first line of every output: the gate's answer, the verdict counts and what the
    comparison can detect."""
    decided = f"{decided_text(c)}; " if c.blind else ""
    return f"{outcome(c)}: {decided}{summary_line(c)}; {detection_line(c)}"


def unjudged_line(c: Comparison, limit: int = 6) -> str:
    """The rows of the baseline the new run lacks or could not measure, named, and whether they
    fail the gate; empty when there are none."""
    rows = c.unjudged
    if not rows:
        return ""
    shown = ", ".join(f"{_where(r)} ({r.verdict})" for r in rows[:limit])
    more = f" and {len(rows) - limit} more" if len(rows) > limit else ""
    verdict = ("not judged, as --allow-missing asks" if c.allow_missing else
               "fail the gate (--allow-missing lets them pass)")
    base = sum(r.reason.startswith(f"{c.baseline_name} has ") for r in rows)
    whose = (f"that {c.new_name} lacks or could not measure" if not base else
             "that it has no median for" if base == len(rows) else
             f"that it or {c.new_name} lacks or could not measure")
    return f"{len(rows)} row(s) of {c.baseline_name} {whose} {verdict}: {shown}{more}"


def summary_line(c: Comparison) -> str:
    counts = c.counts
    parts = [f"{counts[v]} {v}" for v in VERDICTS if v in ("slower", "faster", "same",
                                                           "inconclusive") or counts[v]]
    return ", ".join(parts)


def method_line(c: Comparison) -> str:
    direction = "lower" if c.lower_is_better else "higher"
    noise = ", ".join(_NOISE[n] for n in c.noise_sources) or "-"
    drifts = [r.drift_sd for r in c.rows if r.rounds_baseline and math.isfinite(r.drift_sd)]
    drift = "-"
    if drifts:
        shown = f"±{max(drifts):.1%}" if max(drifts) - min(drifts) < 0.0005 else \
            f"±{min(drifts):.1%} to ±{max(drifts):.1%} (median ±{c.drift_sd:.1%})"
        drift = f"{shown}, {c.drift_source}"
    return (f"metric {c.metric} ({direction} is better); change = ratio of the geometric means of "
            "the per-round medians (interleaved pairs: the mean ratio within pairs, a pair set "
            "aside where a round, or its ratio, lay far out; rounds far above a row's fastest set "
            f"aside), {c.ci_label} from Student t on their logs (rounds' spread from {noise}, "
            "moderated by the trend of the rows' spreads against their time per backend and "
            f"timing; drift of whole runs {drift}); slower or faster when beyond "
            f"±{c.threshold * 100:g}% and adjusted p < {c.alpha:g} (max-T over {c.tested} rows); "
            f"same when the {c.ci_label} lies inside ±{c.threshold * 100:g}%; otherwise "
            "inconclusive")


def noisy_line(c: Comparison, limit: int = 6) -> str:
    """The rows too noisy to gate at this threshold, named; empty when there are none."""
    noisy = c.too_noisy()
    if not noisy:
        return ""
    shown = ", ".join(f"{_where(r)} (detects {r.detectable:.0%})" for r in noisy[:limit])
    more = f" and {len(noisy) - limit} more" if len(noisy) > limit else ""
    return (f"{len(noisy)} row(s) too noisy to gate at ±{c.threshold * 100:g}% with these rounds — "
            f"the change each detects with {POWER:.0%} power: {shown}{more}")


def _notes(c: Comparison) -> tuple:
    """Under a comparison's table: the rows not judged, the method, the rows too noisy to gate."""
    return tuple(line for line in (unjudged_line(c), method_line(c), noisy_line(c)) if line)


def comparison_table(c: Comparison) -> TableModel:
    varying = _varying(c)
    varying_fields = {f for f, _ in varying}
    first = c.rows[0]
    fixed = [rank_count_text(first.field(f)) if f == "world_size" else str(first.field(f))
             for f, _ in _CONFIG
             if f not in varying_fields and not (f == "op" and first.field(f) == "none")]
    label = _METRIC_LABEL[c.metric]
    show_reason = any(r.reason for r in c.rows)
    headers = (("collective", "backend", *[lbl for _, lbl in varying], "size", f"baseline {label}",
                f"new {label}", "change", c.ci_label, "rounds", "p (adj.)", "verdict")
               + (("why",) if show_reason else ()))
    cells = []
    for r in c.rows:
        size = r.field("size_bytes")
        cells.append((r.field("collective"), r.backend, *[str(r.field(f)) for f, _ in varying],
                      format_size(size) if size else "-", _value(r.baseline_value),
                      _value(r.new_value),
                      _change(r), _interval(r), _rounds(r), _p(r), r.verdict)
                     + ((r.reason,) if show_reason else ()))
    title = f"{c.baseline_name} → {c.new_name}" + (f" · {' · '.join(fixed)}" if fixed else "")
    notes = _notes(c)
    # On a narrow terminal: the size, the change and the verdict stay; the medians, p and rounds go
    # first.
    priorities = (3, 2, *[4] * len(varying), 0, 5, 5, 0, 1, 6, 4, 0) + ((1,) if show_reason else ())
    return TableModel(title, headers, tuple(cells), notes, priorities)


def _setup_title(r: RowComparison) -> str:
    """"allreduce · mpi · float32 sum · 2 ranks · latency": what a row compared, but its size."""
    op, row = r.field("op"), r.baseline or r.new
    data = (f"{r.field('dtype')}{'' if op == 'none' else ' ' + op}"
            if row is None or row.size_bytes else "")
    parts = [r.field("collective"), r.field("backend"), data,
             rank_count_text(r.field("world_size")), r.field("timing")]
    parts += setup_words({name: r.field(name) for name in MATCH_FIELDS}, SAID_FIELDS)
    parts += [f"group {r.field('group')}"] * bool(r.field("split"))
    return " · ".join(str(p) for p in parts if p)


def comparison_tables(c: Comparison) -> list:
    """The comparison for a terminal: a table per setup (every field but the size), titled with
    it, as a run's tables are; the method and the noisy rows said once, under the last."""
    label = _METRIC_LABEL[c.metric]
    show_reason = any(r.reason for r in c.rows)
    headers = ("size", f"baseline {label}", f"new {label}", "change", c.ci_label, "rounds",
               "p (adj.)",
               "verdict") + (("why",) if show_reason else ())
    # On a narrow terminal: the size, the change and the verdict stay; p, rounds and the medians go
    # first.
    priorities = (0, 3, 3, 0, 1, 4, 5, 0) + ((2,) if show_reason else ())
    groups: dict = {}
    for r in c.rows:
        groups.setdefault(_setup_title(r), []).append(r)
    tables = []
    for title, rows in groups.items():
        cells = tuple((format_size(r.field("size_bytes")) if r.field("size_bytes") else "-",
                       _value(r.baseline_value),
                       _value(r.new_value), _change(r), _interval(r), _rounds(r), _p(r), r.verdict)
                      + ((r.reason,) if show_reason else ()) for r in rows)
        if any(math.isfinite(_overlap_of(row)) for r in rows for row in (r.baseline, r.new)):
            # --api nonblocking: the gate is on the time; how much of it hid behind compute is
            # reported
            tables.append(TableModel(title, headers + ("overlap %",), tuple(
                line + (_overlap_change(r),) for line, r in zip(cells, rows)), (),
                                     priorities + (2,)))
            continue
        tables.append(TableModel(title, headers, cells, (), priorities))
    tables[-1] = dataclasses.replace(tables[-1], notes=_notes(c))
    return tables


def _overlap_of(row) -> float:
    return row.overlap_pct if row is not None else math.nan


def _overlap_change(r: RowComparison) -> str:
    """The overlap of a non-blocking call on each side: "12 → 30"."""
    a, b = (_overlap_of(row) for row in (r.baseline, r.new))
    shown = [f"{v:.0f}" if math.isfinite(v) else "-" for v in (a, b)]
    return "-" if shown == ["-", "-"] else " → ".join(shown)


def _bold_verdicts(table: TableModel, keep, verdict_column: int) -> TableModel:
    def bold(line):
        cell = line[verdict_column]
        shown = f"**{cell}**" if cell in ("slower", "faster") else cell
        return line[:verdict_column] + (shown,) + line[verdict_column + 1:]
    cells = tuple(bold(line) for line, r in zip(table.cells, keep) if r)
    return dataclasses.replace(table, cells=cells)


def to_summary_markdown(c: Comparison) -> str:
    """A GitHub job summary: heading, verdict counts, warnings, the rows that are not "same",
    then every row in a collapsed block."""
    lines = [f"## collbench compare: {outcome(c)} · {detection_line(c)}", "",
             f"**{summary_line(c)}**" + (f" · {decided_text(c)}" if c.blind else ""), ""]
    if undecided_line(c):
        lines += [f"> **{'Undecided' if c.blind else 'Not decided'}:** {undecided_line(c)}", ""]
    if c.unjudged:
        lines += [f"> **{'Not judged' if c.allow_missing else 'Failed'}:** "
                  f"{unjudged_line(c, limit=20)}", ""]
    lines += [f"> **Warning:** {w}" for w in c.warnings]
    if c.warnings:
        lines.append("")
    table = comparison_table(c)
    column = table.headers.index("verdict")
    notable = [r.verdict != "same" for r in c.rows]
    if any(notable):
        lines.append(to_markdown(_bold_verdicts(table, notable, column), level=3))
    every_row = dataclasses.replace(_bold_verdicts(table, [True] * len(c.rows), column), notes=())
    untitled = to_markdown(every_row, heading=False)
    lines += [f"<details><summary>All {len(c.rows)} rows</summary>", "", untitled, "</details>", ""]
    return "\n".join(lines)


def _number(v):
    return v if v is None or math.isfinite(v) else None


def _detects(c: Comparison) -> dict:
    """``detection_line`` as numbers: the rows within the threshold and beyond it, each with the
    smallest and largest change they detect."""
    def part(values):
        return {"rows": len(values), "low": min(values) if values else None,
                "high": max(values) if values else None}
    able, unable = c.detection()
    return {"line": detection_line(c), "power": POWER, "threshold": c.threshold,
            "within_threshold": part(able), "beyond_threshold": part(unable)}


def to_json(c: Comparison) -> str:
    rows = []
    for r in c.rows:
        record = dict(zip(MATCH_FIELDS, r.key))
        record.update(baseline=_number(r.baseline_value), new=_number(r.new_value),
                      ratio=_number(r.ratio),
                      change=_number(r.change), change_ci_low=_number(r.change_low),
                      change_ci_high=_number(r.change_high), p_value=r.p_value,
                      p_adjusted=r.p_adjusted,
                      rounds_baseline=r.rounds_baseline, rounds_new=r.rounds_new,
                      noise=r.noise or None,
                      detectable_change=_number(r.detectable), rounds_needed=r.rounds_needed,
                      drift_sd=_number(r.drift_sd), verdict=r.verdict, reason=r.reason or None,
                      cause=r.cause or None)
        if any(row is not None and math.isfinite(row.overlap_pct) for row in (r.baseline, r.new)):
            record.update(overlap_pct_baseline=_number(_overlap_of(r.baseline)),
                          overlap_pct_new=_number(_overlap_of(r.new)))
        rows.append(record)
    doc = {"schema": COMPARISON_SCHEMA, "schema_version": COMPARISON_SCHEMA_VERSION,
           "baseline": c.baseline_name, "new": c.new_name, "metric": c.metric,
           "lower_is_better": c.lower_is_better, "threshold": c.threshold, "alpha": c.alpha,
           "confidence": c.confidence,
           "rows_tested": c.tested, "multiple_comparisons": "max-T", "regression": c.regression,
           "passed": c.passed, "status": c.status,
           "decided": {"rows": c.decided, "of": len(c.compared),
                                                                 "needed": c.min_decided,
                       "why_not": c.causes()},
           "allow_missing": c.allow_missing, "fail_on_inconclusive": c.fail_on_inconclusive,
           "detects": _detects(c),
           "unjudged": [f"{_where(r)} ({r.verdict})" for r in c.unjudged],
           "drift_sd": _number(c.drift_sd), "drift_source": c.drift_source or None,
           "summary": c.counts, "method": method_line(c), "warnings": list(c.warnings),
           "too_noisy": [_where(r) for r in c.too_noisy()], "rows": rows}
    return json.dumps(doc, indent=1) + "\n"
