"""Compare two runs row by row on their rounds: change, confidence interval, verdict.

This module matches the rows of two files (on MATCH_FIELDS), gathers each one's evidence from
the two files (``analysis.runs``) and lays the verdicts out with the gate's answer; nothing here
prints (``compare_render`` does). Each row's verdict is worked out in ``stats.verdict``, its terms
and every constant that sets them in ``stats.calibration``. The rules, for users, are in
docs/compare.md: the round is the unit of inference, a side's busy rounds and slow runs are set
aside by fixed rules, the rows share one family (max-T), and a baseline row the new run lacks or
cannot judge fails the gate unless allowed.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass
from typing import Optional

import numpy as np

from collbench.analysis.comparability import comparability_warnings
from collbench.errors import UsageError, printable
from collbench.measure.sizes import DECIMAL_NUMBER
from collbench.results.aggregate import noise_stratum
from collbench.results.records import ASSUMED_SETUP, MATCH_FIELDS, Row, RunResult, backend_label
from collbench.analysis.runs import FileRounds, ab_job, ab_turns, round_warnings
from collbench.stats.calibration import (ASSUMED_LOG_SD, CONFIDENCE, DEFAULT_ALPHA,
                                         DEFAULT_MIN_DECIDED, DEFAULT_THRESHOLD, MIN_CLEAN_SD)
from collbench.stats.change import pairs_kept
from collbench.stats.holds import explained_by, starvation, state_reach
from collbench.stats.verdict import STARVED_WHY, STATE_WHY, Evidence, judge

METRICS = {"time_us_p50": True, "busbw_gbps": False}   # metric -> lower is better
VERDICTS = ("slower", "faster", "same", "inconclusive", "new", "missing", "unmeasured",
            "insufficient data")
#: Rows of the baseline the new run cannot be judged on: they fail the gate unless allowed.
UNJUDGED = ("missing", "unmeasured")
#: The exit status of a gate that could not decide enough rows.
UNDECIDED_STATUS = 3
#: The most rows one comparison judges. Its max-T adjustment simulates every row together
#: (``calibration.DRAWS`` draws, in chunks of 2,000): about 100 KB and 2-3 ms per row on the 2-core
#: VM, so 10,000 rows (the most sizes one sweep measures) take 1.3 GB and 17-35 s in all
#: (benchmarks/README.md, "Large result files").
MAX_COMPARED_ROWS = 10_000


@dataclass(frozen=True)
class RowComparison:
    key: tuple                      # values of MATCH_FIELDS
    baseline: Optional[Row]
    new: Optional[Row]
    baseline_value: float           # the metric as each file reports it; nan when absent
    new_value: float
    ratio: float                    # new / baseline of the metric, from the rounds compared
    change_low: float               # 95% CI of the relative change of the metric
    change_high: float
    p_value: Optional[float]        # two-sided, against no change
    p_adjusted: Optional[float]     # max-T adjusted over every row tested
                                    # (stats.family.max_t_adjust)
    rounds_baseline: int            # rounds counted on each side (interference set aside)
    rounds_new: int
    noise: str                      # where the run-to-run spread came from: both, baseline, new,
                                    # assumed
    detectable: float               # change this comparison detects with POWER, rows adjusted
                                    # together
    rounds_needed: Optional[int]    # per side, for the CI to clear the threshold on the estimate's
                                    # side of it
    verdict: str                    # one of VERDICTS
    reason: str = ""                # why a row is inconclusive, or what limited it
    drift_sd: float = math.nan      # the drift of whole runs this row carries (sd of log medians)
    cause: str = ""                 # why it is inconclusive, a key of CAUSES

    @property
    def backend(self) -> str:
        """The backend as its rows are labelled ("mpi (mpi buffers)"); "mpi → gloo" across two."""
        return " → ".join(dict.fromkeys(backend_label(r) for r in (self.baseline, self.new)
                                        if r is not None))

    def field(self, name: str):
        value = self.key[MATCH_FIELDS.index(name)]
        if name in _BACKEND_FIELDS and value == "*":      # matched across two backends (match_key)
            return " → ".join(dict.fromkeys(getattr(r, name) for r in (self.baseline, self.new)
                                            if r is not None))
        return value

    @property
    def change(self) -> float:
        """Relative change of the metric, (new - baseline) / baseline."""
        return self.ratio - 1.0

    @property
    def significant(self) -> bool:
        return self.verdict in ("slower", "faster")


@dataclass(frozen=True)
class Comparison:
    baseline_name: str
    new_name: str
    metric: str
    threshold: float
    alpha: float
    rows: tuple
    warnings: tuple
    tested: int = 0                 # rows with a change estimate (the family adjusted together)
    drift_sd: float = math.nan      # drift of whole runs used, the median over rows (sd of log
                                    # medians)
    drift_source: str = ""          # "assumed" or "measured over N runs"
    allow_missing: bool = False     # rows the new run lacks or cannot measure do not fail the gate
    fail_on_inconclusive: bool = False   # an inconclusive row fails the gate
    min_decided: float = DEFAULT_MIN_DECIDED   # the share of compared rows the gate must decide
    confidence: float = CONFIDENCE  # of each row's CI

    @property
    def ci_label(self) -> str:
        """"95% CI", or the level an A/B job's looks asked for ("98.3% CI")."""
        return f"{self.confidence * 100:.3g}% CI"

    @property
    def lower_is_better(self) -> bool:
        return METRICS[self.metric]

    @property
    def counts(self) -> dict:
        counted = Counter(r.verdict for r in self.rows)
        return {v: counted.get(v, 0) for v in VERDICTS}

    @property
    def regression(self) -> bool:
        return any(r.verdict == "slower" for r in self.rows)

    @property
    def unjudged(self) -> list:
        """Rows of the baseline the new run lacks or has nothing to judge by (UNJUDGED)."""
        return [r for r in self.rows if r.verdict in UNJUDGED]

    @property
    def undecided(self) -> list:
        """The rows this comparison could not decide (inconclusive)."""
        return [r for r in self.rows if r.verdict == "inconclusive"]

    @property
    def passed(self) -> bool:
        """The gate: no row slower, no row unjudged unless ``allow_missing``, and no row
        inconclusive when ``fail_on_inconclusive``."""
        return (not self.regression and (self.allow_missing or not self.unjudged)
                and not (self.fail_on_inconclusive and self.undecided))

    @property
    def compared(self) -> list:
        """The rows both files have with something to judge by (not new, missing or unmeasured)."""
        return [r for r in self.rows if r.verdict not in ("new",) + UNJUDGED]

    @property
    def decided(self) -> int:
        return sum(r.verdict in ("slower", "faster", "same") for r in self.compared)

    @property
    def blind(self) -> bool:
        """Whether the gate would pass without having decided enough of the rows
        (``min_decided``)."""
        compared = len(self.compared)
        return self.passed and compared > 0 and self.decided < self.min_decided * compared - 1e-9

    @property
    def status(self) -> int:
        """The exit status: 0 passed, 1 failed, UNDECIDED_STATUS passed blind."""
        return 1 if not self.passed else UNDECIDED_STATUS if self.blind else 0

    def causes(self) -> dict:
        """Cause -> rows left undecided by it, most first."""
        counted = Counter(r.cause or "rounds" for r in self.compared
                          if r.verdict not in ("slower", "faster", "same"))
        return dict(counted.most_common())

    def detection(self) -> tuple:
        """(detectable changes of the rows the threshold can gate, of the others): what this
        comparison can see, each row's change detected with POWER, rows adjusted together."""
        found = [r.detectable for r in self.rows
                 if r.rounds_baseline and math.isfinite(r.detectable)]
        return [d for d in found if d <= self.threshold], [d for d in found if d > self.threshold]

    @property
    def noise_sources(self) -> tuple:
        return tuple(sorted({r.noise for r in self.rows if r.noise}))

    def too_noisy(self) -> list:
        """Rows that could not be decided and whose spread hides a change of the threshold's
        size."""
        return [r for r in self.rows if r.verdict == "inconclusive" and math.isfinite(r.detectable)
                and r.detectable > self.threshold]


