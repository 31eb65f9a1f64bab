"""Compare two runs row by row on their rounds: change, confidence interval, verdict.

Nothing here prints; ``compare_render`` turns a ``Comparison`` into a table, markdown or JSON.
The rules are documented for users in docs/compare.md; in short:

* rows are matched on MATCH_FIELDS (collective, backend, dtype, op, world size, size, timing, pair,
  window, pairs at once);
* the unit of inference is the round (one launch), never the iterations of one launch: the
  change is the ratio of the geometric means of the per-round medians, its 95% CI a Student t
  interval on the log medians (``comparison.estimate_change``) whose variance also carries the
  drift of whole runs made at different times: assumed as a multiple of each row's modelled
  spread, or measured when a file merges three or more runs;
* each row's spread of rounds is moderated by the trend of the rows' spreads against their time,
  per stratum (backend setup and timing: ``measure.noise``), as a file's rows are: a stable row
  among noisy ones keeps a narrow interval, and a noisy one stays wide;
* every round counts, busy or not, except those whose median lies far above the row's fastest
  (interference, ``noise.clean_rounds``, judged against each side's own sweep): noise from
  a shared machine only adds time, so a busy machine still leaves the fast rounds to judge by;
* a side whose ranks got clearly less of their cores than the other side's while the machine
  was busy (``starved``) is not called slower by a change that the CPU they lacked can explain;
* slower/faster: max-T adjusted p below alpha over every row tested (the rows share the drift,
  so they are not adjusted as if unrelated) AND the estimate beyond the threshold; same: the
  95% CI inside ±threshold; otherwise inconclusive (more rounds, or more runs);
* a row of the baseline that the new run lacks (missing) or has without a value or a round
  median to judge (unmeasured) fails the gate unless it is allowed (``allow_missing``): a run
  that broke must not pass for want of data.
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
from collbench.results.aggregate import noise_stratum
from collbench.results.records import ASSUMED_SETUP, MATCH_FIELDS, PER_BACKEND, Row, RunResult, backend_label
from collbench.analysis.runs import (ASSUMED_LOG_SD, FileRounds, ab_job, estimate_drift, explained_by,
                                     round_warnings, starvation, state_reach)
from collbench.analysis.significance import max_t_adjust
from collbench.measure.noise import (MIN_CLEAN_SD, MIN_LOG_SD, STATE_ROW_SHARE, fit_trends, machine_state, moderated,
                                    row_time)
from collbench.measure.comparison import (Change, Spread, detectable_change, estimate_change, log_change,
                                         paired_changes, rounds_needed, run_concentration, within_spread)

METRICS = {"time_us_p50": True, "busbw_gbps": False}   # metric -> lower is better
VERDICTS = ("slower", "faster", "same", "inconclusive", "new", "missing", "unmeasured", "insufficient data")
#: Rows of the baseline the new run cannot be judged on: they fail the gate unless allowed.
UNJUDGED = ("missing", "unmeasured")
DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.05
#: The share of the rows both files have that a comparison must decide (same, slower or faster)
#: for its gate to pass: below it the answer is UNDECIDED, exit status 3 (``--min-decided``).
#: An A/A pair measured in one job on a busy 2-core runner decided 133 of 145 rows (92%); two
#: stored runs of it decided none (../shared/data/busy-runner/), and then passed a 2.5x slowdown.
DEFAULT_MIN_DECIDED = 0.8
#: The exit status of a gate that could not decide enough rows.
UNDECIDED_STATUS = 3
#: Why a row was left inconclusive, in words for the line that counts them (``RowComparison.cause``).
CAUSES = {
    "state": "the other side's own rounds ran as slow (a state of the machine)",
    "starved": "a side's ranks got less CPU than the other's",
    "drift": "the drift between runs hides a change this size",
    "floor": "rounds spread far above their fastest",
    "lone": "a lone round ran far faster than the rest",
    "family": "beyond the threshold alone, not with every row tested",
    "rounds": "too few rounds",
    "pairs": "most pairs set aside as interference",
    "data": "no round medians",
}
POWER = 0.8
#: The most rows one comparison judges. Its max-T adjustment simulates every row together
#: (``significance.DRAWS`` draws, in chunks of 2,000): about 100 KB and 2-3 ms per row on the 2-core
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
    p_adjusted: Optional[float]     # max-T adjusted over every row tested (significance.max_t_adjust)
    rounds_baseline: int            # rounds counted on each side (interference set aside)
    rounds_new: int
    noise: str                      # where the run-to-run spread came from: both, baseline, new, assumed
    detectable: float               # change this comparison detects with 80% power, rows adjusted together
    rounds_needed: Optional[int]    # per side, for the CI to clear the threshold on the estimate's side of it
    verdict: str                    # one of VERDICTS
    reason: str = ""                # why a row is inconclusive, or what limited it
    drift_sd: float = math.nan      # the drift of whole runs this row carries (sd of log medians)
    cause: str = ""                 # why it is inconclusive, a key of CAUSES

    @property
    def backend(self) -> str:
        """The backend as its rows are labelled ("mpi (mpi buffers)"); "mpi → gloo" across two."""
        return " → ".join(dict.fromkeys(backend_label(r) for r in (self.baseline, self.new) if r is not None))

    def field(self, name: str):
        value = self.key[MATCH_FIELDS.index(name)]
        if name in _BACKEND_FIELDS and value == "*":      # matched across two backends (match_key)
            return " → ".join(dict.fromkeys(getattr(r, name) for r in (self.baseline, self.new) if r is not None))
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
    drift_sd: float = math.nan      # drift of whole runs used, the median over rows (sd of log medians)
    drift_source: str = ""          # "assumed" or "measured over N runs"
    allow_missing: bool = False     # rows the new run lacks or cannot measure do not fail the gate
    fail_on_inconclusive: bool = False   # an inconclusive row fails the gate
    min_decided: float = DEFAULT_MIN_DECIDED   # the share of compared rows the gate must decide

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
        """Whether the gate would pass without having decided enough of the rows (``min_decided``)."""
        compared = len(self.compared)
        return self.passed and compared > 0 and self.decided < self.min_decided * compared - 1e-9

    @property
    def status(self) -> int:
        """The exit status: 0 passed, 1 failed, UNDECIDED_STATUS passed blind."""
        return 1 if not self.passed else UNDECIDED_STATUS if self.blind else 0

    def causes(self) -> dict:
        """Cause -> rows left undecided by it, most first."""
        counted = Counter(r.cause or "rounds" for r in self.compared if r.verdict not in ("slower", "faster", "same"))
        return dict(counted.most_common())

    def detection(self) -> tuple:
        """(detectable changes of the rows the threshold can gate, of the others): what this
        comparison can see, each row's change detected with POWER, rows adjusted together."""
        found = [r.detectable for r in self.rows if r.rounds_baseline and math.isfinite(r.detectable)]
        return [d for d in found if d <= self.threshold], [d for d in found if d > self.threshold]

    @property
    def noise_sources(self) -> tuple:
        return tuple(sorted({r.noise for r in self.rows if r.noise}))

    def too_noisy(self) -> list:
        """Rows that could not be decided and whose spread hides a change of the threshold's size."""
        return [r for r in self.rows if r.verdict == "inconclusive" and math.isfinite(r.detectable)
                and r.detectable > self.threshold]


