"""Run-to-run statistics: pure functions on the per-round medians of one row (no MPI).

A *round* is one measurement of the whole sweep: a fresh launch when collbench starts the
ranks itself, a fresh communicator and fresh buffers inside a user's job. Launch-to-launch
variation (placement, page layout, connection set-up, neighbours) is what makes one launch's
numbers differ from the next, and the samples of one launch cannot see it; the round medians
can. Everything here works on their logarithms: times are positive and their spread is
multiplicative, so differences of logs are ratios.

Noise from a shared machine only ever adds time (Chen & Revels, 2016): a neighbour that wants
the CPU, or a launch that lands badly beside it, makes a whole round of a row slower, often
2-4 times, and never faster. So a row's rounds are judged against its fastest: a round whose
median lies more than ``INTERFERENCE_WIDTH`` clean spreads above the fastest round is *set
aside* as interference, whether or not the CPU meter saw the neighbour, and the statistics are
those of the rounds that remain. The clean spread is the sweep's (every row of a run meets the
same machine), estimated from the lower half of each row's rounds, which interference rarely
reaches (``spread_prior``).

* ``clean_rounds`` — which rounds of a row count.
* ``summarize_rounds`` — the centre (geometric mean of the counted round medians), a 95% CI
  of it (Student t on their logs), the coefficient of variation, and whether the rounds
  disagree far beyond what their own within-round CIs allow.
* ``within_spread``, ``drift_between_runs`` and ``change`` — the change between two sets of
  runs of round medians (ratio of geometric means) with its CI and p-value. Two kinds of
  noise: the rounds of one run spread around the run's mean, and whole runs made at
  different times drift together (a machine-wide factor: on a shared VM, ±10% from one
  minute to the next). Rounds average out the first only; the second needs separate runs.
* ``detectable_change`` and ``rounds_needed`` — what a given spread lets a comparison see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from collbench.measure.distributions import normal_quantile, t_quantile, t_two_sided_p

CONFIDENCE = 0.95
#: Rounds "disagree" when their medians spread this many times more than their own
#: within-round CIs say a median can move (standard deviations of the log medians).
DISAGREE_FACTOR = 3.0
#: The smallest run-to-run spread (sd of log medians) a comparison assumes: identical round
#: medians (a rounded file, a synthetic test) must not make every difference significant.
MIN_LOG_SD = 0.001
#: A row's run-to-run CI is moderated by the sweep's typical spread of rounds, given this many
#: degrees of freedom (a moderated t, as in limma): a few rounds that happen to agree cannot
#: promise more than the machine's launches allow. Calibrated by benchmarks/coverage.py.
PRIOR_DF = 4.0
#: A row's CI within a sweep also carries the spread between whole runs, taken as this many
#: times the sweep's clean spread: the rounds of one run agree more closely than runs do (a
#: machine state outlasts a launch). On ten quiet runs of the calibration VM, the CIs from the
#: rounds alone held what the other nine runs settled on for 25% of 1450 rows; with 1.5 times the
#: clean spread added, for 96% (benchmarks/coverage.py, "next runs").
BETWEEN_RUNS_FACTOR = 1.5
#: Rows with two or more rounds needed before their spreads are pooled into that prior.
MIN_ROWS_FOR_PRIOR = 8


#: A round more than this many clean spreads (sd of log medians) above the row's fastest round is
#: set aside as interference. Ten clean rounds span about 3 spreads (with 5, 0.4% of ordinary
#: lognormal rounds are set aside; with 4, 2-4%); what a neighbour adds is
#: 10-100 of them on a quiet machine's scale (benchmarks/README.md, "the estimator").
INTERFERENCE_WIDTH = 5.0
#: The clean spread is never taken as smaller than this (a window of 2%): rounds that agree to
#: the timer's last digit must not make every ordinary difference interference.
MIN_CLEAN_SD = 0.005


def _blom(k: int, n: int) -> float:
    """Expected k-th smallest of n standard normal draws (Blom's approximation)."""
    return normal_quantile((k - 0.375) / (n + 0.25))


def expected_fastest(n: int) -> float:
    """Expected smallest of n standard normal draws (0 for one)."""
    return _blom(1, n) if n > 1 else 0.0


def _lower_half_scale(logs: np.ndarray) -> float:
    """The spread of a row's rounds from the fastest to the middle one, as a normal sd: what
    interference that hits fewer than half of the rounds cannot move. nan under 3 rounds."""
    n = len(logs)
    if n < 3:
        return math.nan
    x = np.sort(logs)
    half = (n + 1) // 2
    return float((x[half - 1] - x[0]) / (_blom(half, n) - _blom(1, n)))


def interference_window(clean_sd: float) -> float:
    """How far (log) above the fastest a round may lie and still count: INTERFERENCE_WIDTH clean
    spreads (nan without a clean spread)."""
    return INTERFERENCE_WIDTH * max(clean_sd, MIN_CLEAN_SD) if math.isfinite(clean_sd) else math.nan


def clean_rounds(medians: Sequence[float], clean_sd: float) -> np.ndarray:
    """Which of ``medians`` count (a boolean per median): those within a window of
    INTERFERENCE_WIDTH × ``clean_sd`` above the fastest round that another round confirms —
    a lone round far faster than all others is a freak, not the machine at its best — and
    not below it by more than the window. Non-positive or missing medians never count;
    ``clean_sd`` nan: every positive median counts."""
    x = np.asarray([v if v is not None and math.isfinite(v) and v > 0 else math.nan for v in medians],
                   dtype=np.float64)
    ok = np.isfinite(x)
    if ok.sum() < 2 or not math.isfinite(clean_sd):
        return ok
    logs = np.log(np.where(ok, x, 1.0))
    window = interference_window(clean_sd)
    ordered = np.sort(logs[ok])
    confirmed = np.nonzero(ordered[1:] - ordered[:-1] <= window)[0]
    anchor = ordered[confirmed[0]] if len(confirmed) else ordered[0]
    return ok & (logs <= anchor + window) & (logs >= anchor - window)


@dataclass(frozen=True)
class SpreadPrior:
    """The sweep's spread of undisturbed rounds: ``window_sd`` decides which rounds are set aside
    as interference, ``log_sd`` (with weight ``df``) moderates each row's CI."""

    log_sd: float
    df: float
    rows: int
    window_sd: float = math.nan


def spread_prior(rows_medians) -> Optional["SpreadPrior"]:
    """The sweep's clean spread: the median over rows of their lower halves' spread sets the
    interference window; the median variance of the rounds each row keeps within it is the
    prior for each row's own. None with fewer than MIN_ROWS_FOR_PRIOR rows of two or more rounds."""
    rows = [np.log(x) for x in (_positive(m) for m in rows_medians) if len(x) >= 2]
    if len(rows) < MIN_ROWS_FOR_PRIOR:
        return None
    scales = [v for v in (_lower_half_scale(logs) for logs in rows) if math.isfinite(v)]
    window_sd = max(float(np.median(scales)), MIN_CLEAN_SD) if scales else math.nan
    variances = []
    for logs in rows:
        kept = logs[clean_rounds(np.exp(logs), window_sd)]
        if len(kept) >= 2:
            variances.append(float(kept.var(ddof=1)))
    if not variances:
        return None
    return SpreadPrior(math.sqrt(float(np.median(variances))), PRIOR_DF, len(variances), window_sd)


def row_clean_sd(prior: Optional[SpreadPrior]) -> float:
    """The clean spread that decides which of a row's rounds count: the sweep's (nan without
    one: every round counts). A row's own rounds are too few to tell interference from its
    ordinary spread: judged alone, ten lognormal rounds lost their top round often enough to
    bring the CI's coverage down to 0.89."""
    if prior is not None and math.isfinite(prior.window_sd):
        return prior.window_sd
    return math.nan


@dataclass(frozen=True)
class RoundsSummary:
    rounds: int          # rounds counted (those set aside as interference are not)
    center: float        # geometric mean of the counted round medians; the median itself for one round
    ci_low: float        # 95% CI of the centre from the spread of the rounds; nan under 2 rounds
    ci_high: float
    cv: float            # standard deviation / mean of the counted round medians; nan under 2 rounds
    log_sd: float        # standard deviation of their logs; nan under 2 rounds
    disagree: bool       # spread far beyond the within-round CIs (DISAGREE_FACTOR)
    set_aside: int = 0   # rounds set aside as interference (``clean_rounds``)


def _positive(values: Sequence[float]) -> np.ndarray:
    x = np.asarray([v for v in values if v is not None and math.isfinite(v) and v > 0], dtype=np.float64)
    return x


def within_log_se(ci_low: float, ci_high: float) -> float:
    """Standard error of a log median implied by its 95% CI (half the log width / z)."""
    if not (math.isfinite(ci_low) and math.isfinite(ci_high)) or ci_low <= 0 or ci_high < ci_low:
        return math.nan
    return (math.log(ci_high) - math.log(ci_low)) / (2.0 * normal_quantile(0.5 + CONFIDENCE / 2))


def summarize_rounds(medians: Sequence[float], within_cis: Optional[Sequence[tuple]] = None,
                     confidence: float = CONFIDENCE, prior: Optional[SpreadPrior] = None) -> RoundsSummary:
    """Statistics of one row across rounds, interference set aside (``clean_rounds`` with the
    prior's window; without a prior every round counts). ``within_cis``: each round's own (low, high)
    CI of its median, used only to tell whether the rounds disagree. ``prior``: the sweep's
    clean spread; with it the CI uses the moderated variance ((R-1)·sd² + d0·s0²) / (R-1+d0)
    and t with R-1+d0 degrees of freedom, and carries the spread between whole runs
    (BETWEEN_RUNS_FACTOR × s0): it is meant to hold what the next run measures."""
    nan = math.nan
    values = [v if v is not None else nan for v in medians]
    keep = clean_rounds(values, row_clean_sd(prior))
    x = np.asarray(values, dtype=np.float64)[keep]
    set_aside = len(_positive(values)) - len(x)
    n = len(x)
    if n == 0:
        return RoundsSummary(0, nan, nan, nan, nan, nan, False)
    logs = np.log(x)
    center = float(np.exp(logs.mean()))
    if n == 1:
        if prior is None:
            return RoundsSummary(1, float(x[0]), nan, nan, nan, nan, False, set_aside)
        # Interference left one round: the sweep's clean spread still says how far it may lie.
        half = t_quantile(0.5 + confidence / 2, prior.df) * prior.log_sd * math.sqrt(1.0 + BETWEEN_RUNS_FACTOR ** 2)
        return RoundsSummary(1, float(x[0]), float(x[0] * math.exp(-half)), float(x[0] * math.exp(half)),
                             nan, nan, False, set_aside)
    sd = float(logs.std(ddof=1))
    var, df = sd * sd, float(n - 1)
    between = 0.0
    if prior is not None:
        var = (df * var + prior.df * prior.log_sd ** 2) / (df + prior.df)
        df += prior.df
        between = (BETWEEN_RUNS_FACTOR * prior.log_sd) ** 2
    half = t_quantile(0.5 + confidence / 2, df) * math.sqrt(var / n + between)
    cv = float(x.std(ddof=1) / x.mean())
    disagree = False
    if within_cis:
        kept_cis = [ci for ci, k in zip(within_cis, keep) if k]
        se = np.asarray([within_log_se(lo, hi) for lo, hi in kept_cis], dtype=np.float64)
        se = se[np.isfinite(se)]
        if len(se):
            typical = float(np.sqrt(np.mean(se ** 2)))
            disagree = sd > DISAGREE_FACTOR * max(typical, MIN_LOG_SD)
    return RoundsSummary(n, center, float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half)),
                         cv, sd, disagree, set_aside)


