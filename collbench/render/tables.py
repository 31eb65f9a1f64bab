"""Tables of results as plain data (title, headers, cells), rendered by rich or as markdown.

One table per (collective, dtype, op, timing, world size). With one backend it shows the
full statistics; with several, a column group per backend and the median-time ratio of each
backend against the first (above 1: slower than the first). With rounds, the CI shown is the
run-to-run one, the spread of the round medians is a column, and a row whose rounds disagree
far beyond their own within-round CIs is marked. Rows of many pairs make link maps instead
(``results.link_map``): the matrix and what lies out.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from collbench.benchmarks.registry import BENCHMARKS
from collbench.results import link_map
from collbench.results.records import (BUSIEST_RANK_COUNTS, USUAL_THREAD_LEVEL, Row, backend_label,
                                       setup_words)
from collbench.measure.sizes import format_size
from collbench.measure.timings import eager_and_own


@dataclass(frozen=True)
class TableModel:
    title: str
    headers: tuple           # all empty (""): a table without a header line
    cells: tuple             # per line of the table, a tuple of its cell texts
    notes: tuple = ()
    priorities: tuple = ()   # per column: 0 always shown, higher numbers dropped first to fit a
                             # width
    wrapped: tuple = ()      # columns of prose: left-aligned, wrapped to fit a width


def format_us(us: float) -> str:
    """A time in µs as the tables show it: 2 decimals below 100 µs, 1 below 100,000, none above."""
    if us is None or not math.isfinite(us):
        return "-"
    if us >= 1e5:
        return f"{us:.0f}"
    if us >= 100:
        return f"{us:.1f}"
    return f"{us:.2f}"


def format_gbps(gbps: float) -> str:
    """A bandwidth in GB/s as the tables show it: 3 decimals below 10, 2 above; - for none."""
    return "-" if not gbps or math.isnan(gbps) else f"{gbps:.3f}" if gbps < 10 else f"{gbps:.2f}"


DISAGREE_MARK = "‡"


def _mark(row: Row) -> str:
    return DISAGREE_MARK if row.rounds_disagree else ""


def _ci(row: Row) -> str:
    if math.isnan(row.time_us_ci_low):
        return "-"
    return f"{format_us(row.time_us_ci_low)}–{format_us(row.time_us_ci_high)}{_mark(row)}"


def _lopsided(row: Row) -> bool:
    """Whether the row's CI reaches up to a state of the machine (``noise.state_level``): its
    upper side clearly longer than its lower (a CI of the rounds alone is even on the log scale)."""
    if not (row.time_us_p50 > 0 and row.time_us_ci_low > 0 and row.time_us_ci_high > 0):
        return False
    below, above = (math.log(row.time_us_p50 / row.time_us_ci_low),
                    math.log(row.time_us_ci_high / row.time_us_p50))
    return above > 1.25 * below and above - below >= 0.01


#: A CI whose ends lie this many times its p50 apart from it says only that the next run may land
#: anywhere in a wide range: the table says so in words (a first run on a busy VM printed allreduce
#: 16 B at 3.88 µs, 95% CI 3.56-606.2 µs).
WIDE_CI = 100.0


def _wide(row: Row) -> bool:
    """Whether the row's CI reaches WIDE_CI times its p50 above it or below it."""
    p50, low, high = row.time_us_p50, row.time_us_ci_low, row.time_us_ci_high
    return p50 > 0 and low > 0 and high > 0 and (high >= WIDE_CI * p50 or low * WIDE_CI <= p50)


def _wide_note(rows: list, name) -> list:
    wide = [r for r in rows if _wide(r)]
    if not wide:
        return []
    rounds = [m for r in wide for m in r.time_us_round_p50s if m and m > 0]
    ran = (f" (their rounds ran {format_us(min(rounds))}–{format_us(max(rounds))} µs)"
           if rounds else "")
    return [f"{_listed([name(r) for r in wide])}: the 95% CI spans {WIDE_CI:g}× its p50 or "
            f"more{ran}, so the next run may land anywhere in it and the p50 is not a figure to "
            "quote; measure again with more rounds or on a quieter machine"]


