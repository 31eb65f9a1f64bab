"""The noise model (collbench.stats.noise): per stratum, with a trend against the row's time.

Synthetic sweeps with known answers, then the real H100 files of issue 32 (tests/data/h100),
where overhead-bound rows that spread 5-40% from round to round sit beside bandwidth-bound
rows that agree to 0.1%."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from collbench.analysis.compare import compare_runs
from collbench.analysis.compare_render import (detection_line, first_line, to_json,
                                               to_summary_markdown)
from collbench.analysis.report import gate_sensitivity, sensitivity_table
from collbench.stats.noise import fit_trend, fit_trends, machine_state, moderated, noise_model
from collbench.results.aggregate import build_row, moderate_rows, round_data
from collbench.results.loader import load_result
from collbench.results.records import RunResult
from results_helpers import identity, metadata
from collbench.stats.calibration import MIN_ROWS_FOR_PRIOR

DATA = Path(__file__).resolve().parent / "data"
H100 = DATA / "h100"
M64 = 64 << 20
#: At one rank these are in place and do nothing: ~22 µs of torch's overhead at every size.
IN_PLACE = {"allreduce", "bcast", "reduce"}


def _row(medians, size, backend="mpi", timing="latency"):
    rounds = [round_data(i + 1, [m] * 8, [m, m], precision_reached=True, check="ok")
              for i, m in enumerate(medians)]
    return build_row(identity(size_bytes=size, backend=backend, timing=timing),
                     rounds), tuple(rounds)


def _half_width(row) -> float:
    return math.log(row.time_us_ci_high / row.time_us_p50)


def _jitter_sweep(rng, sizes, jitter_us=4.0, rounds=5, backend="mpi", base_us=20.0):
    """Rows of time base + size/1000 µs whose rounds carry an absolute jitter of ``jitter_us``:
    20% at 20 µs, 0.5% at 800 µs (log sd = jitter / time)."""
    rows = []
    for size in sizes:
        t = base_us + size / 1000.0
        rows.append(_row(list(t * np.exp(rng.normal(0.0, jitter_us / t, rounds))), size, backend))
    return rows


def test_a_trend_keeps_stable_rows_narrow_and_noisy_rows_wide():
    """One stratum, two regimes: short rows that spread 20% from round to round and long ones that
    agree to 0.5%. With one sweep-wide spread every row got the same interval; with the trend the
    long rows get a narrow one and the short ones stay wide and honest."""
    rng = np.random.default_rng(32)
    sizes = [8 * 2 ** k for k in range(8)] + [800_000 + 1000 * k for k in range(8)]
    covered = total = 0
    for _ in range(20):
        rows = [r for r, _ in _jitter_sweep(rng, sizes)]
        out = moderate_rows(rows)
        short = [r for r in out if r.size_bytes < 10_000]
        long = [r for r in out if r.size_bytes >= 800_000]
        assert all(_half_width(r) > 0.15 for r in short)
        assert all(_half_width(r) < 0.03 for r in long)
        for r in out:
            t = 20.0 + r.size_bytes / 1000.0
            covered += r.time_us_ci_low <= t <= r.time_us_ci_high
            total += 1
    assert covered / total > 0.95
    model = noise_model([r.time_us_round_p50s for r in rows])
    trend = model.spread.pooled                             # the jitter is absolute: sd ~ 1 / time
    assert math.sqrt(trend.variance(20.0) / trend.variance(820.0)) > 10


def test_strata_are_kept_apart_and_small_ones_pool_with_the_file():
    """A noisy backend beside a quiet one at the same sizes: each gets its own trend, so the quiet
    one's rows stay narrow. A stratum of fewer than MIN_ROWS_FOR_PRIOR rows reads the whole
    file's."""
    rng = np.random.default_rng(5)
    sizes = [1024 * 2 ** k for k in range(10)]
    noisy = [_row(list(40.0 * np.exp(rng.normal(0, 0.15, 5))), s, "gloo")[0] for s in sizes]
    quiet = [_row(list(40.0 * np.exp(rng.normal(0, 0.003, 5))), s, "mpi")[0] for s in sizes]
    few = [_row(list(40.0 * np.exp(rng.normal(0, 0.003, 5))), s, "mpi", timing="throughput")[0]
           for s in sizes[:3]]
    out = moderate_rows(noisy + quiet + few)
    assert all(_half_width(r) > 0.1 for r in out[:10])
    assert all(_half_width(r) < 0.02 for r in out[10:20])
    trends = fit_trends([("gloo",)] * 10 + [("mpi",)] * 10 + [("few",)] * 3, [40.0] * 23,
                        [0.15 ** 2] * 10 + [0.003 ** 2] * 10 + [0.003 ** 2] * 3)
    assert set(trends.by_stratum) == {("gloo",), ("mpi",)}
    assert trends.variance(40.0, ("few",)) == pytest.approx(trends.pooled.variance(40.0))
    assert trends.variance(40.0, ("mpi",)) == pytest.approx(0.003 ** 2)
    assert fit_trends([None] * (MIN_ROWS_FOR_PRIOR - 1), [1.0] * 7, [0.1] * 7).pooled is None