def parse_threshold(text) -> float:
    """``5%`` or ``0.05`` -> 0.05. A bare number of 1 or more is ambiguous and refused."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"bad --threshold {raw!r}: expected a percentage like 5% or a fraction like 0.05") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"bad --threshold {raw!r}: must be a non-negative percentage like 5%")
    if value >= 1 and not raw.endswith("%"):
        raise UsageError(f"bad --threshold {raw!r}: ambiguous; write {raw}% or {value / 100:g}")
    return value


def match_key(row: Row, across_backends: bool = False, across_levels: bool = False) -> tuple:
    """The row's values of MATCH_FIELDS; ``across_backends``: the backend and what belongs to it
    (its buffers, its payload) left blank (two files of one backend each, compared with each
    other: collbench ab --a-backend/--b-backend); ``across_levels``: the MPI thread level left
    blank."""
    return tuple("*" if (across_backends and name in _BACKEND_FIELDS) or (across_levels and name == "thread_level")
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


#: what belongs to a backend's setup, the thread level apart (levels are matched on their own)
_BACKEND_FIELDS = ("backend",) + tuple(name for name in PER_BACKEND if name != "thread_level")


def _one_backend_each(baseline: RunResult, new: RunResult) -> bool:
    """Each file measured one backend setup, and not the same one (the thread level aside)."""
    def setups(result: RunResult) -> set:
        return {tuple(getattr(r, name) for name in _BACKEND_FIELDS) for r in result.rows}
    a, b = setups(baseline), setups(new)
    return len(a) == 1 and len(b) == 1 and a != b


def _index(result: RunResult, name: str, across_backends: bool = False, across_levels: bool = False) -> dict:
    index = {}
    for i, row in enumerate(result.rows):
        key = match_key(row, across_backends, across_levels)
        if key in index:
            raise UsageError(f"{name}: two rows for {_describe(key)}; compare files of one run each")
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
    names = [name for name, result in ((baseline_name, baseline), (new_name, new)) if ASSUMED_SETUP in result.notes]
    return f" (assumed for {' and '.join(names)}: written before levels were recorded)" if names else ""


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


@dataclass(frozen=True)
class _Pending:
    key: tuple
    base: Row
    new: Row
    base_runs: list                 # counted round medians grouped by run
    new_runs: list
    block_var: float = 0.0          # taken as known: how far below the counted rounds each side's fastest lay
                                    # (runs.SideRounds.floor_var),
    gap_var: float = 0.0            # and the doubt a lone fast round casts (runs.SideRounds.fast_gap)
    pairs: tuple = ()               # one interleaved job: (A, B) medians of the pairs both counted
    paired_rounds: int = 0          # and the pairs both sides measured, counted or not
    stratum: tuple = ()             # the row's noise stratum (aggregate.noise_stratum)
    kept_floor: float = 0.0         # the drift the runs kept beside a merged file's slow runs show
    change: Optional[Change] = None
    drift_sd: float = math.nan      # the drift of whole runs the row carries (sd)
    drift_var: float = 0.0          # the drift's share of the estimate's variance
    state_var: float = 0.0          # taken as known: a state of the machine moves each row by a share of its own
    starved: tuple = ()             # (side, log slowdown it can explain) where one side's ranks lacked CPU (starvation)
    reached: tuple = ((), ())       # (new slower, new faster): how often the other side's set-aside rounds ran
                                    # that slow, (rounds, of rounds), or () (state_reach)

    @property
    def time(self) -> float:
        """The time the row's trend is read at: the median of both sides' counted round medians."""
        return row_time([m for side in (self.base_runs, self.new_runs) for run in side for m in run])

    @property
    def concentration(self) -> float:
        """One run's share of the estimate's drift, both sides together."""
        return run_concentration(self.base_runs) + run_concentration(self.new_runs)

    @property
    def known_var(self) -> float:
        return self.block_var + self.gap_var + self.state_var


def _expm1(x: float) -> float:
    """exp(x) - 1, infinite where it does not fit a float (a CI of rounds a million-fold apart)."""
    return math.expm1(x) if x < 709.0 else math.inf


def _metric_change(c: Change, lower_is_better: bool) -> tuple:
    """(ratio, CI low, CI high) of the metric's relative change from the log change of times."""
    if lower_is_better:
        return c.ratio, _expm1(c.ci_low), _expm1(c.ci_high)
    return 1.0 / c.ratio, _expm1(-c.ci_high), _expm1(-c.ci_low)


