"""The real CLI under real mpiexec: every collective on both MPI backends, files read back."""

import math
from collections import Counter

import pandas as pd
import pytest

from collbench.benchmarks.registry import ORDER, get_benchmark
from collbench.results.loader import load_result
from collbench.results.rank_view import RANK_FIELDS
from collbench.results.records import ROW_FIELDS
from conftest import FAST, cli, load_json, mpirun

pytestmark = pytest.mark.mpi

SIZES = "8,1K,12K,64K"   # 12K: not a power of two; 8: too small for some collectives at 3 ranks


def _check_rows(rows, n, backends):
    assert {r["collective"] for r in rows} == set(ORDER)
    assert {r["backend"] for r in rows} == set(backends)
    for r in rows:
        assert r["check"] == ("skipped" if r["collective"] == "barrier" else "ok"), r
        assert r["world_size"] == n
        assert r["iterations"] == 10 and r["rounds"] == 1
        (only,) = r["round_details"]
        assert len(only["samples_us"]) == 10 and only["round"] == 1
        assert len(only["rank_means_us"]) == n
        assert r["time_us_min"] <= r["time_us_p50"] <= r["time_us_max"]
        assert r["time_us_ci_low"] <= r["time_us_p50"] <= r["time_us_ci_high"]
        if r["collective"] == "barrier":
            assert r["size_bytes"] == 0
            continue
        itemsize = 4
        assert r["count"] * itemsize == r["size_bytes"]
        if get_benchmark(r["collective"]).size_is_per_rank:
            assert r["per_rank_bytes"] == r["size_bytes"]
        else:
            assert r["size_bytes"] % (n * itemsize) == 0
            assert r["per_rank_bytes"] * n == r["size_bytes"]
        assert r["busbw_gbps"] > 0 and r["algbw_gbps"] > 0


def test_all_collectives_both_backends_two_ranks(run_dir):
    proc = mpirun(2, ["all", "--backend", "mpi,mpi-pickle", "--sizes", SIZES, *FAST,
                      "-o", "run.json", "-o", "run.csv"], run_dir)
    assert proc.returncode == 0, proc.stderr
    doc = load_json(run_dir / "run.json")
    rows = doc["rows"]
    _check_rows(rows, 2, ["mpi", "mpi-pickle"])
    # every collective x 4 sizes, and barrier once, for each backend
    assert len(rows) == 2 * ((len(ORDER) - 1) * 4 + 1)
    meta = doc["metadata"]
    assert meta["launcher"] == "mpiexec" and meta["world_size"] == 2
    assert ("MPICH" in meta["versions"]["mpi_library"]
            or "Open MPI" in meta["versions"]["mpi_library"])
    assert meta["versions"]["mpi4py"]
    frame = pd.read_csv(run_dir / "run.csv")
    assert list(frame.columns) == list(ROW_FIELDS + RANK_FIELDS) + ["run_metadata"]
    assert len(frame) == len(rows)
    # the barriers
    assert set(frame["check"]) == {"ok", "skipped"} and (frame["check"] == "skipped").sum() == 2
    loaded = load_result(run_dir / "run.csv")
    assert loaded.rows[0].collective == "allreduce"
    # One side-by-side table per collective, printed by rank 0 only.
    assert proc.stdout.count("mpi-pickle/mpi") == len(ORDER)


def test_three_ranks_oversubscribed(run_dir):
    proc = mpirun(3, ["all", "--backend", "mpi,mpi-pickle", "--sizes", SIZES, *FAST, "-o",
                      "run.json"], run_dir)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(run_dir / "run.json")["rows"]
    _check_rows(rows, 3, ["mpi", "mpi-pickle"])
    sizes = {r["size_bytes"] for r in rows if r["collective"] == "allgather"}
    # 1K rounds down to a multiple of 3 ranks x 4 bytes; 8 bytes cannot be split over 3 ranks.
    assert 1020 in sizes and 8 not in sizes
    assert "too small to split over 3 ranks" in proc.stderr


def test_under_mpiexec_one_table_not_two(run_dir):
    proc = mpirun(2, ["allreduce", "--sizes", "8-1M", "--max-time", "0.05", "--no-save"], run_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("allreduce · float32 sum · 2 ranks") == 1
    assert "1M" in proc.stdout


def test_self_launch_returns_results_and_prints_command(run_dir):
    proc = cli(["allreduce", "-n", "2", "--sizes", "1K-4K", *FAST, "-v", "-o", "out.json"], run_dir)
    assert proc.returncode == 0, proc.stderr
    assert "launching:" in proc.stderr and "mpiexec" in proc.stderr
    rows = load_json(run_dir / "out.json")["rows"]
    assert [r["size_bytes"] for r in rows] == [1024, 2048, 4096]
    assert all(r["world_size"] == 2 for r in rows)


def test_default_files_go_to_results(run_dir):
    proc = cli(["bcast", "-n", "2", "--sizes", "1K", *FAST], run_dir)
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.suffix for p in (run_dir / "results").iterdir())
    assert files == [".csv", ".json"]