def _ci_pct(row: Row) -> str:
    """The CI relative to the median: ±x%, or -a…+b% where it reaches up to a state."""
    if math.isnan(row.time_us_ci_low) or not row.time_us_p50:
        return "-"
    below = (row.time_us_p50 - row.time_us_ci_low) / row.time_us_p50 * 100
    above = (row.time_us_ci_high - row.time_us_p50) / row.time_us_p50 * 100
    if _lopsided(row):
        return (f"-{below:.{0 if below >= 10 else 1}f}…"
                f"+{above:.{0 if above >= 10 else 1}f}%{_mark(row)}")
    return f"±{(above + below) / 2:.1f}%{_mark(row)}"


def _cv(row: Row) -> str:
    return "-" if math.isnan(row.run_to_run_cv) else f"{row.run_to_run_cv * 100:.1f}%"


def _size(row: Row) -> str:
    return "-" if not row.size_bytes else format_size(row.size_bytes)


def _iters(row: Row) -> str:
    return f"{row.iterations}"


def _p50(row: Row) -> str:
    """The median, marked * when a round's CI did not reach --precision (see the notes)."""
    return format_us(row.time_us_p50) + ("" if row.precision_reached else "*")


def _group_key(row: Row) -> tuple:
    return (row.collective, row.dtype, row.op, row.timing, row.world_size, *setup_words(row))


def rank_count_text(n) -> str:
    """"1 rank", "8 ranks"."""
    return f"{n} rank" if n == 1 else f"{n} ranks"


def setup_text(dtype: str, op: str, world_size: int, timing: str) -> str:
    """"float32 sum, 2 ranks, latency": what a row measured besides its collective, backend,
    size."""
    return f"{dtype}{'' if op == 'none' else ' ' + op}, {rank_count_text(world_size)}, {timing}"


def root_text(collective: str, root: int) -> str:
    """"root 1" for a rooted collective whose root is not 0; else nothing (root 0 goes unsaid)."""
    known = BENCHMARKS.get(collective)
    return f"root {root}" if root and known is not None and known.rooted else ""


def level_word(rows: list) -> str:
    """" · thread single" where the table's MPI rows ran at the usual thread level (another
    level is in the backend's label), else ""."""
    levels = {r.thread_level for r in rows if r.thread_level}
    return f" · thread {USUAL_THREAD_LEVEL}" if levels == {USUAL_THREAD_LEVEL} else ""


def _title(rows: list, root: int) -> str:
    row = rows[0]
    op = "" if row.op == "none" else f" {row.op}"
    data = f" · {row.dtype}{op}" if any(r.size_bytes for r in rows) else ""     # barrier: no data
    rooted = "".join(f" · {text}" for text in [root_text(row.collective, root)] if text)
    where = "".join(f" · {word}" for word in setup_words(row))
    return (f"{row.collective}{data}{rooted} · {rank_count_text(row.world_size)} · "
            f"{row.timing}{where}")


def _per_rank(rows: list) -> bool:
    """Whether each rank's part differs from the size (allgather, gather, scatter, alltoall,
    reduce_scatter: the size is the whole n-rank array, as in nccl-tests)."""
    return any(r.size_bytes and r.per_rank_bytes != r.size_bytes for r in rows)


def _rank_size(row: Row) -> str:
    return "-" if not row.per_rank_bytes else format_size(row.per_rank_bytes)


def _uneven(rows: list) -> bool:
    """Whether a pattern spread some row's bytes unevenly over the ranks (--pattern)."""
    return any(max(r.imbalance_sent, r.imbalance_received) > 1.0 for r in rows)


def _busiest(row: Row) -> str:
    return f"{max(row.imbalance_sent, row.imbalance_received):.2f}×"