#: The largest --threshold: a change of more than 10x either way is beyond any gate's question.
MAX_THRESHOLD = 10.0


def parse_threshold(text) -> float:
    """``5%`` or ``0.05`` -> 0.05. A bare number of 1 or more is ambiguous and refused."""
    raw = str(text).strip()
    # "٥%", "1_0%": not here
    if not DECIMAL_NUMBER.fullmatch(raw[:-1] if raw.endswith("%") else raw):
        raise UsageError(f"bad --threshold {printable(raw)!r}: expected a percentage like 5% or a "
                         "fraction like 0.05, in the digits 0-9")
    value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"bad --threshold {raw!r}: must be a non-negative percentage like 5%")
    if value > MAX_THRESHOLD:
        raise UsageError(f"bad --threshold {raw!r}: over {MAX_THRESHOLD:.0%} no change could fail "
                         "the gate")
    if value >= 1 and not raw.endswith("%"):
        raise UsageError(f"bad --threshold {raw!r}: ambiguous; write {raw}% or {value / 100:g}")
    return value


def match_key(row: Row, across_backends: bool = False, across_levels: bool = False) -> tuple:
    """The row's values of MATCH_FIELDS; ``across_backends``: the backend and what belongs to it
    (its buffers, its payload) left blank (two files of one backend each, compared with each
    other: collbench ab --a-backend/--b-backend); ``across_levels``: the MPI thread level left
    blank."""
    return tuple("*" if (across_backends and name in _BACKEND_FIELDS)
                 or (across_levels and name == "thread_level")
                 else getattr(row, name) for name in MATCH_FIELDS)