def test_a_flat_trend_is_the_median_of_the_variances():
    """Variances that do not move with time give a flat trend scaled to their median: the
    sweep-wide estimator the CPU calibration was made with."""
    rng = np.random.default_rng(1)
    times = np.exp(rng.uniform(0, 8, 60))
    variances = 0.02 ** 2 * rng.chisquare(4, 60) / 4
    trend = fit_trend(times, variances)
    assert trend.shape < 1e-3
    assert trend.variance(times[0]) == pytest.approx(np.median(variances), rel=0.05)
    jitter = fit_trend(times, (1.0 / times) ** 2 * rng.chisquare(4, 60) / 4)
    assert jitter.shape > 0.99 and jitter.variance(100.0) < jitter.variance(1.0) / 1000


def test_moderation_follows_limma_and_leaves_a_row_beyond_its_trend_alone():
    m = moderated(0.02 ** 2, 4.0, 0.01 ** 2)
    assert (not m.beyond and m.df == 8.0
            and m.variance == pytest.approx((4 * 0.02 ** 2 + 4 * 0.01 ** 2) / 8))
    wild = moderated(0.2 ** 2, 4.0, 0.01 ** 2)
    assert wild.beyond and wild.df == 4.0 and wild.variance == 0.2 ** 2
    assert moderated(0.01, 2.0, math.nan) == moderated(0.01, 2.0, math.nan)


def test_a_state_moves_each_row_in_proportion_to_its_noise():
    """The whole shift is read in units of each row's modelled spread: when the noisy rows move
    10% together, the stable rows are not taken to have moved with them."""
    units = [0.05] * 12 + [0.002] * 6
    changes = [0.1] * 12 + [0.0] * 6
    state = machine_state(changes, units, [None] * 18)
    assert state[0][0] == pytest.approx(0.1) and state[-1][0] == pytest.approx(0.004)
    flat = machine_state([0.1] * 18, [0.02] * 18, [None] * 18)
    assert all(s == pytest.approx((0.1, 0.1)) for s in flat)          # one noise: the shift itself
    assert machine_state([0.1] * 5, [0.02] * 5, [None] * 5) == [(0.0, 0.0)] * 5


# --- the H100 files of issue 32 ----------------------------------------------------------------

