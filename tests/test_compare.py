"""compare on constructed results with known answers: rounds, busy rounds, Holm, verdicts."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from collbench.analysis.compare import compare_runs, parse_threshold

from collbench.analysis.compare_render import (comparison_table, summary_line, to_json,
                                               to_summary_markdown)
from collbench.errors import UsageError
from collbench.results.loader import load_result
from collbench.results.records import RunResult
from collbench.stats.family import max_t_adjust
from results_helpers import metadata, row_with_rounds, run_of, sweep
from collbench.stats.calibration import ASSUMED_LOG_SD

SERIES = sweep(backends=("mpi", "mpi-pickle"))
V1_EXAMPLE = Path(__file__).resolve().parent / "data" / "v1-allreduce-mpi-vs-pickle.json"


def verdicts(comparison) -> list:
    return [r.verdict for r in comparison.rows]


def holm(p_values) -> list:
    """Holm–Bonferroni adjusted p-values: the reference max-T is held against."""
    p = [float(v) for v in p_values]
    adjusted, running = [0.0] * len(p), 0.0
    for step, index in enumerate(sorted(range(len(p)), key=lambda i: p[i])):
        running = max(running, min(1.0, (len(p) - step) * p[index]))
        adjusted[index] = running
    return adjusted


def test_holm_known_values():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


@pytest.mark.parametrize("text, value",
                         [("5%", 0.05), ("0.05", 0.05), (" 12.5% ", 0.125), ("0", 0.0),
                                         ("150%", 1.5)])
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["5", "abc", "-1%", "nan", "%", "inf", "٥%", "５%", "1_0%",
                                  "1e308%", "1001%"])
def test_parse_threshold_rejects(text):
    with pytest.raises(UsageError) as info:
        parse_threshold(text)
    assert "--threshold" in str(info.value) and "\n" not in str(info.value)


# --- verdicts ----------------------------------------------------------------------------------

def test_identical_runs_are_all_same():
    run = run_of(SERIES)
    c = compare_runs(run, run)
    assert set(verdicts(c)) == {"same"} and not c.regression
    assert all(r.ratio == pytest.approx(1.0) and r.noise == "both" for r in c.rows)


def test_three_times_slower_is_a_regression():
    c = compare_runs(run_of(SERIES, seed=1), run_of(SERIES, seed=2, scale=3.0))
    assert set(verdicts(c)) == {"slower"} and c.regression
    assert all(r.ratio == pytest.approx(3.0, rel=0.1) and r.p_adjusted < 0.05 for r in c.rows)
    assert all(r.change_low > 0 for r in c.rows)          # the CI of the change excludes zero
    assert summary_line(c).startswith(f"{len(SERIES)} slower, 0 faster, 0 same, 0 inconclusive")


def test_faster_is_not_a_regression():
    c = compare_runs(run_of(SERIES, seed=1), run_of(SERIES, seed=2, scale=0.5))
    assert set(verdicts(c)) == {"faster"} and not c.regression


def test_launch_noise_gives_inconclusive_not_slower():
    """Rounds 30% apart from launch to launch: a 20% change cannot be told from noise."""
    base = run_of(SERIES, seed=1, rounds=3, launch_sd=0.3)
    new = run_of(SERIES, seed=2, rounds=3, launch_sd=0.3, scale=1.2)
    c = compare_runs(base, new)
    assert "slower" not in verdicts(c) and not c.regression
    assert set(verdicts(c)) == {"inconclusive"}
    assert all("rounds per side" in r.reason or "drift between runs" in r.reason for r in c.rows)
    assert len(c.too_noisy()) == len(SERIES)


def test_within_round_precision_does_not_matter_only_rounds_do():
    """Tight samples in every round, but whole rounds 15% apart: the iterations of one round say
    nothing about the next, so a 10% shift of one side is not significant."""
    base = run_of(SERIES, seed=5, n=500, rounds=3, launch_sd=0.15)
    new = run_of(SERIES, seed=6, n=500, rounds=3, launch_sd=0.15, scale=1.1)
    assert not compare_runs(base, new).regression


def test_change_within_the_threshold_is_same_and_significant_beyond_it_is_slower():
    """One backend's rows move by 2.5%, the others' not (a change that moves every row alike may
    be the machine's: test_a_uniform_shift_may_be_the_machines_state)."""
    series = sweep(backends=("mpi", "mpi-pickle", "gloo"))
    moved = {k: 1.025 for k in series if k[1] == "gloo"}
    base = run_of(series, seed=1, n=200, rounds=10, launch_sd=0.002)
    new = run_of(series, seed=2, n=200, rounds=10, launch_sd=0.002, scale=moved)
    c = compare_runs(base, new, threshold=0.05)
    assert set(verdicts(c)) == {"same"}
    tight = compare_runs(base, new, threshold=0.01)
    gloo = [r.verdict for r in tight.rows if r.field("backend") == "gloo"]
    assert gloo.count("slower") >= 0.8 * len(gloo)
    assert not any(r.verdict == "slower" for r in tight.rows if r.field("backend") != "gloo")


def test_a_uniform_shift_may_be_the_machines_state():
    """Every row 12% slower, in separate runs: a state of a shared machine does that
    (calibration.STATE_LOG_SHIFT), so it is not called, and the rows say what would settle it; 3x is
    beyond any state and is called. A stored baseline cannot tell the two apart below that."""
    base = run_of(SERIES, seed=1, n=200, rounds=10, launch_sd=0.002)
    state = compare_runs(base,
                         run_of(SERIES, seed=2, n=200, rounds=10, launch_sd=0.002, scale=1.12),
                         threshold=0.05)
    assert not state.regression and set(verdicts(state)) == {"inconclusive"}
    assert "differ as a whole by +12%" in state.drift_source
    assert all("collbench ab" in r.reason for r in state.rows)
    far = compare_runs(base, run_of(SERIES, seed=2, n=200, rounds=10, launch_sd=0.002, scale=3.0),
                       threshold=0.05)
    assert set(verdicts(far)) == {"slower"}


def test_one_round_against_many_uses_the_many_rounds_spread():
    baseline = run_of(SERIES, seed=1, rounds=12, launch_sd=0.02)
    c = compare_runs(baseline, run_of(SERIES, seed=2, rounds=1, scale=2.0))
    assert {r.noise for r in c.rows} == {"baseline"} and set(verdicts(c)) == {"slower"}
    same = compare_runs(baseline, run_of(SERIES, seed=3, rounds=1, launch_sd=0.0))
    assert not same.regression and {r.rounds_new for r in same.rows} == {1}


def test_one_round_each_assumes_a_spread_and_says_so():
    base, new = run_of(SERIES, seed=1, rounds=1), run_of(SERIES, seed=2, rounds=1, scale=1.5)
    c = compare_runs(base, new)
    # 50% is within launch noise
    assert {r.noise for r in c.rows} == {"assumed"} and not c.regression
    assert any("assumed" in w for w in c.warnings)
    huge = compare_runs(base, run_of(SERIES, seed=2, rounds=1, scale=5.0))
    assert set(verdicts(huge)) == {"slower"}                                   # 5x is not
    # with an honest, wide CI
    assert huge.rows[0].change_high - huge.rows[0].change_low > 1.0
    assert 0.1 < ASSUMED_LOG_SD < 1


def _busy(result: RunResult, rounds) -> RunResult:
    records = [{"round": r + 1, "load": {"busy": (r + 1) in rounds, "other_cpu_cores": 0.9}}
               for r in range(len(result.rounds[0]))]
    return dataclasses.replace(result, metadata=metadata(rounds=records))


def test_interference_is_set_aside_whether_or_not_the_meter_saw_it():
    base = run_of(SERIES, seed=1, rounds=6)
    new = run_of(SERIES, seed=2, rounds=6)
    # rounds 5 and 6 of NEW ran beside a CPU hog: three times slower
    for i, (row, data) in enumerate(zip(new.rows, new.rounds)):
        slowed = [dataclasses.replace(d, time_us_p50=d.time_us_p50 * (3 if d.round > 4 else 1))
                  for d in data]
        new.rounds[i] = tuple(slowed)
        new.rows[i] = dataclasses.replace(row,
                                          time_us_round_p50s=tuple(d.time_us_p50 for d in slowed))
    for c in (compare_runs(base, new), compare_runs(base, _busy(new, {5, 6}))):
        assert {r.rounds_new for r in c.rows} == {4} and set(verdicts(c)) == {"same"}
        assert all(r.ratio == pytest.approx(1.0, abs=0.02) for r in c.rows)
    busy = compare_runs(base, _busy(new, {5, 6}))
    assert any("2 of 6 round(s) ran while other processes used" in w and "set aside" in w
               for w in busy.warnings)


def _slowed(result: RunResult, factor: float, rounds, keys) -> RunResult:
    """``result`` with the round medians of ``rounds`` (numbers) multiplied by ``factor`` in the
    rows of ``keys`` ((collective, backend, size))."""
    for i, (row, data) in enumerate(zip(result.rows, result.rounds)):
        if (row.collective, row.backend, row.size_bytes) not in keys:
            continue
        slowed = [dataclasses.replace(d,
                                      time_us_p50=d.time_us_p50
                                      * (factor if d.round in rounds else 1))
                  for d in data]
        result.rounds[i] = tuple(slowed)
        result.rows[i] = dataclasses.replace(row,
                                             time_us_round_p50s=tuple(d.time_us_p50
                                                                      for d in slowed))
    return result


def test_a_side_in_a_state_the_other_was_seen_in_is_not_called():
    """In four rows of ten the baseline ran 1.5x slower in 2 of its 6 rounds, set aside as
    interference; the new run ran 1.5x slower in all of its rounds there. A state of the machine
    that held two rounds of one run may have held the whole of the next: inconclusive, and
    said. 3x lies beyond what the baseline was seen to do and is called; so is 1.5x where the
    baseline showed it once in ten rounds."""
    keys = {k for k in SERIES if k[2] in (64, 8192)}

    def mine(c):
        return [r for r in c.rows if (r.field("collective"), r.field("backend"),
                                      r.field("size_bytes")) in keys]

    base = _slowed(run_of(SERIES, seed=1, rounds=6), 1.5, {2, 5}, keys)
    state = compare_runs(base, run_of(SERIES, seed=2, rounds=6, scale=dict.fromkeys(keys, 1.5)),
                         threshold=0.05)
    held = mine(state)
    assert len(held) == 4 and not state.regression
    assert all(r.verdict == "inconclusive"
               and "baseline run's own rounds ran this slow in 2 of its 6 rounds"
               in r.reason for r in held)
    assert {r.verdict for r in state.rows if r not in held} == {"same"}
    assert ("4 row(s) slower in new are inconclusive: baseline's own rounds ran as slow"
            in "\n".join(state.warnings))
    backwards = compare_runs(run_of(SERIES, seed=2, rounds=6, scale=dict.fromkeys(keys, 1.5)), base,
                             threshold=0.05)
    assert all(r.verdict == "inconclusive" and "new run's own rounds ran this slow" in r.reason
               for r in mine(backwards))
    beyond = compare_runs(base, run_of(SERIES, seed=2, rounds=6, scale=dict.fromkeys(keys, 3.0)),
                          threshold=0.05)
    assert [r.verdict for r in mine(beyond)] == ["slower"] * 4
    rare = _slowed(run_of(SERIES, seed=1, rounds=10), 1.5, {4}, keys)
    once = compare_runs(rare, run_of(SERIES, seed=2, rounds=10, scale=dict.fromkeys(keys, 1.5)),
                        threshold=0.05)
    assert [r.verdict for r in mine(once)] == ["slower"] * 4


def test_a_busy_side_is_judged_as_a_quiet_one_row_by_row():
    """Every round busy: a 3x slowdown is called, and so are one backend's rows 12% slower, as on
    a quiet machine. A busy machine moves the whole sweep (the state term); the term a busy row
    used to carry on its own went when no collection showed a neighbour moving one row alone
    (benchmarks/README.md: the busy-runner A/A, 115 rows same and none flagged without it)."""
    c = compare_runs(run_of(SERIES, seed=1),
                     _busy(run_of(SERIES, seed=2, scale=3.0), {1, 2, 3, 4, 5}))
    assert set(verdicts(c)) == {"slower"} and c.regression
    series = sweep(backends=("mpi", "mpi-pickle", "gloo"))
    moved = {k: 1.12 for k in series if k[1] == "gloo"}
    mild = compare_runs(run_of(series, seed=1),
                        _busy(run_of(series, seed=2, scale=moved), {1, 2, 3, 4, 5}))
    quiet = compare_runs(run_of(series, seed=1), run_of(series, seed=2, scale=moved))
    for c in (mild, quiet):
        assert {r.verdict for r in c.rows if r.field("backend") == "gloo"} == {"slower"}
        assert {r.verdict for r in c.rows
                if r.field("backend") != "gloo"} <= {"same", "inconclusive"}


def test_many_rows_are_adjusted_together():
    """One row whose rounds differ with p about 0.01: a regression alone, noise among 40 rows
    (of about its time, spreading a little more: the trend of their noise is flat)."""
    def run(medians, sizes):
        result = RunResult(metadata=metadata())
        result.add(*row_with_rounds([[m] * 9 for m in medians], size_bytes=8))
        for size in sizes:
            result.add(*row_with_rounds([[100.0 + 2 * r] * 9 for r in range(5)], size_bytes=size))
        return result

    base, new = [100, 103, 97, 101, 99], [111, 107, 112, 109, 106]
    alone = compare_runs(run(base, []), run(new, []))
    assert verdicts(alone) == ["slower"] and 0.05 / 40 < alone.rows[0].p_value < 0.05
    many = range(16, 16 + 39 * 16, 16)
    c = compare_runs(run(base, many), run(new, many))
    first = c.rows[0]
    assert first.p_adjusted > 5 * first.p_value and first.p_adjusted >= 0.05
    assert first.verdict == "inconclusive" and not c.regression and c.tested == 40


def test_max_t_is_never_stricter_than_needed():
    """Rows that all carry one shared term move together: the family needs about one test's
    level, not forty. Rows with nothing shared are adjusted as independent tests are (Šidák,
    a little less strict than Holm's first step)."""
    shared = max_t_adjust([2.5] * 40, [1e-6] * 40, [math.inf] * 40, [1.0] * 40, math.inf)
    assert shared.critical == pytest.approx(1.96, abs=0.05) and max(shared.adjusted) < 0.02
    apart = max_t_adjust([2.5] + [0.0] * 39, [1.0] * 40, [math.inf] * 40, [0.0] * 40, math.inf)
    p_one = 2 * (1 - 0.5 * (1 + math.erf(2.5 / math.sqrt(2))))          # 0.0124
    assert apart.adjusted[0] == pytest.approx(1 - (1 - p_one) ** 40, rel=0.05)
    assert apart.adjusted[0] < holm([p_one] + [1.0] * 39)[0]
    # Bonferroni for 40 at 5%: 3.23
    assert 3.0 < apart.critical < 3.4
    assert max_t_adjust([1.0, 2.0], [1.0, 1.0], [4, 4], [0.5, 0.5], 2).adjusted == \
        max_t_adjust([1.0, 2.0], [1.0, 1.0], [4, 4], [0.5, 0.5], 2).adjusted          # seeded


def test_max_t_steps_down_past_rows_already_shown_to_have_changed():
    """Westfall & Young's step-down: the row with the largest |t| is held to the whole family,
    each next row only to the rows left, and no row's p-value falls below a larger |t|'s."""
    p_one = 2 * (1 - 0.5 * (1 + math.erf(2.5 / math.sqrt(2))))          # 0.0124
    changed = max_t_adjust([20.0] * 39 + [2.5], [1.0] * 40, [math.inf] * 40, [0.0] * 40, math.inf)
    assert changed.adjusted[-1] == pytest.approx(p_one, rel=0.1)        # single-step: 0.39
    alone = max_t_adjust([2.5] + [0.0] * 39, [1.0] * 40, [math.inf] * 40, [0.0] * 40, math.inf)
    assert alone.adjusted[0] == pytest.approx(1 - (1 - p_one) ** 40, rel=0.05)    # the first step
    mixed = max_t_adjust([2.0, 3.0, 0.5, 2.9], [1.0, 1.0, 1.0, 4.0], [4, 9, 9, 3], [0.2] * 4, 5)
    by_t = [p for _, p in sorted(zip([2.0, 3.0, 0.5, 2.9], mixed.adjusted), reverse=True)]
    assert by_t == sorted(by_t)


def test_missing_and_new_rows():
    new = dict(SERIES)
    gone, added = ("allreduce", "mpi", 65536), ("allreduce", "mpi", 1 << 20)
    del new[gone]
    new[added] = 600.0
    c = compare_runs(run_of(SERIES), run_of(new))
    by_size = {(r.field("backend"), r.field("size_bytes")): r for r in c.rows}
    assert (by_size[("mpi", 65536)].verdict == "missing"
            and math.isnan(by_size[("mpi", 65536)].ratio))
    assert by_size[("mpi", 1 << 20)].verdict == "new"
    assert c.counts["missing"] == 1 and c.counts["new"] == 1 and not c.regression


def test_busbw_metric_higher_is_better():
    c = compare_runs(run_of(SERIES, seed=1), run_of(SERIES, seed=2, scale=3.0), metric="busbw_gbps")
    assert set(verdicts(c)) == {"slower"}
    assert all(r.ratio == pytest.approx(1 / 3, rel=0.1) and r.change_high < 0 for r in c.rows)
    faster = compare_runs(run_of(SERIES, seed=1), run_of(SERIES, seed=2, scale=0.5),
                          metric="busbw_gbps")
    assert set(verdicts(faster)) == {"faster"}


def test_barrier_has_no_bandwidth_to_compare():
    series = {("barrier", "mpi", 0): 3.0}
    c = compare_runs(run_of(series, seed=1), run_of(series, seed=2, scale=3.0), metric="busbw_gbps")
    assert verdicts(c) == ["insufficient data"]
    assert verdicts(compare_runs(run_of(series, seed=1),
                                 run_of(series, seed=2, scale=3.0))) == ["slower"]


def test_csv_rows_compare_on_their_round_medians(tmp_path):
    from results_helpers import write

    base = load_result(write(run_of(SERIES, seed=1), tmp_path / "base.csv"))
    slow = load_result(write(run_of(SERIES, seed=2, scale=3.0), tmp_path / "slow.csv"))
    assert all(r.rounds == 5 and len(r.time_us_round_p50s) == 5 for r in base.rows)
    assert set(verdicts(compare_runs(base, slow))) == {"slower"}
    assert set(verdicts(compare_runs(base, base))) == {"same"}


def test_version_1_files_still_load_and_compare():
    old = load_result(V1_EXAMPLE)
    assert all(r.rounds == 1 and r.time_us_round_p50s == (r.time_us_p50,) for r in old.rows)
    assert all(len(d) == 1 and len(d[0].samples_us) == r.iterations
               for r, d in zip(old.rows, old.rounds))
    itself = compare_runs(old, old)
    assert not itself.regression and {r.noise for r in itself.rows} == {"assumed"}
    rows = [dataclasses.replace(r, time_us_round_p50s=(r.time_us_p50 * 4,),
                                time_us_p50=r.time_us_p50 * 4)
            for r in old.rows]
    slower = compare_runs(old, dataclasses.replace(old, rows=rows))
    assert set(verdicts(slower)) == {"slower"}


def test_no_common_rows_is_incomparable():
    other = run_of({("bcast", "mpi", 8): 3.0})
    with pytest.raises(UsageError, match="no row in common.*incomparable"):
        compare_runs(run_of(SERIES), other)
    with pytest.raises(UsageError, match="incomparable"):
        compare_runs(RunResult(metadata=metadata()), RunResult(metadata=metadata()))


def test_no_common_rows_names_what_keeps_them_apart():
    """A 2-rank file against a 4-rank one: the line says so, not only that nothing matched."""
    two = run_of(SERIES)
    four = dataclasses.replace(two, rows=[dataclasses.replace(r, world_size=4) for r in two.rows])
    with pytest.raises(UsageError, match=r"rows; world_size 2 vs 4\): incomparable"):
        compare_runs(two, four)
    with pytest.raises(UsageError, match=r"rows; collective allreduce vs bcast, "):
        compare_runs(two, run_of({("bcast", "mpi", 8): 3.0}))


def test_duplicate_keys_are_refused():
    run = run_of(SERIES)
    run.add(run.rows[0], run.rounds[0])
    with pytest.raises(UsageError, match="two rows"):
        compare_runs(run, run_of(SERIES))


def test_metadata_differences_are_warned():
    base = run_of(SERIES)
    new = run_of(SERIES, meta=metadata(hostnames=["node7"], world_size=4, settings={"root": 1},
                                       versions={"mpi_library": "Open MPI v5.0.3",
                                                 "mpi4py": "4.0"}))
    warnings = " | ".join(compare_runs(base, new).warnings)
    for expected in ("hostnames differs: node1", "MPI library differs", "world size differs",
                     "root rank differs: 0 in baseline, 1 in new"):
        assert expected in warnings
    assert compare_runs(base, run_of(SERIES)).warnings == ()


def test_dtype_and_check_failures_are_warned():
    base = run_of(SERIES)
    new = run_of(SERIES)
    row, data = row_with_rounds([[5.0] * 9] * 3, size_bytes=8, check="wrong:3")
    new.rows[0], new.rounds[0] = row, data
    new.add(*row_with_rounds([[5.0] * 9] * 3, dtype="float64"))
    warnings = " | ".join(compare_runs(base, new).warnings)
    assert "dtype differs: float32 in baseline, float32,float64 in new" in warnings
    assert "1 matched row(s) in new FAILED the result check" in warnings


def test_renderers_carry_verdicts_intervals_and_warnings():
    base = run_of(SERIES, seed=1)
    new = run_of(SERIES, seed=2, scale=3.0, meta=metadata(hostnames=["elsewhere"]))
    c = compare_runs(base, new, baseline_name="base.json", new_name="new.json")
    table = comparison_table(c)
    verdict = table.headers.index("verdict")
    assert {row[verdict] for row in table.cells} == {"slower"} and "95% CI" in table.headers
    assert "max-T" in table.notes[0] and "per-round medians" in table.notes[0]
    markdown = to_summary_markdown(c)
    assert markdown.startswith("## collbench compare: REGRESSION")
    assert f"**{len(SERIES)} slower, 0 faster, 0 same, 0 inconclusive**" in markdown
    assert "> **Warning:** hostnames differs" in markdown
    doc = json.loads(to_json(c))
    assert doc["regression"] is True and doc["summary"]["slower"] == len(SERIES)
    assert doc["schema_version"] == 3 and doc["multiple_comparisons"] == "max-T"
    first = doc["rows"][0]
    assert (first["verdict"] == "slower" and first["rounds_baseline"] == 5
            and first["change_ci_low"] > 0)


def test_inconclusive_rows_name_the_rounds_needed():
    c = compare_runs(run_of(SERIES, seed=1, rounds=3, launch_sd=0.2),
                     run_of(SERIES, seed=2, rounds=3, launch_sd=0.2))
    table = comparison_table(c)
    assert "why" in table.headers and any("too noisy to gate" in n for n in table.notes)
    doc = json.loads(to_json(c))
    assert all(r["rounds_needed"] is None or r["rounds_needed"] > 3 for r in doc["rows"])
    assert all(r["reason"] for r in doc["rows"]) and doc["too_noisy"]


def test_random_a_a_pairs_rarely_flag_anything():
    """Many A/A pairs drawn from one noisy model (heavy-tailed launches): the share of pairs
    with any row called slower stays near alpha, the share of rows far below it."""
    flagged_pairs = flagged_rows = rows = 0
    for seed in range(40):
        base = run_of(SERIES, seed=2 * seed, rounds=8, launch_sd=0.15)
        new = run_of(SERIES, seed=2 * seed + 1, rounds=4, launch_sd=0.15)
        c = compare_runs(base, new)
        flagged_pairs += c.regression
        flagged_rows += c.counts["slower"] + c.counts["faster"]
        rows += len(c.rows)
    assert flagged_pairs <= 4 and flagged_rows / rows < 0.02


def _with_drift(seed: int, runs: int, scale: float = 1.0, drift_sd: float = 0.15) -> RunResult:
    """``runs`` runs of 4 rounds, each run shifted as a whole (the machine's drift), merged."""
    from collbench.analysis.merge import merge_runs

    rng = np.random.default_rng(seed)
    parts = []
    for k in range(runs):
        part = run_of(SERIES, seed=seed * 100 + k, rounds=4, launch_sd=0.02,
                      scale=scale * math.exp(rng.normal(0, drift_sd)))
        part.metadata["run_id"] = f"run{seed}-{k}"
        parts.append((f"part{k}.json", part))
    return merge_runs(parts)[0] if runs > 1 else parts[0][1]


def test_drift_of_whole_runs_is_not_taken_for_a_change():
    """Runs that move as a whole by 15% between one another: the rounds of one run cannot see
    it, so a comparison that ignored it would flag a quarter of these A/A pairs."""
    exits = sum(compare_runs(_with_drift(2 * s, 3), _with_drift(2 * s + 1, 1)).regression
                for s in range(60))
    # alpha 0.05; 6 of these 60: in a third of them the 3-run baseline has two runs that agree and
    # a third far off, which compare sets aside as a slow state of the machine (runs.FileRounds)
    assert exits <= 6


def test_a_baseline_of_many_runs_measures_the_drift():
    c = compare_runs(_with_drift(1, 8), _with_drift(2, 1))
    assert c.drift_source == "measured over 8 runs" and 0.05 < c.drift_sd < 0.3
    few = compare_runs(_with_drift(1, 2), _with_drift(2, 1))      # two runs measure no drift: the
    # sides' whole shift is the one seen
    assert "differ as a whole by -6%" in few.drift_source
    assert compare_runs(_with_drift(1, 8), _with_drift(2, 1, scale=3.0)).regression


@pytest.mark.parametrize("field, value",
                         [("api", "nonblocking"), ("placement", "in-place"), ("buffers", "mpi")])
def test_rows_that_differ_in_what_is_measured_are_not_matched(field, value):
    """A blocking sweep against the same sweep with --api nonblocking exited 0, judging 7.06 µs
    against 145.7 µs with api "*": one setup each was taken for two backends' files."""
    series = sweep(backends=("mpi",))
    base = run_of(series, seed=1)
    other = run_of(series, seed=2, scale=20.0)
    other = dataclasses.replace(other,
                                rows=[dataclasses.replace(r, **{field: value}) for r in other.rows])
    with pytest.raises(UsageError) as info:
        compare_runs(base, other, baseline_name="base", new_name="new")
    assert "no row in common" in str(info.value) and field in str(info.value)


def test_two_backends_one_each_are_still_matched_across():
    """collbench ab --a-backend mpi --b-backend mpi-pickle: one backend per file, matched across."""
    base = run_of(sweep(backends=("mpi",)), seed=1)
    other = run_of(sweep(backends=("mpi-pickle",)), seed=2)
    comparison = compare_runs(base, other, baseline_name="mpi", new_name="pickle")
    assert (comparison.compared
            and comparison.warnings[0].startswith("mpi measured mpi and pickle mpi-pickle"))
