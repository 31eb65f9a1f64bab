"""Cache-cold buffers (--cache cold): the pool's size from the machine's cache, the rotation over
its sets, and real runs on mpi and gloo (self-launched and under mpiexec) whose every result is
checked, hot and cold side by side; the refusals."""

import os

import pytest

from collbench.measure import caches
from collbench.measure.calls import Bound
from conftest import cli, load_json, mpirun

QUICK = ["--iters", "20", "--warmup", "2", "--rounds", "1"]


def test_the_host_cache_is_read_from_the_machine():
    size, source = caches.host_cache()
    if not os.path.isdir(caches._SYSFS):
        assert (size, source) == (caches.ASSUMED_BYTES, "assumed: the machine does not say")
        return
    levels = [int(open(os.path.join(caches._SYSFS, e, "level")).read())
              for e in os.listdir(caches._SYSFS) if e.startswith("index")]
    assert source.startswith(f"L{max(levels)}, ") and size >= 256 << 10
    assert ([caches._bytes(t) for t in ("32768K", "2M", "512", "1G")]
            == [32 << 20, 2 << 20, 512, 1 << 30])


def test_a_pool_spans_twice_the_cache_within_its_bounds():
    cache = 32 << 20
    assert caches.sets(caches.padded(128 << 10), cache) == 512           # 64K send + 64K receive
    # a set as large as the cache
    assert caches.sets(caches.padded(32 << 20), cache) == 2
    # however large: two alternate
    assert caches.sets(caches.padded(1 << 30), cache) == 2
    assert caches.sets(caches.padded(16), cache) == caches.MOST_SETS    # a small size: bounded
    assert caches.padded(1) == caches.padded(4096) == 4096 and caches.padded(4097) == 8192


def _recorder(log: list, k: int, two_step: bool) -> Bound:
    if two_step:
        return Bound.two_step(start=lambda: (log.append(("start", k)), k)[1],
                              complete=lambda handle: log.append(("complete", k, handle)),
                              reset=lambda: None, result=lambda: k,
                              release=lambda: log.append(("release", k)))
    return Bound(run=lambda: log.append(("run", k)),
                 run_blocking=lambda: log.append(("blocking", k)),
                 checked=lambda: k, release=lambda: log.append(("release", k)))


@pytest.mark.parametrize("two_step", [False, True])
def test_the_calls_rotate_over_the_sets_and_complete_where_they_started(two_step):
    log: list = []
    bound = caches.rotating([_recorder(log, k, two_step) for k in range(3)])
    # the check is the first set's
    assert bound.checked() == 0 and {entry[1] for entry in log} <= {0}
    log.clear()
    for _ in range(4):
        bound.run()
    if two_step:
        handles = [bound.start() for _ in range(2)]
        # completed in another order: each on its own set
        for handle in reversed(handles):
            bound.complete(handle)
        assert log[:8] == [("start", 0), ("complete", 0, 0), ("start", 1), ("complete", 1, 1),
                           ("start", 2), ("complete", 2, 2), ("start", 0), ("complete", 0, 0)]
        assert log[8:] == [("start", 1), ("start", 2), ("complete", 2, 2), ("complete", 1, 1)]
    else:
        bound.run_blocking()
        assert log == [("run", 0), ("run", 1), ("run", 2), ("run", 0), ("blocking", 1)]
    log.clear()
    bound.release()
    assert log == [("release", 0), ("release", 1), ("release", 2)]


def test_hot_and_cold_side_by_side_check_every_result_and_say_what_the_pool_spanned(tmp_path):
    proc = cli(["allreduce", "-n", "2", "--sizes", "8,64K", "--cache", "hot,cold", "--api",
                "blocking,persistent",
                "-o", "c.json", *QUICK], tmp_path, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    data = load_json(tmp_path / "c.json")
    rows = {(r["cache"], r["api"], r["size_bytes"]): r for r in data["rows"]}
    assert len(rows) == 8 and {r["check"] for r in rows.values()} == {"ok"}
    size, _ = caches.host_cache()
    for api in ("blocking", "persistent"):
        assert rows["hot", api, 8]["cache_span"] == rows["hot", api, 65536]["cache_span"] == 0
        # 64K: a send and a receive buffer a set, enough sets for twice the cache (or two)
        stride = 2 * caches.padded(65536)
        assert rows["cold", api, 65536]["cache_span"] == pytest.approx(
            stride * caches.sets(stride, size) / size, abs=1e-3) and rows["cold", api,
                                                                          65536]["cache_span"] >= 2
        assert rows["cold", api, 8]["cache_span"] == pytest.approx(caches.MOST_SETS * 2 * 4096
                                                                   / size, abs=1e-3)
    cold_setups = data["metadata"]["settings"]["caches"]
    assert len(cold_setups) == 2 and all(c["bytes"] == size and c["span"] == 2
                                         for c in cold_setups.values())
    out = proc.stdout
    said = " ".join(out.split())
    assert "mpi (cold cache)" in said and "mpi (persistent, cold cache)" in said
    assert ("cold cache: each call on the next of a pool" in said
            and "at 8 the pool's sets spanned less" in said)
    assert all(len(line) <= 80 for line in out.splitlines() if line.startswith(("|", "+")))


def test_gloo_cold_calls_started_and_waited_for_check(tmp_path):
    pytest.importorskip("torch")
    proc = cli(["allreduce", "-n", "2", "--backend", "gloo", "--sizes", "8,64K", "--cache", "cold",
                "--api",
                "nonblocking", "-o", "g.json", *QUICK, "-q"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(tmp_path / "g.json")["rows"]
    assert [(r["cache"], r["check"]) for r in rows] == [("cold", "ok")] * 2


def test_under_mpiexec_a_skewed_alltoallv_on_cold_buffers_checks(tmp_path):
    proc = mpirun(3, ["alltoallv", "--sizes", "12,96K", "--pattern", "zipf:1.2", "--cache", "cold",
                      "-o", "v.json",
                      "--thread-level", "multiple", *QUICK, "-q"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(tmp_path / "v.json")["rows"]
    assert ([(r["cache"], r["pattern"], r["check"]) for r in rows] == [("cold", "zipf:1.2:0", "ok")]
            * 2)


@pytest.mark.parametrize("args,said", [
    (["allreduce", "--cache", "cold", "--timing", "latency,graph"],
     "--cache cold with --timing graph"),
    (["barrier", "--cache", "cold"], "barrier takes no --cache: it moves no data"),
    (["allreduce", "--cache", "lukewarm"], "lukewarm"),
])
def test_a_cache_that_cannot_be_measured_is_one_line_and_exit_2(tmp_path, args, said):
    proc = cli([*args, "-n", "2", "--no-save"], tmp_path)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
