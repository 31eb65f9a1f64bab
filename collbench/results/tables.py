"""Tables of results as plain data (title, headers, cells), rendered by rich or as markdown.

One table per (collective, dtype, op, timing, world size). With one backend it shows the
full statistics; with several, a column group per backend and the median-time ratio of each
backend against the first (above 1: slower than the first). With rounds, the CI shown is the
run-to-run one, the spread of the round medians is a column, and a row whose rounds disagree
far beyond their own within-round CIs is marked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from collbench.results.records import Row
from collbench.measure.sizes import format_size


@dataclass(frozen=True)
class TableModel:
    title: str
    headers: tuple
    rows: tuple
    notes: tuple = ()


def _t(us: float) -> str:
    if us is None or math.isnan(us):
        return "-"
    if us >= 1e5:
        return f"{us:.0f}"
    if us >= 100:
        return f"{us:.1f}"
    return f"{us:.2f}"


def _bw(gbps: float) -> str:
    return "-" if not gbps or math.isnan(gbps) else f"{gbps:.3f}" if gbps < 10 else f"{gbps:.2f}"


DISAGREE_MARK = "‡"


def _mark(row: Row) -> str:
    return DISAGREE_MARK if row.rounds_disagree else ""


def _ci(row: Row) -> str:
    if math.isnan(row.time_us_ci_low):
        return "-"
    return f"{_t(row.time_us_ci_low)}–{_t(row.time_us_ci_high)}{_mark(row)}"


def _ci_pct(row: Row) -> str:
    if math.isnan(row.time_us_ci_low) or not row.time_us_p50:
        return "-"
    return f"±{(row.time_us_ci_high - row.time_us_ci_low) / 2 / row.time_us_p50 * 100:.1f}%{_mark(row)}"


def _cv(row: Row) -> str:
    return "-" if math.isnan(row.run_to_run_cv) else f"{row.run_to_run_cv * 100:.1f}%"


def _size(row: Row) -> str:
    return "-" if not row.size_bytes else format_size(row.size_bytes)


def _iters(row: Row) -> str:
    return f"{row.iterations}" + ("" if row.precision_reached else "*")


def _group_key(row: Row) -> tuple:
    return (row.collective, row.dtype, row.op, row.timing, row.world_size)


def _title(row: Row) -> str:
    op = "" if row.op == "none" else f" {row.op}"
    return f"{row.collective} · {row.dtype}{op} · {row.world_size} ranks · {row.timing}"


def _single(title: str, rows: list) -> TableModel:
    rounds = any(r.rounds > 1 for r in rows)
    headers = ("size", "count") + (("rounds",) if rounds else ()) + ("iters", "p50 µs", "95% CI µs") \
        + (("run cv",) if rounds else ()) + ("min µs", "p95 µs", "max µs", "algbw GB/s", "busbw GB/s", "check")
    cells = tuple((_size(r), str(r.count)) + ((str(r.rounds),) if rounds else ())
                  + (_iters(r), _t(r.time_us_p50), _ci(r)) + ((_cv(r),) if rounds else ())
                  + (_t(r.time_us_min), _t(r.time_us_p95), _t(r.time_us_max), _bw(r.algbw_gbps), _bw(r.busbw_gbps),
                     r.check)
                  for r in rows)
    return TableModel(f"{title} · {rows[0].backend}", headers, cells, _notes(rows))


def _multi(title: str, rows: list, backends: list) -> TableModel:
    by = {(r.backend, r.size_bytes): r for r in rows}
    sizes = sorted({r.size_bytes for r in rows})
    show_check = any(r.check != "ok" for r in rows)
    headers = ["size"]
    for b in backends:
        headers += [f"{b} p50 µs", f"{b} CI", f"{b} busbw GB/s"] + ([f"{b} check"] if show_check else [])
    headers += [f"{b}/{backends[0]}" for b in backends[1:]]
    cells = []
    for size in sizes:
        line = [_size(next(r for r in rows if r.size_bytes == size))]
        for b in backends:
            r = by.get((b, size))
            line += [_t(r.time_us_p50) + ("" if r.precision_reached else "*"), _ci_pct(r), _bw(r.busbw_gbps)] \
                if r else ["-", "-", "-"]
            if show_check:
                line.append(r.check if r else "-")
        base = by.get((backends[0], size))
        for b in backends[1:]:
            r = by.get((b, size))
            ok = r and base and base.time_us_p50 and not math.isnan(r.time_us_p50)
            line.append(f"{r.time_us_p50 / base.time_us_p50:.2f}×" if ok else "-")
        cells.append(tuple(line))
    return TableModel(title, tuple(headers), tuple(cells), _notes(rows))


def _notes(rows: list) -> tuple:
    notes = []
    most = max(r.rounds for r in rows)
    if most > 1:
        notes.append(f"{most} rounds: p50 is the geometric mean of the round medians, its 95% CI comes from "
                     f"their spread, pooled with the sweep's typical one (run cv: standard deviation / mean of the "
                     f"round medians)")
    else:
        notes.append("one round: the CI describes this launch only; --rounds 2 or more gives one that holds "
                     "from one run to the next")
    if any(r.rounds_disagree for r in rows):
        notes.append(f"{DISAGREE_MARK} rounds disagree: their medians spread more than 3× what each round's "
                     f"own CI allows")
    if any(not r.precision_reached for r in rows):
        notes.append("* precision not reached in every round: a round's CI of its median stayed wider than "
                     "--precision, or it had too few samples (under 6) for one")
    wrong = [r for r in rows if r.check.startswith("wrong")]
    checked = [r for r in rows if r.check != "skipped"]
    if wrong:
        notes.append(f"{len(wrong)} row(s) FAILED the result check")
    elif checked:
        notes.append("every checked result: ok" if len(checked) < len(rows) else "every result checked: ok")
    return tuple(notes)


def build_tables(rows: Iterable[Row]) -> list:
    groups: dict = {}
    for r in rows:
        groups.setdefault(_group_key(r), []).append(r)
    tables = []
    for group in groups.values():
        backends = list(dict.fromkeys(r.backend for r in group))
        title = _title(group[0])
        tables.append(_single(title, group) if len(backends) == 1 else _multi(title, group, backends))
    return tables


def to_markdown(table: TableModel) -> str:
    lines = [f"### {table.title}", "", "| " + " | ".join(table.headers) + " |",
             "|" + "|".join("---:" if i else "---" for i in range(len(table.headers))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    for note in table.notes:
        lines += ["", f"_{note}_"]
    return "\n".join(lines) + "\n"


def to_rich(table: TableModel, plain: bool = False):
    from rich import box
    from rich.table import Table

    t = Table(title=table.title, box=box.ASCII if plain else box.SIMPLE_HEAVY,
              caption="\n".join(table.notes) or None, title_justify="left")
    for i, h in enumerate(table.headers):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for row in table.rows:
        t.add_row(*row)
    return t
