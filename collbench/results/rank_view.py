"""Per-rank view of a row: the rank a collective waits on, and ranks that stand out.

With a barrier before each timed call, the rank with the highest mean time is the one the
collective ends on, so each round's per-rank means name the slowest rank and any outliers; a
rank that is late into a call delays every rank alike and does not show. Pure functions: the
exporters put the view in every row, and ``collbench report --per-rank`` draws its tables from
it. The rules (``K_SPREADS``, ``MARGIN``): docs/results-format.md, "Per-rank fields".
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from statistics import median
from typing import NamedTuple, Optional, Sequence

from collbench.benchmarks.registry import BENCHMARKS

K_SPREADS = 3.5        # Iglewicz and Hoaglin's cut-off for the modified z-score
MARGIN = 0.25          # and at least 25% slower than the median rank: tiny spreads flag nothing
# a normal distribution's standard deviation, from its median absolute deviation
MAD_SCALE = 1.4826
MIN_PEERS = 3

#: The per-rank fields of a row, in file order (JSON rows and CSV columns).
RANK_FIELDS = ("slowest_rank", "slowest_rank_host", "slowest_rank_us", "slowest_rank_rel",
               "outlier_ranks")


@dataclass(frozen=True)
class Outlier:
    rank: int
    host: Optional[str]      # its host(s) in the rounds that flagged it, joined by ","
    rel: float               # its combined relative time
    rounds_flagged: int


@dataclass(frozen=True)
class RoundRanks:
    """One round of a row, for the per-host summary: hosts as that round placed the ranks."""

    peers: tuple                  # (rank, host, relative time) of every peer
    slowest_host: Optional[str]   # the host of this round's slowest peer
    flagged_hosts: tuple          # the hosts of this round's outliers
    judged: bool                  # whether outliers were judged in this round


@dataclass(frozen=True)
class RankView:
    """One row's per-rank view; empty (``slowest_rank`` None) without per-rank times."""

    slowest_rank: Optional[int] = None
    slowest_host: Optional[str] = None
    slowest_us: float = math.nan          # its mean time per call, median over rounds
    slowest_rel: float = math.nan         # its relative time
    median_us: float = math.nan           # the median peer's mean, median over rounds
    same_work: bool = False               # every peer does the same work (no root, no tree
                                          # positions)
    outliers: Optional[tuple] = None      # Outlier per outlier rank, slowest first; None: not
                                          # judged
    per_round: tuple = ()                 # RoundRanks per round, for the per-host summary only
                                          # (``keep_slots``)


def outliers_of(means: dict) -> set:
    """The ranks of ``means`` (rank -> mean time of one round) that are outliers in that round."""
    if len(means) < MIN_PEERS:
        return set()
    center = median(means.values())
    spread = MAD_SCALE * median(abs(m - center) for m in means.values())
    return {rank for rank, m in means.items()
            if m - center > K_SPREADS * spread and m > center * (1.0 + MARGIN)}


def _hosts(names: list) -> Optional[str]:
    """The distinct hosts of ``names``, most frequent first, or None when none is known."""
    known = Counter(n for n in names if n is not None)
    return ",".join(name for name, _ in known.most_common()) or None


def rank_view(rounds: Sequence, hosts: Sequence, *, collective: str, root: int = 0,
              keep_slots: bool = False) -> RankView:
    """The view of one row from its rounds (``RoundData``) and each round's rank -> host list
    (``hosts[i]`` for ``rounds[i]``; None or a list of another length: hosts unknown)."""
    known = BENCHMARKS.get(collective)
    rooted = known is not None and known.rooted
    same_work = known is not None and known.same_work     # a benchmark unknown here: not judged
    rels: dict = {}
    times: dict = {}
    placed: dict = {}
    flagged: Counter = Counter()
    flagged_on: dict = {}
    centers, per_round, judged = [], [], 0
    for data, names in zip(rounds, hosts):
        means = data.rank_means_us or ()
        peers = {r: m for r, m in enumerate(means)
                 if m is not None and math.isfinite(m) and not (rooted and r == root)}
        center = median(peers.values()) if peers else 0.0
        if not center > 0:
            continue
        names = names if names is not None and len(names) == len(means) else [None] * len(means)
        centers.append(center)
        for r, m in peers.items():
            rels.setdefault(r, []).append(m / center)
            times.setdefault(r, []).append(m)
            placed.setdefault(r, []).append(names[r])
        here = outliers_of(peers) if same_work and len(peers) >= MIN_PEERS else None
        if here is not None:
            judged += 1
            for r in here:
                flagged[r] += 1
                flagged_on.setdefault(r, []).append(names[r])
        if keep_slots:
            top = max(sorted(peers), key=lambda r: peers[r])
            per_round.append(RoundRanks(tuple((r, names[r], m / center) for r, m in peers.items()),
                                        names[top],
                                        tuple(names[r] for r in sorted(here or ())),
                                        here is not None))
    if not rels:
        return RankView()
    combined = {r: median(v) for r, v in rels.items()}
    slowest = max(sorted(combined), key=lambda r: combined[r])
    outliers = None
    if judged:
        outliers = tuple(sorted((Outlier(r, _hosts(flagged_on[r]), combined[r], n)
                                 for r, n in flagged.items() if 2 * n > judged),
                                key=lambda o: (-o.rel, o.rank)))
    return RankView(slowest, _hosts(placed[slowest]), median(times[slowest]), combined[slowest],
                    median(centers), same_work, outliers, tuple(per_round))


