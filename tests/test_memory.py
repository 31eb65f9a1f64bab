"""The memory guard: the estimate and budget as pure functions, then real runs in memory cgroups
of their own: sizes beyond the limit skipped, a size that no longer fits skipped between rounds,
and a rank really killed by the kernel's out-of-memory killer, named as such."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from collbench import environment
from collbench.benchmarks.registry import COLLECTIVES
from collbench.launch.liveness import oom
from collbench.launch.self_launch.mpiexec import find_mpiexec, mpiexec_command
from collbench.measure import memory
from collbench.measure.memory import Probe, Shortfall
from collbench.results.loader import load_result
from conftest import FAST, cli

GiB, MiB = memory.GiB, memory.MiB


# The estimate and the budget ---------------------------------------------------------------------

def test_rank_need_is_work_plus_factor_and_tells_root_from_others():
    f = memory.factor("buffer", "reduce")
    nominal = 2 * GiB
    assert (memory.rank_need("reduce", "buffer", nominal, True) == memory.WORK_BYTES
            + int(f.root * nominal))
    assert (memory.rank_need("reduce", "buffer", nominal, False) == memory.WORK_BYTES
            + int(f.others * nominal))
    # the check's temporaries scale down too
    small = memory.rank_need("reduce", "buffer", 1024, False)
    assert small == memory.WORK_PER_BYTE * 1024 + int(f.others * 1024)


def test_every_collective_that_moves_data_has_a_measured_factor_for_every_family():
    for coll in COLLECTIVES.values():
        if not coll.moves_data:
            continue
        families = {f for f in ("buffer", "object", "tensor") if coll.issued_by(f)}
        assert set(coll.memory_factors) == families, coll.name
        for family in families:
            f = memory.factor(family, coll.name)
            assert (f.root, f.others) == coll.memory_factors[family]
            assert 0.5 <= f.others <= 12 and 0.5 <= f.root <= 12, (family, coll.name, f)


def test_a_plugin_without_family_gets_the_largest_factor():
    got = memory.factor(None, "allreduce")
    assert got.root == max(root for root, _ in COLLECTIVES["allreduce"].memory_factors.values())
    assert got.others == max(others for _, others
                             in COLLECTIVES["allreduce"].memory_factors.values())


def test_a_collective_without_figures_gets_the_largest_measured_not_one(monkeypatch):
    """A new collective module that has not been measured yet is guarded with the largest factor
    any collective needs, so that the guard errs on the side of skipping a size."""
    monkeypatch.setattr(type(COLLECTIVES["bcast"]), "memory_factors", {})
    known = [f for c in COLLECTIVES.values() for f in c.memory_factors.values()]
    got = memory.factor("buffer", "bcast")
    assert got == memory.Factor(max(r for r, _ in known),
                                max(o for _, o in known)) and got.root >= 3


def test_headroom_leaves_a_reserve_and_a_share():
    assert (memory.headroom(10 * GiB) == int(10 * GiB * (1 - memory.RESERVE_SHARE))
            - memory.RESERVE_BYTES)
    assert memory.headroom(100 * MiB) == 0


def test_budgets_per_host_take_the_fullest_rank_and_the_users_limit():
    probes = [Probe("a", 10 * GiB, 100 * MiB, None), Probe("a", 9 * GiB, 100 * MiB, None),
              Probe("b", 20 * GiB, 100 * MiB, 4 * GiB)]
    got = memory.budgets(probes)
    assert got["a"] == memory.headroom(9 * GiB)
    assert got["b"] == 4 * GiB - 100 * MiB          # the limit, less what its one rank holds


def test_shortfall_sums_the_ranks_of_each_host_and_names_the_worst():
    probes = [Probe("a", 4 * GiB, 0, None), Probe("a", 4 * GiB, 0, None),
              Probe("b", 8 * GiB, 0, None)]
    started = [0, 0, 0]
    budget_a = memory.headroom(4 * GiB)
    assert memory.shortfall(lambda r: budget_a // 2, probes, started) is None
    short = memory.shortfall(lambda r: budget_a // 2 + 1, probes, started)
    assert short == Shortfall("a", budget_a + 2, budget_a, 2)
    # the root alone needs more: only its host is short
    assert memory.shortfall(lambda r: 8 * GiB if r == 2 else 0, probes, started).host == "b"


def test_shortfall_credits_growth_only_up_to_the_blocks_buffers():
    """A rank that grew by its block's buffers has them already; growth beyond (a leak) is in
    use."""
    need = 3 * GiB
    budget = memory.headroom(2 * GiB)
    grown = [Probe("a", 2 * GiB, 100 * MiB + 2 * GiB, None)]
    assert memory.shortfall(lambda r: need, grown, [100 * MiB], allocated=2 * GiB) is None
    assert memory.shortfall(lambda r: need, grown, [100 * MiB], allocated=0).need == need
    assert memory.shortfall(lambda r: need, grown, [100 * MiB], allocated=GiB).need == need - GiB
    assert need - GiB > budget


def test_is_large_above_a_few_mib_or_a_share_of_a_small_budget():
    big = [Probe("a", 20 * GiB, 0, None)]
    assert not memory.is_large("allreduce", "buffer", 1 * MiB, 2, big)
    assert memory.is_large("allreduce", "buffer", 64 * MiB, 2, big)
    small = [Probe("a", 1 * GiB, 0, None)]
    assert memory.is_large("allreduce", "buffer", 8 * MiB, 2, small)


def test_skip_note_says_out_of_memory():
    note = memory.skip_note("allreduce on mpi at 4G", Shortfall("node1", 40 * GiB, 16 * GiB, 2),
                            now=True)
    assert note == ("allreduce on mpi at 4G: needs about 40.0 GiB more on node1 (2 ranks), more "
                    "than the 16.0 GiB now available there; skipped, as it would run out of memory")


def test_a_ranks_own_address_space_note_names_its_amounts():
    """It once said "needs about 0 MiB more ..., more than the 0 MiB its ulimit -v leaves", then
    "needs about 215 bytes more address space": with nothing left, the need is not the point."""
    none_left = memory.skip_note("allreduce on mpi at 1K", Shortfall("vm", 215, 0, 1, rank=0))
    assert none_left == ("allreduce on mpi at 1K: rank 0 on vm has no address space left for "
                         "buffers under its ulimit -v (the libraries keep 64 MiB of it; raise it); "
                         "skipped, as its allocation would fail")
    some_left = memory.skip_note("allreduce on mpi at 256M",
                                 Shortfall("vm", 934 * MiB, 70 * MiB, 1, rank=1), now=True)
    assert ("needs about 934 MiB more address space in rank 1 on vm, more than the 70 MiB its "
            "ulimit -v leaves now;" in some_left)


def test_user_limit(monkeypatch):
    monkeypatch.delenv(environment.MEMORY_LIMIT, raising=False)
    assert memory.user_limit() is None
    monkeypatch.setenv(environment.MEMORY_LIMIT, "6G")
    assert memory.user_limit() == 6 * GiB
    monkeypatch.setenv(environment.MEMORY_LIMIT, "lots")
    with pytest.raises(memory.UsageError, match="COLLBENCH_MEMORY_LIMIT='lots' is not a size"):
        memory.user_limit()


def _tree(tmp_path, version, files: dict) -> tuple:
    """A fake cgroup mount: files {relative path: text}; returns (root, proc_cgroup file)."""
    for rel, text in files.items():
        path = tmp_path / "fs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/job/step\n0::/\n" if version == 1 else "0::/job/step\n")
    return str(tmp_path / "fs"), str(proc)


def test_cgroup_room_v1_takes_the_tightest_level_and_leaves_out_reclaimable_cache(tmp_path):
    root, proc = _tree(tmp_path, 1, {
        "memory/memory.limit_in_bytes": "9223372036854771712",
        "memory/memory.usage_in_bytes": str(5 * GiB),
        "memory/job/memory.limit_in_bytes": str(4 * GiB),
        "memory/job/memory.usage_in_bytes": str(3 * GiB),
        "memory/job/memory.stat": f"cache 1\ntotal_inactive_file {GiB}\n",
        "memory/job/step/memory.limit_in_bytes": str(6 * GiB),
        "memory/job/step/memory.usage_in_bytes": str(GiB)})
    found = memory.memory_cgroup(proc, root)
    assert found == (1, os.path.join(root, "memory", "job/step"))
    assert memory.cgroup_room(found, root) == 4 * GiB - (3 * GiB - GiB)


def test_cgroup_room_v2_and_no_limit(tmp_path):
    root, proc = _tree(tmp_path, 2, {
        "cgroup.controllers": "cpu memory pids", "job/memory.max": "max",
        "job/memory.current": str(GiB),
        "job/step/memory.max": str(3 * GiB), "job/step/memory.current": str(2 * GiB),
        "job/step/memory.stat": f"anon 1\ninactive_file {GiB // 2}\n"})
    found = memory.memory_cgroup(proc, root)
    assert found == (2, os.path.join(root, "job/step"))
    assert memory.cgroup_room(found, root) == 3 * GiB - (2 * GiB - GiB // 2)
    Path(root, "job/step/memory.max").write_text("max\n")
    assert memory.cgroup_room(found, root) is None


def test_oom_counter_file_v1_and_v2(tmp_path):
    root, proc = _tree(tmp_path, 1,
                       {"memory/job/step/memory.oom_control": "oom_kill_disable 0\noom_kill 3\n"})
    path = oom._cgroup_counter_file(proc, root)
    assert path == os.path.join(root, "memory", "job/step",
                                "memory.oom_control") and oom._count(path) == 3
    root, proc = _tree(tmp_path / "v2", 2, {"job/step/memory.events": "low 0\noom 2\noom_kill 1\n"})
    assert oom._count(oom._cgroup_counter_file(proc, root)) == 1
    assert oom._count(None) == 0


def test_a_bad_memory_limit_is_one_line_and_exit_2(run_dir):
    proc = cli(["allreduce", "-n", "2", "--sizes", "1K"], run_dir, timeout=60,
               env={environment.MEMORY_LIMIT: "lots"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == ["collbench: error: COLLBENCH_MEMORY_LIMIT='lots' "
                                                "is not a size (e.g. 8G, 512M)"]


# Real runs in a memory cgroup of their own
# ---------------------------------------------------------

class Cgroup:
    """A memory cgroup under this process's own, with a limit; the processes started in it are
    this test's, and are ended (by pid) before it is removed."""

    def __init__(self, limit: int) -> None:
        found = memory.memory_cgroup()
        if found is None:
            pytest.skip("no memory cgroup for this process")
        self.version, parent = found
        self.path = Path(parent) / f"collbench-test-{uuid.uuid4().hex[:10]}"
        try:
            self.path.mkdir()
            (self.path / ("memory.limit_in_bytes"
                          if self.version == 1 else "memory.max")).write_text(str(limit))
            if self.version == 2 and (self.path / "memory.swap.max").exists():
                (self.path / "memory.swap.max").write_text("0")
        except OSError as exc:
            self.remove()
            pytest.skip(f"cannot make a memory cgroup with a limit here: {exc}")

    def enter(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def oom_kills(self) -> int:
        return oom._count(str(self.path / ("memory.oom_control"
                                           if self.version == 1 else "memory.events")))

    def run(self, cmd: list, cwd, env: dict, timeout: int = 240) -> subprocess.CompletedProcess:
        full = {**os.environ, **env}
        for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE",
                     "COLLBENCH_LAUNCHED"):
            full.pop(name, None)
        return subprocess.run(cmd, cwd=cwd, env=full, capture_output=True, text=True,
                              timeout=timeout, preexec_fn=self.enter)

    def remove(self) -> None:
        if not self.path.exists():
            return
        for _ in range(100):
            for pid in filter(None, (self.path / "cgroup.procs").read_text().split()):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


