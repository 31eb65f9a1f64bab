"""compare on constructed results with known answers; the statistics against scipy."""

import json
import math

import numpy as np
import pytest

from collbench.compare import compare_runs, parse_threshold
from collbench.compare_render import comparison_table, summary_line, to_json, to_summary_markdown
from collbench.errors import UsageError
from collbench.results import RunResult
from collbench.significance import ci_overlap, holm, mann_whitney
from results_helpers import metadata, row_from_samples, run_of, sweep

SERIES = sweep(backends=("mpi", "mpi-pickle"))


def verdicts(comparison) -> list:
    return [r.verdict for r in comparison.rows]


# --- statistics --------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_mann_whitney_matches_scipy_including_ties(seed):
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(seed)
    x = np.round(rng.lognormal(1.0, 0.3, rng.integers(5, 80)), 1)    # rounding makes ties
    y = np.round(rng.lognormal(1.0 + 0.05 * seed, 0.3, rng.integers(5, 80)), 1)
    ours = mann_whitney(x, y)
    theirs = stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic")
    assert ours.u_statistic == pytest.approx(theirs.statistic)
    assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-9, abs=1e-15)


def test_mann_whitney_direction_and_all_tied():
    shifted = mann_whitney([1, 2, 3, 4, 5], [11, 12, 13, 14, 15])
    assert shifted.prob_y_greater == 1.0 and shifted.z_score > 0 and shifted.p_value < 0.02
    tied = mann_whitney([7.0] * 6, [7.0] * 6)
    assert tied.p_value == 1.0 and tied.prob_y_greater == 0.5


def test_holm_known_values():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_ci_overlap():
    assert ci_overlap(1, 2, 2, 3) and ci_overlap(1, 5, 2, 3)
    assert not ci_overlap(1, 2, 2.5, 3)


@pytest.mark.parametrize("text, value", [("5%", 0.05), ("0.05", 0.05), (" 12.5% ", 0.125), ("0", 0.0),
                                         ("150%", 1.5)])
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["5", "abc", "-1%", "nan", "%", "inf"])
def test_parse_threshold_rejects(text):
    with pytest.raises(UsageError) as info:
        parse_threshold(text)
    assert "--threshold" in str(info.value) and "\n" not in str(info.value)


# --- verdicts ----------------------------------------------------------------------------------

def test_identical_runs_are_all_same():
    run = run_of(SERIES)
    c = compare_runs(run, run)
    assert set(verdicts(c)) == {"same"} and not c.regression
    assert all(r.ratio == 1.0 and r.test == "mann-whitney" for r in c.rows)


def test_three_times_slower_is_a_regression():
    c = compare_runs(run_of(SERIES, seed=1), run_of(SERIES, seed=2, scale=3.0))
    assert set(verdicts(c)) == {"slower"} and c.regression
    assert all(r.ratio == pytest.approx(3.0, rel=0.1) and r.p_adjusted < 0.05 for r in c.rows)
    assert summary_line(c).startswith(f"{len(SERIES)} slower, 0 faster, 0 same")


def test_faster_is_not_a_regression():
    c = compare_runs(run_of(SERIES, seed=1), run_of(SERIES, seed=2, scale=0.5))
    assert set(verdicts(c)) == {"faster"} and not c.regression


def test_significant_change_within_the_threshold_is_same():
    base, new = run_of(SERIES, seed=1, n=400), run_of(SERIES, seed=1, n=400, scale=1.03)
    c = compare_runs(base, new, threshold=0.05)
    assert set(verdicts(c)) == {"same"} and not c.regression
    assert all(r.significant for r in c.rows)            # the test sees it; the threshold discounts it
    assert verdicts(compare_runs(base, new, threshold=0.01)) == ["slower"] * len(SERIES)


def test_large_but_insignificant_change_is_same():
    c = compare_runs(_wide(1), _wide(1, scale=1.15))
    row = c.rows[0]
    assert abs(row.change) > 0.05 and not row.significant and row.verdict == "same"


def _wide(seed, scale=1.0) -> RunResult:
    """Six very noisy samples: a median can move by 15% without any evidence."""
    rng = np.random.default_rng(seed)
    samples = list(10.0 * scale * rng.lognormal(0.0, 0.6, 6))
    result = RunResult(metadata=metadata())
    result.add(row_from_samples(samples), samples)
    return result


def test_too_few_samples_is_insufficient_data():
    few = run_of(SERIES, n=3)
    c = compare_runs(few, run_of(SERIES, n=3, scale=3.0))
    assert set(verdicts(c)) == {"insufficient data"} and not c.regression


def test_missing_and_new_rows():
    base = dict(SERIES)
    new = dict(SERIES)
    gone = ("allreduce", "mpi", 65536)
    added = ("allreduce", "mpi", 1 << 20)
    del new[gone]
    new[added] = 600.0
    c = compare_runs(run_of(base), run_of(new))
    by_size = {(r.field("backend"), r.field("size_bytes")): r for r in c.rows}
    assert by_size[("mpi", 65536)].verdict == "missing" and math.isnan(by_size[("mpi", 65536)].ratio)
    assert by_size[("mpi", 1 << 20)].verdict == "new"
    assert c.counts["missing"] == 1 and c.counts["new"] == 1 and not c.regression