@dataclass(frozen=True)
class Spread:
    """The spread of one row's round medians within runs (sd of logs), shared by both sides."""

    log_sd: float
    df: float            # degrees of freedom of that estimate (inf: assumed)
    source: str          # both, baseline, new (the sides with two or more rounds in a run), or assumed


def _within(groups) -> tuple:
    """(sum of squares around each run's mean, degrees of freedom) of log medians."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) >= 2:
            ss += float(((g - g.mean()) ** 2).sum())
            df += len(g) - 1
    return ss, df


def _logs(groups) -> list:
    return [np.log(x) for x in (_positive(g) for g in groups) if len(x)]


def within_spread(baseline, new, *, assumed_log_sd: float) -> Spread:
    """How far the rounds of one run spread, from the rounds of both sides (each a list of runs,
    each run a list of round medians). With rounds on both sides the *larger* side's variance
    (never smaller than the pooled one: a noisy new run cannot borrow precision from a quiet
    baseline) with the pooled degrees of freedom; with rounds on one side, that side's; with
    none, ``assumed_log_sd``."""
    ssa, dfa = _within(_logs(baseline))
    ssb, dfb = _within(_logs(new))
    if dfa and dfb:
        return Spread(math.sqrt(max(ssa / dfa, ssb / dfb)), float(dfa + dfb), "both")
    if dfa:
        return Spread(math.sqrt(ssa / dfa), float(dfa), "baseline")
    if dfb:
        return Spread(math.sqrt(ssb / dfb), float(dfb), "new")
    return Spread(assumed_log_sd, math.inf, "assumed")


#: Runs a side needs before its own drift between runs is trusted: with fewer, the estimate has
#: too few degrees of freedom to be anything but noise (calibration: with three runs it cost
#: more power than it bought, benchmarks/README.md).
MIN_RUNS_FOR_DRIFT = 3


def drift_between_runs(rows_runs) -> Optional[tuple]:
    """(sd, df) of the machine-wide factor that moves whole runs made at different times, from
    one side's rows, each a list of runs of round medians; None with fewer than
    MIN_RUNS_FOR_DRIFT runs.

    Each run's effect is the median over rows of its mean log median's deviation from the
    row's mean (the factor moves every row alike); their variance, less what the rounds' own
    spread explains, is the drift's."""
    k = max((len(_logs(runs)) for runs in rows_runs), default=0)
    if k < MIN_RUNS_FOR_DRIFT:
        return None
    effects, rows, within = _run_effects(rows_runs, k)
    if effects is None:
        return None
    variance = float(effects.var(ddof=1)) - (float(np.median(within)) / rows if within else 0.0)
    return math.sqrt(max(variance, 0.0)), float(k - 1)


