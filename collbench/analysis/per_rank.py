"""``collbench report --per-rank``: per size, the slowest rank and its host, its time against the
median rank and the outlier ranks; then per host, how its ranks compare, so that a bad node
stands out from the rows at once instead of by bisecting nodes by hand.

The statistics are ``collbench.results.rank_view``'s. They need each round's per-rank times, which
only the JSON file holds. Several files merge as in ``report``; runs of one setup are shown one
after the other (``report.per_rank_view``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median

from collbench.benchmarks import patterns
from collbench.benchmarks.base import Roles
from collbench.benchmarks.registry import BENCHMARKS, COLLECTIVES
from collbench.errors import UsageError
from collbench.measure.sizes import format_size
from collbench.results.rank_view import K_SPREADS, MARGIN, label, root_of, round_hosts, row_views
from collbench.results.records import backend_label
from collbench.render.tables import TableModel, format_gbps, format_us, rank_count_text



def _listed(names: list) -> str:
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


# bcast, reduce, gather and scatter
_ROOTED = _listed([name for name, c in COLLECTIVES.items() if c.rooted])
_PAIRED = _listed([name for name, c in BENCHMARKS.items() if c.paired])      # pingpong, bw and bibw
_PATTERNED = _listed([name for name, c in BENCHMARKS.items() if c.patterned])      # alltoallv
_SAME_WORK = ", ".join(name for name, c in BENCHMARKS.items() if c.same_work)

RULE_NOTES = (
    "slowest: the rank with the highest mean time per call against the median rank of its round "
    f"(median over rounds), the one the collective ends on; the root of {_ROOTED} is left out, its "
    "part differs by design",
    f"outliers: a rank beyond the median rank by more than {K_SPREADS:g} robust spreads (1.4826 × "
    f"the median absolute deviation) and by more than {MARGIN:.0%}, in more than half of the "
    "rounds",
    "a rank late into a call delays every rank as much: it makes every rank slower, not one; this "
    "view finds ranks that end late (slow to unpack, reduce or receive)",
)
NOT_JUDGED_NOTE = (f"-: outliers not judged: the root and the tree positions of {_ROOTED}, the two "
                   f"sides of {_PAIRED} (the others wait), and the ranks of {_PATTERNED} (as many "
                   "bytes as its pattern gives each) do different work, and with fewer than 3 "
                   "ranks compared neither is an outlier of the other")
HOST_NOTES = (
    f"per host: every round of the rows where every rank does the same work ({_SAME_WORK}), with "
    "the hosts as that round placed the ranks; median ×: its ranks' times against the median rank "
    "of their round; slowest in: rounds whose slowest rank ran there; expected: the rounds its "
    "share of the ranks would give it; outlier in: rounds with a rank there beyond the outlier "
    "rule in that round (3+ ranks). A bad node holds the slowest rank far more often than "
    "expected, in every collective",
)


def per_rank_rows(loaded) -> list:
    """[(Row, RankView)] of the files ``loaded`` ([(name, RunResult)]), merged by row key."""
    merged: dict = {}
    for name, result in loaded:
        if result.metadata.get("format") == "csv":
            raise UsageError(f"{name}: a CSV holds no per-rank times; report --per-rank needs the "
                             "JSON file")
        for row, view in zip(result.rows, row_views(result, keep_slots=True)):
            merged[row.key()] = (row, view)
    return list(merged.values())


def _times(rel: float) -> str:
    return f"{rel:.2f}×" if math.isfinite(rel) else "-"


def _outliers(view) -> str:
    if view.outliers is None:
        return "-"
    return ", ".join(f"{label(o.rank, o.host)} {_times(o.rel)}" for o in view.outliers) or "none"


def _title(row) -> str:
    op = "" if row.op == "none" else f" {row.op}"
    spread = f" · pattern {row.pattern}" if row.pattern else ""
    return (f"{row.collective} · {row.dtype}{op} · {rank_count_text(row.world_size)} · "
            f"{row.timing}{spread} · per rank")


def size_tables(entries) -> list:
    """One table per (collective, dtype, op, timing, world size, pattern): per backend and size,
    the slowest rank@host, its time, the median rank's, their ratio and the outliers."""
    groups: dict = {}
    for row, view in entries:
        groups.setdefault((row.collective, row.dtype, row.op, row.timing, row.world_size,
                           row.pattern),
                          []).append((row, view))
    headers = ("backend", "size", "rounds", "slowest rank", "its µs", "median rank µs", "× median",
               "outliers")
    tables = []
    for group in groups.values():
        cells = tuple((backend_label(row), format_size(row.size_bytes) if row.size_bytes else "-",
                       str(row.rounds),
                       "-" if view.slowest_rank is None
                       else label(view.slowest_rank, view.slowest_host),
                       format_us(view.slowest_us), format_us(view.median_us),
                       _times(view.slowest_rel), _outliers(view))
                      for row, view in group)
        notes = (NOT_JUDGED_NOTE,) if any(v.outliers is None and v.slowest_rank is not None
                                          for _, v in group) else ()
        tables.append(TableModel(_title(group[0][0]), headers, cells, notes,
                                 (0, 0, 5, 0, 3, 3, 1, 2)))
    return tables


def _rank_ranges(ranks) -> str:
    """0-3,6: sorted ranks, runs collapsed; as launch.liveness.coordinator.rank_ranges (analysis
    may not import launch)."""
    runs: list = []
    for r in sorted(ranks):
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


@dataclass
class _Host:
    by_rank: dict = field(default_factory=dict)     # rank -> its relative times, every row and
                                                    # round
    slowest: int = 0                                # rounds whose slowest rank ran here
    share: float = 0.0                              # rounds its share of the ranks would give it
    flagged: int = 0                                # judged rounds with an outlier here

    def rels(self) -> list:
        return [rel for rels in self.by_rank.values() for rel in rels]