def test_busbw_metric_higher_is_better():
    c = compare_runs(run_of(SERIES, seed=1), run_of(SERIES, seed=2, scale=3.0), metric="busbw_gbps")
    assert set(verdicts(c)) == {"slower"}
    assert all(r.ratio == pytest.approx(1 / 3, rel=0.1) for r in c.rows)
    faster = compare_runs(run_of(SERIES, seed=1), run_of(SERIES, seed=2, scale=0.5), metric="busbw_gbps")
    assert set(verdicts(faster)) == {"faster"}


def test_holm_controls_false_alarms_across_many_sizes():
    """One row about 6% slower with p = 0.002: a regression alone, noise among 40 rows."""
    base_samples = [100.0 + i for i in range(12)]
    new_samples = [106.0 + i for i in range(12)]
    alone = mann_whitney(base_samples, new_samples).p_value
    assert 0.05 / 40 < alone < 0.05

    def run(samples, sizes):
        result = RunResult(metadata=metadata())
        result.add(row_from_samples(samples, size_bytes=8), samples)
        for size in sizes:
            flat = [50.0 + (i % 3) for i in range(12)]
            result.add(row_from_samples(flat, size_bytes=size), flat)
        return result

    assert verdicts(compare_runs(run(base_samples, []), run(new_samples, []))) == ["slower"]
    many = range(16, 16 + 39 * 16, 16)
    c = compare_runs(run(base_samples, many), run(new_samples, many))
    first = c.rows[0]
    assert first.p_value == pytest.approx(alone) and first.p_adjusted == pytest.approx(min(1.0, 40 * alone))
    assert first.verdict == "same" and not c.regression


def test_csv_like_rows_use_ci_overlap():
    base, slow = run_of(SERIES, seed=1), run_of(SERIES, seed=2, scale=3.0)
    for result in (base, slow):
        result.samples = [None] * len(result.rows)
    c = compare_runs(base, slow)
    assert {r.test for r in c.rows} == {"ci-overlap"} and set(verdicts(c)) == {"slower"}
    same = compare_runs(base, base)
    assert set(verdicts(same)) == {"same"}
    few = run_of(SERIES, n=3)                      # three samples: no confidence interval
    few.samples = [None] * len(few.rows)
    assert set(verdicts(compare_runs(few, slow))) == {"insufficient data"}


def test_no_common_rows_is_incomparable():
    other = run_of({("bcast", "mpi", 8): 3.0})
    with pytest.raises(UsageError, match="no row in common.*incomparable"):
        compare_runs(run_of(SERIES), other)
    with pytest.raises(UsageError, match="incomparable"):
        compare_runs(RunResult(metadata=metadata()), RunResult(metadata=metadata()))


def test_duplicate_keys_are_refused():
    run = run_of(SERIES)
    run.add(run.rows[0], run.samples[0])
    with pytest.raises(UsageError, match="two rows"):
        compare_runs(run, run_of(SERIES))


def test_metadata_differences_are_warned():
    base = run_of(SERIES)
    new = run_of(SERIES, meta=metadata(hostnames=["node7"], world_size=4,
                                       versions={"mpi_library": "Open MPI v5.0.3", "mpi4py": "4.0"}))
    warnings = " | ".join(compare_runs(base, new).warnings)
    for expected in ("hostnames differs: node1", "MPI library differs", "world size differs"):
        assert expected in warnings
    assert compare_runs(base, run_of(SERIES)).warnings == ()


def test_dtype_and_check_failures_are_warned():
    base = run_of(SERIES)
    new = run_of(SERIES)
    new.rows[0] = row_from_samples(new.samples[0], size_bytes=8, check="wrong:3")
    new.add(row_from_samples(new.samples[1], dtype="float64"), new.samples[1])
    warnings = " | ".join(compare_runs(base, new).warnings)
    assert "dtype differs: float32 in baseline, float32,float64 in new" in warnings
    assert "1 matched row(s) in new FAILED the result check" in warnings


def test_renderers_carry_verdicts_and_warnings():
    base = run_of(SERIES, seed=1)
    new = run_of(SERIES, seed=2, scale=3.0, meta=metadata(hostnames=["elsewhere"]))
    c = compare_runs(base, new, baseline_name="base.json", new_name="new.json")
    table = comparison_table(c)
    assert table.headers[-1] == "verdict" and {row[-1] for row in table.rows} == {"slower"}
    markdown = to_summary_markdown(c)
    assert markdown.startswith("## collbench compare: REGRESSION")
    assert f"**{len(SERIES)} slower, 0 faster, 0 same**" in markdown
    assert "> **Warning:** hostnames differs" in markdown
    doc = json.loads(to_json(c))
    assert doc["regression"] is True and doc["summary"]["slower"] == len(SERIES)
    assert doc["warnings"] and doc["rows"][0]["verdict"] == "slower" and doc["multiple_comparisons"] == "holm"
