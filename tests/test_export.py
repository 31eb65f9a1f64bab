"""collbench export: a real run's JSON and CSV in github-action-benchmark's and Bencher's formats,
read back as those tools read them."""

import dataclasses
import json
import math
import re

import pytest

from collbench.errors import UsageError
from collbench.launch.self_launch.mpiexec import find_mpiexec
from collbench.render.ci_export import TARGETS, benchmark_name, export
from collbench.results.loader import load_result
from results_helpers import (one_line_error, row_from_samples, row_with_rounds, run_cli, run_of,
                             sweep)

#: github-action-benchmark's extractRangeInfo: the range it can rescale with the unit
RANGE = re.compile(r"(\+-|±)\s*(\d.+)")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """x.json and x.csv of one real 2-rank allreduce sweep of 2 rounds."""
    if find_mpiexec() is None:
        pytest.skip("no mpiexec")
    folder = tmp_path_factory.mktemp("run")
    proc = run_cli(["allreduce", "-n", "2", "--sizes", "8-1K", "--rounds", "2", "--iters", "10",
                    "--warmup", "1",
                    "-o", "x.json", "-o", "x.csv", "-q"], folder, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return folder


def _export(folder, name, target, out):
    proc = run_cli(["export", name, "--to", target, "-o", out], folder)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote 8 benchmarks for {target} to {out}" in proc.stderr
    return json.loads((folder / out).read_text())


@pytest.mark.mpi
def test_github_action_benchmark_entries_are_the_rows_medians(run):
    rows = load_result(run / "x.json").rows
    entries = _export(run, "x.json", "github-action-benchmark", "gab.json")
    assert isinstance(entries, list) and len(entries) == len(rows) == 8
    assert [e["name"] for e in entries] == [benchmark_name(r) for r in rows]
    assert len({e["name"] for e in entries}) == 8
    assert entries[-1]["name"] == "allreduce mpi float32 sum 2 ranks 1K latency"
    for entry, row in zip(entries, rows):
        assert set(entry) <= {"name", "unit", "value", "range", "extra"}
        assert entry["unit"] == "us" and entry["value"] == row.time_us_p50
        assert isinstance(entry["value"], float) and isinstance(entry["extra"], str)
        half = float(RANGE.fullmatch(entry["range"]).group(2))
        widest = max(row.time_us_p50 - row.time_us_ci_low, row.time_us_ci_high - row.time_us_p50)
        assert half == pytest.approx(widest, rel=1e-5)
        assert f"rounds: {row.rounds}" in entry["extra"] and "check: ok" in entry["extra"]


@pytest.mark.mpi
def test_bencher_metric_format_holds_latency_in_ns_and_bus_bandwidth(run):
    rows = load_result(run / "x.json").rows
    doc = _export(run, "x.json", "bencher", "bmf.json")
    assert list(doc) == [benchmark_name(r) for r in rows]
    for row in rows:
        measures = doc[benchmark_name(row)]
        assert set(measures) == {"latency", "bus-bandwidth"}
        latency, bandwidth = measures["latency"], measures["bus-bandwidth"]
        assert latency["value"] == pytest.approx(row.time_us_p50 * 1e3, abs=1e-3)
        assert latency["lower_value"] == pytest.approx(row.time_us_ci_low * 1e3, abs=1e-3)
        assert latency["upper_value"] == pytest.approx(row.time_us_ci_high * 1e3, abs=1e-3)
        assert bandwidth["value"] == pytest.approx(row.busbw_gbps, rel=1e-5)
        assert bandwidth["lower_value"] <= bandwidth["value"] <= bandwidth["upper_value"]
        for metric in measures.values():      # the BMF schema: numbers, "value" required
            assert set(metric) <= {"value", "lower_value", "upper_value"}
            assert all(isinstance(v, float) and math.isfinite(v) for v in metric.values())


@pytest.mark.mpi
@pytest.mark.parametrize("target", list(TARGETS))
def test_csv_exports_the_same_benchmarks_to_six_digits(run, target):
    from_json = json.loads(export(load_result(run / "x.json"), target).text)
    proc = run_cli(["export", "x.csv", "--to", target], run)          # stdout without -o
    assert proc.returncode == 0, proc.stderr
    # Bencher's format has no units: they are said, on stderr, so that stdout stays its JSON
    said = ("" if target != "bencher"
            else f"collbench: {len(from_json)} benchmarks for bencher: latency in nanoseconds")
    assert (proc.stderr.startswith(said)
            and proc.stderr.count("\n") == (target == "bencher")), proc.stderr
    from_csv = json.loads(proc.stdout)
    if target == "bencher":
        assert list(from_csv) == list(from_json)
        # a bandwidth bound is busbw * p50 / CI end: three six-digit CSV figures, each off by up
        # to 5e-6, then rounded again; so 2.5e-5 apart at worst (1.27e-5 was seen)
        pairs = [(a[m][k], b[m][k], 1e-5 if m == "latency" or k == "value" else 3e-5)
                 for a, b in zip(from_csv.values(), from_json.values()) for m in a for k in a[m]]
    else:
        assert [e["name"] for e in from_csv] == [e["name"] for e in from_json]
        pairs = [(a["value"], b["value"], 1e-5) for a, b in zip(from_csv, from_json)]
    assert all(a == pytest.approx(b, rel=rel) for a, b, rel in pairs), pairs


@pytest.mark.mpi
def test_an_existing_output_needs_force(run):
    (run / "taken.json").write_text("keep me")
    proc = run_cli(["export", "x.json", "--to", "bencher", "-o", "taken.json"], run)
    assert proc.returncode == 2 and "--force" in one_line_error(proc)
    assert (run / "taken.json").read_text() == "keep me"
    proc = run_cli(["export", "x.json", "--to", "bencher", "-o", "taken.json", "--force"], run)
    assert proc.returncode == 0 and len(json.loads((run / "taken.json").read_text())) == 8


@pytest.mark.parametrize("args, message", [
    (["absent.json", "--to", "bencher"], "no such file"),
    (["notes.txt", "--to", "bencher"], "not valid JSON"),
    (["run.json", "--to", "jenkins"], "Invalid value for '--to'"),
    (["run.json"], "Missing option '--to'"),
    (["run.json", "--to", "bencher", "-o", "no/such/folder/out.json"], "does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "notes.txt").write_text("hello")
    from results_helpers import write

    write(run_of(sweep()), tmp_path / "run.json")
    proc = run_cli(["export", *args], tmp_path)
    assert proc.returncode == 2 and message in one_line_error(proc)


def test_names_say_what_was_measured_and_stay_unique():
    names = [benchmark_name(row_from_samples([3.0, 4.0], **key)) for key in (
        {}, {"collective": "bcast", "op": "none"}, {"collective": "barrier", "size_bytes": 0},
        {"timing": "throughput"},
        {"size_bytes": 1000}, {"backend": "mpi-pickle", "world_size": 4})]
    assert names == ["allreduce mpi float32 sum 2 ranks 1K latency",
                     "bcast mpi float32 2 ranks 1K latency",
                     "barrier mpi 2 ranks latency",
                     "allreduce mpi float32 sum 2 ranks 1K throughput",
                     "allreduce mpi float32 sum 2 ranks 1000 latency",
                     "allreduce mpi-pickle float32 sum 4 ranks 1K latency"]
    twice = run_of(sweep())
    twice.add(twice.rows[0], twice.rounds[0])
    with pytest.raises(UsageError, match="two rows would be named 'allreduce mpi float32 sum 2 "
                                         "ranks 8 latency'"):
        export(twice, "bencher", source="twice.json")


def test_a_root_other_than_0_is_in_the_names_of_rooted_collectives_only():
    bcast = row_from_samples([3.0, 4.0], collective="bcast", op="none")
    allreduce = row_from_samples([3.0, 4.0])
    assert benchmark_name(bcast, root=1) == "bcast mpi float32 root 1 2 ranks 1K latency"
    assert benchmark_name(bcast, root=0) == benchmark_name(bcast)
    assert benchmark_name(allreduce, root=1) == benchmark_name(allreduce)
    result = run_of(sweep())
    result.metadata["settings"] = {"root": 1}
    result.add(*row_with_rounds([[3.0, 4.0]] * 2, collective="gather", op="none", size_bytes=1024))
    names = [e["name"] for e
             in json.loads(export(result, "github-action-benchmark", source="r.json").text)]
    assert ("gather mpi float32 root 1 2 ranks 1K latency" in names
            and not any("allreduce" in n and "root" in n for n in names))


def test_rows_without_a_median_or_bandwidth_are_left_out():
    result = run_of(sweep(sizes=(8, 64)))
    result.rows[0] = dataclasses.replace(result.rows[0], time_us_p50=math.nan)
    result.rows[1] = dataclasses.replace(result.rows[1], busbw_gbps=0.0, time_us_ci_low=math.nan)
    done = export(result, "bencher")
    assert (done.benchmarks, done.left_out) == (1, 1)
    assert json.loads(done.text) == {"allreduce mpi float32 sum 2 ranks 64 latency":
                                     {"latency": {"value":
                                                  round(result.rows[1].time_us_p50 * 1e3, 3)}}}
    entry = json.loads(export(result, "github-action-benchmark").text)[0]
    assert "range" not in entry and "95% CI" not in entry["extra"]
    result.rows[1] = dataclasses.replace(result.rows[1], time_us_p50=math.nan)
    with pytest.raises(UsageError, match="no row with a median time"):
        export(result, "bencher", source="empty.json")
