"""``collbench pairs``: the schedule, the rule that says what lies out, and real runs (self-launched
and under mpiexec, on mpi, mpi-pickle and gloo), their files, tables, heat map and compare. The
slowed link between simulated hosts: tests/test_multihost.py."""

import itertools
import json
import os
import subprocess
import sys

import pytest

from collbench.benchmarks.base import Roles
from collbench.results.link_map import ACROSS_HOSTS, SAME_HOST, Placement, split
from collbench.results.loader import load_result
from collbench.run.pairing import Pairing, round_robin
from conftest import cli, load_json, mpirun
from results_helpers import row_from_samples

QUICK = ["--iters", "20", "--warmup", "1", "--rounds", "1", "--no-shuffle"]


def _backends():
    try:
        import torch  # noqa: F401
    except ImportError:
        return ["mpi", "mpi-pickle"]
    return ["mpi", "mpi-pickle", "gloo"]


@pytest.mark.parametrize("n", range(2, 12))
def test_round_robin_meets_every_pair_once_in_disjoint_steps(n):
    steps = round_robin(list(range(n)))
    assert len(steps) == (n - 1 if n % 2 == 0 else n)
    assert sorted(p for step in steps for p in step) == list(itertools.combinations(range(n), 2))
    for step in steps:
        ranks = [r for pair in step for r in pair]
        assert len(ranks) == len(set(ranks)) and len(step) == n // 2


def test_which_pairs_cross_host_per_host_both_ways_and_serial():
    hosts = ["a", "a", "b", "b", "c"]
    cross = Pairing(select="cross-host").steps(hosts)
    assert all(hosts[x] != hosts[y] for step in cross for x, y in step)
    assert len({p for step in cross for p in step}) == 10 - 2          # 0-1 and 2-3 share a host
    per_host = Pairing(select="per-host").steps(hosts)
    assert sorted(p for step in per_host for p in step) == [(0, 2), (0, 4), (2, 4)]
    both = [p for step in Pairing(metric="bw").steps(hosts) for p in step]
    assert len(both) == 20 and set(both) == {(b, a) for a, b in both}    # each way once
    serial = Pairing(serial=True).steps(hosts)
    assert all(len(step) == 1 for step in serial) and len(serial) == 10
    assert Pairing(select="cross-host").problem(["a", "a"]).startswith("--cross-host needs ranks "
                                                                       "on two hosts")
    layouts = Pairing(metric="bw").layouts(hosts, Roles(window=16))
    assert all(roles.window == 16 for roles in layouts)


def _map(times: dict, hosts: list, name="pingpong"):
    rows = [row_from_samples([t * 0.98, t, t * 1.02], collective=name, pair=pair,
                             world_size=len(hosts))
            for pair, t in times.items()]
    maps, rest = split(rows, Placement(hosts))
    assert len(maps) == 1 and not rest
    return maps[0]


def test_a_host_whose_links_are_slow_is_named_once_not_as_its_pairs():
    hosts = ["a", "b", "c", "d", "e"]
    times = {pair: 10.0 + 0.1 * i for i, pair in enumerate(itertools.combinations(range(5), 2))}
    for pair in times:
        if 3 in pair:
            times[pair] *= 4
    findings = _map(times, hosts).findings
    assert [(f.what, f.name, f.links_out, f.links) for f in findings] == [("host", "d", 4, 4)]
    assert findings[0].kind == ACROSS_HOSTS and findings[0].ratio > 3


def test_one_slow_pair_among_good_ones_is_named_with_how_far_it_is():
    hosts = ["a"] * 6
    times = {pair: 5.0 + 0.05 * (i % 4)
             for i, pair in enumerate(itertools.combinations(range(6), 2))}
    times[(1, 4)] = 9.0
    (finding,) = _map(times, hosts).findings
    assert (finding.what, finding.name, finding.kind) == ("pair", "1-4", SAME_HOST)
    assert finding.ratio == pytest.approx(9.0 / 5.05, rel=0.02) and finding.sigmas > 3.5


