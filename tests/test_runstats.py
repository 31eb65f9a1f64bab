"""Run-to-run statistics and the t distribution, as pure functions with known answers."""

import math

import numpy as np
import pytest

from collbench.results.aggregate import build_row, moderate_rows, round_data, worst_check
from collbench.stats.distributions import (f_cdf, f_quantile, incomplete_beta, t_cdf, t_quantile,
                                           t_two_sided_p)
from collbench.stats import runs as runstats
from collbench.stats.noise import SpreadPrior, noise_model
from collbench.stats.change import detectable_change, estimate_change, rounds_needed, within_spread
from collbench.stats.rounds import summarize_rounds
from collbench.stats.runs import drift_between_runs
from results_helpers import identity
from collbench.stats.calibration import BETWEEN_RUNS_FACTOR, MIN_ROWS_FOR_PRIOR, PRIOR_DF


@pytest.mark.parametrize("df", [0.7, 1, 2, 3.5, 4, 9, 30, 250, 5000])
def test_t_distribution_matches_scipy(df):
    stats = pytest.importorskip("scipy.stats")
    for t in (-40, -4.5, -1.2, 0.0, 0.3, 2.1, 7.0, 60.0):
        assert t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), rel=1e-9, abs=1e-13)
        assert t_two_sided_p(t, df) == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-9,
                                                     abs=1e-13)
    for p in (1e-6, 0.001, 0.025, 0.4, 0.975, 0.999, 1 - 1e-6):
        assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9)


@pytest.mark.parametrize("d1, d2", [(1, 4), (2, 4), (9, 4), (27, 8), (4, math.inf)])
def test_f_distribution_matches_scipy(d1, d2):
    stats = pytest.importorskip("scipy.stats")
    for p in (0.5, 0.95, 0.99):
        assert f_quantile(p, d1, d2) == pytest.approx(stats.f.ppf(p, d1, min(d2, 1e12)), rel=1e-6)
    assert f_cdf(3.0, d1, d2) == pytest.approx(stats.f.cdf(3.0, d1, min(d2, 1e12)), rel=1e-6)


def test_t_distribution_known_values_and_limits():
    assert t_quantile(0.975, 4) == pytest.approx(2.7764451051977987)
    assert t_quantile(0.975, math.inf) == pytest.approx(1.959963984540054)
    assert t_cdf(0.0, 3) == 0.5 and t_two_sided_p(0.0, 3) == 1.0
    assert incomplete_beta(2.0, 3.0, 0.0) == 0.0 and incomplete_beta(2.0, 3.0, 1.0) == 1.0
    assert incomplete_beta(1.0, 1.0, 0.3) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_summarize_rounds_known_answer():
    s = summarize_rounds([10.0, 20.0, 40.0])
    assert s.rounds == 3 and s.center == pytest.approx(20.0)                # geometric mean
    sd = math.log(2.0)                                                      # logs are evenly spaced
    half = t_quantile(0.975, 2) * sd / math.sqrt(3)
    assert s.log_sd == pytest.approx(sd)
    assert (s.ci_low, s.ci_high) == pytest.approx((20 * math.exp(-half), 20 * math.exp(half)))
    assert s.cv == pytest.approx(np.std([10, 20, 40], ddof=1) / np.mean([10, 20, 40]))


def test_one_round_has_no_run_to_run_figures():
    s = summarize_rounds([7.0])
    assert (s.rounds == 1 and s.center == 7.0 and math.isnan(s.ci_low) and math.isnan(s.cv)
            and not s.disagree)
    assert summarize_rounds([]).rounds == 0


def test_rounds_disagree_only_far_beyond_what_their_trend_allows():
    """‡ compares a row's spread with its trend's (an F test at 1%), not with what each round's
    own CI allows: ten rounds 2% apart among rows whose trend says 2% are ordinary; 20% apart
    they disagree, and their CI then rests on their own rounds alone (wider than moderated)."""
    rng = np.random.default_rng(8)
    prior = SpreadPrior(log_sd=0.02, df=4.0, rows=40, window_sd=1.0)
    ordinary = 50.0 * np.exp(rng.normal(0, 0.02, 10))
    assert not summarize_rounds(ordinary, prior=prior).disagree
    wild = 50.0 * np.exp(rng.normal(0, 0.2, 10))
    s = summarize_rounds(wild, prior=prior)
    assert s.disagree and s.rounds == 10
    own = summarize_rounds(wild)
    between = (BETWEEN_RUNS_FACTOR * 0.02) ** 2
    half = t_quantile(0.975, 9) * math.sqrt(own.log_sd ** 2 / 10 + between)
    assert s.ci_high == pytest.approx(own.center * math.exp(half))
    # without a model there is nothing to judge by
    assert not summarize_rounds(wild).disagree