def _decide(p: _Pending, p_adj: Optional[float], threshold: float, alpha: float, metric: str,
            critical: float) -> RowComparison:
    """The verdict of one row from its change, its adjusted p-value and the threshold."""
    lower_is_better = METRICS[metric]
    base_value, new_value = _metric(p.base, metric), _metric(p.new, metric)
    c = p.change
    if c is None or not (math.isfinite(base_value) and math.isfinite(new_value)):
        return RowComparison(p.key, p.base, p.new, base_value, new_value, math.nan, math.nan, math.nan, None, None,
                             0, 0, "", math.nan, None, "insufficient data", "no round medians to compare",
                             cause="data")
    ratio, low, high = _metric_change(c, lower_is_better)
    detect = detectable_change(c.se, c.df, critical, POWER)
    # Enough rounds for the CI to clear the threshold on whichever side of it the estimate lies.
    fixed = p.drift_var + p.known_var               # what more rounds in the same runs do not average out
    within_sd = math.sqrt(max(c.se ** 2 - fixed, 0.0) / (1.0 / c.n_baseline + 1.0 / c.n_new))
    needed = rounds_needed(within_sd, max(abs(abs(ratio - 1.0) - threshold), threshold / 4), drift_var=fixed)
    beyond = abs(ratio - 1.0) > threshold
    significant = p_adj is not None and p_adj < alpha
    reason, cause = "", ""
    reached = p.reached[0 if c.estimate > 0 else 1]       # the other side's slow rounds, in the change's direction
    if significant and beyond and _starvation_explains(p):
        verdict, cause = "inconclusive", "starved"
        reason = (f"the {'new' if p.starved[0] == 1 else 'baseline'} run's ranks {STARVED_WHY} while other "
                  f"processes were busy: a slowdown of up to {explained_by(p.starved)} may be the machine's; "
                  f"measure again on a quiet one, or both sides in one job (collbench ab)")
    elif significant and beyond and 2 * len(p.pairs) < p.paired_rounds:
        verdict, cause = "inconclusive", "pairs"
        reason = (f"only {len(p.pairs)} of its {p.paired_rounds} pairs counted, the others set aside as "
                  "interference: too few to call; measure again on a quieter machine, or more rounds")
    elif significant and beyond and reached:
        verdict, cause = "inconclusive", "state"
        reason = (f"the {'baseline' if c.estimate > 0 else 'new'} run's {STATE_WHY} in {reached[0]} of its "
                  f"{reached[1]} rounds (set aside as interference): a state of the machine that lasted the "
                  f"other's whole run can do this; measure both sides in one job (collbench ab)")
    elif significant and beyond:
        verdict = "slower" if (ratio > 1.0) == lower_is_better else "faster"
    elif low >= -threshold and high <= threshold:
        verdict = "same"
    else:
        verdict, cause = "inconclusive", "rounds"
        if low > threshold or high < -threshold:
            cause = "family"
            reason = ("beyond the threshold at 95% for this row alone, not with every row tested at once: "
                      + ("measure more rounds" if p.pairs else "measure both sides in one job (collbench ab)"))
        elif needed is None:
            cause = ("floor" if p.block_var > max(p.drift_var, p.gap_var) else
                     "lone" if p.gap_var > p.drift_var else "drift" if p.drift_var > 0 else "rounds")
            reason = ("its rounds spread far above its fastest (a state of the machine that outlasted "
                      "launches?): measure both sides in one job (collbench ab), or merge more runs into the "
                      "baseline" if p.block_var > max(p.drift_var, p.gap_var) else
                      "a lone round ran far faster than those counted: which is the row's own time is "
                      "uncertain; measure more rounds" if p.gap_var > p.drift_var else
                      "the drift between runs (or the machine's state) hides a change this size: measure both "
                      "sides in one job (collbench ab), or merge runs from other times into the baseline"
                      if p.drift_var > 0 else
                      "more than 1000 rounds per side would be needed")
        else:
            reason = f"needs about {needed} rounds per side"
    return RowComparison(p.key, p.base, p.new, base_value, new_value, ratio, low, high, c.p_value, p_adj,
                         c.n_baseline, c.n_new, c.noise, detect, needed, verdict, reason, p.drift_sd, cause)