#: what the busiest column means, said under a table that has it
BUSIEST_NOTE = ("busiest: the busiest rank's bytes, sent or received, over the size; algbw and "
                "busbw count that rank's bytes, as nccl-tests' alltoallv does")
#: the same for the collectives of one piece per rank (allgatherv, gatherv, scatterv)
PIECES_NOTE = ("busiest: the largest piece over the mean piece; algbw and busbw count the whole "
               "array, which every rank (or the root) moves whatever its pieces")


def _busiest_note(rows: list) -> tuple:
    """The busiest column's note, for the collective of ``rows``; none where it is not shown."""
    if not _uneven(rows):
        return ()
    return (BUSIEST_NOTE if rows[0].collective in BUSIEST_RANK_COUNTS else PIECES_NOTE,)


def _columns(columns: list, lines: list, title: str, notes: tuple) -> TableModel:
    """A table from (header, priority, cell function) triples: a line per item of ``lines`` (a
    Row, or in ``_multi`` a size), each cell function applied to it."""
    headers = tuple(h for h, _, _ in columns)
    priorities = tuple(p for _, p, _ in columns)
    cells = tuple(tuple(cell(line) for _, _, cell in columns) for line in lines)
    return TableModel(title, headers, cells, notes, priorities)


def _slowest_groups(rows: list) -> tuple[list, dict, tuple]:
    """The rows of a split (``--split``) as a table shows them: per backend and size the slowest
    group's row, with the spread over the groups (slowest / fastest median) by row; and the
    note that says so. Rows without a split stay as they are."""
    if not any(r.split for r in rows):
        return rows, {}, ()
    by: dict = {}
    for r in rows:
        by.setdefault((backend_label(r), r.size_bytes), []).append(r)
    kept, spread = [], {}
    for members in by.values():
        times = [r.time_us_p50 for r in members if math.isfinite(r.time_us_p50)]
        slowest = max(members,
                      key=lambda r: r.time_us_p50 if math.isfinite(r.time_us_p50) else -math.inf)
        kept.append(slowest)
        spread[id(slowest)] = (max(times) / min(times) if times and min(times) > 0 else math.nan,
                               len(members))
    counts = {n for _, n in spread.values()}
    note = ("split: p50 and the figures are the slowest of the "
            f"{'/'.join(map(str, sorted(counts)))} groups measuring at once; spread: its median / "
            "the fastest group's (the files have each group's rows)",)
    return kept, spread, note


def _spread(spread: dict):
    def cell(row: Row) -> str:
        ratio, _ = spread.get(id(row), (math.nan, 0))
        return "-" if not math.isfinite(ratio) else f"{ratio:.2f}×"
    return cell


def _single(title: str, rows: list) -> TableModel:
    rounds = any(r.rounds > 1 for r in rows)
    sized = any(r.size_bytes for r in rows)
    columns = [("size", 0, _size)] if sized else []
    if _per_rank(rows):
        columns.append(("per rank", 2, _rank_size))
    if _uneven(rows):
        columns.append(("busiest", 2, _busiest))
    if sized:
        columns.append(("count", 8, lambda r: str(r.count)))
    if rounds:
        columns.append(("rounds", 9, lambda r: str(r.rounds)))
    rows, spread, split_note = _slowest_groups(rows)
    columns += [("iters", 7, _iters), ("p50 µs", 0, _p50), ("95% CI µs", 1, _ci)]
    if spread:
        columns += [("group", 2, lambda r: str(r.group)), ("spread", 1, _spread(spread))]
    if rounds:
        columns.append(("run cv", 4, _cv))
    columns += [("avg µs", 6, lambda r: format_us(r.time_us_rank_avg)),
                ("min µs", 10, lambda r: format_us(r.time_us_min)),
                ("p95 µs", 12, lambda r: format_us(r.time_us_p95)),
                ("max µs", 11, lambda r: format_us(r.time_us_max))]
    if sized:
        columns += [("algbw GB/s", 5, lambda r: format_gbps(r.algbw_gbps)),
                    ("busbw GB/s", 3, lambda r: format_gbps(r.busbw_gbps))]
    if _overlaps(rows):
        columns += [("overlap %", 1, _overlap),
                    ("overall µs", 2, lambda r: format_us(r.overall_us)),
                    ("compute µs", 2, lambda r: format_us(r.compute_us))]
    if sized:
        columns.append(("check", 1, lambda r: r.check))
    label = backend_label(rows[0])
    busiest = _busiest_note(rows)
    return _columns(columns, rows, f"{title} · {label}{level_word(rows)}",
                    _summary(rows, [label]) + split_note + busiest + _notes(rows))