@pytest.mark.parametrize("rounds", [3, 5, 10])
def test_run_to_run_ci_covers_the_true_centre_about_95_percent(rounds):
    """Short seeded version of benchmarks/coverage.py: launches with a lognormal effect (sd 15%)
    plus within-round noise (3%); the CI of the centre must cover exp(mean log) ~95% of the time."""
    rng = np.random.default_rng(rounds)
    true = 50.0
    trials, covered = 4000, 0
    for _ in range(trials):
        medians = true * np.exp(rng.normal(0, 0.15, rounds) + rng.normal(0, 0.03, rounds))
        s = summarize_rounds(medians)
        covered += s.ci_low <= true <= s.ci_high
    assert 0.935 <= covered / trials <= 0.965


@pytest.mark.parametrize("rounds", [5, 10])
def test_a_rows_centre_is_its_own_and_the_model_shapes_only_its_interval(rounds):
    """Short seeded sweeps of 40 rows where one launch in four is 35% slower (interference, 15
    spreads up): the file's noise model moves no row's centre, only its interval, which still
    covers the undisturbed time in over 90% of rows. With 10 rounds a row's own rounds set most
    slow ones aside (the centre 2% above the undisturbed time, against 7.5% with every round);
    with 5 they cannot tell 15 spreads from their own spread, and keep them."""
    rng = np.random.default_rng(100 + rounds)
    slow = math.log(1.35)
    centre = 50.0
    pooled = total = same = 0
    bias = []
    for _ in range(60):
        sweep = [50.0 * np.exp(np.where(rng.random(rounds) < 0.25, slow, 0.0)
                               + rng.normal(0, 0.02, rounds))
                 for _ in range(40)]
        prior = noise_model(sweep)
        for medians in sweep:
            s, m = summarize_rounds(medians), summarize_rounds(medians, prior=prior)
            same += s.center == m.center and s.set_aside == m.set_aside
            pooled += m.ci_low <= centre <= m.ci_high
            bias.append(math.log(m.center / centre))
            total += 1
    assert same == total
    assert pooled / total > 0.9
    if rounds == 10:
        assert np.mean(bias) < 0.03 < 0.25 * slow


def _change(a, b, drift=0.0, assumed=0.3):
    spread = within_spread(a, b, assumed_log_sd=assumed)
    return estimate_change(a, b, spread=spread, drift=(drift, math.inf))


def test_change_sources_of_noise():
    both = _change([[10, 11, 12]], [[20, 22, 24]])
    assert both.noise == "both" and both.ratio == pytest.approx(2.0) and both.df == pytest.approx(4)
    assert both.ci_low < math.log(2) < both.ci_high and both.p_value < 0.001
    base_only = _change([[10, 11, 12, 10.5]], [[20]])
    assert base_only.noise == "baseline" and base_only.df == pytest.approx(3)
    assert _change([[10]], [[20, 21]]).noise == "new"
    assumed = _change([[10]], [[20]])
    assert assumed.noise == "assumed" and math.isinf(assumed.df)
    assert assumed.se == pytest.approx(0.3 * math.sqrt(2))
    assert _change([], [[1.0]]) is None


def test_change_takes_the_noisier_side():
    quiet = [[10.0, 10.1, 9.9, 10.0, 10.05, 9.95]]
    noisy = [[12.0, 9.0, 15.0]]
    spread = within_spread(quiet, noisy, assumed_log_sd=0.3)
    assert spread.log_sd == pytest.approx(np.std(np.log(noisy[0]), ddof=1), rel=1e-9)
    # a quiet baseline does not make a noisy new run "significant"
    assert _change(quiet, noisy).p_value > 0.05


