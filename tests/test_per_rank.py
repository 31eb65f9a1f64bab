"""The per-rank view: the slowest rank and its host, outlier ranks, per host; its statistics on
their own, the fields in real files, and ``report --per-rank`` on real runs, one with a rank
made slow by the fault plugin."""

import json
import math
import socket
from pathlib import Path

import pandas as pd
import pytest

from collbench.launch.self_launch.mpiexec import find_mpiexec
from collbench.results.aggregate import round_data
from collbench.results.loader import load_result
from collbench.results.rank_view import (RANK_FIELDS, json_fields, outliers_of, rank_view,
                                         round_hosts, row_views)
from collbench.results.records import ROW_FIELDS
from results_helpers import one_line_error, run_cli, write

V1 = Path(__file__).resolve().parent / "data" / "v1-allreduce-mpi-vs-pickle.json"


def _rounds(*per_round_means):
    return tuple(round_data(i + 1, [10.0] * 8, means, precision_reached=True, check="ok")
                 for i, means in enumerate(per_round_means))


def _view(*per_round_means, hosts=None, collective="allreduce", root=0):
    rounds = _rounds(*per_round_means)
    return rank_view(rounds, hosts or [None] * len(rounds), collective=collective, root=root,
                     keep_slots=True)


@pytest.mark.parametrize("means, flagged", [
    # two ranks: neither is an outlier
    ({0: 10.0, 1: 100.0}, set()),
    ({0: 10.0, 1: 10.1, 2: 20.0}, {2}),
    # no spread at all, but only 20% slower
    ({0: 10.0, 1: 10.0, 2: 10.0, 3: 12.0}, set()),
    ({0: 10.0, 1: 10.0, 2: 10.0, 3: 13.0}, {3}),
    # 73% slower, within 3.5 robust spreads
    ({0: 5.0, 1: 10.0, 2: 15.0, 3: 20.0, 4: 26.0}, set()),
    ({0: 10.0, 1: 10.0, 2: 10.0, 3: 5.0}, set()),                  # only the slow side counts
])
def test_outlier_rule_needs_spread_and_margin(means, flagged):
    assert outliers_of(means) == flagged


def test_slowest_rank_and_outliers_combine_the_rounds():
    view = _view([10, 10.2, 30, 9.9], [11, 11, 40, 10.8], [10, 10, 10.5, 25],
                 hosts=[("a", "a", "b", "b")] * 3)
    assert (view.slowest_rank, view.slowest_host) == (2, "b")
    # median over rounds of mean / median rank
    assert view.slowest_rel == pytest.approx(30 / 10.1)
    assert view.slowest_us == 30 and view.median_us == pytest.approx(10.25)
    # rank 3 was flagged in one round of three only
    [outlier] = view.outliers
    assert (outlier.rank, outlier.host, outlier.rounds_flagged) == (2, "b", 2)
    assert [r.slowest_host for r in view.per_round] == ["b", "b", "b"] and view.same_work
    assert [r.flagged_hosts for r in view.per_round] == [("b",), ("b",), ("b",)]
    assert len(view.per_round[0].peers) == 4


def test_one_round_of_two_is_not_enough():
    assert _view([10, 10, 30], [10, 10, 10.1]).outliers == ()
    assert [o.rank for o in _view([10, 10, 30], [10, 10, 31]).outliers] == [2]


def test_rooted_collectives_leave_the_root_out_and_judge_no_outliers():
    view = _view([500, 10, 10, 30], [400, 10, 11, 33], collective="gather")
    assert view.slowest_rank == 3 and view.outliers is None and not view.same_work
    assert _view([10, 500, 10, 30], collective="reduce", root=1).slowest_rank == 3
    # fewer than 3 ranks: not judged
    assert _view([10, 30], collective="allreduce").outliers is None
    assert _view([10, 10, 30], collective="no-such-collective").outliers is None


def test_hosts_follow_each_round_and_missing_data_is_tolerated():
    view = _view([10, 30, 10], [10, 30, 10], [10, 30, 10],
                 hosts=[("a", "b", "a"), ("b", "a", "a"), ("c", "b", "a")])
    assert view.slowest_host == "b,a"                                # most rounds first
    assert _view([10, 30, 10], hosts=[("a", "b")]).slowest_host is None   # a map of another length
    assert _view([10, math.nan, 30, 10]).slowest_rank == 2
    empty = rank_view(_rounds(None), [None], collective="allreduce")
    assert empty.slowest_rank is None and json_fields(empty) == dict.fromkeys(RANK_FIELDS)


