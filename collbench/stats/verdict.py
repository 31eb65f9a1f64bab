"""A row's verdict: its change estimated from both sides' rounds with every term of its
variance (``calibration.TERMS``), the family of rows adjusted together (``family``), and the
rules that hold a row back (``holds``). ``judge`` takes the rows a comparison matched
(``Evidence``) and gives each its ``Verdict``; matching rows and laying the verdicts out is
``analysis.compare``'s.

The terms of a change's variance: the spread of the rounds within a run (moderated by the
rows' trend: ``time_spreads``), the drift of whole runs and the machine's state (a stored
baseline only: ``machine_state_drift``), how far each side's fastest round lay below those it
counts (floor gap) and the doubt a lone fast round casts (fast gap). The two sides of one
interleaved job share the machine's moods pair by pair: they carry neither drift nor state.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from collbench.stats.calibration import (CONFIDENCE, MIN_LOG_SD, MIN_PAIRS_SHARE, MIN_PAIRS_TO_CALL,
                                         POWER, STATE_ROW_SHARE)
from collbench.stats.change import (Change, Spread, detectable_change, estimate_change, log_change,
                                    paired_changes, rounds_needed, run_concentration, within_spread)
from collbench.stats.family import max_t_adjust
from collbench.stats.holds import explained_by
from collbench.stats.noise import fit_trends, machine_state, moderated, row_time
from collbench.stats.runs import estimate_drift

#: Why a row was left inconclusive, in words for the line that counts them (``Verdict.cause``).
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


@dataclass(frozen=True)
class Verdict:
    """One row's judgement (``analysis.compare.RowComparison`` lays it beside the two rows)."""

    ratio: float                    # new / baseline of the metric, from the rounds compared
    change_low: float               # 95% CI of the relative change of the metric
    change_high: float
    p_value: Optional[float]        # two-sided, against no change
    p_adjusted: Optional[float]     # max-T adjusted over every row tested (family.max_t_adjust)
    rounds_baseline: int            # rounds counted on each side (interference set aside)
    rounds_new: int
    noise: str                      # where the run-to-run spread came from: both, baseline, new,
                                    # assumed
    detectable: float               # change this comparison detects with POWER, rows adjusted
                                    # together
    rounds_needed: Optional[int]    # per side, for the CI to clear the threshold on the estimate's
                                    # side of it
    verdict: str                    # slower, faster, same, inconclusive or insufficient data
    reason: str = ""                # why a row is inconclusive, or what limited it
    drift_sd: float = math.nan      # the drift of whole runs this row carries (sd of log medians)
    cause: str = ""                 # why it is inconclusive, a key of CAUSES


@dataclass(frozen=True)
class Judgement:
    """Every row's verdict, and what the family shared."""

    verdicts: dict                  # key -> Verdict
    evidence: list                  # the rows' Evidence, with the terms judge worked out
    tested: int                     # rows with a change estimate (the family adjusted together)
    drift_source: str               # "assumed", "measured over N runs", or what set it


def judge(pending: list, *, one_job: bool, threshold: float, alpha: float, assumed_log_sd: float,
          confidence: float = CONFIDENCE) -> Judgement:
    """Each row's change, with its spread moderated by the rows' trend and, for a stored
    baseline, the drift of whole runs and the machine's state; the rows adjusted together
    (max-T); each row's verdict. ``confidence``: of each row's CI, which a row must lie within
    the threshold by to be the same."""
    raw = {p.key: within_spread(p.base_runs, p.new_runs, assumed_log_sd=assumed_log_sd)
           for p in pending}
    spreads, units = time_spreads(pending, raw, assumed_log_sd)
    if one_job:
        drift_df, drift_source = math.inf, "none: both sides took turns in one job"
        pending = [dataclasses.replace(p, drift_sd=0.0) for p in pending]
    else:
        drift, drift_source = estimate_drift(units,
                                             [[p.base_runs for p in pending],
                                              [p.new_runs for p in pending]])
        pending, drift_df, drift_source = machine_state_drift(pending, drift, drift_source, units)
    # pairs of one job: of the known terms only a lone fast round's doubt applies (the others are 0)
    paired = dict(zip((p.key for p in pending),
                      paired_changes([p.pairs for p in pending], [p.known_var for p in pending],
                                     confidence=confidence, strata=[p.stratum for p in pending])))
    # per row: (the variance its own rounds give the estimate, its df)
    own_var = {}
    for i, p in enumerate(pending):
        estimate = paired[p.key]
        if estimate is not None:
            own_var[p.key] = (estimate.se ** 2 - p.known_var, estimate.df)
        else:
            estimate = estimate_change(p.base_runs, p.new_runs, spread=spreads[p.key],
                                       drift=(p.drift_sd, drift_df),
                                       known_var=p.known_var, confidence=confidence)
            if estimate is not None:
                w = spreads[p.key]
                own_var[p.key] = (max(w.log_sd, MIN_LOG_SD) ** 2
                                  * (1.0 / estimate.n_baseline + 1.0 / estimate.n_new), w.df)
        if estimate is not None:
            concentration = 0.0 if one_job else p.concentration
            pending[i] = dataclasses.replace(p, change=estimate,
                                             drift_var=p.drift_sd ** 2 * concentration)
    # A row of an interleaved job that kept too few of its pairs is never called (decide), so it
    # stays out of the family: with two pairs left (one df) its own t has tails so heavy that
    # the family's largest |t| held every other row back (a +25% job: p 1e-7, adjusted 0.06).
    tested = [p for p in pending if p.change is not None and not few_pairs(p)]
    family = max_t_adjust(
        [p.change.estimate / p.change.se for p in tested],
        [own_var[p.key][0] for p in tested], [own_var[p.key][1] for p in tested],
        [p.drift_var for p in tested], drift_df, known_var=[p.known_var for p in tested],
        alpha=alpha)
    adjusted = dict(zip((p.key for p in tested), family.adjusted))
    verdicts = {p.key: decide(p, adjusted.get(p.key), threshold, alpha, family.critical, confidence)
                for p in pending}
    return Judgement(verdicts, pending, len(tested), drift_source)