def test_drift_of_whole_runs_averages_out_over_runs_not_rounds():
    """One run on each side carries all of its run's drift: more rounds in it do not help."""
    few, many = _change([[10.0, 10.2]], [[11.0, 11.2]], drift=0.1), \
        _change([[10.0, 10.2] * 20], [[11.0, 11.2] * 20], drift=0.1)
    assert many.se == pytest.approx(0.1 * math.sqrt(2), rel=0.01) and many.se < few.se
    # eight runs in the baseline
    base, new = [[10.0, 10.2]] * 8, [[11.0, 11.2]]
    runs = _change(base, new, drift=0.1)
    s = within_spread(base, new, assumed_log_sd=0.3).log_sd
    assert runs.se == pytest.approx(math.sqrt(s * s * (1 / 16 + 1 / 2) + 0.1 ** 2 * (1 / 8 + 1)))
    assert runs.se < many.se


def test_drift_between_runs_is_measured_from_three_runs():
    rng = np.random.default_rng(3)
    effects = rng.normal(0, 0.2, 8)                        # each run shifts every row alike
    rows = [[list(10.0 * (r + 1) * np.exp(e + rng.normal(0, 0.01, 6))) for e in effects]
            for r in range(30)]
    sd, df = drift_between_runs(rows)
    assert df == 7 and sd == pytest.approx(np.std(effects, ddof=1), rel=0.05)
    # too few runs to say anything
    assert drift_between_runs([runs[:2] for runs in rows]) is None


def test_detectable_change_and_rounds_needed():
    assert detectable_change(0.05, 18, 2.0) < detectable_change(0.1, 18, 2.0)
    assert detectable_change(0.1, 18, 3.5) > detectable_change(0.1, 18, 2.0)
    assert (detectable_change(0.1, math.inf, 1.96)
            == pytest.approx(math.expm1((1.96 + 0.8416) * 0.1), rel=1e-3))
    assert math.isnan(detectable_change(math.nan, 4, 2.0))
    n = rounds_needed(0.1, 0.05)
    half = lambda k: math.expm1(t_quantile(0.975, 2 * k - 2) * 0.1 * math.sqrt(2 / k))   # noqa: E731
    assert half(n) <= 0.05 < half(n - 1)
    assert rounds_needed(5.0, 0.01) is None and rounds_needed(0.001, 0.5) == 2
    # the drift alone is wider
    assert rounds_needed(0.01, 0.05, drift_var=0.1 ** 2) is None


def test_rows_from_rounds():
    rounds = [round_data(i + 1, [m] * 9 + [m * 3], [m, m], precision_reached=i != 1, check=c)
              for i, (m, c) in enumerate([(10.0, "ok"), (20.0, "wrong:3"), (40.0, "ok")])]
    row = build_row(identity(size_bytes=1024), rounds)
    assert row.rounds == 3 and row.time_us_round_p50s == (10.0, 20.0, 40.0)
    assert row.time_us_p50 == pytest.approx(20.0) and row.iterations == 30
    # over every round's samples
    assert row.time_us_min == 10.0 and row.time_us_max == 120.0
    assert row.check == "wrong:3" and not row.precision_reached
    assert row.algbw_gbps == pytest.approx(1024 / 20e-6 / 1e9)
    single = build_row(identity(size_bytes=1024), rounds[:1])
    assert single.time_us_p50 == 10.0 and single.time_us_ci_low == rounds[0].time_us_ci_low


def test_worst_check():
    assert worst_check(["ok", "ok"]) == "ok"
    assert worst_check(["ok", "wrong:2", "wrong:7"]) == "wrong:7"
    assert worst_check(["skipped"]) == "skipped"


def test_moderated_interval_pools_the_sweeps_spread_into_each_rows_own():
    medians = [10.0, 10.1, 9.9]                       # three rounds that happen to agree
    own = summarize_rounds(medians)
    prior = SpreadPrior(log_sd=0.2, df=4.0, rows=20, window_sd=0.2)
    moderated = summarize_rounds(medians, prior=prior)
    logs = np.log(medians)
    var = (2 * logs.var(ddof=1) + 4.0 * 0.2 ** 2) / 6.0
    # and between runs
    half = t_quantile(0.975, 6.0) * math.sqrt(var / 3 + (BETWEEN_RUNS_FACTOR * 0.2) ** 2)
    assert moderated.ci_low == pytest.approx(math.exp(logs.mean() - half))
    assert moderated.ci_high == pytest.approx(math.exp(logs.mean() + half))
    assert moderated.ci_high - moderated.ci_low > 5 * (own.ci_high - own.ci_low)
    assert moderated.center == own.center and moderated.cv == own.cv    # only the interval changes
    # a row a little noisier than its trend is moderated towards it, with more degrees of freedom
    noisier = [10.0, 10.6, 9.5]
    s = summarize_rounds(noisier, prior=SpreadPrior(0.04, 4.0, 20))
    logs = np.log(noisier)
    var = (2 * logs.var(ddof=1) + 4.0 * 0.04 ** 2) / 6.0
    assert not s.disagree and var < logs.var(ddof=1)
    half = t_quantile(0.975, 6.0) * math.sqrt(var / 3 + (BETWEEN_RUNS_FACTOR * 0.04) ** 2)
    assert s.ci_high == pytest.approx(math.exp(logs.mean() + half))
    # one far noisier than its trend is not described by it: its own rounds alone (and the spread
    # between runs)
    noisy = [10.0, 14.0, 7.0]
    beyond = summarize_rounds(noisy, prior=SpreadPrior(0.01, 4.0, 20))
    assert beyond.disagree and beyond.ci_high >= summarize_rounds(noisy).ci_high