def scaled_copy(path: Path, factor: float, min_size: int, out: Path) -> Path:
    """The file with every row of ``min_size`` bytes or more ``factor`` times slower: its round
    medians, round CIs, samples and figures."""
    doc = json.loads(path.read_text())
    for row in doc["rows"]:
        if row["size_bytes"] < min_size:
            continue
        for name in ("time_us_p50", "time_us_ci_low", "time_us_ci_high", "time_us_mean",
                     "time_us_min", "time_us_p95",
                     "time_us_p99", "time_us_max", "time_us_rank_avg", "slowest_rank_us"):
            if row.get(name) is not None:
                row[name] *= factor
        row["algbw_gbps"] /= factor
        row["busbw_gbps"] /= factor
        row["time_us_round_p50s"] = [m * factor for m in row["time_us_round_p50s"]]
        for d in row.get("round_details") or []:
            for name in ("time_us_p50", "time_us_ci_low", "time_us_ci_high"):
                d[name] *= factor
            for name in ("samples_us", "rank_means_us"):
                if d.get(name):
                    d[name] = [v * factor for v in d[name]]
    out.write_text(json.dumps(doc))
    return out


@pytest.fixture(scope="module")
def nccl():
    return load_result(H100 / "nccl-all.json")


def test_a_stable_row_gets_a_narrow_interval_beside_noisy_ones(nccl):
    """allgather 1G: three round medians within 0.1%. With the sweep-wide spread its CI was ±9%;
    with its trend about ±1.3% (the spread between runs, 1.5 × the trend's spread at 735 µs,
    is most of it). The overhead-bound rows keep ±10% and more."""
    rows = {(r.collective, r.size_bytes): r for r in moderate_rows(nccl.rows)}
    big = rows[("allgather", 1 << 30)]
    assert _half_width(big) < 0.014 and -math.log(big.time_us_ci_low / big.time_us_p50) < 0.014
    assert all(_half_width(rows[(c, 1024)]) > 0.08 for c in ("allreduce", "bcast", "reduce",
                                                             "allgather"))


def test_rounds_disagree_marks_the_exception(nccl):
    """‡ stood on 11 of 18 rows of a quiet CPU run and on most of the H100 sweep: it compared the
    spread from launch to launch with what one launch's samples allow. Against the trend, it
    marks rows far noisier than their stratum at their time."""
    quiet = load_result(DATA / "gate" / "slow-state-a.json")
    # the file, as written
    assert sum(r.rounds_disagree for r in quiet.rows) == 11
    assert sum(r.rounds_disagree for r in moderate_rows(quiet.rows)) <= 1
    assert sum(r.rounds_disagree for r in moderate_rows(nccl.rows)) <= 2


def _bandwidth_bound(rows):
    big = [r for r in rows if r.field("size_bytes") >= M64]
    return [r for r in big if r.field("collective") not in IN_PLACE], big


def test_compare_of_the_sweep_with_itself_calls_the_stable_rows_same(nccl):
    """At 5%: of the 15 bandwidth-bound rows of 64M and more, those whose rounds agree are the
    same (12: the other three have rounds 3%, 7% and 35% apart, a lone fast round or none two
    agree); the 9 in-place rows (torch's overhead, bimodal rounds) stay inconclusive."""
    c = compare_runs(nccl, nccl, threshold=0.05)
    bandwidth, big = _bandwidth_bound(c.rows)
    assert len(bandwidth) == 15 and len(big) == 24
    assert sum(r.verdict == "same" for r in bandwidth) >= 12
    assert {r.verdict for r in c.rows} <= {"same", "inconclusive"}
    # 14 of 89 rows decided at 5%: the gate says it could not see the rest rather than pass them
    assert first_line(c).startswith("UNDECIDED: decided 14 of 89 rows, 80% needed; 0 slower, 0 "
                                    "faster")
    assert "detects changes of" in first_line(c) and c.status == 3


def test_a_ten_percent_slowdown_of_the_large_rows_is_called_there_only(nccl, tmp_path):
    """11 of the 15 bandwidth-bound rows are called slower. Of the other four, three are the
    rows whose own rounds spread 3-35% (above), and scatter 256M ran 12% slow in one of its
    three rounds, set aside as interference: a copy 10% slower in every round is what that state
    lasting a whole run looks like, and it is not called."""
    slow = load_result(scaled_copy(H100 / "nccl-all.json", 1.1, M64, tmp_path / "slow.json"))
    c = compare_runs(nccl, slow, threshold=0.05)
    bandwidth, big = _bandwidth_bound(c.rows)
    assert sum(r.verdict == "slower" for r in bandwidth) >= 11
    held = [(r.field("collective"), r.field("size_bytes")) for r in bandwidth
            if "own rounds ran this slow" in r.reason]
    assert held == [("scatter", 256 << 20)]
    assert not any(r.verdict in ("slower", "faster") for r in c.rows if r.field("size_bytes") < M64)
    assert c.regression and "a state of the machine" not in c.drift_source