def _run_effects(rows_runs, k: int) -> tuple:
    """(each run's effect, rows it was judged on, their within-run variances of a run's mean):
    the median over the rows that have all ``k`` runs of the run's mean log median's deviation
    from the row's mean; (None, 0, []) without such a row."""
    deviations, within = [], []
    for runs in rows_runs:
        logs = _logs(runs)
        if len(logs) != k:
            continue
        means = np.array([g.mean() for g in logs])
        deviations.append(means - means.mean())
        ss, df = _within(logs)
        if df:
            within.append(ss / df * float(np.mean([1.0 / len(g) for g in logs])))
    if not deviations:
        return None, 0, []
    return np.median(np.array(deviations), axis=0), len(deviations), within


def slow_runs(rows_runs, clean_sd: float) -> tuple:
    """(distances, kept sd): which runs of a side merged from several lay, on most rows, far above the side's fastest
    run: the log distance of each run's sweep above the fastest that another run confirms,
    where it exceeds the interference window of INTERFERENCE_WIDTH × ``clean_sd`` (the rule
    ``clean_rounds`` applies to rounds), else 0. ``rows_runs``: per row, the side's runs in one
    order, each a list of round medians (an empty list where a run counted none).

    A state of the machine can outlast the launches of a run: on the calibration VM one quiet
    run in ten was 18% slower on every row, with no CPU meter showing why. Noise only adds
    time, so such a run says nothing about the code that the faster ones do not; merged into a
    baseline it moves the baseline and makes the drift between runs look five times larger.
    Needs MIN_RUNS_FOR_DRIFT runs (a fastest and a second to confirm it, and one to judge) and
    MIN_ROWS_FOR_PRIOR rows that have them all; otherwise every run counts. ``kept sd``: how
    far the effects of the runs kept spread (sd; nan with fewer than two), the drift they show."""
    k = len(rows_runs[0]) if rows_runs else 0
    none = (np.zeros(k), math.nan)
    if k < MIN_RUNS_FOR_DRIFT or any(len(runs) != k for runs in rows_runs):
        return none
    effects, rows, _ = _run_effects(rows_runs, k)
    if effects is None or rows < MIN_ROWS_FOR_PRIOR or not math.isfinite(clean_sd):
        return none
    window = interference_window(clean_sd)
    ordered = np.sort(effects)
    confirmed = np.nonzero(ordered[1:] - ordered[:-1] <= window)[0]
    if not len(confirmed):               # no two runs agree: no state of the machine to judge by
        return none
    distance = np.where(effects - ordered[confirmed[0]] > window, effects - ordered[confirmed[0]], 0.0)
    kept = effects[distance == 0]
    return distance, float(np.std(kept, ddof=1)) if len(kept) > 1 else math.nan