def _multi(title: str, rows: list, backends: list) -> TableModel:
    rows, spread, split_note = _slowest_groups(rows)
    by = {(backend_label(r), r.size_bytes): r for r in rows}
    sizes = sorted({r.size_bytes for r in rows})
    first = {s: next(r for r in rows if r.size_bytes == s) for s in sizes}
    sized = any(sizes)
    show_check = sized and any(r.check != "ok" for r in rows)

    def of(b, cell, default="-"):
        return lambda s: cell(by[(b, s)]) if (b, s) in by else default

    columns = [("size", 0, lambda s: _size(first[s]))] if sized else []
    if _per_rank(rows):
        columns.append(("per rank", 3, lambda s: _rank_size(first[s])))
    if _uneven(rows):
        columns.append(("busiest", 3, lambda s: _busiest(first[s])))
    for i, b in enumerate(backends):
        shown = _stacked(b)
        columns += [(f"{shown}\np50 µs", 0, of(b, _p50)),
                    (f"{shown}\nCI", 4 if i == 0 else 5, of(b, _ci_pct))]
        if spread:
            columns.append((f"{shown}\nspread", 2, of(b, _spread(spread))))
        if _overlaps([r for r in rows if backend_label(r) == b]):
            columns.append((f"{shown}\noverlap %", 0, of(b, _overlap)))
        if sized:
            columns.append((f"{shown}\nbusbw GB/s", 6, of(b, lambda r: format_gbps(r.busbw_gbps))))
        columns += [(f"{shown}\navg µs", 8, of(b, lambda r: format_us(r.time_us_rank_avg))),
                    (f"{shown}\nmin µs", 9, of(b, lambda r: format_us(r.time_us_min))),
                    (f"{shown}\nmax µs", 9, of(b, lambda r: format_us(r.time_us_max))),
                    (f"{shown}\niters", 10, of(b, _iters))]
        if show_check:
            columns.append((f"{shown}\ncheck", 2, of(b, lambda r: r.check)))

    def ratio(b):
        def cell(s):
            r, base = by.get((b, s)), by.get((backends[0], s))
            ok = r and base and base.time_us_p50 and not math.isnan(r.time_us_p50)
            return f"{r.time_us_p50 / base.time_us_p50:.2f}×" if ok else "-"
        return cell

    columns += [(f"{_stacked(b)}\n/{backends[0]}", 1, ratio(b)) for b in backends[1:]]
    busiest = _busiest_note(rows)
    return _columns(columns, sizes, title,
                    _summary(rows, backends) + split_note + busiest + _notes(rows))


def _overlaps(rows: list) -> bool:
    """Whether any of ``rows`` measured an overlap (--api nonblocking, persistent)."""
    return any(math.isfinite(r.overlap_pct) for r in rows)


def _overlap(row: Row) -> str:
    return f"{row.overlap_pct:.0f}" if math.isfinite(row.overlap_pct) else "-"