def round_hosts(metadata: dict) -> tuple:
    """(round number -> rank -> host list, the run's own list for rounds that lack one) from a
    file's metadata, every list a tuple of strings (anything else: unknown)."""
    def names(value):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return tuple(value) if ok else None

    by_round = {}
    records = metadata.get("rounds")
    for record in records if isinstance(records, list) else ():
        if (isinstance(record, dict) and isinstance(record.get("round"), int)
                and names(record.get("rank_hosts"))):
            by_round[record["round"]] = names(record["rank_hosts"])
    return by_round, names(metadata.get("rank_hosts"))


def root_of(metadata: dict) -> int:
    settings = metadata.get("settings")
    root = settings.get("root") if isinstance(settings, dict) else None
    return root if isinstance(root, int) and not isinstance(root, bool) else 0


class _HostsMemo(NamedTuple):
    stamp: tuple       # (rounds in the metadata, identity of its rank_hosts) when ``hosts`` was
                       # read
    hosts: tuple       # round_hosts(metadata)


class _ViewMemo(NamedTuple):
    """A row's view, kept while its rounds, their hosts and the root stay the same."""

    rounds: tuple
    hosts: tuple
    root: int
    view: RankView


def row_views(result, *, keep_slots: bool = False) -> list:
    """A RankView per row of ``result`` (a RunResult). Views are kept in ``result.cache`` while a
    row's rounds and their hosts stay the same objects, so a file rewritten after every size
    recomputes only the row that changed; views with their rounds' ranks (a tuple per rank and
    round, too many to keep for a large run) are computed afresh."""
    rounds_meta = result.metadata.get("rounds")
    stamp = (len(rounds_meta) if isinstance(rounds_meta, list) else 0,
             id(result.metadata.get("rank_hosts")))
    hosts_memo = result.cache.get("round_hosts")
    if hosts_memo is None or hosts_memo.stamp != stamp:      # rounds only ever get appended
        hosts_memo = result.cache["round_hosts"] = _HostsMemo(stamp, round_hosts(result.metadata))
    by_round, default = hosts_memo.hosts
    root = root_of(result.metadata)
    memo = {} if keep_slots else result.cache.setdefault("rank_views", {})
    views = []
    for row, rounds in zip(result.rows, result.rounds):
        hosts = tuple(by_round.get(d.round, default) for d in rounds)
        cached = memo.get(row.key())
        if (cached is None or cached.rounds != rounds or cached.hosts != hosts
                or cached.root != root):
            cached = memo[row.key()] = _ViewMemo(rounds, hosts, root, rank_view(
                rounds, hosts, collective=row.collective, root=root, keep_slots=keep_slots))
        views.append(cached.view)
    return views


def _number(value: float, digits: int):
    return None if value is None or not math.isfinite(value) else round(value, digits)


def json_fields(view: RankView) -> dict:
    """The row's per-rank fields as the JSON file holds them."""
    outliers = None if view.outliers is None else [
        {"rank": o.rank, "host": o.host, "rel": _number(o.rel, 3),
         "rounds_flagged": o.rounds_flagged}
        for o in view.outliers]
    return {"slowest_rank": view.slowest_rank, "slowest_rank_host": view.slowest_host,
            "slowest_rank_us": _number(view.slowest_us, 4),
            "slowest_rank_rel": _number(view.slowest_rel, 3), "outlier_ranks": outliers}


def label(rank: int, host: Optional[str]) -> str:
    """rank@host, as the report and the CSV name a rank."""
    return f"{rank}@{host}" if host else str(rank)


def csv_fields(view: RankView) -> dict:
    """The same fields for one CSV line: the outliers as one cell of space-separated rank@host."""
    fields = json_fields(view)
    fields["outlier_ranks"] = " ".join(label(o.rank, o.host) for o in view.outliers or ())
    return fields