@dataclass(frozen=True)
class Evidence:
    """What one row's comparison is judged on: both sides' counted rounds and every term that
    enters its change's variance or holds it back (``calibration.TERMS``)."""

    key: tuple
    base: object                    # the two rows, carried for the caller (results.records.Row)
    new: object
    base_value: float               # the metric compared, on each side (nan: none)
    new_value: float
    lower_is_better: bool
    base_runs: list                 # counted round medians grouped by run
    new_runs: list
    block_var: float = 0.0          # taken as known: how far below the counted rounds each side's
                                    # fastest lay (runs.SideRounds.floor_var),
    gap_var: float = 0.0            # and the doubt a lone fast round casts
                                    # (runs.SideRounds.fast_gap)
    pairs: tuple = ()               # one interleaved job: (A, B) medians of the pairs both counted
    paired_rounds: int = 0          # and the pairs both sides measured, counted or not
    stratum: tuple = ()             # the row's noise stratum (aggregate.noise_stratum)
    kept_floor: float = 0.0         # the drift the runs kept beside a merged file's slow runs show
    change: Optional[Change] = None
    drift_sd: float = math.nan      # the drift of whole runs the row carries (sd)
    drift_var: float = 0.0          # the drift's share of the estimate's variance
    state_var: float = 0.0          # taken as known: a state of the machine moves each row by a
                                    # share of its own
    starved: tuple = ()             # (side, log slowdown it can explain) where one side's ranks
                                    # lacked CPU (starvation)
    reached: tuple = ((), ())       # (new slower, new faster): how often the other side's set-aside
                                    # rounds ran that slow, (rounds, of rounds), or () (state_reach)

    @property
    def time(self) -> float:
        """The time the row's trend is read at: the median of both sides' counted round medians."""
        return row_time([m for side in (self.base_runs, self.new_runs) for run in side
                         for m in run])

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