def host_table(entries) -> TableModel:
    """Per host, over every round of the rows where every rank does the same work, with the
    hosts as each round placed the ranks: its ranks' median relative time, the rounds whose
    slowest rank ran there (and the rounds its share of the ranks would give it), the judged
    rounds with an outlier there, and its slowest rank. Worst host first."""
    hosts: dict = {}
    rounds = judged = 0
    for _, view in entries:
        if not view.same_work:
            continue
        for one in view.per_round:
            rounds += 1
            judged += one.judged
            for rank, host, rel in one.peers:
                entry = hosts.setdefault(host or "?", _Host())
                entry.by_rank.setdefault(rank, []).append(rel)
                entry.share += 1 / len(one.peers)
            hosts.setdefault(one.slowest_host or "?", _Host()).slowest += 1
            for host in set(one.flagged_hosts):
                hosts.setdefault(host or "?", _Host()).flagged += 1
    lines = []
    for name, h in hosts.items():
        center = median(h.rels()) if h.by_rank else math.nan
        worst = max(sorted(h.by_rank), key=lambda r: median(h.by_rank[r])) if h.by_rank else None
        lines.append((-center if math.isfinite(center) else math.inf, (
            name, _rank_ranges(h.by_rank) if h.by_rank else "-", _times(center),
            f"{h.slowest} of {rounds}",
            f"{h.share:.1f}", f"{h.flagged} of {judged}",
            "-" if worst is None else f"{worst} ({_times(median(h.by_rank[worst]))})")))
    lines.sort(key=lambda line: line[0])
    headers = ("host", "ranks", "median ×", "slowest in", "expected", "outlier in",
               "its slowest rank")
    return TableModel("per host", headers, tuple(line[1] for line in lines),
                      HOST_NOTES + RULE_NOTES, (0, 3, 0, 1, 2, 1, 2))


#: the most ranks whose bytes the view lists, a line each
MAX_BYTES_RANKS = 64
BYTES_NOTES = (
    "sent, received: what each rank's call sends and receives at the largest size of its row, as "
    "its pattern spreads the bytes; its µs: its mean time per call (median over rounds); GB/s: its "
    "heavier side's bytes over that time",
)


def _amount(n: float) -> str:
    """Bytes, short: 512, 1.5K, 12.3M."""
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}".replace(".0" + suffix, suffix)
    return f"{n:.0f}"


def bytes_tables(loaded) -> list:
    """For each row a pattern spreads (alltoallv, the v-collectives), at the largest size of its
    backend: each rank's bytes sent and received, its time and its bandwidth."""
    largest: dict = {}
    for _, result in loaded:
        by_round, default = round_hosts(result.metadata)
        root = root_of(result.metadata)
        for row, rounds in zip(result.rows, result.rounds):
            bench = BENCHMARKS.get(row.collective)
            if bench is None or not bench.patterned or not row.pattern or not row.count:
                continue
            key = (row.collective, row.dtype, row.op, row.timing, row.world_size, row.pattern,
                   backend_label(row))
            if key not in largest or row.size_bytes > largest[key][0].size_bytes:
                largest[key] = (row, rounds, [by_round.get(d.round, default) for d in rounds], root)
    return [_bytes_table(*entry) for entry in largest.values()]


def _unlisted(row, n: int) -> str:
    """Why a row's ranks are not listed ("" where they are): the first reason that holds."""
    if n > MAX_BYTES_RANKS:
        return f"{n} ranks: listed up to {MAX_BYTES_RANKS}"
    if n != row.world_size:
        return "the ranks of split groups are not listed"
    if not patterns.known(row.pattern):
        return ("its matrix is not in the file (a file keeps one of up to "
                f"{patterns.MAX_KEPT_RANKS} ranks)")
    if patterns.problem(row.pattern, n):
        return f"its pattern does not spread {n} ranks"
    return ""


def _bytes_table(row, rounds, hosts, root) -> TableModel:
    n, itemsize = row.group_size or row.world_size, row.size_bytes // row.count
    title = (f"{row.collective} · {row.dtype} · {rank_count_text(n)} · pattern {row.pattern} · "
             f"{backend_label(row)} · bytes per rank at {format_size(row.size_bytes)}")
    headers = ("rank", "sent", "received", "its µs", "GB/s")
    why = _unlisted(row, n)
    if why:
        return TableModel(title, headers, (), (f"not listed: {why}",))
    spread = BENCHMARKS[row.collective].rank_elements(row.count, n,
                                                      Roles(root=root, pattern=row.pattern))
    cells = []
    for rank, (sent, received) in enumerate(spread):
        times = [d.rank_means_us[rank] for d in rounds
                 if d.rank_means_us and len(d.rank_means_us) == n
                 and d.rank_means_us[rank] is not None and math.isfinite(d.rank_means_us[rank])]
        us = median(times) if times else math.nan
        heavier = max(sent, received) * itemsize
        gbps = heavier / (us * 1e3) if us > 0 else math.nan
        where = next((names[rank] for names in hosts if names is not None and len(names) == n),
                     None)
        cells.append((label(rank, where), _amount(sent * itemsize), _amount(received * itemsize),
                      format_us(us), format_gbps(gbps)))
    return TableModel(title, headers, tuple(cells), BYTES_NOTES, (0, 0, 0, 1, 0))


def per_rank_tables(loaded) -> list:
    entries = per_rank_rows(loaded)
    return size_tables(entries) + bytes_tables(loaded) + [host_table(entries)]