def levels_apart(baseline: RunResult, new: RunResult, across_backends: bool = False) -> tuple:
    """(the baseline's thread levels, the new run's) where some rows of the two would match but
    for their MPI thread level; ((), ()) where none would."""
    keys = {match_key(r, across_backends) for r in new.rows}
    blank = {match_key(r, across_backends, True): r.thread_level for r in new.rows}
    base, other = set(), set()
    for row in baseline.rows:
        loose = match_key(row, across_backends, True)
        if match_key(row, across_backends) not in keys and loose in blank:
            base.add(row.thread_level)
            other.add(blank[loose])
    return tuple(sorted(base)), tuple(sorted(other))


#: what belongs to a backend and not to the measurement: the library's own memory and payloads,
#: how its ranks meet. The api and the placement are what is measured, and always matched: a
#: blocking sweep against a non-blocking one was judged 7.06 µs against 145.7 µs, exit 0.
_BACKEND_FIELDS = ("backend", "buffers", "payload", "init_method")


def _one_backend_each(baseline: RunResult, new: RunResult) -> bool:
    """Each file measured one backend, and not the same one (collbench ab --a-backend/--b-backend):
    their rows are matched across the two."""
    def backends(result: RunResult) -> set:
        return {r.backend for r in result.rows}
    a, b = backends(baseline), backends(new)
    return len(a) == 1 and len(b) == 1 and a != b


def _index(result: RunResult, name: str, across_backends: bool = False,
           across_levels: bool = False) -> dict:
    index = {}
    for i, row in enumerate(result.rows):
        key = match_key(row, across_backends, across_levels)
        if key in index:
            raise UsageError(f"{name}: two rows for {_describe(key)}; compare files of one run "
                             "each")
        index[key] = i
    return index