def test_a_flat_noise_model_is_the_median_variance_of_rows_with_rounds():
    rows = [[10.0 * math.exp(0.1 * k), 10.0] for k in range(1, MIN_ROWS_FOR_PRIOR + 1)] + [[5.0]]
    prior = noise_model(rows)
    variances = sorted(np.log(r).var(ddof=1) for r in rows if len(r) >= 2)
    assert prior.rows == MIN_ROWS_FOR_PRIOR and prior.df == PRIOR_DF
    # these rows spread more the longer they take, which no jitter does: the trend is flat, and the
    # prior of every row is the median variance, as a sweep-wide prior was
    assert prior.spread.pooled.shape == 0.0
    assert all(prior.noise(r).log_sd == pytest.approx(math.sqrt(np.median(variances)))
               for r in rows)
    # too few rows of 2+ rounds
    assert noise_model(rows[:MIN_ROWS_FOR_PRIOR - 1] + [[1.0]] * 20) is None


def test_moderate_rows_changes_only_the_intervals_of_rows_with_rounds():
    def row(medians, size):
        rounds = [round_data(i + 1, [m] * 10, [m, m], precision_reached=True, check="ok")
                  for i, m in enumerate(medians)]
        return build_row(identity(size_bytes=size), rounds)

    rng = np.random.default_rng(3)
    noisy = [row(list(20.0 * np.exp(rng.normal(0, 0.2, 5))), 2 ** k) for k in range(10)]
    quiet = row([20.0, 20.01, 19.99, 20.0, 20.02], 4096)
    single = row([7.0], 8192)
    out = moderate_rows(noisy + [quiet, single])
    assert out[-1] is single
    kept = [(a, b) for a, b in zip(out, noisy + [quiet, single]) if a.rounds_set_aside == 0]
    assert len(kept) >= 8 and all(a.time_us_p50 == pytest.approx(b.time_us_p50) for a, b in kept)
    assert (out[-2].time_us_ci_high / out[-2].time_us_ci_low > 1.2 > quiet.time_us_ci_high
            / quiet.time_us_ci_low)
    # too few rows to pool: their own rounds only
    assert moderate_rows(noisy[:3]) == noisy[:3]


def test_collector_moderates_with_the_prior_of_the_last_round_and_keeps_unchanged_rows():
    from collbench.results.collector import Collector

    rng = np.random.default_rng(5)
    collector = Collector({})
    ids = [identity(size_bytes=2 ** k) for k in range(12)]
    for number in (1, 2, 3):
        for k, key in enumerate(ids):
            m = 10.0 * math.exp(rng.normal(0, 0.2))
            collector.add(key, (k,),
                          round_data(number, [m] * 8, [m, m], precision_reached=True, check="ok"))
        collector.round_ended()
    first = list(collector.run_result().rows)
    prior = noise_model(r.time_us_round_p50s for r in first)
    assert first == moderate_rows(first) and prior is not None
    m = 30.0
    collector.add(ids[0], (0,), round_data(4, [m] * 8, [m, m], precision_reached=True, check="ok"))
    second = collector.run_result().rows
    # a save costs the changed row only
    assert all(a is b for a, b in zip(first[1:], second[1:]))
    assert second[0].rounds == 4
    assert second[0].time_us_ci_high == pytest.approx(summarize_rounds(second[0].time_us_round_p50s,
                                                                       prior=prior).ci_high)
    # the next round: a fresh prior
    collector.round_ended()
    assert collector.run_result().rows == moderate_rows([r for r in collector.run_result().rows])