#: The words of a row that the other side's own slow rounds kept from a verdict (its warning counts them).
STATE_WHY = "own rounds ran this slow"

#: The words of a row that starved ranks kept from a verdict, which its warning counts.
STARVED_WHY = "got less CPU than the other's"


def _starvation_explains(p: _Pending) -> bool:
    """Whether the change lies the way a starved side (``p.starved``) pushes it, and its CI does
    not clear what the CPU those ranks lacked can explain."""
    if not p.starved:
        return False
    side, explained = p.starved
    c = p.change
    return 0 < c.ci_low < explained if side == 1 else -explained < c.ci_high < 0


def _starved_warnings(pending: list, decided: dict, names: tuple) -> list:
    """One line per side whose starved ranks kept rows from being called: the table's ``why``
    column says it per row, but a terminal of 80 columns does not show it."""
    kept: dict = {}
    for p in pending:
        if p.starved and STARVED_WHY in decided[p.key].reason:
            kept.setdefault(p.starved[0], []).append(p.starved)
    return [f"{names[side]}: on a busy machine its ranks got clearly less of their cores than {names[1 - side]}'s "
            f"(starved); {len(rows)} row(s) {'slower' if side == 1 else 'faster'} by no more than the CPU they "
            f"lacked can explain (up to {explained_by(min(rows, key=lambda s: s[1]))}) are inconclusive: measure "
            f"again on a quiet machine, or both sides in one job (collbench ab)"
            for side, rows in sorted(kept.items())]