@dataclass(frozen=True)
class Change:
    """NEW against BASELINE on the log scale: ``estimate`` = log(ratio of geometric means)."""

    n_baseline: int      # rounds on each side
    n_new: int
    estimate: float      # log ratio; exp(estimate) = new / baseline
    se: float            # standard error of the estimate: rounds and drift between runs
    df: float            # degrees of freedom of the t distribution (Welch–Satterthwaite)
    ci_low: float        # log ratio bounds of the 95% CI
    ci_high: float
    p_value: float       # two-sided, against no change
    noise: str           # where the rounds' spread came from: both, baseline, new, assumed

    @property
    def ratio(self) -> float:
        return math.exp(self.estimate)


def run_concentration(runs) -> float:
    """sum(n_run²) / n²: the share of a side's mean that one run's drift carries (1 for one run;
    0 for none)."""
    sizes = [len(g) for g in runs]
    total = sum(sizes)
    return sum(n * n for n in sizes) / (total * total) if total else 0.0


def log_change(baseline, new) -> Optional[float]:
    """The difference of the sides' mean log medians (each a list of runs of round medians);
    None if either side has none: the point estimate of ``estimate_change``."""
    a, b = _logs(baseline), _logs(new)
    return _difference(a, b) if a and b else None


def _difference(a_logs: list, b_logs: list) -> float:
    return float(np.concatenate(b_logs).mean() - np.concatenate(a_logs).mean())