def _summary(rows: list, backends: list) -> tuple:
    """The line users of nccl-tests look for: the mean bus bandwidth over the sizes (its "Avg bus
    bandwidth"). OSU's average latency (the mean of the ranks' mean times) is the avg µs column."""
    parts, counts = [], set()
    for b in backends:
        bus = [r.busbw_gbps for r in rows
               if backend_label(r) == b and r.size_bytes and r.busbw_gbps
               and math.isfinite(r.busbw_gbps)]
        if bus:
            mean = (format_gbps(sum(bus) / len(bus))
                    if sum(bus) / len(bus) >= 0.001 else f"{sum(bus) / len(bus):.2g}")
            parts.append(f"{b} {mean}" if len(backends) > 1 else mean)
            counts.add(len(bus))
    if not parts:
        return ()
    count = counts.pop() if len(counts) == 1 else None
    over = "the sizes" if count is None else f"{count} size{'s' * (count != 1)}"
    return (f"avg bus bandwidth: {', '.join(parts)} GB/s (mean over {over}, as nccl-tests prints "
            "it)",)


def _notes(rows: list) -> tuple:
    notes = []
    most = max(r.rounds for r in rows)
    if most > 1:
        aside = sum(r.rounds_set_aside for r in rows)
        notes.append(f"{most} rounds: p50 is the geometric mean of the round medians, its 95% CI "
                     "comes from their spread, moderated by what rows of like time in this file "
                     "spread by, and the spread between runs (run cv: standard deviation / mean of "
                     "the round medians)")
        if aside:                         # this table's own: the note above is said once for all
            notes.append(f"{aside} round median(s) far above their row's fastest set aside as "
                         "interference")
        if any(_lopsided(r) for r in rows):      # said once for all tables, as the note above
            notes.append("a CI far longer above its p50 than below reaches up to where a fifth or "
                         "more of the row's rounds ran, set aside: a state of the machine that the "
                         "next run may settle in")
    else:
        notes.append("one round: the CI describes this launch only; --rounds 2 or more gives one "
                     "that holds from one run to the next")
    notes += _cold_note(rows)
    grouped = sorted({r.coalesce for r in rows if r.coalesce > 1})
    if grouped:
        notes.append(f"{'/'.join(map(str, grouped))} grouped: that many calls issued as one group, "
                     "each on buffers of its own (torch's coalescing manager; MPI's non-blocking "
                     "calls, all started, then completed), timed as a group; p50 and the other "
                     "times are per call (the group's over its calls)")
    if _overlaps(rows):
        notes.append("overlap %: how much of a call compute between its start and its wait hid, as "
                     "OSU defines it: 100·max(0, 1 − (overall − compute) / p50), the compute "
                     "lasting at least p50 (docs/methodology.md)")
    if any(r.rounds_disagree for r in rows):
        notes.append(f"{DISAGREE_MARK} rounds disagree: their medians spread far more than the "
                     "file's noise model expects of rows like it at its time (its CI rests on its "
                     "own rounds alone)")
    several = len({r.backend for r in rows}) > 1

    def name(r: Row) -> str:
        return f"{_size(r)} ({backend_label(r)})" if several else _size(r)

    notes += _wide_note(rows, lambda r: name(r) if r.size_bytes else r.collective)
    notes += _budget_notes(rows, name)
    if any(not r.precision_reached for r in rows):
        notes.append("* precision not reached in every round: a round's CI of its median stayed "
                     "wider than --precision, or it had too few samples (under 6) for one")
    wrong = [r for r in rows if r.check.startswith("wrong")]
    checked = [r for r in rows if r.check != "skipped"]
    if wrong:
        notes.append(f"{len(wrong)} row(s) FAILED the result check")
    elif checked:
        notes.append("every checked result: ok"
                     if len(checked) < len(rows) else "every result checked: ok")
    return tuple(notes)