def test_pairs_within_a_host_and_across_hosts_are_never_compared():
    hosts = ["a", "a", "b", "b"]           # across hosts ten times slower than within: no outlier
    times = {pair: (1.0 if hosts[pair[0]] == hosts[pair[1]] else 10.0) + 0.01 * i
             for i, pair in enumerate(itertools.combinations(range(4), 2))}
    lmap = _map(times, hosts)
    assert lmap.findings == [] and set(lmap.classes()) == {SAME_HOST, ACROSS_HOSTS}


def test_a_small_difference_is_not_called_out():
    # identical figures but one 10% slower: no spread, under 25%
    hosts = ["a"] * 4
    times = {pair: 2.0 for pair in itertools.combinations(range(4), 2)}
    times[(0, 2)] = 2.2
    assert _map(times, hosts).findings == []


def test_a_crowded_host_is_not_judged_and_says_why():
    from collbench.results.link_map import crowding

    why = crowding({"ranks_per_node": 4, "cpu_count": 2})
    assert (why.startswith("4 ranks share a host with 2 CPUs")
            and not crowding({"ranks_per_node": 2, "cpu_count": 2}))
    times = {pair: 5.0 for pair in itertools.combinations(range(4), 2)}
    times[(1, 2)] = 40.0
    rows = [row_from_samples([t], collective="pingpong", pair=pair, world_size=4)
            for pair, t in times.items()]
    (lmap,), _ = split(rows, Placement(["a"] * 4, why))
    assert lmap.findings == [] and lmap.crowded == why
    # the same rows, judged where each rank has a core
    assert split(rows, Placement(["a"] * 4))[0][0].findings


def test_bandwidth_is_one_way_a_host_slow_only_sending_is_named_from_it():
    hosts = ["a", "b", "c", "d"]
    times = {pair: 100.0 for pair in itertools.permutations(range(4), 2)}
    for b in (0, 1, 3):
        times[(2, b)] = 500.0                  # from c only
    (finding,) = _map(times, hosts, "bw").findings
    assert (finding.what, finding.name, finding.direction,
            finding.links_out) == ("host", "c", "from", 3)