def decide(p: Evidence, p_adj: Optional[float], threshold: float, alpha: float, critical: float,
           confidence: float = CONFIDENCE) -> Verdict:
    """The verdict of one row from its change, its adjusted p-value and the threshold."""
    lower_is_better = p.lower_is_better
    c = p.change
    if c is None or not (math.isfinite(p.base_value) and math.isfinite(p.new_value)):
        return Verdict(math.nan, math.nan, math.nan, None, None, 0, 0, "", math.nan, None,
                       "insufficient data",
                       "no round medians to compare", cause="data")
    ratio, low, high = _metric_change(c, lower_is_better)
    detect = detectable_change(c.se, c.df, critical, POWER)
    # Enough rounds for the CI to clear the threshold on whichever side of it the estimate lies.
    # what more rounds in the same runs do not average out
    fixed = p.drift_var + p.known_var
    within_sd = math.sqrt(max(c.se ** 2 - fixed, 0.0) / (1.0 / c.n_baseline + 1.0 / c.n_new))
    needed = rounds_needed(within_sd, max(abs(abs(ratio - 1.0) - threshold), threshold / 4),
                           drift_var=fixed, confidence=confidence)
    beyond = abs(ratio - 1.0) > threshold
    significant = p_adj is not None and p_adj < alpha
    reason, cause = "", ""
    # the other side's slow rounds, in the change's direction
    reached = p.reached[0 if c.estimate > 0 else 1]
    if significant and beyond and _starvation_explains(p):
        verdict, cause = "inconclusive", "starved"
        reason = (f"the {'new' if p.starved[0] == 1 else 'baseline'} run's ranks {STARVED_WHY} "
                  f"while other processes were busy: a slowdown of up to {explained_by(p.starved)} "
                  "may be the machine's; measure again on a quiet one, or both sides in one job "
                  "(collbench ab)")
    elif beyond and few_pairs(p) and c.p_value is not None and c.p_value < alpha:
        verdict, cause = "inconclusive", "pairs"
        reason = (f"only {len(p.pairs)} of its {p.paired_rounds} pairs counted, the others set "
                  "aside as interference: too few to call; measure again on a quieter machine, or "
                  "more rounds")
    elif significant and beyond and reached:
        verdict, cause = "inconclusive", "state"
        reason = (f"the {'baseline' if c.estimate > 0 else 'new'} run's {STATE_WHY} in "
                  f"{reached[0]} of its {reached[1]} rounds (set aside as interference): a state "
                  "of the machine that lasted the other's whole run can do this; measure both "
                  "sides in one job (collbench ab)")
    elif significant and beyond:
        verdict = "slower" if (ratio > 1.0) == lower_is_better else "faster"
    elif low >= -threshold and high <= threshold:
        verdict = "same"
    else:
        verdict, cause = "inconclusive", "rounds"
        if low > threshold or high < -threshold:
            cause = "family"
            reason = ("beyond the threshold at 95% for this row alone, not with every row tested "
                      "at once: "
                      + ("measure more rounds" if p.pairs else "measure both sides in one job "
                                                               "(collbench ab)"))
        elif needed is None:
            cause = ("floor" if p.block_var > max(p.drift_var, p.gap_var) else
                     "lone" if p.gap_var > p.drift_var else "drift"
                     if p.drift_var > 0 else "rounds")
            reason = ("its rounds spread far above its fastest (a state of the machine that "
                      "outlasted launches?): measure both sides in one job (collbench ab), or "
                      "merge more runs into the baseline"
                      if p.block_var > max(p.drift_var, p.gap_var) else
                      "a lone round ran far faster than those counted: which is the row's own time "
                      "is uncertain; measure more rounds" if p.gap_var > p.drift_var else
                      "the drift between runs (or the machine's state) hides a change this size: "
                      "measure both sides in one job (collbench ab), or merge runs from other "
                      "times into the baseline"
                      if p.drift_var > 0 else
                      "more than 1000 rounds per side would be needed")
        else:
            reason = f"needs about {needed} rounds per side"
    return Verdict(ratio, low, high, c.p_value, p_adj, c.n_baseline, c.n_new, c.noise, detect,
                   needed, verdict, reason, p.drift_sd, cause)


def few_pairs(p: Evidence) -> bool:
    """Whether a row of an interleaved job kept too few of its pairs to be called: fewer than
    half of those both sides measured, or than MIN_PAIRS_TO_CALL."""
    return bool(p.paired_rounds) and len(p.pairs) < max(MIN_PAIRS_SHARE * p.paired_rounds,
                                                        MIN_PAIRS_TO_CALL)


#: The words of a row that the other side's own slow rounds kept from a verdict (its warning counts
#: them).
STATE_WHY = "own rounds ran this slow"

#: The words of a row that starved ranks kept from a verdict, which its warning counts.
STARVED_WHY = "got less CPU than the other's"


def _starvation_explains(p: Evidence) -> bool:
    """Whether the change lies the way a starved side (``p.starved``) pushes it, and its CI does
    not clear what the CPU those ranks lacked can explain."""
    if not p.starved:
        return False
    side, explained = p.starved
    c = p.change
    return 0 < c.ci_low < explained if side == 1 else -explained < c.ci_high < 0


def machine_state_drift(pending: list, drift: tuple, source: str, units: list) -> tuple:
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
    slow state (``analysis.runs.FileRounds.slow``) leave the spread of the kept runs as a floor of
    the drift (two runs measure it poorly)."""
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
        source = (f"the two sides differ as a whole by {math.expm1(whole):+.0%}{where}, as a state "
                  "of the machine can")
    elif by_kept:
        source = kept_source
    return out, df if keeps_measured else math.inf, source


def time_spreads(pending: list, spreads: dict, assumed_log_sd: float) -> tuple:
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