def _apart(baseline: RunResult, new: RunResult, across_backends: bool) -> str:
    """What keeps two files' rows apart, for the line that says they share none: each matched
    column in which the two sides have no value in common ("; world_size 2 vs 4")."""
    said = []
    for i, name in enumerate(MATCH_FIELDS):
        a = {match_key(r, across_backends)[i] for r in baseline.rows}
        b = {match_key(r, across_backends)[i] for r in new.rows}
        if a and b and not a & b:
            said.append(f"{name} {_values(a)} vs {_values(b)}")
    return "; " + ", ".join(said) if said else ""


def _assumed(baseline: RunResult, new: RunResult, baseline_name: str, new_name: str) -> str:
    """" (assumed for NAME: it predates their record)" where a file's levels were assumed."""
    names = [name for name, result in ((baseline_name, baseline), (new_name, new))
             if ASSUMED_SETUP in result.notes]
    return (f" (assumed for {' and '.join(names)}: written before levels were recorded)"
            if names else "")


def _values(values: set) -> str:
    shown = sorted(map(str, values))
    return printable(",".join(shown[:4]) + (",…" if len(shown) > 4 else ""))


def _describe(key: tuple) -> str:
    return " ".join(f"{name}={value}" for name, value in zip(MATCH_FIELDS, key))


def _metric(row: Optional[Row], metric: str) -> float:
    if row is None:
        return math.nan
    value = float(getattr(row, metric))
    return value if math.isfinite(value) and value > 0 else math.nan


def _lacks(row: Row, side, metric: str) -> str:
    """What the row lacks for a comparison on ``metric``: "" when it has a value and a counted
    round median (``side``: its runs.SideRounds)."""
    if not math.isfinite(_metric(row, metric)):
        return f"no {metric}"
    return "" if side.runs else "no round median"


def _starved_warnings(pending: list, decided: dict, names: tuple) -> list:
    """One line per side whose starved ranks kept rows from being called: the table's ``why``
    column says it per row, but a terminal of 80 columns does not show it."""
    kept: dict = {}
    for p in pending:
        if p.starved and STARVED_WHY in decided[p.key].reason:
            kept.setdefault(p.starved[0], []).append(p.starved)
    return [f"{names[side]}: on a busy machine its ranks got clearly less of their cores than "
            f"{names[1 - side]}'s (starved); {len(rows)} row(s) "
            f"{'slower' if side == 1 else 'faster'} by no more than the CPU they lacked can "
            f"explain (up to {explained_by(min(rows, key=lambda s: s[1]))}) are inconclusive: "
            "measure again on a quiet machine, or both sides in one job (collbench ab)"
            for side, rows in sorted(kept.items())]


def _shared_runner(files: tuple, names: tuple) -> list:
    """Where two runs made at different times met a busy machine in most of their rounds: the
    case where a stored baseline decides little, said once (each file's busy rounds are said
    on their own line)."""
    shares = [len(f.busy) / max(1, len(f.result.metadata.get("rounds") or [])) for f in files]
    if max(shares) < 0.5:
        return []
    return [f"{names[0]} and {names[1]} were measured at different times, "
            f"{' and '.join(f'{s:.0%}' for s in shares)} of their rounds on a busy machine: a "
            "shared runner, where a stored baseline decides little; measure both versions in one "
            "job (collbench ab)"]


def _state_warnings(pending: list, decided: dict, names: tuple) -> list:
    """One line per direction of the rows that the other side's own slow rounds kept from a
    verdict (``state_reach``): the ``why`` column is not shown at 80 columns."""
    held = Counter(p.change.estimate > 0 for p in pending if STATE_WHY in decided[p.key].reason)
    return [f"{held[slower]} row(s) {'slower' if slower else 'faster'} in "
            f"{names[1] if slower else names[0]} are inconclusive: "
            f"{names[0] if slower else names[1]}'s own rounds ran as slow, set aside as "
            "interference (a state of the machine that can last a run); measure both sides in one "
            "job (collbench ab)"
            for slower in (True, False) if held[slower]]