def test_round_hosts_from_metadata():
    meta = {"rank_hosts": ["x", "y"],
            "rounds": [{"round": 1, "rank_hosts": ["a", "b"]}, {"round": 2},
                                                 {"round": 3, "rank_hosts": "oops"}, "junk"]}
    assert round_hosts(meta) == ({1: ("a", "b")}, ("x", "y"))
    assert round_hosts({"rank_hosts": [1, 2]}) == ({}, None)


def test_version_1_file_gets_the_fields_and_still_compares(tmp_path):
    """An old file: its rank means are round 1's; rewritten, it carries the fields and loads as
    before."""
    old = load_result(V1)
    views = row_views(old)
    assert all(v.slowest_rank in (0, 1) and v.slowest_host == "vm" for v in views)
    new = load_result(write(old, tmp_path / "new.json"))
    assert new.rows == old.rows
    doc = json.loads((tmp_path / "new.json").read_text())
    assert [r["slowest_rank"] for r in doc["rows"]] == [v.slowest_rank for v in views]
    assert all(r["outlier_ranks"] is None for r in doc["rows"])      # 2 ranks: not judged
    for a, b in ((V1, "new.json"), ("new.json", V1)):
        proc = run_cli(["compare", a, b], tmp_path)
        assert (proc.returncode in (0, 3)
                and proc.stdout.startswith(("no regression", "UNDECIDED"))), proc.stderr
    table = run_cli(["report", V1, "--per-rank"], tmp_path)
    assert table.returncode == 0 and "per host" in table.stdout, table.stderr


def _sweep(tmp_path, name, *options, extra_env=None, backend="mpi"):
    if find_mpiexec() is None:
        pytest.skip("no mpiexec")
    proc = run_cli(["allreduce", "-n", "3", "--backend", backend, "--sizes", "8,1K", "--rounds",
                    "2", *options,
                    "-o", f"{name}.json", "-o", f"{name}.csv", "-q"], tmp_path, timeout=180,
                   env_extra=extra_env)
    assert proc.returncode == 0, proc.stderr
    return json.loads((tmp_path / f"{name}.json").read_text())["rows"]


@pytest.mark.mpi
def test_real_run_rows_and_report(tmp_path):
    rows = _sweep(tmp_path, "r", "--iters", "20")
    host = socket.gethostname()
    views = row_views(load_result(tmp_path / "r.json"))
    for row, view in zip(rows, views):
        assert row["slowest_rank"] in (0, 1, 2) and row["slowest_rank_host"] == host
        assert row["slowest_rank_rel"] >= 1.0 and row["slowest_rank_us"] > 0
        assert isinstance(row["outlier_ranks"], list)                # a noisy machine may flag one
        # what readers recompute (from 4 decimals)
        again = json_fields(view)
        assert [row[k] for k in ("slowest_rank", "slowest_rank_host")] == [again["slowest_rank"],
                                                                          again["slowest_rank_host"]]
        assert row["slowest_rank_us"] == pytest.approx(again["slowest_rank_us"], rel=1e-5)
        assert [o["rank"] for o in row["outlier_ranks"]] == [o["rank"] for o
                                                             in again["outlier_ranks"]]
    frame = pd.read_csv(tmp_path / "r.csv")
    assert list(frame.columns) == list(ROW_FIELDS + RANK_FIELDS) + ["run_metadata"]
    assert list(frame["slowest_rank"]) == [r["slowest_rank"] for r in rows]
    # compares: not 1, not 2
    assert run_cli(["compare", "r.json", "r.csv"], tmp_path).returncode in (0, 3)

    table = run_cli(["report", "r.json", "--per-rank"], tmp_path)
    assert table.returncode == 0, table.stderr
    assert "allreduce · float32 sum · 3 ranks · latency · per rank" in table.stdout
    assert f"{rows[0]['slowest_rank']}@{host}" in table.stdout and "per host" in table.stdout
    markdown = run_cli(["report", "r.json", "--per-rank", "--format", "markdown"], tmp_path)
    assert markdown.returncode == 0 and markdown.stdout.startswith("# collbench report: per rank")
    assert f"| {host} | 0-2 | " in markdown.stdout and "| slowest rank |" in markdown.stdout
    plain = run_cli(["report", "r.json"], tmp_path)
    assert (plain.returncode == 0 and "per rank" not in plain.stdout
            and "latency–bandwidth fit" in plain.stdout)
    csv = run_cli(["report", "r.csv", "--per-rank"], tmp_path)
    assert csv.returncode == 2 and "needs the JSON file" in one_line_error(csv)
    assert "--per-rank" in run_cli(["report", "--help"], tmp_path).stdout