def _cold_note(rows: list) -> tuple:
    """What a cold cache's rows measured, and which of them spanned less than twice the cache."""
    cold = [r for r in rows if r.cache == "cold"]
    if not cold:
        return ()
    short = [r for r in cold if r.cache_span < 2]
    less = (f"; at {_listed(list(dict.fromkeys(_size(r) for r in short)))} the pool's sets spanned "
            f"less ({min(r.cache_span for r in short):.2g}× at least), so some data may still be "
            "in that cache"
            if short else "")
    return ("cold cache: each call on the next of a pool of page-aligned buffer sets spanning "
            f"twice the cache behind them (IMB's -off_cache){less}",)


def _listed(names: list, most: int = 6) -> str:
    names = list(dict.fromkeys(names))
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _budget_notes(rows: list, name) -> list:
    """What the budget (a round's share of --max-time) cut: windows shrunk for slow pairs, rows
    with fewer than --min-iters samples in a round; ``name(row)``: how a note names a row."""
    notes = []
    shrunk: dict = {}
    for r in rows:
        if r.window_used < r.window:
            shrunk.setdefault((r.window, r.window_used), []).append(name(r))
    for (window, used), names in sorted(shrunk.items()):
        notes.append(f"window {window} shrunk to {used} for {_listed(names)}: a whole window would "
                     "have taken over half a round's share of --max-time")
    short = [r for r in rows if r.rounds_short]
    if short:
        notes.append("fewer than --min-iters samples in a round for "
                     f"{_listed([name(r) for r in short])}: its share of --max-time ran out first "
                     "(iterations says how many; a longer --max-time gives more)")
    return notes


def build_tables(rows: Iterable[Row], root: int = 0,
                 where: link_map.Placement = link_map.Placement()) -> list:
    """One table per (collective, setup), its backends side by side; ``root``: the run's root
    rank, named in the titles of rooted collectives when it is not 0. Rows of many pairs
    (``collbench pairs``) make link maps instead: a matrix where it fits and what lies out;
    ``where``: every rank's host, which tells the map's classes of pairs apart, and whether they
    can be judged (``link_map.placement`` of the run's metadata)."""
    maps, rows = link_map.split(list(rows), where)
    tables = [table for lmap in maps for table in link_tables(lmap)]
    groups: dict = {}
    for r in rows:
        groups.setdefault(_group_key(r), []).append(r)
    for group in groups.values():
        backends = list(dict.fromkeys(backend_label(r) for r in group))
        title = _title(group, root)
        tables.append(_single(title, group) if len(backends) == 1 else
                      _multi(title + level_word(group), group, backends))
    return tables + timing_tables(rows)


# The eager timings, in the order an overhead prefers them (back-to-back calls, else one call),
# and the device's own (``timings.eager_and_own``): the faster of the two at each size is the
# library's time. NCCL's captured calls can be the slower (an H100's 1 GiB allgather: 889 µs
# replayed, 714 µs eager on the device's clock, and nccl-tests -G 882 µs), small ones the faster
# (no launch between).