def _shared_runner(files: tuple, names: tuple) -> list:
    """Where two runs made at different times met a busy machine in most of their rounds: the
    case where a stored baseline decides little, said once (each file's busy rounds are said
    on their own line)."""
    shares = [len(f.busy) / max(1, len(f.result.metadata.get("rounds") or [])) for f in files]
    if max(shares) < 0.5:
        return []
    return [f"{names[0]} and {names[1]} were measured at different times, "
            f"{' and '.join(f'{s:.0%}' for s in shares)} of their rounds on a busy machine: a shared runner, "
            f"where a stored baseline decides little; measure both versions in one job (collbench ab)"]


def _state_warnings(pending: list, decided: dict, names: tuple) -> list:
    """One line per direction of the rows that the other side's own slow rounds kept from a
    verdict (``state_reach``): the ``why`` column is not shown at 80 columns."""
    held = Counter(p.change.estimate > 0 for p in pending if STATE_WHY in decided[p.key].reason)
    return [f"{held[slower]} row(s) {'slower' if slower else 'faster'} in {names[1] if slower else names[0]} are "
            f"inconclusive: {names[0] if slower else names[1]}'s own rounds ran as slow, set aside as interference "
            f"(a state of the machine that can last a run); measure both sides in one job (collbench ab)"
            for slower in (True, False) if held[slower]]


def _machine_state(pending: list, drift: tuple, source: str, units: list) -> tuple:
    """The drift of a stored baseline, judged with the state of the machine in mind: (pending
    rows with their drift and state terms, drift df, description).

    A shared machine moves between states that outlast launches: a hidden neighbour, a clock,
    a host's other guests. Every row then moves by a common factor, and each row by a share of
    it of its own (``STATE_ROW_SHARE``). A baseline merged from runs that met one state cannot
    see how far the next state lies, so the two sides' whole shift, per stratum and in units of
    each row's modelled spread (``noise.machine_state``), is one more observation of each row's
    drift: a uniform change smaller than a few times that can be the machine, and only one
    interleaved job (``collbench ab``) settles it; one beyond it is called, and so is a change
    confined to some rows, which does not move the median. Runs of a merged file set aside as a
    slow state (``FileRounds.slow``) leave the spread of the kept runs as a floor of the drift
    (two runs measure it poorly)."""
    (rows_drift, df), measured = drift, source.startswith("measured")
    states = machine_state([log_change(p.base_runs, p.new_runs) for p in pending], units,
                           [p.stratum for p in pending])
    kept_source = "the spread of the runs kept beside those set aside"
    out, by_state, by_kept, keeps_measured = [], [], False, False
    for p, sd, (state, whole) in zip(pending, rows_drift, states):
        seen = state / math.sqrt(p.concentration) if p.concentration > 0 else 0.0
        if p.kept_floor > max(sd, seen):
            sd, by_kept = p.kept_floor, True
        elif seen > sd:
            sd = seen
            by_state.append((abs(whole), whole, p.stratum))
        else:
            keeps_measured = keeps_measured or measured
        out.append(dataclasses.replace(p, drift_sd=sd, state_var=(STATE_ROW_SHARE * state) ** 2))
    if by_state:
        _, whole, stratum = max(by_state)
        strata = {p.stratum for p in pending}
        where = f" ({stratum[0]}, {stratum[1]})" if len(strata) > 1 else ""
        source = f"the two sides differ as a whole by {math.expm1(whole):+.0%}{where}, as a state of the machine can"
    elif by_kept:
        source = kept_source
    return out, df if keeps_measured else math.inf, source