def estimate_change(baseline, new, *, spread: Spread, drift: tuple, known_var: float = 0.0,
                    confidence: float = CONFIDENCE) -> Optional[Change]:
    """The change from ``baseline`` to ``new`` (each a list of runs, each run a list of round
    medians); None if either side has none.

    The estimate is the difference of the sides' mean log medians. Its variance has three
    parts: the rounds' spread within a run, which averages out over all rounds; the drift of
    whole runs (``drift``: (sd, df)), which averages out only over separate runs — a side made
    of one run carries all of its run's drift; and ``known_var``, taken as known (what a busy
    machine may add to one side's rows and not the other's).
    """
    a, b = _logs(baseline), _logs(new)
    if not a or not b:
        return None
    na, nb = sum(len(g) for g in a), sum(len(g) for g in b)
    drift_sd, drift_df = drift
    within_var = max(spread.log_sd, MIN_LOG_SD) ** 2 * (1.0 / na + 1.0 / nb)
    drift_var = drift_sd ** 2 * (run_concentration(a) + run_concentration(b))
    variance = within_var + drift_var + known_var
    parts = [(within_var, spread.df), (drift_var, drift_df)]
    denominator = sum(v * v / df for v, df in parts if v > 0 and math.isfinite(df))
    df = variance * variance / denominator if denominator > 0 else math.inf
    se = math.sqrt(variance)
    estimate = _difference(a, b)
    half = t_quantile(0.5 + confidence / 2, df) * se
    return Change(na, nb, estimate, se, df, estimate - half, estimate + half,
                  t_two_sided_p(estimate / se, df), spread.source)