@pytest.mark.mpi
def test_a_slow_rank_is_named_in_every_row_and_its_host_stands_out(tmp_path, plugin_env):
    """Rank 2 sleeps 150 ms at the end of each call: it is the slowest rank and the one outlier.
    (3 ranks on 2 cores: when rank 2 wakes it takes a core from a rank that then waits up to a
    few ms in its own call, so the others' means spread that far; the sleep stands well beyond.
    With 50 ms, in two workers beside two busy loops, rank 2 was not judged an outlier once: the
    two other ranks' means, whose gap is the spread with 3 ranks, lay too far apart.)"""
    rows = _sweep(tmp_path, "slow", "--iters", "10", "--warmup", "1",
                  extra_env={**plugin_env, "FAULTY_SLOW": "2:0.15"}, backend="faulty-mpi")
    host = socket.gethostname()
    assert [r["size_bytes"] for r in rows] == [8, 1024]
    for row in rows:
        assert (row["slowest_rank"], row["slowest_rank_host"]) == (2, host)
        assert row["slowest_rank_rel"] > 3 and row["slowest_rank_us"] > 50_000
        assert [(o["rank"], o["host"], o["rounds_flagged"])
                for o in row["outlier_ranks"]] == [(2, host, 2)]
    proc = run_cli(["report", "slow.json", "--per-rank", "-f", "markdown"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("| faulty-mpi |")]
    assert len(lines) == 2 and all(f"| 2@{host} |" in line and f"2@{host} " in line.split("|")[-2]
                                   for line in lines)
    [host_line] = [line for line in proc.stdout.splitlines() if line.startswith(f"| {host} |")]
    assert "| 4 of 4 | 4.0 | 4 of 4 | 2 (" in host_line          # 2 sizes x 2 rounds, all rank 2


def test_report_puts_the_bad_host_first(tmp_path):
    """Four ranks on two hosts over three launches; the second launch swaps the hosts, and the
    rank on node-b that is slow follows the host, not the rank number."""
    from collbench.results.aggregate import build_row
    from collbench.results.records import RunResult
    from results_helpers import identity, metadata

    placements = {1: ["node-a", "node-a", "node-b", "node-b"],
                  2: ["node-b", "node-b", "node-a", "node-a"],
                  3: ["node-a", "node-a", "node-b", "node-b"]}
    # node-b's second rank in every launch
    slow_rank = {1: 3, 2: 1, 3: 3}
    run = RunResult(metadata(world_size=4, hostnames=["node-a", "node-b"], rank_hosts=placements[1],
                             rounds=[{"round": n, "rank_hosts": hosts}
                                     for n, hosts in placements.items()]))
    for collective in ("allreduce", "bcast"):
        for size in (1024, 65536):
            rounds = []
            for n in placements:
                means = [10.0, 10.2, 9.9, 10.1]
                means[slow_rank[n]] = 30.0
                rounds.append(round_data(n, [31.0] * 8, means, precision_reached=True, check="ok"))
            run.add(build_row(identity(collective=collective, size_bytes=size, world_size=4),
                              rounds), tuple(rounds))
    write(run, tmp_path / "two-hosts.json")
    proc = run_cli(["report", "two-hosts.json", "--per-rank", "-f", "markdown"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| mpi |")]
    # rank 3, by rank number
    assert len(rows) == 4 and all("| 3@node-b,node-a |" in line for line in rows)
    # flagged in rounds 1 and 3
    assert all(line.endswith("| 3@node-b 2.97× |") for line in rows[:2])
    hosts = [line for line in proc.stdout.splitlines() if line.startswith("| node-")]
    assert hosts[0].startswith("| node-b | 0-3 |") and "| 6 of 6 | 3.0 | 6 of 6 |" in hosts[0]
    assert hosts[1].startswith("| node-a | 0-3 | 1.00× | 0 of 6 | 3.0 | 0 of 6 |")
