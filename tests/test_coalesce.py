"""Coalesced calls (--coalesce K): K calls issued as one group, each on buffers of its own, beside
the calls one at a time; the group's times per call; every call of a group checked, on mpi and
gloo, self-launched and under mpiexec; the refusals."""

import numpy as np
import pytest

from collbench.backends.mpi import MpiBackend
from collbench.measure import harness
from collbench.measure.calls import Bound
from conftest import cli, load_json, mpirun

QUICK = ["--iters", "20", "--warmup", "2", "--rounds", "1"]


def _two_step(log: list, k: int) -> Bound:
    return Bound.two_step(start=lambda: (log.append(("start", k)), f"h{k}")[1],
                          complete=lambda handle: log.append(("complete", handle)),
                          reset=lambda: log.append(("reset", k)), result=lambda: k)


def test_a_group_starts_every_call_before_completing_any_and_checks_each():
    log: list = []
    bound = MpiBackend.coalesced(None, [_two_step(log, k) for k in range(3)])
    assert bound.calls == 3 and bound.start is None        # timed whole: no overlap of its own
    bound.run()
    assert log == [("start", 0), ("start", 1), ("start", 2), ("complete", "h0"), ("complete", "h1"),
                   ("complete", "h2")]
    log.clear()
    assert bound.checked_all() == [0, 1, 2]
    assert log[:3] == [("reset", 0), ("reset", 1), ("reset", 2)] and len(log) == 9


def test_a_groups_samples_become_times_per_call():
    m = harness.Measurement(samples_us=[np.array([8.0, 12.0])], rank_means_us=[10.0, None],
                            iterations=2, calls_per_sample=1, precision_reached=(True,))
    per = harness.per_call(m, 4)
    assert (list(per.samples_us[0]) == [2.0, 3.0] and per.rank_means_us == [2.5, None]
            and per.calls_per_sample == 4)
    assert harness.per_call(m, 1) is m


def test_grouped_rows_stand_beside_the_calls_one_at_a_time_and_check(tmp_path):
    proc = cli(["allreduce", "-n", "2", "--sizes", "8,64K", "--coalesce", "4", "-o", "k.json",
                *QUICK], tmp_path,
               env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    rows = load_json(tmp_path / "k.json")["rows"]
    # a group's calls go in two steps: nonblocking where blocking was asked, and the row says so
    assert [(r["api"], r["coalesce"], r["check"]) for r in rows] == \
        [("blocking", 1, "ok")] * 2 + [("nonblocking", 4, "ok")] * 2
    for row in rows:
        assert all(d["calls_per_sample"] % row["coalesce"] == 0 for d in row["round_details"])
    said = " ".join(proc.stdout.split())
    assert ("mpi (nonblocking, 4 grouped)" in said
            and "4 grouped: that many calls issued as one group" in said)
    assert all(len(line) <= 80 for line in proc.stdout.splitlines() if line.startswith(("|", "+")))


@pytest.mark.parametrize("name", ["bcast", "alltoall"])
def test_gloo_groups_what_its_coalescing_manager_does_not_fuse_and_every_call_checks(
        tmp_path, name):
    # torch's manager fuses allreduce, allgather and reduce_scatter on gloo; the others go one by
    # one, and were read before they arrived until their own works were waited for
    pytest.importorskip("torch")
    proc = cli([name, "-n", "3", "--backend", "gloo", "--sizes", "96,96K", "--coalesce", "4", "-o",
                "g.json", *QUICK,
                "-q"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(tmp_path / "g.json")["rows"]
    assert [(r["coalesce"], r["check"]) for r in rows] == [(1, "ok")] * 2 + [(4, "ok")] * 2


def test_under_mpiexec_persistent_requests_go_in_groups(tmp_path):
    proc = mpirun(3, ["reduce_scatter", "--sizes", "96,96K", "--coalesce", "3", "--api",
                      "persistent", "-o", "r.json",
                      "--thread-level", "multiple", *QUICK, "-q"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(tmp_path / "r.json")["rows"]
    assert [(r["api"], r["coalesce"], r["check"]) for r in rows] == \
        [("persistent", 1, "ok")] * 2 + [("persistent", 3, "ok")] * 2


def test_a_cold_group_is_left_out_with_a_note_and_the_rest_measured(tmp_path):
    proc = cli(["allreduce", "-n", "2", "--sizes", "8", "--coalesce", "2", "--cache", "hot,cold",
                "-o", "c.json",
                *QUICK], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "a group of calls on a cold pool is not measured" in proc.stderr
    rows = load_json(tmp_path / "c.json")["rows"]
    assert (sorted((r["cache"], r["coalesce"]) for r in rows)
            == [("cold", 1), ("hot", 1), ("hot", 2)])


@pytest.mark.parametrize("args,said", [
    (["pingpong", "--coalesce", "4"],
     "pingpong takes no --coalesce: only collectives that move data are grouped"),
    (["allreduce", "--coalesce", "0"], "--coalesce"),
    (["allreduce", "--coalesce", "65"], "--coalesce"),
    (["allreduce", "--coalesce", "4", "--timing", "graph"], "--coalesce with --timing graph"),
    (["allreduce", "--coalesce", "4", "--backend", "mpi-pickle"],
     "--coalesce 4 is for mpi and gloo and nccl"),
])
def test_a_group_that_cannot_be_measured_is_one_line_and_exit_2(tmp_path, args, said):
    proc = cli([*args, "-n", "2", "--no-save"], tmp_path)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