def paired_changes(rows_pairs, known_vars=None, confidence: float = CONFIDENCE) -> list:
    """Per row, the change from A to B estimated on its pairs — (A's round median, B's round
    median) of rounds measured one after the other in one job, both counted — or None with
    fewer than two pairs. The estimate is the mean log ratio within pairs: what moved the machine
    during a pair moved both of its rounds and cancels. Its variance is moderated by the
    median over rows of the variance of those log ratios (as ``summarize_rounds`` is), plus the
    row's ``known_vars`` entry, taken as known (as ``estimate_change``'s ``known_var``)."""
    diffs = [None if len(pairs) < 2 else np.log(np.asarray([b for _, b in pairs])) - np.log(np.asarray([a for a, _ in pairs]))
             for pairs in rows_pairs]
    variances = [float(d.var(ddof=1)) for d in diffs if d is not None]
    prior = float(np.median(variances)) if len(variances) >= MIN_ROWS_FOR_PRIOR else None
    out = []
    for d, known in zip(diffs, known_vars if known_vars is not None else [0.0] * len(diffs)):
        if d is None:
            out.append(None)
            continue
        n = len(d)
        var, df = max(float(d.var(ddof=1)), MIN_LOG_SD ** 2), float(n - 1)
        if prior is not None:
            var, df = (df * var + PRIOR_DF * prior) / (df + PRIOR_DF), df + PRIOR_DF
        se = math.sqrt(var / n + known)
        estimate = float(d.mean())
        half = t_quantile(0.5 + confidence / 2, df) * se
        out.append(Change(n, n, estimate, se, df, estimate - half, estimate + half,
                          t_two_sided_p(estimate / se, df), "paired"))
    return out


def detectable_change(se: float, df: float, critical: float, power: float = 0.8) -> float:
    """The relative change (0.12 for 12%) that a test calling |t| > ``critical`` significant
    detects with probability ``power`` when the estimate's standard error is ``se``."""
    if not (math.isfinite(se) and math.isfinite(critical)) or df <= 0:
        return math.nan
    return math.expm1((critical + t_quantile(power, df)) * se)


def rounds_needed(log_sd: float, half_width: float, *, drift_var: float = 0.0, confidence: float = CONFIDENCE,
                  limit: int = 1000) -> Optional[int]:
    """Rounds on each side (one run each) for the CI of a change to be at most ±``half_width``
    (relative) wide; None if more than ``limit`` — or if the drift between runs
    (``drift_var``: its share of the estimate's variance) alone is too wide, which no number
    of rounds in one run can fix."""
    if not math.isfinite(log_sd) or half_width <= 0:
        return None
    target = math.log1p(half_width)
    sd = max(log_sd, MIN_LOG_SD)

    def fits(n: int) -> bool:
        return t_quantile(0.5 + confidence / 2, 2 * n - 2) * math.sqrt(sd * sd * 2.0 / n + drift_var) <= target

    if not fits(limit):
        return None
    lo, hi = 1, limit                 # the half-width shrinks as n grows: bisect for the first n that fits
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return max(hi, 2)