def test_a_five_round_run_decides_every_bandwidth_row_and_sees_a_ten_percent_slowdown(tmp_path):
    """nccl-all-3.json: the same sweep on the H100 with five rounds (2026-11-27). Every one of
    the 15 bandwidth-bound rows of 64M and more is the same as itself at 5%. In a copy 10%
    slower, 12 are called slower; gather, scatter and reduce_scatter at 64M (the host's ~23 µs
    a third of their time) ran 13-33% slow in 1-3 of their five rounds, and those are not
    called; no row below 64M is called slower."""
    run = load_result(H100 / "nccl-all-3.json")
    bandwidth, _ = _bandwidth_bound(compare_runs(run, run, threshold=0.05).rows)
    assert len(bandwidth) == 15 and all(r.verdict == "same" for r in bandwidth)
    slow = load_result(scaled_copy(H100 / "nccl-all-3.json", 1.1, M64, tmp_path / "slow.json"))
    c = compare_runs(run, slow, threshold=0.05)
    bandwidth, _ = _bandwidth_bound(c.rows)
    held = {(r.field("collective"), r.field("size_bytes")) for r in bandwidth
            if r.verdict != "slower"}
    assert held == {("gather", M64), ("scatter", M64), ("reduce_scatter", M64)}
    assert all("own rounds ran this slow" in r.reason for r in bandwidth if r.verdict != "slower")
    assert not any(r.verdict == "slower" for r in c.rows if r.field("size_bytes") < M64)
    assert not any(r.verdict == "slower" for r in c.rows if r.field("size_bytes") < M64)


def test_two_sessions_of_the_same_code_on_the_gpu_call_nothing_slower():
    """nccl-all-2.json and nccl-all-3.json: the same code, the same sweep, on one H100 nine
    minutes apart. bcast's rounds drew only the slow states (33-45 µs) in one and mostly the
    fast (24-26 µs) in the other, whose slow rounds were set aside as interference: compare
    called bcast 64K, 16M and 64M slower by 20-87%, a false alarm. The other run's own rounds
    ran that slow in one or two of five, and the rows are inconclusive, with the reason."""
    a, b = load_result(H100 / "nccl-all-3.json"), load_result(H100 / "nccl-all-2.json")
    c = compare_runs(a, b, threshold=0.05)
    assert not any(r.verdict in ("slower", "faster") for r in c.rows) and not c.regression
    held = {r.field("size_bytes") for r in c.rows if "own rounds ran this slow" in r.reason}
    assert all(r.field("collective") == "bcast" for r in c.rows if r.field("size_bytes") in held and
               "own rounds ran this slow" in r.reason)
    assert held == {64 << 10, 16 << 20, M64}
    assert any(w.startswith("3 row(s) slower in") for w in c.warnings)


def test_two_runs_of_torch_overhead_are_not_told_apart(tmp_path):
    """cb-ar-1 and cb-ar-2: every row torch's overhead, rounds 22 vs 34 µs. Nothing is called;
    the warning says the rounds varied, not that the machine (idle, the meter says) was busy."""
    a, b = load_result(H100 / "cb-ar-1.json"), load_result(H100 / "cb-ar-2.json")
    c = compare_runs(a, b, threshold=0.05)
    assert {r.verdict for r in c.rows} == {"inconclusive"}
    assert not any("not quiet" in w for w in c.warnings)
    assert any("the rounds varied" in w and "saw no other work" in w for w in c.warnings)