def _time_spreads(pending: list, spreads: dict, assumed_log_sd: float) -> tuple:
    """(each row's spread moderated by the trend, each row's modelled spread): the rows' spreads
    of rounds within a run (both sides') fitted per stratum against their time (``noise``), the
    trend's value at each row, and each measured spread moderated by it (limma-trend, as a
    file's rows are). Too few rows for a trend: the median of the measured spreads for every
    row, unmoderated, or ``assumed_log_sd`` where no row has rounds to measure one."""
    raw = [spreads[p.key] for p in pending]
    times = [p.time for p in pending]
    measured = [w.log_sd ** 2 if w.source != "assumed" else math.nan for w in raw]
    trends = fit_trends([p.stratum for p in pending], times, measured)
    known = [v for v in measured if math.isfinite(v)]
    flat = math.sqrt(float(np.median(known))) if known else assumed_log_sd
    units, out = [], {}
    for p, w, t in zip(pending, raw, times):
        prior = trends.variance(t, p.stratum)
        units.append(max(math.sqrt(prior) if math.isfinite(prior) else flat, MIN_LOG_SD))
        if w.source == "assumed":
            out[p.key] = w
            continue
        m = moderated(max(w.log_sd, MIN_LOG_SD) ** 2, w.df, prior)
        out[p.key] = Spread(math.sqrt(m.variance), m.df, w.source)
    return out, units