def test_which_rounds_count_is_the_rows_own_and_one_round_gets_the_sweeps_interval():
    prior = SpreadPrior(log_sd=0.02, df=4.0, rows=20, window_sd=0.02)
    # three rounds cannot tell interference
    few = summarize_rounds([10.0, 30.0, 90.0], prior=prior)
    assert few.rounds == 3 and few.set_aside == 0 and few.center == pytest.approx(30.0)
    assert few.ci_low < 10.0 and few.ci_high > 90.0
    # nine rounds agree: they count
    ten = summarize_rounds([10.0] + [90.0] * 9, prior=prior)
    assert ten.center == pytest.approx(90.0) and ten.set_aside == 1
    spike = summarize_rounds([10.0, 10.1, 10.05, 9.95, 10.02, 90.0], prior=prior)
    assert spike.set_aside == 1 and spike.center == pytest.approx(10.02, rel=1e-3)
    # no model: the same
    assert summarize_rounds([10.0, 10.1, 10.05, 9.95, 10.02, 90.0]).center == spike.center
    one = summarize_rounds([10.0, None, math.nan], prior=prior)       # one measured round
    half = t_quantile(0.975, 4.0) * 0.02 * math.sqrt(1 + BETWEEN_RUNS_FACTOR ** 2)
    assert one.rounds == 1 and one.ci_low == pytest.approx(10.0 * math.exp(-half))
    # alone, one round says nothing
    assert math.isnan(summarize_rounds([10.0]).ci_low)


def test_a_ci_reaches_up_to_a_state_a_fifth_of_the_rounds_ran_in():
    """Rounds set aside above the counted ones in a fifth of a row's rounds or more are a state
    of the machine its next run may settle in (the ten H100 runs: the CIs of the overhead-bound
    rows held what the other runs settled on for 70% of rows, 96% with this). Fewer are
    interference, and the CI is the counted rounds' alone."""
    prior = SpreadPrior(log_sd=0.01, df=4.0, rows=20, window_sd=0.01)
    clean = [10.0, 10.1, 10.05, 9.95, 10.02, 10.08, 9.97, 10.03]
    alone = summarize_rounds(clean, prior=prior)
    once = summarize_rounds(clean + [15.0], prior=prior)                 # 1 of 9: interference
    twice = summarize_rounds(clean + [15.0, 14.0], prior=prior)          # 2 of 10: a state
    assert once.set_aside == 1 and once.ci_high == pytest.approx(alone.ci_high, rel=0.01)
    # the slowest level a fifth reached
    assert twice.set_aside == 2 and twice.ci_high == pytest.approx(14.0)
    assert (twice.ci_low == pytest.approx(alone.ci_low, rel=0.01)
            and twice.center == pytest.approx(alone.center))
    # a fifth of 11 is 2.2: three must reach it
    thrice = summarize_rounds(clean + [15.0, 14.0, 16.0], prior=prior)
    assert thrice.ci_high == pytest.approx(14.0)


def _runs_of(levels, rows=10, rounds=5, sd=0.01, seed=3):
    """Per row, one run of round medians per level (a whole run's factor)."""
    rng = np.random.default_rng(seed)
    return [[list(np.exp(np.log(100.0 * (1 + r)) + level + rng.normal(0, sd, rounds)))
             for level in levels]
            for r in range(rows)]


def test_a_run_far_above_two_that_agree_is_set_aside_and_the_kept_runs_spread_is_their_drift():
    distance, kept = runstats.slow_runs(_runs_of([0.0, 0.01, 0.2]), [0.01] * 10)
    assert distance[:2].tolist() == [0.0, 0.0] and 0.15 < distance[2] < 0.25
    assert 0.0 < kept * 0.01 < 0.03                     # in units of the rows' clean spread


def test_runs_are_all_kept_without_two_that_agree_or_with_too_few():
    # no consensus
    assert not runstats.slow_runs(_runs_of([0.0, 0.2, 0.4]), [0.01] * 10)[0].any()
    assert not runstats.slow_runs(_runs_of([0.0, 0.3]), [0.01] * 10)[0].any()          # two runs
    # too few rows
    assert not runstats.slow_runs(_runs_of([0.0, 0.01, 0.3], rows=4), [0.01] * 4)[0].any()