def test_report_and_compare_give_one_answer_to_what_can_be_detected(nccl):
    """report's last table is compare's own computation against one more run like the file."""
    comparison, found = gate_sensitivity(nccl, 0.05, 0.05)
    itself = compare_runs(nccl, nccl, threshold=0.05)
    # one round: none
    expected = [r.detectable if r.noise != "assumed" else math.nan for r in itself.rows]
    assert [d for _, d in found] == pytest.approx(expected, nan_ok=True)
    table = sensitivity_table([("nccl-all.json", nccl)], 0.05, 0.05)
    assert any(detection_line(itself) in note for note in table.notes)


# --- the CLI: first line, --fail-on-inconclusive ----------------------------------------------

def _compare(*args):
    return subprocess.run([sys.executable, "-m", "collbench", "compare", *map(str, args)],
                          capture_output=True, text=True)


def test_the_first_line_says_what_the_comparison_can_detect():
    base = H100 / "nccl-all.json"
    table = _compare(base, base)
    assert table.returncode == 3, table.stderr           # 14 of 89 rows decided at 5%
    first, why = table.stdout.splitlines()[:2]
    assert first.startswith("UNDECIDED: decided 14 of 89 rows, 80% needed; 0 slower, 0 faster, ")
    assert ("detects changes of " in first and "at 80% power" in first
            and first.endswith("threshold 5%"))
    assert why.startswith("undecided rows, why: ")
    markdown = _compare(base, base, "--format", "markdown").stdout.splitlines()[0]
    assert markdown.startswith("## collbench compare: UNDECIDED · detects changes of ")
    doc = json.loads(_compare(base, base, "--format", "json").stdout)
    assert doc["detects"]["line"] in first and doc["detects"]["power"] == 0.8
    assert (doc["detects"]["within_threshold"]["rows"] + doc["detects"]["beyond_threshold"]["rows"]
            == 89)


def test_fail_on_inconclusive_fails_a_gate_that_cannot_decide():
    base, again = DATA / "gate" / "quiet.json", DATA / "gate" / "quiet-again.json"
    decided = _compare(base, again, "--threshold", "10%", "--fail-on-inconclusive")
    # every row the same
    assert decided.returncode == 0, decided.stdout + decided.stderr
    nccl = H100 / "nccl-all.json"
    # too few rows decided
    assert _compare(nccl, nccl).returncode == 3
    # passed blind, as asked
    assert _compare(nccl, nccl, "--min-decided", "0%").returncode == 0
    undecided = _compare(nccl, nccl, "--fail-on-inconclusive")
    assert undecided.returncode == 1 and undecided.stdout.startswith("UNDECIDED: 0 slower")
    doc = json.loads(_compare(nccl, nccl, "--fail-on-inconclusive", "-f", "json").stdout)
    assert (doc["passed"] is False and doc["regression"] is False
            and doc["fail_on_inconclusive"] is True)
    c = compare_runs(load_result(nccl), load_result(nccl), fail_on_inconclusive=True)
    assert to_summary_markdown(c).startswith("## collbench compare: UNDECIDED")
    assert json.loads(to_json(c))["passed"] is False


def test_ab_passes_fail_on_inconclusive_to_its_comparison():
    help_text = subprocess.run([sys.executable, "-m", "collbench", "ab", "--help"],
                               capture_output=True, text=True).stdout
    assert "--fail-on-inconclusive" in help_text


def test_a_file_of_few_rows_has_no_model_and_keeps_its_own_intervals():
    rows = [_row([10.0, 10.5, 9.8], 8 * 2 ** k)[0] for k in range(MIN_ROWS_FOR_PRIOR - 1)]
    assert moderate_rows(rows) == rows
    result = RunResult(metadata=metadata())
    for k in range(3):
        result.add(*_row([10.0, 10.01, 9.99], 8 * 2 ** k))
    c = compare_runs(result, result)
    assert {r.verdict for r in c.rows} == {"same"} and "detects changes of" in first_line(c)