def timing_tables(rows: list) -> list:
    """Per collective and setup measured both ways, the timings side by side with what a call
    costs beyond the library's own time on the device: eager (throughput, else latency) less own
    (the faster of graph and device), what the framework adds per call. A split's rows: the
    slowest group's."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r.collective, r.dtype, r.op, r.world_size, *setup_words(r),
                           backend_label(r)), []).append(r)
    tables = []
    eager_order, own_order = eager_and_own(dict.fromkeys(r.timing for r in rows))
    for group in groups.values():
        timings = [t for t in (*eager_order[::-1], *own_order) if any(r.timing == t for r in group)]
        eager = next((t for t in eager_order if t in timings), None)
        owns = [t for t in own_order if t in timings]
        if eager is None or not owns:
            continue
        by = {(r.timing, r.size_bytes): r for t in timings
              for r in _slowest_groups([r for r in group if r.timing == t])[0]}
        sizes = sorted({size for _, size in by})

        def p50(timing):
            return lambda size: _p50(by[timing, size]) if (timing, size) in by else "-"

        def beyond(size, share=False):
            a = by.get((eager, size))
            mine = [by[t, size].time_us_p50 for t in owns if (t, size) in by]
            mine = [x for x in mine if math.isfinite(x)]
            if a is None or not mine or not math.isfinite(a.time_us_p50):
                return "-"
            extra = a.time_us_p50 - min(mine)
            return f"{extra / a.time_us_p50:.0%}" if share else format_us(extra)

        first = group[0]
        columns = [("size", 0, lambda size: format_size(size) if size else "-")]
        columns += [(f"{t} µs", 0, p50(t)) for t in timings]
        columns += [("overhead µs", 0, beyond), ("of eager", 1, lambda size: beyond(size, True))]
        data = f"{first.dtype}{'' if first.op == 'none' else ' ' + first.op}"
        title = " · ".join([first.collective, data, rank_count_text(first.world_size),
                            *setup_words(first), backend_label(first), "timings side by side"])
        own = {("graph",): "graph (the same calls replayed from a CUDA graph)",
               ("device",): "device (one call on the GPU's clock)"}.get(tuple(owns),
                                                                        "the faster of "
                                                                        "graph and device")
        note = (f"overhead: {eager} less {own}, what a call costs beyond the library's own time on "
                "the device; docs/methodology.md says what each timing includes")
        tables.append(_columns(columns, sizes, title, (note,)))
    return tables


#: The most ranks whose matrix a table shows (past it, 80 columns cannot hold it): the files
#: and ``collbench plot`` have it whole.
MATRIX_RANKS = 10


def _figure_text(lmap: link_map.LinkMap, time_us: float) -> str:
    value = link_map.figure(lmap, time_us)
    return format_gbps(value) if lmap.one_way else format_us(value)


def _host_legend(lmap: link_map.LinkMap) -> str:
    by_host: dict = {}
    for rank in lmap.ranks:
        by_host.setdefault(lmap.host(rank), []).append(str(rank))
    return "hosts: " + "; ".join(f"{host}: ranks {','.join(ranks)}"
                                 for host, ranks in by_host.items())


def link_tables(lmap: link_map.LinkMap) -> list:
    """A link map as tables: the matrix (where it fits), then what lies out, with the rule."""
    ranks = lmap.ranks
    flagged = {f.name for f in lmap.findings if f.what == "pair"}
    classes = lmap.classes()
    summary = []
    for kind, pairs in classes.items():
        values = [link_map.figure(lmap, lmap.time(p)) for p in pairs]
        med = float(np.median(values))
        summary.append(f"{kind}: {len(pairs)} pair{'s' * (len(pairs) != 1)}, median "
                       f"{_fmt(lmap, med)} ({_fmt(lmap, min(values))} "
                       f"to {_fmt(lmap, max(values))})")
    notes = tuple(summary) + ((_host_legend(lmap),)
                              if len({lmap.host(r) for r in ranks}) > 1 else ()) \
        + tuple(_budget_notes(list(lmap.rows.values()), lambda r: r.pair))
    tables = []
    if len(ranks) <= MATRIX_RANKS:
        lines = []
        for a in ranks:
            line = [str(a)]
            for b in ranks:
                pair = (a, b) if (a, b) in lmap.rows or lmap.one_way else (min(a, b), max(a, b))
                text = "·" if pair not in lmap.rows else _figure_text(lmap, lmap.time(pair))
                line.append(text + ("!" if "%d-%d" % pair in flagged else ""))
            lines.append(tuple(line))
        tables.append(TableModel(link_map.describe(lmap), ("",) + tuple(str(r) for r in ranks),
                                 tuple(lines),
                                 notes + ("! lies out (below)",) * bool(flagged),
                                 (0,) * (len(ranks) + 1)))
    else:
        drawn = "collbench plot draws it" if len(ranks) <= link_map.MOST_DRAWN_RANKS else \
            f"collbench plot draws maps of up to {link_map.MOST_DRAWN_RANKS} ranks"
        notes += (f"the {len(ranks)}-rank matrix is in the result files; {drawn}",)
        tables.append(TableModel(link_map.describe(lmap), ("",), (), notes, (0,)))
    if lmap.findings:
        cells = tuple((_what(f), f"{f.links_out} of {f.links}" if f.what != "pair" else "-",
                       _fmt(lmap, link_map.figure(lmap, f.time_us)),
                       _fmt(lmap, link_map.figure(lmap, f.reference_us)),
                       _how_far(lmap, f)) for f in lmap.findings)
        tables.append(TableModel(f"lies out · {lmap.first.collective} · "
                                 f"{backend_label(lmap.first)} · "
                                 f"{format_size(lmap.first.size_bytes)}",
                                 ("what", "links out", "figure", "median", "how far"), cells,
                                 ("median: of the comparable links that do not touch it; how far: "
                                  "its figure over the median, and in robust σ; rule: "
                                  f"{link_map.RULE}",), (0,) * 5))
    else:
        tables[-1] = dataclasses.replace(tables[-1], notes=tables[-1].notes + (
            lmap.crowded or f"nothing lies out (rule: {link_map.RULE})",))
    return tables


def _fmt(lmap: link_map.LinkMap, value: float) -> str:
    return (format_gbps(value) if lmap.one_way else format_us(value)) + " " + link_map.unit(lmap)


def _what(f: link_map.Finding) -> str:
    """"host node3, from it", "pair 0-2", "rank 3 (within a host)"."""
    return (f"{f.what} {f.name}" + (f", {f.direction} it" if f.direction else "")
            + (" (within a host)" if f.kind == link_map.SAME_HOST and f.what != "host" else ""))


def _how_far(lmap: link_map.LinkMap, f: link_map.Finding) -> str:
    ratio = f"{1 / f.ratio:.2f}×" if lmap.one_way else f"{f.ratio:.1f}×"
    return ratio + ("" if not math.isfinite(f.sigmas) else f", {f.sigmas:.0f}σ")


def _stacked(label: str) -> str:
    """A backend's label as a column group's header shows it: what sets it apart on a line of its
    own ("mpi-pickle\n(list payload)"), so that several fit side by side."""
    return label.replace(" (", "\n(", 1)


def header_group(header: str) -> tuple:
    """(the column group, what the column is) of a header: ("mpi (mpi buffers)", "p50 µs")."""
    group, _, what = header.rpartition("\n")
    return group.replace("\n", " "), what


def flat_header(header: str) -> str:
    """A column group's header on one line: "mpi p50 µs", "gloo/mpi"."""
    group, what = header_group(header)
    return what if not group else group + ("" if what.startswith("/") else " ") + what


_NUMBER = re.compile(r"[-+±]?[\d.,]+[KMGT]?[%×*‡]*(?:[–…][-+]?[\d.,]+%?[‡*]*)?|-|<0\.0001")


def _numeric(table: TableModel, column: int) -> bool:
    return all(_NUMBER.fullmatch(line[column].strip("*")) for line in table.cells
               if column < len(line))


def _cell(text: str) -> str:
    """A markdown table's cell: a | in a name (a plugin's backend, a label) escaped, not a
    column."""
    return str(text).replace("|", "\\|")


def to_markdown(table: TableModel, level: int = 2, heading: bool = True) -> str:
    """The table under a heading of ``level`` (2: under a document's title; none when not
    ``heading``), its notes after it; text columns left-aligned, numbers right."""
    headers = [_cell(flat_header(h)) for h in table.headers]
    lines = [f"{'#' * level} {table.title}", ""] if heading else []
    lines += ["| " + " | ".join(headers) + " |",
              "|" + "|".join("---:" if i and _numeric(table, i) else "---"
                             for i in range(len(table.headers))) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in line) + " |" for line in table.cells]
    for note in table.notes:
        lines += ["", f"_{note}_"]
    return "\n".join(lines) + "\n"
