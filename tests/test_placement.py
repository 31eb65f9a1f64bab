"""--placement out-of-place, in-place: both side by side, checked by the real check, and said once
where a collective has one form only."""

from collections import Counter

import pytest

from collbench.backends import backend_class
from collbench.benchmarks.registry import BENCHMARKS
from collbench.results.loader import load_result
from collbench.results.records import backend_label, usual_placement
from conftest import FAST, cli, gloo_lacks, load_json, mpirun

MOVING = ["allreduce", "bcast", "reduce", "allgather", "gather", "scatter", "alltoall", "alltoallv",
          "reduce_scatter"]


@pytest.mark.mpi
def test_both_placements_side_by_side_checked_and_each_single_form_said_once(run_dir):
    pytest.importorskip("torch")
    proc = cli(["all", "-n", "2", "--backend", "mpi,gloo,mpi-pickle", "--placement",
                "out-of-place,in-place",
                "--sizes", "1K,64K", *FAST, "-o", "p.json"], run_dir, timeout=300,
               env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    # the placement notes; not the timer's, which a fast barrier at thread level single may bring
    notes = [line for line in proc.stderr.splitlines()
             if line.startswith("collbench: ") and "wrote" not in line
             and "timer resolution" not in line]
    assert notes == [
        *(line for line in notes if line.endswith("on mpi and mpi-pickle; skipped") or
          # the v-forms gloo lacks, once each
          line.endswith("on mpi, mpi-pickle and nccl; skipped")),
        "collbench: allreduce, reduce on gloo: only in place; measured once",
        "collbench: allreduce, reduce, allgather on mpi-pickle: only out of place; measured once",
        "collbench: bcast on mpi, gloo, mpi-pickle: only in place; measured once",
        "collbench: allgatherv, gatherv, scatterv, reduce_scatterv on mpi, mpi-pickle: only out of "
        "place; measured once",
        "collbench: gather, scatter, alltoall, reduce_scatter on gloo, mpi-pickle: only out of "
        "place; measured once",
        "collbench: alltoallv on mpi, gloo, mpi-pickle: only out of place; measured once",
        "collbench: barrier on mpi, gloo, mpi-pickle: no buffers to place; measured once"], notes
    assert sum(line.endswith("; skipped") for line in notes) == len(gloo_lacks()), notes
    rows = load_json(run_dir / "p.json")["rows"]
    forms = Counter((r["collective"], r["backend"], r["placement"]) for r in rows)
    for name in MOVING:
        expected = {"bcast": {("mpi", "in-place")}, "alltoallv": {("mpi", "out-of-place")}}.get(
            name, {("mpi", "out-of-place"), ("mpi", "in-place")})
        assert {(b, p) for (c, b, p) in forms if c == name and b == "mpi"} == expected, name
    assert ({p for (c, b, p) in forms if c == "allgather" and b == "gloo"}
            == {"out-of-place", "in-place"})
    assert {p for (c, b, p) in forms if c == "allreduce" and b == "gloo"} == {"in-place"}
    # nothing twice
    assert all(count == (1 if c == "barrier" else 2) for (c, _, _), count in forms.items())
    assert all(r["check"] == ("skipped" if r["collective"] == "barrier" else "ok") for r in rows)
    # labels name a placement only where it is not the collective's usual one
    labels = {backend_label(r) for r in load_result(run_dir / "p.json").rows
              if r.collective == "allreduce"}
    assert labels == {"mpi", "mpi (in-place)", "gloo", "mpi-pickle"}
    assert "mpi (in-place)" in proc.stdout


@pytest.mark.mpi
def test_in_place_under_a_real_mpiexec(run_dir):
    proc = mpirun(3, ["all", "--backend", "mpi", "--thread-level", "multiple", "--placement",
                      "in-place", "--root", "1", "--sizes", "48,48K", *FAST,
                      "-o", "m.json"], run_dir)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(run_dir / "m.json")["rows"]
    assert ({r["collective"] for r in rows if r["placement"] == "in-place"} == set(MOVING)
            - {"alltoallv"})
    assert all(r["check"] == "ok" for r in rows if r["collective"] != "barrier")


@pytest.mark.mpi
@pytest.mark.parametrize("collective,wrong",
                         [("allreduce", 6), ("allgather", 6), ("reduce_scatter", 3)])
def test_a_wrong_in_place_result_is_caught(collective, wrong, run_dir, plugin_env):
    """Rank 1's input is three elements off: in place, it reaches the call through the receive
    buffer."""
    proc = cli([collective, "-n", "2", "--backend", "faulty-mpi", "--placement", "in-place",
                "--sizes", "1K", *FAST,
                "-o", "c.json"], run_dir, env={**plugin_env, "FAULTY_CORRUPT": "1"})
    assert proc.returncode == 1, proc.stderr
    assert f"CHECK FAILED: {collective} on faulty-mpi (in-place)" in proc.stderr
    (row,) = load_json(run_dir / "c.json")["rows"]
    assert row["placement"] == "in-place" and row["check"] == f"wrong:{wrong}"


def test_a_placement_on_point_to_point_is_refused_in_one_line(run_dir):
    proc = cli(["pingpong", "-n", "2", "--placement", "in-place", "--sizes", "8", "--no-save"],
               run_dir)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "--placement" in proc.stderr


@pytest.mark.parametrize("backend,family",
                         [("mpi", "buffer"), ("mpi-pickle", "object"), ("gloo", "tensor"),
                                            ("nccl", "tensor")])
def test_the_usual_placement_is_what_each_benchmark_takes_unless_told(backend, family):
    assert backend_class(backend).family == family
    for name, bench in BENCHMARKS.items():
        assert (usual_placement(backend, name)
                == bench.placement(family, "out-of-place")), (backend, name)


def test_files_written_before_placement_existed_read_as_measured():
    from pathlib import Path
    result = load_result(Path(__file__).parent / "data" / "h100" / "nccl-all.json")
    forms = {r.collective: r.placement for r in result.rows}
    assert forms["allreduce"] == forms["bcast"] == forms["reduce"] == "in-place"
    assert forms["allgather"] == forms["alltoall"] == "out-of-place"