def compare_runs(baseline: RunResult, new: RunResult, *, metric: str = "time_us_p50",
                 threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA,
                 baseline_name: str = "baseline", new_name: str = "new",
                 assumed_log_sd: float = ASSUMED_LOG_SD, allow_missing: bool = False,
                 fail_on_inconclusive: bool = False, across_levels: bool = False,
                 min_decided: float = DEFAULT_MIN_DECIDED,
                 confidence: float = CONFIDENCE) -> Comparison:
    """Match the rows of two runs and give each a verdict; UsageError when nothing matches, or
    when more than MAX_COMPARED_ROWS do. ``allow_missing``: rows the new run lacks or cannot
    measure do not fail the gate (``Comparison.passed``); ``fail_on_inconclusive``: rows it
    cannot decide do; with fewer than ``min_decided`` of the compared rows decided, a gate that
    would pass is UNDECIDED (``Comparison.status``). Rows that differ only in their MPI thread
    level are refused (UsageError) unless ``across_levels``: the level alone moves MPICH's
    times 2-3x. ``confidence``: of each row's CI (an A/B job judged at several looks asks more
    of each)."""
    if metric not in METRICS:
        raise UsageError(f"unknown metric {metric!r}: use one of {', '.join(METRICS)}")
    names = (baseline_name, new_name)
    match = _match(baseline, new, names, across_levels)
    # The two sides of one interleaved job (collbench ab) took turns on the machine over the same
    # minutes: whatever moved it moved both alike, so neither drift nor busy shifts enter.
    one_job = bool(ab_job(baseline)) and ab_job(baseline) == ab_job(new)
    # and took turns size by size
    by_size = one_job and ab_turns(baseline) == ab_turns(new) == "size"
    found = _gather(baseline, new, match, metric, names, one_job, alpha, by_size)
    judged = judge(found.pending, one_job=one_job, threshold=threshold, alpha=alpha,
                   assumed_log_sd=assumed_log_sd, confidence=confidence)
    pending = judged.evidence
    by_key = {p.key: RowComparison(p.key, p.base, p.new, p.base_value, p.new_value,
                                   *dataclasses.astuple(judged.verdicts[p.key])) for p in pending}
    rows = _all_rows(baseline, new, match, metric, new_name, by_key, found.unmeasured)
    warnings = _warnings(baseline, new, match, names, found, pending, by_key, one_job,
                         assumed_log_sd)
    drifts = [p.drift_sd for p in pending if p.change is not None]
    return Comparison(baseline_name, new_name, metric, threshold, alpha, tuple(rows),
                      tuple(warnings), judged.tested,
                      float(np.median(drifts)) if drifts else math.nan, judged.drift_source,
                      allow_missing, fail_on_inconclusive, min_decided, confidence)


@dataclasses.dataclass(frozen=True)
class _Match:
    """How two runs' rows pair up: across two backends, across thread levels (``levels``: each
    side's), each side's index by key, and the keys both hold."""
    across: bool
    levels: tuple
    base_index: dict
    new_index: dict
    common: list


def _match(baseline: RunResult, new: RunResult, names: tuple, across_levels: bool) -> _Match:
    """The rows both runs hold, keyed alike; UsageError where none, too many, or only across
    thread levels without ``across_levels``."""
    baseline_name, new_name = names
    across = _one_backend_each(baseline, new)
    levels = levels_apart(baseline, new, across)
    if levels[0] and not across_levels:
        raise UsageError(f"{baseline_name} ran MPI at thread level {'/'.join(levels[0])} and "
                         f"{new_name} at {'/'.join(levels[1])}"
                         f"{_assumed(baseline, new, baseline_name, new_name)}: "
                         "the level alone moves MPI's times 2-3x, so no verdict is called across "
                         "levels; --across-levels compares them anyway")
    base_index = _index(baseline, baseline_name, across, bool(levels[0]))
    new_index = _index(new, new_name, across, bool(levels[0]))
    common = [k for k in base_index if k in new_index]
    if not common:
        raise UsageError(f"{baseline_name} and {new_name} have no row in common "
                         f"({len(baseline.rows)} and {len(new.rows)} "
                         f"rows{_apart(baseline, new, across)}): incomparable")
    if len(common) > MAX_COMPARED_ROWS:
        raise UsageError(f"{baseline_name} and {new_name} share {len(common):,} rows; compare "
                         f"judges at most {MAX_COMPARED_ROWS:,} at once: compare the sweep in "
                         "parts (a file per collective, or per range of sizes)")
    return _Match(across, levels, base_index, new_index, common)