@pytest.fixture
def cgroup():
    made = []

    def make(limit: int) -> Cgroup:
        made.append(Cgroup(limit))
        return made[-1]

    yield make
    for group in made:
        group.remove()


def collbench(*args) -> list:
    return [sys.executable, "-m", "collbench", *args]


@pytest.mark.mpi
def test_sizes_beyond_a_cgroup_limit_are_skipped_and_nothing_is_killed(cgroup, run_dir):
    group = cgroup(int(1.5 * GiB))
    proc = group.run(collbench("allreduce", "-n", "2", "--backend", "mpi,mpi-pickle", "--sizes",
                               "1K,64M,1G,4G",
                               *FAST, "-o", "m.json"), run_dir, {})
    assert proc.returncode == 0, proc.stderr
    result = load_result(run_dir / "m.json")
    measured = {(r.backend, r.size_bytes) for r in result.rows}
    assert {("mpi", 1024), ("mpi", 64 * MiB), ("mpi-pickle", 1024)} <= measured
    assert not any(size >= GiB for _, size in measured)
    for backend in ("mpi", "mpi-pickle"):
        for size in ("1G", "4G"):
            note = next(n for n in result.notes
                        if n.startswith(f"allreduce on {backend} at {size}: needs about"))
            assert note.endswith("skipped, as it would run out of memory")
    assert "as it would run out of memory" in proc.stderr
    assert group.oom_kills() == 0


