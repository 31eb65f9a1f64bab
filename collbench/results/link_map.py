"""The link map of ``collbench pairs``: the hosts, ranks and pairs whose figures lie out.

A map is the rows of one point-to-point measurement (benchmark, backend, dtype, size, timing,
window) that name three pairs or more. Pairs within a host and pairs across hosts are judged
apart, each figure against the median of comparable links, by a robust spread
(``OUT_SIGMAS``) and a ratio (``OUT_RATIO``). Hosts are judged first, then ranks, then single
pairs, each against the links that touch nothing already named, so that a host whose every
link is slow is one finding rather than n − 1 pairs. The rule: docs/point-to-point.md,
"Every pair: collbench pairs".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from collbench.benchmarks.registry import BENCHMARKS
from collbench.measure.sizes import format_size
from collbench.results.rank_view import round_hosts
from collbench.results.records import PER_BACKEND, backend_label

OUT_SIGMAS = 3.5
OUT_RATIO = 1.25
MAD_TO_SIGMA = 1.4826
SAME_HOST, ACROSS_HOSTS = "within a host", "across hosts"
RULE = ("a pair lies out when slower than the median of comparable pairs (same host; across hosts) "
        f"by over {OUT_SIGMAS} robust σ ({MAD_TO_SIGMA} × MAD) and over "
        f"{(OUT_RATIO - 1) * 100:.0f}%; a host or rank with most of its links out is named instead")
MIN_PAIRS = 3


@dataclass(frozen=True)
class Finding:
    """One thing that lies out: a host, a rank or a pair (``what``), its class of links, its
    figure (the median of its links' for a host or rank) and the reference median (µs per
    message), and, for a host or rank, how many of its links lie out."""

    what: str                # "host", "rank" or "pair"
    name: str                # the host's name, "3", or "0-2"
    kind: str                # SAME_HOST or ACROSS_HOSTS
    time_us: float
    reference_us: float
    sigmas: float            # (time - reference) / robust sigma; inf when the reference has no
                             # spread
    links_out: int = 1
    links: int = 1
    direction: str = ""      # for a host or rank of a one-way map: "from" or "to"

    @property
    def ratio(self) -> float:
        return self.time_us / self.reference_us if self.reference_us else math.inf


@dataclass
class LinkMap:
    """One map: its rows by pair (first, second), every rank's host, whether a pair's figure
    has a direction (bandwidth: first → second)."""

    rows: dict
    hosts: list
    one_way: bool
    crowded: str = ""        # why nothing is judged: more ranks on a host than it has CPUs, or too
                             # many ranks
    findings: list = field(default_factory=list)

    @property
    def first(self):
        return next(iter(self.rows.values()))

    @property
    def ranks(self) -> list:
        return sorted({r for pair in self.rows for r in pair})

    def kind(self, pair: tuple) -> str:
        a, b = pair
        return SAME_HOST if self.host(a) == self.host(b) else ACROSS_HOSTS

    def host(self, rank: int) -> str:
        return self.hosts[rank] if rank < len(self.hosts) else "?"

    def time(self, pair: tuple) -> float:
        return self.rows[pair].time_us_p50

    def classes(self) -> dict:
        """kind: the pairs of that kind."""
        out: dict = {}
        for pair in sorted(self.rows):
            out.setdefault(self.kind(pair), []).append(pair)
        return out


def parse_pair(text: str) -> Optional[tuple]:
    try:
        a, b = (int(x) for x in text.split("-"))
        return a, b
    except (ValueError, AttributeError):
        return None


def map_key(row) -> tuple:
    return (row.collective, row.backend, row.dtype, row.op, row.world_size, row.size_bytes,
            row.timing, row.window,
            *(getattr(row, name) for name in PER_BACKEND))      # --buffers numpy,mpi: a map each


def crowding(metadata: dict) -> str:
    """Why a run's pairs cannot be judged, or "": more ranks on a host than it has CPUs. The
    pairs measuring at once and the waiting ranks (MPICH's poll) then take turns on the cores,
    and which pair waits is chance: on 2 cores, 4 ranks in 2 pairs gave one pair 1.6 µs and the
    other 8 µs, each time another."""
    per_node, cpus = metadata.get("ranks_per_node"), metadata.get("cpu_count")
    if isinstance(per_node, int) and isinstance(cpus, int) and 0 < cpus < per_node:
        return (f"{per_node} ranks share a host with {cpus} CPUs: pairs at once and waiting ranks "
                "take turns on the cores, so nothing is judged; give every rank a core (or fewer "
                "ranks)")
    return ""


@dataclass(frozen=True)
class Placement:
    """Where a run's ranks ran, as a map needs it: every rank's host (None: unknown), and why
    nothing can be judged ("" when it can: ``crowding``)."""

    hosts: Optional[list] = None
    crowded: str = ""


def placement(metadata: dict) -> Placement:
    hosts = round_hosts(metadata)[1]
    return Placement(list(hosts) if hosts else None, crowding(metadata))


#: The most ranks of a map ``collbench plot`` draws as a heat map: a panel is at most 12 inches
#: (1,440 pixels) wide, so that beyond this its cells and labels would be under 5 pixels, and
#: drawing takes time and memory growing as the square of the ranks (2,000 ranks: 27 s, 680 MB).
MOST_DRAWN_RANKS = 256
#: A map of more ranks is not judged: judging takes a time that grows as the cube of its ranks
#: (each host and rank against the links that touch neither), 16 s for 512 ranks on a 2-core VM.
MOST_JUDGED_RANKS = 1024


def groups(rows) -> list:
    """The rows that form link maps, a list per map: rows of a paired benchmark with a time,
    sharing a map key, naming three pairs or more."""
    found: dict = {}
    for row in rows:
        bench = BENCHMARKS.get(row.collective)
        if bench is not None and bench.paired and parse_pair(row.pair) is not None and \
                math.isfinite(row.time_us_p50) and row.time_us_p50 > 0:
            found.setdefault(map_key(row), []).append(row)
    return [members for members in found.values()
            if len({parse_pair(r.pair) for r in members}) >= MIN_PAIRS]


def ranks_of(members) -> set:
    """The ranks the pairs of a map's rows name."""
    return {rank for r in members for rank in parse_pair(r.pair)}


def split(rows: list, where: Placement = Placement()) -> tuple[list, list]:
    """(link maps, the other rows): ``groups`` of rows form maps, judged unless ``where`` says
    they cannot be or they have more than MOST_JUDGED_RANKS ranks."""
    hosts, crowded = where.hosts, where.crowded
    maps, used = [], set()
    for members in groups(rows):
        by_pair = {parse_pair(r.pair): r for r in members}
        n = members[0].world_size
        # unknown: "?" (``LinkMap.host``)
        known = list(hosts) if hosts and len(hosts) == n else []
        one_way = BENCHMARKS[members[0].collective].directed
        ranks = len(ranks_of(members))
        unjudged = crowded or (f"not judged: {ranks:,} ranks, more than the {MOST_JUDGED_RANKS:,} "
                               "collbench judges"
                               if ranks > MOST_JUDGED_RANKS else "")
        lmap = LinkMap(by_pair, known, one_way, unjudged)
        lmap.findings = [] if unjudged else judge(lmap)
        maps.append(lmap)
        used.update(id(r) for r in members)
    return maps, [r for r in rows if id(r) not in used]


def _stats(values: list) -> tuple[float, float]:
    """(median, robust sigma) of ``values``."""
    arr = np.asarray(values, dtype=float)
    med = float(np.median(arr))
    return med, MAD_TO_SIGMA * float(np.median(np.abs(arr - med)))


def lies_out(value: float, reference: tuple) -> tuple[bool, float, float]:
    """(whether ``value`` lies out against a reference, its median, sigmas); ``reference``: the
    (median, robust sigma) of its figures, ``_stats``, taken once for every value judged
    against it (a map of n ranks judges each of its n² links against one reference)."""
    med, sigma = reference
    over = value - med
    sigmas = over / sigma if sigma > 0 else (math.inf if over > 0 else 0.0)
    return (over > OUT_SIGMAS * sigma and value > OUT_RATIO * med), med, sigmas


def _entity_findings(lmap: LinkMap, what: str, members: dict, pairs_of_kind: dict,
                     excluded) -> list:
    """Hosts or ranks (``members``: name → ranks) whose links of a kind lie out in majority,
    each against the links of that kind that touch neither it nor anything already named. In a
    one-way map its outgoing and incoming links are judged apart (a link can be slow one way);
    both out make one finding over all its links."""
    found = []
    for kind, pairs in pairs_of_kind.items():
        pairs = [p for p in pairs if not excluded(p)]
        for name, ranks in members.items():
            others = [p for p in pairs if p[0] not in ranks and p[1] not in ranks]
            if not others:
                continue
            reference = _stats([lmap.time(p) for p in others])
            sides = {"from": [p for p in pairs if p[0] in ranks],
                     "to": [p for p in pairs if p[1] in ranks]} \
                if lmap.one_way else {"": [p for p in pairs if p[0] in ranks or p[1] in ranks]}
            out_sides = {}
            for direction, mine in sides.items():
                out = [p for p in mine if lies_out(lmap.time(p), reference)[0]]
                if len(mine) >= 2 and len(out) * 2 > len(mine):
                    out_sides[direction] = (mine, out)
            if not out_sides:
                continue
            direction = next(iter(out_sides)) if len(out_sides) == 1 else ""
            mine = [p for m, _ in out_sides.values() for p in m]
            out = [p for _, o in out_sides.values() for p in o]
            value = float(np.median([lmap.time(p) for p in mine]))
            _, med, sigmas = lies_out(value, reference)
            found.append(Finding(what, name, kind, value, med, sigmas, len(out), len(mine),
                                 direction))
    return found


def judge(lmap: LinkMap) -> list:
    """The findings of a map: hosts, then ranks, then pairs (see the module's text)."""
    classes = lmap.classes()
    hosts: dict = {}
    for rank in lmap.ranks:
        hosts.setdefault(lmap.host(rank), set()).add(rank)
    findings: list = []
    named: set = set()

    def excluded(pair) -> bool:
        return pair[0] in named or pair[1] in named

    if len(hosts) >= 3 or (len(hosts) == 2 and SAME_HOST in classes):
        for f in _entity_findings(lmap, "host", {h: r for h, r in hosts.items()}, classes,
                                  excluded):
            findings.append(f)
            named.update(hosts[f.name])
    singles = {str(r): {r} for r in lmap.ranks
               if r not in named and len(hosts.get(lmap.host(r), ())) > 1}
    if len(singles) >= 3:
        for f in _entity_findings(lmap, "rank", singles, classes, excluded):
            findings.append(f)
            named.update(singles[f.name])
    for kind, pairs in classes.items():
        rest = [p for p in pairs if not excluded(p)]
        if len(rest) < MIN_PAIRS:
            continue
        reference = _stats([lmap.time(p) for p in rest])
        for pair in rest:
            out, med, sigmas = lies_out(lmap.time(pair), reference)
            if out:
                findings.append(Finding("pair", "%d-%d" % pair, kind, lmap.time(pair), med, sigmas))
    return findings


def figure(lmap: LinkMap, time_us: float) -> float:
    """What the map shows for a time per message: µs, or GB/s for a one-way map."""
    if not lmap.one_way:
        return time_us
    return lmap.first.size_bytes / time_us / 1e3 if time_us else math.nan


def unit(lmap: LinkMap) -> str:
    return "GB/s" if lmap.one_way else "µs"


def describe(lmap: LinkMap) -> str:
    row = lmap.first
    at_once = max(r.pairs_at_once for r in lmap.rows.values())
    hosts = len({lmap.host(r) for r in lmap.ranks})
    metric = "GB/s row→column" if lmap.one_way else "µs"
    return (f"pairs · {row.collective} · {backend_label(row)} · {format_size(row.size_bytes)} · "
            f"{metric} · {len(lmap.ranks)} ranks, {hosts} host{'s' * (hosts != 1)} · "
            f"{'1 pair at a time' if at_once == 1 else f'≤{at_once} at once'}")