@dataclasses.dataclass
class _Found:
    """What the shared rows hold before any verdict: the evidence of the rows to judge, the
    rows a side cannot judge (``unmeasured``; the baseline's keys apart), each side's rounds set
    aside, and ``files``: each side's rounds as a file."""
    files: tuple
    pending: list = dataclasses.field(default_factory=list)
    unmeasured: dict = dataclasses.field(default_factory=dict)
    unmeasured_base: list = dataclasses.field(default_factory=list)
    set_aside: dict = dataclasses.field(default_factory=dict)


def _gather(baseline: RunResult, new: RunResult, match: _Match, metric: str, names: tuple,
            one_job: bool, alpha: float, by_size: bool = False) -> _Found:
    """Each shared row's evidence, or why a side cannot judge it."""
    baseline_name, new_name = names
    found = _Found((FileRounds.of(baseline), FileRounds.of(new)),
                   set_aside={name: [0, 0] for name in names})
    files = found.files
    for key in match.common:
        b, n = match.base_index[key], match.new_index[key]
        sides = (files[0].row(b), files[1].row(n))
        for name, side in zip(names, sides):
            found.set_aside[name][0] += side.set_aside
            found.set_aside[name][1] += side.set_aside + sum(len(g) for g in side.runs)
        # no bandwidth of a barrier
        applies = metric == "time_us_p50" or bool(baseline.rows[b].size_bytes)
        base_lacks = _lacks(baseline.rows[b], sides[0], "time_us_p50") or (
            _lacks(baseline.rows[b], sides[0], metric) if applies else "")
        lacks = "" if base_lacks else _lacks(new.rows[n], sides[1], metric)
        if base_lacks or (lacks and not _lacks(baseline.rows[b], sides[0], metric)):
            # a baseline that cannot judge a row must not pass it: the gate fails as for NEW's
            if base_lacks:
                found.unmeasured_base.append(key)
            found.unmeasured[key] = RowComparison(
                key, baseline.rows[b], new.rows[n], _metric(baseline.rows[b], metric),
                _metric(new.rows[n], metric),
                math.nan, math.nan, math.nan, None, None, 0, 0, "", math.nan, None, "unmeasured",
                f"{baseline_name} has {base_lacks}" if base_lacks else f"{new_name} has {lacks}")
            continue
        found.pending.append(_evidence(key, baseline.rows[b], new.rows[n], sides, files, (b, n),
                                       metric, one_job, alpha, by_size))
    if len(found.unmeasured_base) == len(match.common):
        raise UsageError(f"{baseline_name}: none of the {len(match.common)} rows it shares with "
                         f"{new_name} has a median time and a round median to judge by (a broken "
                         "baseline?): incomparable")
    return found