def test_dtypes_and_ops_as_comma_lists_measure_every_pair_in_one_run(run_dir):
    """Every dtype with every op, on both MPI backends, in one launch: each pair has its rows,
    checked, and its own table."""
    dtypes, ops = ["float64", "float16", "int32", "int64"], ["max", "min", "prod"]
    proc = cli(["reduce_scatter", "-n", "2", "--backend", "mpi,mpi-pickle", "--sizes", "64,4K",
                "--dtype", ",".join(dtypes), "--op", ",".join(ops), *FAST, "-o", "r.json"],
               run_dir)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(run_dir / "r.json")["rows"]
    assert all(r["check"] == "ok" for r in rows)
    assert Counter((r["dtype"], r["op"]) for r in rows) == {(d, o): 4 for d in dtypes for o in ops}
    # rows of another dtype are apart by their bytes: 64 bytes are 4 float16 and 1 int64 per rank
    assert {r["count"] for r in rows if r["dtype"] == "float16" and r["size_bytes"] == 64} == {32}
    for d in dtypes:
        for o in ops:
            assert f"reduce_scatter · {d} {o} · 2 ranks" in proc.stdout


def test_root_and_throughput_timing(run_dir):
    proc = cli(["gather", "-n", "2", "--root", "1", "--sizes", "1K,64K", "--timing", "both", *FAST,
                "-o", "r.json"], run_dir)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(run_dir / "r.json")["rows"]
    assert [r["timing"] for r in rows] == ["latency", "throughput"] * 2
    assert all(r["check"] == "ok" for r in rows)


def test_adaptive_iterations_reach_precision(run_dir):
    proc = cli(["allreduce", "-n", "2", "--sizes", "8,64K", "--precision", "0.05", "--max-time",
                "2", "--rounds", "1", "-o", "r.json"], run_dir)
    assert proc.returncode == 0, proc.stderr
    meta_rows = load_json(run_dir / "r.json")
    rows = meta_rows["rows"]
    assert meta_rows["metadata"]["settings"]["precision"] == 0.05
    for r in rows:
        assert r["iterations"] >= 10
        halfwidth = (r["time_us_ci_high"] - r["time_us_ci_low"]) / 2 / r["time_us_p50"]
        assert r["precision_reached"] == (halfwidth <= 0.05)
        assert not math.isnan(r["time_us_rank_avg"])
    assert any(r["precision_reached"] for r in rows)


def test_markdown_and_csv_printing(run_dir):
    md = cli(["allreduce", "-n", "2", "--sizes", "1K", *FAST, "--no-save", "--format", "markdown"],
             run_dir)
    assert md.returncode == 0 and "| size |" in md.stdout
    csv = cli(["allreduce", "-n", "2", "--sizes", "1K", *FAST, "--no-save", "--format", "csv"],
              run_dir)
    assert csv.returncode == 0 and csv.stdout.splitlines()[0].startswith("collective,backend,dtype")


def test_a_library_setting_is_recorded_and_compare_names_it(tmp_path):
    """MPICH's MPIR_CVAR_ variables tune the library (one can move a row 2-3x) and were not
    recorded in the run's metadata; two runs that differ by one now say so in compare."""
    args = ["allreduce", "-n", "2", "--sizes", "8", "--rounds", "1"]
    plain = cli(args + ["-o", "a.json"], tmp_path)
    tuned = cli(args + ["-o", "b.json"], tmp_path, env={"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"})
    assert plain.returncode == 0 and tuned.returncode == 0, plain.stderr + tuned.stderr
    recorded = load_json(tmp_path / "b.json")["metadata"]["environment"]
    assert recorded.get("MPIR_CVAR_ENABLE_HEAVY_YIELD") == "1"
    assert "MPIR_CVAR_ENABLE_HEAVY_YIELD" not in load_json(tmp_path / "a.json")["metadata"][
        "environment"]
    proc = cli(["compare", "a.json", "b.json"], tmp_path)
    assert proc.returncode in (0, 1, 3), proc.stderr
    assert ("MPI library settings differ: MPIR_CVAR_ENABLE_HEAVY_YIELD=1 in b.json only"
            in proc.stderr + proc.stdout), proc.stderr