def compare_runs(baseline: RunResult, new: RunResult, *, metric: str = "time_us_p50",
                 threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA,
                 baseline_name: str = "baseline", new_name: str = "new",
                 assumed_log_sd: float = ASSUMED_LOG_SD, allow_missing: bool = False,
                 fail_on_inconclusive: bool = False, across_levels: bool = False,
                 min_decided: float = DEFAULT_MIN_DECIDED) -> Comparison:
    """Match the rows of two runs and give each a verdict; UsageError when nothing matches, or
    when more than MAX_COMPARED_ROWS do. ``allow_missing``: rows the new run lacks or cannot
    measure do not fail the gate (``Comparison.passed``); ``fail_on_inconclusive``: rows it
    cannot decide do; with fewer than ``min_decided`` of the compared rows decided, a gate that
    would pass is UNDECIDED (``Comparison.status``). Rows that differ only in their MPI thread
    level are refused (UsageError) unless ``across_levels``: the level alone moves MPICH's
    times 2-3x."""
    if metric not in METRICS:
        raise UsageError(f"unknown metric {metric!r}: use one of {', '.join(METRICS)}")
    across = _one_backend_each(baseline, new)
    levels = levels_apart(baseline, new, across)
    if levels[0] and not across_levels:
        raise UsageError(f"{baseline_name} ran MPI at thread level {'/'.join(levels[0])} and {new_name} at "
                         f"{'/'.join(levels[1])}{_assumed(baseline, new, baseline_name, new_name)}: the level alone "
                         "moves MPI's times 2-3x, so no verdict is called across levels; --across-levels "
                         "compares them anyway")
    across_levels = bool(levels[0])
    base_index = _index(baseline, baseline_name, across, across_levels)
    new_index = _index(new, new_name, across, across_levels)
    common = [k for k in base_index if k in new_index]
    if not common:
        raise UsageError(f"{baseline_name} and {new_name} have no row in common "
                         f"({len(baseline.rows)} and {len(new.rows)} rows{_apart(baseline, new, across)}): incomparable")
    if len(common) > MAX_COMPARED_ROWS:
        raise UsageError(f"{baseline_name} and {new_name} share {len(common):,} rows; compare judges at most "
                         f"{MAX_COMPARED_ROWS:,} at once: compare the sweep in parts (a file per collective, or "
                         f"per range of sizes)")
    files = (FileRounds.of(baseline), FileRounds.of(new))
    # The two sides of one interleaved job (collbench ab) took turns on the machine over the same
    # minutes: whatever moved it moved both alike, so neither drift nor busy shifts enter.
    one_job = bool(ab_job(baseline)) and ab_job(baseline) == ab_job(new)
    set_aside = {baseline_name: [0, 0], new_name: [0, 0]}
    pending, unmeasured, unmeasured_base = [], {}, []
    for key in common:
        b, n = base_index[key], new_index[key]
        sides = (files[0].row(b), files[1].row(n))
        for name, side in zip((baseline_name, new_name), sides):
            set_aside[name][0] += side.set_aside
            set_aside[name][1] += side.set_aside + sum(len(g) for g in side.runs)
        applies = metric == "time_us_p50" or bool(baseline.rows[b].size_bytes)   # no bandwidth of a barrier
        base_lacks = _lacks(baseline.rows[b], sides[0], "time_us_p50") or (
            _lacks(baseline.rows[b], sides[0], metric) if applies else "")
        if base_lacks:
            # a baseline that cannot judge a row must not pass it: the gate fails as for NEW's
            unmeasured_base.append(key)
            unmeasured[key] = RowComparison(key, baseline.rows[b], new.rows[n], _metric(baseline.rows[b], metric),
                                            _metric(new.rows[n], metric), math.nan, math.nan, math.nan, None, None,
                                            0, 0, "", math.nan, None, "unmeasured", f"{baseline_name} has {base_lacks}")
            continue
        lacks = _lacks(new.rows[n], sides[1], metric)
        if lacks and not _lacks(baseline.rows[b], sides[0], metric):
            unmeasured[key] = RowComparison(key, baseline.rows[b], new.rows[n], _metric(baseline.rows[b], metric),
                                            _metric(new.rows[n], metric), math.nan, math.nan, math.nan, None, None,
                                            0, 0, "", math.nan, None, "unmeasured", f"{new_name} has {lacks}")
            continue
        comparable = _metric(baseline.rows[b], metric) > 0 and _metric(new.rows[n], metric) > 0
        block_var = 0.0 if one_job else sum(side.floor_var for side in sides)
        pairs = tuple((sides[0].by_round[r], sides[1].by_round[r]) for r in sorted(sides[0].by_round)
                      if r in sides[1].by_round) if one_job and comparable else ()
        kept_floor = max((f.kept_spread * max(f.clean_sd(i), MIN_CLEAN_SD) for f, i in zip(files, (b, n))
                          if f.slow and math.isfinite(f.kept_spread) and math.isfinite(f.clean_sd(i))), default=0.0)
        pending.append(_Pending(key, baseline.rows[b], new.rows[n], sides[0].runs if comparable else [],
                                sides[1].runs if comparable else [], block_var,
                                sum(side.fast_gap ** 2 for side in sides), pairs,
                                min(side.positive for side in sides) if pairs else 0, noise_stratum(baseline.rows[b]),
                                kept_floor, starved=() if one_job else starvation(sides),
                                reached=((), ()) if one_job else state_reach(sides, alpha)))
    if len(unmeasured_base) == len(common):
        raise UsageError(f"{baseline_name}: none of the {len(common)} rows it shares with {new_name} has a median time "
                         f"and a round median to judge by (a broken baseline?): incomparable")
    raw = {p.key: within_spread(p.base_runs, p.new_runs, assumed_log_sd=assumed_log_sd) for p in pending}
    spreads, units = _time_spreads(pending, raw, assumed_log_sd)
    if one_job:
        drift_df, drift_source = math.inf, "none: both sides took turns in one job"
        pending = [dataclasses.replace(p, drift_sd=0.0) for p in pending]
    else:
        drift, drift_source = estimate_drift(units, [[p.base_runs for p in pending], [p.new_runs for p in pending]])
        pending, drift_df, drift_source = _machine_state(pending, drift, drift_source, units)
    # pairs of one job: of the known terms only a lone fast round's doubt applies (the others are 0)
    paired = dict(zip((p.key for p in pending), paired_changes([p.pairs for p in pending],
                                                               [p.known_var for p in pending],
                                                               strata=[p.stratum for p in pending])))
    own_var = {}                     # per row: (the variance its own rounds give the estimate, its df)
    for i, p in enumerate(pending):
        estimate = paired[p.key]
        if estimate is not None:
            own_var[p.key] = (estimate.se ** 2 - p.known_var, estimate.df)
        else:
            estimate = estimate_change(p.base_runs, p.new_runs, spread=spreads[p.key], drift=(p.drift_sd, drift_df),
                                       known_var=p.known_var)
            if estimate is not None:
                w = spreads[p.key]
                own_var[p.key] = (max(w.log_sd, MIN_LOG_SD) ** 2 * (1.0 / estimate.n_baseline + 1.0 / estimate.n_new),
                                  w.df)
        if estimate is not None:
            concentration = 0.0 if one_job else p.concentration
            pending[i] = dataclasses.replace(p, change=estimate, drift_var=p.drift_sd ** 2 * concentration)
    tested = [p for p in pending if p.change is not None]
    family = max_t_adjust(
        [p.change.estimate / p.change.se for p in tested],
        [own_var[p.key][0] for p in tested], [own_var[p.key][1] for p in tested],
        [p.drift_var for p in tested], drift_df, known_var=[p.known_var for p in tested], alpha=alpha)
    adjusted = dict(zip((p.key for p in tested), family.adjusted))
    by_key = {p.key: _decide(p, adjusted.get(p.key), threshold, alpha, metric, family.critical) for p in pending}
    rows = []
    nan = math.nan
    for key, i in base_index.items():
        row = baseline.rows[i]
        rows.append(by_key.get(key) or unmeasured.get(key) or RowComparison(
            key, row, None, _metric(row, metric), nan, nan, nan, nan, None, None, 0, 0, "", nan, None, "missing",
            f"{new_name} lacks it"))
    for key, i in new_index.items():
        if key not in base_index:
            row = new.rows[i]
            rows.append(RowComparison(key, None, row, nan, _metric(row, metric), nan, nan, nan, None, None, 0, 0,
                                      "", nan, None, "new"))
    warnings = comparability_warnings(baseline, new, baseline_name, new_name,
                                      [(r.baseline, r.new) for r in [*by_key.values(), *unmeasured.values()]])
    if across:
        warnings.insert(0, f"{baseline_name} measured {baseline.rows[0].backend} and {new_name} "
                           f"{new.rows[0].backend}: rows are matched across the two backends")
    if across_levels:
        warnings.insert(0, f"{baseline_name} ran MPI at thread level {'/'.join(levels[0])} and {new_name} at "
                           f"{'/'.join(levels[1])}: rows are matched across the levels")
    if unmeasured_base:
        warnings.append(f"{len(unmeasured_base)} row(s) of {baseline_name} have no median time or no round median: "
                        f"they judge nothing (unmeasured, which fails the gate unless --allow-missing)")
    warnings += round_warnings(files, (baseline_name, new_name), by_key.values(),
                               {name: tuple(v) for name, v in set_aside.items()}, assumed_log_sd)
    if not one_job:
        warnings += _shared_runner(files, (baseline_name, new_name))
    warnings += _starved_warnings(pending, by_key, (baseline_name, new_name))
    warnings += _state_warnings(pending, by_key, (baseline_name, new_name))
    drifts = [p.drift_sd for p in tested]
    return Comparison(baseline_name, new_name, metric, threshold, alpha, tuple(rows), tuple(warnings), len(tested),
                      float(np.median(drifts)) if drifts else math.nan, drift_source, allow_missing,
                      fail_on_inconclusive, min_decided)