def _evidence(key, base_row, new_row, sides: tuple, files: tuple, where: tuple, metric: str,
              one_job: bool, alpha: float, by_size: bool = False) -> Evidence:
    """What one shared row, measured by both sides, gives the verdict."""
    comparable = _metric(base_row, metric) > 0 and _metric(new_row, metric) > 0
    block_var = 0.0 if one_job else sum(side.floor_var for side in sides)
    # An interleaved job's pairs. Taken size by size, a pair's two measurements lie milliseconds
    # apart and share the machine's state: every round both sides measured counts, since what
    # moved both cancels in its ratio, and a pair whose ratio lies far from the others' had one
    # side meet interference alone, and goes (pairs_kept). A side's own window would set aside
    # the rounds of a state both sides shared, and with them pairs that agree: on live +25% jobs
    # it left 3-4 of 10 pairs on 40 of 113 rows. Launch by launch, a pair's rounds lie a sweep
    # apart, and a side's state is its own: the rounds each side counts.
    pool = [side.measured if by_size else side.by_round for side in sides]
    pairs = (tuple((pool[0][r], pool[1][r]) for r in sorted(pool[0]) if r in pool[1])
             if one_job and comparable else ())
    pairs = pairs_kept(pairs) if by_size else pairs
    kept_floor = max((f.kept_spread * max(f.clean_sd(i), MIN_CLEAN_SD) for f, i in zip(files, where)
                      if f.slow and math.isfinite(f.kept_spread) and math.isfinite(f.clean_sd(i))),
                     default=0.0)
    return Evidence(key, base_row, new_row, _metric(base_row, metric), _metric(new_row, metric),
                    METRICS[metric],
                    sides[0].runs if comparable else [], sides[1].runs if comparable else [],
                    block_var, 0.0 if by_size else sum(side.fast_gap ** 2 for side in sides), pairs,
                    min(side.positive for side in sides) if pairs else 0, noise_stratum(base_row),
                    kept_floor, starved=() if one_job else starvation(sides),
                    reached=((), ()) if one_job else state_reach(sides, alpha))


def _all_rows(baseline: RunResult, new: RunResult, match: _Match, metric: str, new_name: str,
              by_key: dict, unmeasured: dict) -> list:
    """Every row of either run, in the baseline's order, then the new run's own: judged,
    unmeasured, missing from the new run, or new."""
    nan = math.nan
    rows = []
    for key, i in match.base_index.items():
        row = baseline.rows[i]
        rows.append(by_key.get(key) or unmeasured.get(key) or RowComparison(
            key, row, None, _metric(row, metric), nan, nan, nan, nan, None, None, 0, 0, "", nan,
            None, "missing",
            f"{new_name} lacks it"))
    for key, i in match.new_index.items():
        if key not in match.base_index:
            row = new.rows[i]
            rows.append(RowComparison(key, None, row, nan, _metric(row, metric), nan, nan, nan,
                                      None, None, 0, 0, "", nan, None, "new"))
    return rows


def _warnings(baseline: RunResult, new: RunResult, match: _Match, names: tuple, found: _Found,
              pending: list, by_key: dict, one_job: bool, assumed_log_sd: float) -> list:
    """What a reader of the verdicts should know: what the runs differ in, what was matched
    across, rows that judge nothing, and what the rounds and the machine's states did."""
    baseline_name, new_name = names
    levels = match.levels
    warnings = comparability_warnings(baseline, new, baseline_name, new_name,
                                      [(r.baseline, r.new)
                                       for r in [*by_key.values(), *found.unmeasured.values()]])
    if match.across:
        warnings.insert(0, f"{baseline_name} measured {baseline.rows[0].backend} and {new_name} "
                           f"{new.rows[0].backend}: rows are matched across the two backends")
    if levels[0]:
        warnings.insert(0, f"{baseline_name} ran MPI at thread level {'/'.join(levels[0])} and "
                           f"{new_name} at {'/'.join(levels[1])}: rows are matched across the "
                           "levels")
    if found.unmeasured_base:
        warnings.append(f"{len(found.unmeasured_base)} row(s) of {baseline_name} have no median "
                        "time or no round median: they judge nothing (unmeasured, which fails the "
                        "gate unless --allow-missing)")
    warnings += round_warnings(found.files, names, by_key.values(),
                               {name: tuple(v) for name, v in found.set_aside.items()},
                               assumed_log_sd)
    if not one_job:
        warnings += _shared_runner(found.files, names)
    warnings += _starved_warnings(pending, by_key, names)
    warnings += _state_warnings(pending, by_key, names)
    return warnings
