"""--api blocking, nonblocking, persistent: each measured side by side on real MPI and gloo
processes, checked, and the overlap of a call started and completed apart."""

import math

import pytest

from collbench.analysis.compare import compare_runs
from collbench.backends._mpi import persistent_collectives
from collbench.results.aggregate import overlap_pct
from collbench.results.loader import load_result
from collbench.benchmarks.registry import ORDER
from conftest import FAST, cli, gloo_lacks, load_json, mpirun



def _by_setup(rows) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault((r["backend"], r["api"]), []).append(r)
    return out


def _every_api(run_dir, command: str, backends: str, sizes: str) -> tuple:
    """``command`` on ``backends`` with every api side by side, self-launched: (the process, its
    file)."""
    pytest.importorskip("torch")
    proc = cli([command, "-n", "2", "--backend", backends, "--api",
                "blocking,nonblocking,persistent",
                "--sizes", sizes, *FAST, "-o", "out.json"], run_dir, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc, load_json(run_dir / "out.json")


@pytest.mark.mpi
def test_every_api_side_by_side_on_mpi_and_gloo_checks_ok_and_says_what_it_skips(run_dir):
    proc, data = _every_api(run_dir, "all", "mpi,gloo", "1K,64K")
    assert ("every collective on gloo (persistent): torch.distributed has no persistent calls; "
            "use mpi; skipped" in proc.stderr)
    setups = _by_setup(data["rows"])
    assert set(setups) == {("mpi", "blocking"), ("mpi", "nonblocking"), ("mpi", "persistent"),
                           ("gloo", "blocking"), ("gloo", "nonblocking")}
    for (backend, api), rows in setups.items():
        expected = set(ORDER) - (gloo_lacks() if backend == "gloo" else set())
        assert {r["collective"] for r in rows} == expected, (backend, api)
        assert all(r["check"] in ("ok", "skipped") for r in rows)
        assert all(r["check"] == "ok" for r in rows if r["collective"] != "barrier")
        overlaps = [r["overlap_pct"] for r in rows]
        if api == "blocking":
            assert overlaps == [None] * len(rows)
        else:          # OSU's four figures on every row of a call started and completed apart
            assert all(r["overall_us"] > 0 and r["compute_us"] > 0 and 0 <= r["overlap_pct"] <= 100
                       for r in rows)
            assert all(d["overall_us"] > 0 for r in rows for d in r["round_details"])
    assert "mpi (nonblocking)" in proc.stdout and "overlap %" in proc.stdout


@pytest.mark.mpi
def test_nonblocking_and_persistent_under_a_real_mpiexec(run_dir):
    pytest.importorskip("torch")
    proc = mpirun(2, ["allreduce", "--backend", "mpi,gloo", "--api", "nonblocking,persistent",
                      "--sizes", "8,1M",
                      *FAST, "-o", "m.json"], run_dir)
    assert proc.returncode == 0, proc.stderr
    assert ("allreduce on gloo (persistent): torch.distributed has no persistent calls"
            in proc.stderr)
    rows = load_json(run_dir / "m.json")["rows"]
    assert [(r["backend"], r["api"], r["size_bytes"], r["check"]) for r in rows] == [
        ("mpi", "nonblocking", 8, "ok"), ("mpi", "nonblocking", 1 << 20, "ok"),
        ("mpi", "persistent", 8, "ok"),
        ("mpi", "persistent", 1 << 20, "ok"), ("gloo", "nonblocking", 8, "ok"),
        ("gloo", "nonblocking", 1 << 20, "ok")]
    assert all(0 <= r["overlap_pct"] <= 100 for r in rows)


@pytest.mark.mpi
@pytest.mark.parametrize("api", ["nonblocking", "persistent"])
def test_a_wrong_result_is_caught_whatever_the_api(api, run_dir, plugin_env):
    proc = cli(["allreduce", "-n", "2", "--backend", "faulty-mpi", "--api", api, "--sizes", "1K",
                *FAST, "-o", "c.json"], run_dir, env={**plugin_env, "FAULTY_CORRUPT": "1"})
    assert proc.returncode == 1, proc.stderr
    assert (f"CHECK FAILED: allreduce on faulty-mpi ({api})" in proc.stderr
            and "6 wrong elements" in proc.stderr)
    assert [r["check"] for r in load_json(run_dir / "c.json")["rows"]] == ["wrong:6"]


@pytest.mark.mpi
@pytest.mark.parametrize("kind,low,high", [("background", 50, 100), ("in-wait", 0, 30)])
def test_the_overlap_of_a_library_whose_progress_is_known(kind, low, high, run_dir, plugin_env):
    """A call that progresses for 20 ms in the background from its start is hidden by 20 ms of
    compute; one that waits only inside its wait is not hidden at all. (The figure is a timing:
    beside two busy loops and other jobs the background call read 64%, hence a wide band; the two
    kinds stay apart by 20 points.)"""
    proc = cli(["allreduce", "-n", "2", "--backend", "timed-library-mpi", "--api", "nonblocking",
                "--sizes", "1K",
                "--iters", "20", "--warmup", "1", "--rounds", "1", "-o", "o.json"], run_dir,
               env={**plugin_env, "TIMED_LIBRARY": f"{kind}:0.02"})
    assert proc.returncode == 0, proc.stderr
    (row,) = load_json(run_dir / "o.json")["rows"]
    # the compute is calibrated to the call and lengthened once if a busy moment cut it short; a
    # second busy moment may still leave it a little short of the median call
    assert row["time_us_p50"] >= 20_000 and row["compute_us"] >= 0.9 * row["time_us_p50"]
    assert low <= row["overlap_pct"] <= high, row


@pytest.mark.mpi
def test_point_to_point_takes_the_apis_that_apply(run_dir):
    proc, data = _every_api(run_dir, "pingpong", "mpi,mpi-pickle,gloo", "8,64K")
    rows = data["rows"]
    assert set(_by_setup(rows)) == {("mpi", "blocking"), ("mpi", "nonblocking"),
                                    ("mpi", "persistent"),
                                    ("mpi-pickle", "blocking"), ("mpi-pickle", "nonblocking"),
                                    ("gloo", "blocking"), ("gloo", "nonblocking")}
    assert all(r["check"] == "ok" and r["overlap_pct"] is None for r in rows)
    assert ("pingpong on mpi-pickle (persistent): mpi4py's pickle API has no persistent calls; "
            "use mpi; skipped" in proc.stderr)


@pytest.mark.parametrize("args,fragment", [
    (["allreduce", "--backend", "gloo", "--api", "persistent"],
     "torch.distributed has no persistent calls"),
    (["allreduce", "--backend", "mpi-pickle", "--api", "nonblocking"],
     "mpi4py's pickle API has no nonblocking collectives"),
    (["bw", "--backend", "mpi", "--api", "nonblocking"],
     "its window is of non-blocking sends and receives already"),
    (["sendrecv", "--backend", "mpi", "--api", "persistent"], "no persistent form"),
    (["allreduce", "--backend", "mpi", "--api", "eventually"], "eventually"),
])
def test_an_api_a_benchmark_or_backend_lacks_is_one_line_exit_2(args, fragment, run_dir):
    proc = cli([*args, "-n", "2", "--sizes", "8", "--no-save"], run_dir)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert fragment in proc.stderr and "Traceback" not in proc.stderr


class _Library:
    """An mpi4py MPI module and communicator as far as persistent_collectives asks: a library
    whose persistent allreduce exists, is missing from mpi4py, or is not implemented."""

    class Exception(Exception):
        pass

    SUM = "sum"

    def __init__(self, has_init, raises=None):
        self.Comm = type("Comm", (), {"Allreduce_init": None} if has_init else {})
        self.raises, self.freed = raises, False

    def Allreduce_init(self, send, recv, op):
        if self.raises:
            raise self.raises("MPI_Allreduce_init not available")
        library = self

        class Request:
            def Free(self):
                library.freed = True
        return Request()


def test_persistent_collectives_are_asked_of_the_library_not_its_version():
    made = _Library(True)
    assert persistent_collectives(made, made) and made.freed
    assert not persistent_collectives(_Library(False), _Library(False))
    assert not persistent_collectives(_Library(True, NotImplementedError),
                                      _Library(True, NotImplementedError))
    broken = _Library(True)
    broken.raises = _Library.Exception
    assert not persistent_collectives(broken, broken)


def test_overlap_is_osu_s_figure():
    # 10 of 100 µs left after the compute
    assert overlap_pct(110.0, 100.0, 100.0) == pytest.approx(90.0)
    assert overlap_pct(200.0, 100.0, 100.0) == 0.0                     # nothing hidden
    # worse than nothing: 0, as OSU
    assert overlap_pct(260.0, 100.0, 100.0) == 0.0
    assert overlap_pct(100.0, 100.0, 100.0) == 100.0
    assert math.isnan(overlap_pct(math.nan, 100.0, 100.0))


@pytest.mark.mpi
def test_compare_matches_on_the_api_and_shows_the_overlap_on_each_side(run_dir):
    for name in ("a", "b"):
        proc = cli(["allreduce", "-n", "2", "--backend", "mpi", "--api", "blocking,nonblocking",
                    "--sizes", "1K",
                    "--iters", "10", "--warmup", "1", "--rounds", "2", "-q", "-o", f"{name}.json"],
                   run_dir)
        assert proc.returncode == 0, proc.stderr
    c = compare_runs(load_result(run_dir / "a.json"), load_result(run_dir / "b.json"),
                     threshold=0.5)
    assert sorted(r.field("api") for r in c.rows) == ["blocking", "nonblocking"]
    proc = cli(["compare", "a.json", "b.json", "--threshold", "50%"], run_dir,
               env={"COLUMNS": "160"})
    assert proc.returncode in (0, 1, 3), proc.stderr
    assert "overlap %" in proc.stdout and " → " in proc.stdout
    proc = cli(["compare", "a.json", "b.json", "--threshold", "50%", "-f", "json"], run_dir)
    rows = [r for r in __import__("json").loads(proc.stdout)["rows"] if r["api"] == "nonblocking"]
    assert rows and all(0 <= r["overlap_pct_baseline"] <= 100 for r in rows)


def test_files_written_before_the_api_existed_read_as_blocking(tmp_path):
    import json
    from pathlib import Path
    old = Path(__file__).parent / "data" / "h100" / "cb-ar-1.json"
    doc = json.loads(old.read_text())
    assert doc["metadata"]["schema_version"] < 6 and "api" not in doc["rows"][0]
    result = load_result(old)
    assert {r.api for r in result.rows} == {"blocking"}
    assert all(math.isnan(r.overlap_pct) for r in result.rows)