def _pairs(args, run_dir, out="p.json", n=4):
    proc = cli(["pairs", "-n", str(n), "-b", ",".join(_backends()), *QUICK, *args, "-o", out],
               run_dir, timeout=300, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    return proc, load_json(run_dir / out)


@pytest.mark.mpi
def test_latency_between_every_pair_self_launched(run_dir):
    proc, doc = _pairs([], run_dir)
    rows = doc["rows"]
    assert doc["metadata"]["settings"]["pairs"] == {"metric": "latency", "select": "all",
                                                    "serial": False}
    for backend in _backends():
        mine = [r for r in rows if r["backend"] == backend]
        assert sorted(r["pair"] for r in mine) == ["0-1", "0-2", "0-3", "1-2", "1-3", "2-3"]
        for r in mine:
            assert r["collective"] == "pingpong" and r["size_bytes"] == 8 and r["check"] == "ok"
            assert r["pairs_at_once"] == 2 and r["time_us_p50"] > 0
            means = r["round_details"][0]["rank_means_us"]
            pair = [int(x) for x in r["pair"].split("-")]
            # its two ranks alone
            assert [m is not None for m in means] == [k in pair for k in range(4)]
        assert (f"pairs · pingpong · {backend} · 8 · µs · 4 ranks, 1 host · ≤2 at once"
                in proc.stdout)
    assert "within a host: 6 pairs, median" in proc.stdout
    assert all(len(line) <= 80 for line in proc.stdout.splitlines())
    order = load_json(run_dir / "p.json")["metadata"]["rounds"][0]["order"]
    assert sorted(p for block in order if block["backend"] == "mpi" for p in block["pairs"]) == \
        ["0-1", "0-2", "0-3", "1-2", "1-3", "2-3"]


@pytest.mark.mpi
def test_bandwidth_each_way_one_pair_at_a_time_on_three_ranks(run_dir):
    proc, doc = _pairs(["--metric", "bw", "--serial", "--sizes", "64K", "--window", "4"], run_dir,
                       n=3)
    for backend in _backends():
        mine = [r for r in doc["rows"] if r["backend"] == backend]
        assert sorted(r["pair"] for r in mine) == ["0-1", "0-2", "1-0", "1-2", "2-0", "2-1"]
        assert {(r["collective"], r["window"], r["pairs_at_once"], r["check"])
                for r in mine} == {("bw", 4, 1, "ok")}
    assert "GB/s row→column · 3 ranks, 1 host · 1 pair at a time" in proc.stdout


@pytest.mark.mpi
def test_pairs_under_mpiexec(run_dir):
    proc = mpirun(3, ["pairs", "--thread-level", "multiple", "-b", "mpi", *QUICK, "-o", "p.json"],
                  run_dir, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(run_dir / "p.json")["rows"]
    assert (sorted(r["pair"] for r in rows) == ["0-1", "0-2", "1-2"]
            and {r["check"] for r in rows} == {"ok"})
    assert {r["pairs_at_once"] for r in rows} == {1}         # three ranks: one waits in every step


@pytest.mark.mpi
def test_compare_report_and_plot_of_pairs_runs(run_dir):
    for out in ("a.json", "b.json"):
        proc = cli(["pairs", "-n", "4", "-b", "mpi", "--iters", "30", "--rounds", "2", "-o", out,
                    "-q"], run_dir,
                   timeout=300)
        assert proc.returncode == 0, proc.stderr
    same = subprocess.run([sys.executable, "-m", "collbench", "compare", "a.json", "b.json", "-f",
                           "json"],
                          cwd=run_dir, capture_output=True, text=True, timeout=120)
    assert same.returncode in (0, 1, 3), same.stderr
    doc = json.loads(same.stdout)
    assert sorted(r["pair"] for r in doc["rows"]) == ["0-1", "0-2", "0-3", "1-2", "1-3", "2-3"]
    report = subprocess.run([sys.executable, "-m", "collbench", "report", "a.json"], cwd=run_dir,
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "80"})
    assert report.returncode == 0, report.stderr
    assert "pairs · pingpong · mpi · 8 · µs" in report.stdout
    pytest.importorskip("matplotlib")
    drawn = subprocess.run([sys.executable, "-m", "collbench", "plot", "a.json", "-o", "a.png"],
                           cwd=run_dir, capture_output=True, text=True, timeout=120)
    assert drawn.returncode == 0, drawn.stderr
    assert (run_dir / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = load_result(run_dir / "a.json")
    assert {r.pairs_at_once for r in again.rows} == {2}
    exported = subprocess.run([sys.executable, "-m", "collbench", "export", "a.json", "--to",
                               "github-action-benchmark"], cwd=run_dir, capture_output=True,
                              text=True, timeout=120)
    assert exported.returncode == 0, exported.stderr
    names = [e["name"] for e in json.loads(exported.stdout)]
    assert (len(set(names)) == 6
            and "pingpong mpi float32 4 ranks 8 latency pair 0-2 2 pairs at once" in names)


@pytest.mark.parametrize("args,said", [
    (["--pair", "0,1"], "pairs takes no --pair: it measures every pair"),
    (["--window", "8"], "--window applies to --metric bw only"),
    (["--root", "1"], "pairs takes no --root: it has no root rank"),
    (["--cross-host", "-n", "2"],
     "--cross-host needs ranks on two hosts or more; all 2 ranks are on"),
    (["--per-host", "-n", "2"], "--per-host needs ranks on two hosts or more"),
])
@pytest.mark.mpi
def test_what_pairs_refuses_is_one_line_and_exit_2(args, said, run_dir):
    proc = cli(["pairs", "-b", "mpi", *QUICK, "--no-save", *args], run_dir, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("collbench")]
    assert len(lines) == 1 and said in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