@pytest.mark.mpi
def test_a_size_that_no_longer_fits_is_skipped_in_the_next_round(cgroup, run_dir, plugin_env):
    """Rank 0 grabs 700 MiB between in-job rounds (as a neighbour in its cgroup would): round 2
    asks every rank again before 64M and skips it; what round 1 measured stays."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    group = cgroup(int(1.5 * GiB))
    env = {**plugin_env, "FAULTY_HOG": f"0:renew:{700 * MiB}"}
    full = {**os.environ, **env}
    cmd = mpiexec_command(mpiexec, 2,
                          collbench("allreduce", "--backend", "faulty-mpi", "--sizes", "1K,64M",
                                                 "--iters", "5", "--warmup", "1", "--rounds", "2",
                                    "--no-shuffle",
                                                 "-o", "m.json"), full)
    proc = group.run(cmd, run_dir, env)
    assert proc.returncode == 0, proc.stderr
    result = load_result(run_dir / "m.json")
    rounds = {r.size_bytes: r.rounds for r in result.rows}
    assert rounds == {1024: 2, 64 * MiB: 1}
    assert any(n.startswith("allreduce on faulty-mpi at 64M: needs about")
               and "now available there; skipped, as "
               "it would run out of memory (round 2)" in n for n in result.notes), result.notes
    assert group.oom_kills() == 0


@pytest.mark.mpi
def test_a_rank_killed_by_the_oom_killer_is_named_as_such(cgroup, run_dir, plugin_env):
    """Rank 1 allocates 2 GiB in a 512 MiB cgroup inside its first call: the kernel kills it."""
    group = cgroup(512 * MiB)
    proc = group.run(collbench("allreduce", "-n", "2", "--backend", "faulty-mpi", "--sizes", "1K",
                               *FAST,
                               "--no-save"), run_dir,
                     {**plugin_env, "FAULTY_HOG": f"1:call:{2 * GiB}"})
    print(proc.stderr)
    assert group.oom_kills() >= 1
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr
    line = next(line for line in proc.stderr.splitlines() if "was killed by signal 9" in line)
    assert "rank 1 (pid " in line
    assert ("was killed by signal 9 (SIGKILL), most likely by the kernel's out-of-memory killer"
            in line)
    assert "during allreduce on faulty-mpi at 1K" in line
