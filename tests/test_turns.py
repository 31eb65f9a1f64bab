"""ab's two sides at once, taking turns size by size (``collbench.run.turns``): the referee's
protocol between real processes, and real ab jobs that use it."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from collbench.launch import processes
from collbench.run.turns import Referee, Turns
from conftest import cli

#: A rank's stand-in: it takes TURNS turns, and in each one writes when it held the turn.
RANK = """
import sys, time
from collbench.run.turns import Turns
path, side, rank, turns, log, die_after = sys.argv[1:7]
t = Turns(path, side, int(rank))
with open(log, "w") as out:
    for i in range(int(turns)):
        t.take()
        if i == int(die_after):
            import os; os._exit(9)
        began = time.monotonic()
        time.sleep(0.004)
        out.write(f"{side} {began} {time.monotonic()}\\n")
        out.flush()
"""


def _ranks(tmp_path, path: str, turns: int, die_after: dict = None) -> dict:
    procs = {}
    for side in "AB":
        for rank in (0, 1):
            log = tmp_path / f"{side}{rank}.log"
            procs[side, rank] = (subprocess.Popen(
                [sys.executable, "-c", RANK, path, side, str(rank), str(turns), str(log),
                 str((die_after or {}).get((side, rank), -1))]), log)
    return procs


def _wait(procs: dict, referee: Referee, timeout: float) -> dict:
    """Each process's exit code, telling the referee of each side whose processes all ended."""
    deadline = time.monotonic() + timeout
    codes = {}
    while len(codes) < len(procs) and time.monotonic() < deadline:
        for key, (proc, _) in procs.items():
            if key not in codes and proc.poll() is not None:
                codes[key] = proc.returncode
        for side in "AB":
            if all((side, r) in codes for r in (0, 1)):
                referee.ended(side)
        time.sleep(0.01)
    for proc, _ in procs.values():
        if proc.poll() is None:
            proc.kill()
    return codes


def _held(procs: dict) -> list:
    """(began, ended, side) of every turn a rank held, in time order."""
    spans = []
    for (side, _), (_, log) in procs.items():
        for line in log.read_text().splitlines():
            _, began, ended = line.split()
            spans.append((float(began), float(ended), side))
    return sorted(spans)


def test_the_sides_take_turns_and_never_measure_at_once(tmp_path):
    path = str(tmp_path / "turns")
    referee = Referee(path, ranks=2, seed=3)
    try:
        procs = _ranks(tmp_path, path, turns=25)
        codes = _wait(procs, referee, timeout=60)
    finally:
        referee.close()
    assert set(codes.values()) == {0}, codes
    assert referee.turns == {"A": 25, "B": 25}
    spans = _held(procs)
    assert len(spans) == 100
    # both ranks of a side hold its turn together; no span of one side overlaps one of the other
    for (b1, e1, s1), (b2, e2, s2) in zip(spans, spans[1:]):
        if s1 != s2:
            assert e1 <= b2, (s1, e1, s2, b2)
    sides = [s for i, (_, _, s) in enumerate(spans) if i % 2 == 0]     # one entry per turn
    longest = max(len(run) for run
                  in "".join(sides).replace("AB", "A B").replace("BA", "B A").split())
    # each round of turns gives each side one, in some order
    assert longest <= 2, sides
    assert not os.path.exists(path)


def test_a_side_whose_ranks_end_does_not_hold_the_other_back(tmp_path):
    path = str(tmp_path / "turns")
    referee = Referee(path, ranks=2, seed=5)
    try:
        procs = _ranks(tmp_path, path, turns=40, die_after={("B", 1): 3})
        began = time.monotonic()
        codes = _wait(procs, referee, timeout=60)
    finally:
        referee.close()
    # side b's rank 0, left alone, goes on without turns (its job would end it)
    assert codes == {("B", 1): 9, ("A", 0): 0, ("A", 1): 0, ("B", 0): 0}, codes
    assert time.monotonic() - began < 30
    assert referee.turns["A"] == 40 and referee.turns["B"] == 4


def test_a_rank_whose_referee_is_gone_measures_without_turns(tmp_path):
    turns = Turns(str(tmp_path / "nobody"), "A", 0)
    began = time.monotonic()
    for _ in range(3):
        turns.take()
    assert time.monotonic() - began < 1.0 and turns.taken == 0


def _rounds(run_dir, prefix: str) -> list:
    return [json.loads((run_dir / f"{prefix}-{side}.json").read_text())["metadata"]
            for side in "ab"]


def test_an_ab_job_measures_both_sides_at_once_size_by_size(run_dir):
    proc = cli(["ab", "-o", "sz", "--seed", "4", "--", "allreduce", "-n", "2", "--sizes",
                "8,1K,64K", "--iters",
                "20", "--warmup", "1", "--rounds", "3"], run_dir, timeout=300)
    assert proc.returncode in (0, 1, 3), proc.stderr
    assert "pair 1/3: a and b, size by size" in proc.stderr
    a, b = _rounds(run_dir, "sz")
    assert a["ab"]["turns"] == b["ab"]["turns"] == "size"
    for ra, rb in zip(a["rounds"], b["rounds"]):
        # three sizes, one turn each; each side waited while the other measured
        assert ra["ab_turns"]["taken"] == rb["ab_turns"]["taken"] == 3
        assert ra["ab_turns"]["waited_s"] > 0 and rb["ab_turns"]["waited_s"] > 0
        assert "ab_turn" not in ra
        assert ra["order"] == rb["order"]
    from collbench.analysis.compare import compare_runs
    from collbench.results.loader import load_result

    c = compare_runs(load_result(run_dir / "sz-a.json"), load_result(run_dir / "sz-b.json"))
    assert c.drift_source.startswith("none")


def test_a_fixed_rendezvous_makes_the_sides_take_turns_launch_by_launch(run_dir):
    env = {"MASTER_PORT": "29581"}
    proc = cli(["ab", "-o", "fx", "--", "allreduce", "-n", "2", "--sizes", "8", "--iters", "10",
                "--warmup", "1",
                "--rounds", "2"], run_dir, timeout=300, env=env)
    assert proc.returncode in (0, 1, 3), proc.stderr
    assert ("the sides take turns launch by launch: MASTER_PORT names one port for both sides"
            in proc.stderr)
    a, b = _rounds(run_dir, "fx")
    assert a["ab"]["turns"] == "launch" and {r["ab_turn"] for r in a["rounds"]} <= {0, 1}


def _alive(prefix: str) -> list:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if prefix.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_both_sides_measure_ends_both(run_dir, signum):
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_RANK", "PMI_SIZE", "RANK",
                                                            "WORLD_SIZE")}
    prefix = f"both{os.getpid()}x{signum}"
    proc = subprocess.Popen([sys.executable, "-m", "collbench", "ab", "-o", prefix, "--",
                             "allreduce", "-n", "2",
                             "--sizes", "8-1M", "--rounds", "3"], cwd=run_dir, env=env,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None and len(_alive(prefix)) < 6:
        time.sleep(0.05)              # both sides' launches are up (mpiexec and ranks of each)
    time.sleep(1.0)
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)      # to the ab process alone: it passes it on to both sides
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 128 + signum and "Traceback" not in err, err
    assert f"interrupted by {signal.Signals(signum).name}" in err, err
    time.sleep(1.0)
    assert _alive(prefix) == [], err



def test_a_rank_that_crashes_as_the_other_side_takes_ctrl_c_counts_as_interrupted(tmp_path):
    # Side A of an ab pair is waited for on a thread, which learns of a Ctrl-C only when the main
    # thread notes it. MPICH can crash as it is interrupted: here mpiexec passes on its rank's
    # SIGSEGV (exit 11) a moment before the main thread notes SIGINT. The launch ended of the
    # Ctrl-C (130), not of a crash nobody could place (139).
    import threading
    from collbench.launch.self_launch import spawn
    from collbench.launch.self_launch.relay import Relay
    mpiexec = spawn.find_mpiexec(sys.executable)
    proc = subprocess.Popen([mpiexec, "-n", "1", sys.executable, "-c",
                             "import os, signal, time; time.sleep(0.3); os.kill(os.getpid(), "
                             "signal.SIGSEGV)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    noted, codes = [], []
    waiter = threading.Thread(target=lambda: codes.append(spawn._wait_forwarding(
        [proc], Relay(proc), lambda: "nothing was saved", str(tmp_path), noted=noted)))
    waiter.start()
    proc.wait(timeout=60)
    assert proc.returncode == signal.SIGSEGV           # what mpiexec passes on
    time.sleep(0.1)
    noted.append(signal.SIGINT)                         # the main thread's handler, a moment later
    waiter.join(timeout=30)
    assert codes == [128 + signal.SIGINT]


def _rank_of_guardian(pid: int, ours: set) -> bool:
    """Whether ``pid`` is a rank (its parent, a guardian, is ours; the guardian's is not)."""
    up = processes.parent(pid)
    return up in ours and processes.parent(up) not in ours


def test_a_rank_killed_in_one_side_lets_the_other_finish_its_round(run_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_RANK", "PMI_SIZE", "RANK",
                                                            "WORLD_SIZE")}
    prefix = f"kill{os.getpid()}"
    proc = subprocess.Popen([sys.executable, "-m", "collbench", "ab", "-o", prefix, "--b-env",
                             "SIDE_B=1", "--",
                             "allreduce", "-n", "2", "--sizes", "8-1M", "--rounds", "2"],
                            cwd=run_dir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    victim, deadline = None, time.monotonic() + 90
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        ours = set()
        for pid in _alive(prefix):
            try:
                environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"SIDE_B=1" in environ and b"PMI_RANK=1" in environ:
                ours.add(pid)
        # rank 1 of side b itself, whose parent is its guardian: a guardian that has not forked
        # yet has no children either, and killing it was another fault (a rank orphaned in
        # MPI_Init); not a short-lived helper the rank itself started, whose parent is in ours too
        # (CI once killed a pid gone 0.5 s later)
        victim = next((pid for pid in ours if _rank_of_guardian(pid, ours)), None)
        time.sleep(0.05)
    assert victim is not None
    time.sleep(0.5)
    os.kill(victim, signal.SIGKILL)
    began = time.monotonic()
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode not in (0, 3) and "Traceback" not in err, err
    assert time.monotonic() - began < 90
    assert "collbench ab: stopped in pair 1 of 2 (b); no pair was completed" in err, err
    time.sleep(1.0)
    assert _alive(prefix) == [], err


# --- how compare reads a job taken size by size (in this process) --------------------------------

from results_helpers import metadata, run_of, sweep  # noqa: E402

SERIES = sweep(sizes=(8, 64, 512, 4096, 32768, 262144), backends=("mpi",))


def _side(scale, side: str, turns: str, rounds: int = 10):
    """One side of a job whose rounds 2, 5 and 8 met a state of the machine, twice as slow, that
    both sides met (the same draws on both sides)."""
    run = run_of(SERIES, seed=4, rounds=rounds, launch_sd=0.02, scale=scale)
    run.metadata.update(metadata(rounds=[{"round": r + 1, "load": {"busy": False}}
                                         for r in range(rounds)]))
    run.metadata["ab"] = {"job": "j", "side": side, "turns": turns}
    for row in range(len(run.rows)):
        for i in (1, 4, 7):
            _bump(run, row, i, 2.0)
    return run


def _bump(run, row: int, round_index: int, factor: float):
    """One side met interference alone in one of its turns: that round of that row, ``factor``
    slower."""
    import dataclasses as dc

    r = run.rows[row]
    medians = list(r.time_us_round_p50s)
    medians[round_index] *= factor
    run.rows[row] = dc.replace(r, time_us_round_p50s=tuple(medians))
    return run


def test_size_by_size_every_round_pairs_and_a_one_sided_round_is_set_aside():
    from collbench.analysis.compare import compare_runs

    slower = compare_runs(_side(1.0, "A", "size"), _bump(_side(1.25, "B", "size"), 2, 3, 2.5),
                          threshold=0.10)
    assert {r.verdict for r in slower.rows} == {"slower"}, [(r.verdict, r.reason)
                                                            for r in slower.rows]
    assert all(r.ratio == pytest.approx(1.25, rel=0.02) for r in slower.rows)
    # the bumped round's pair went
    assert [r.rounds_new for r in slower.rows] == [10, 10, 9, 10, 10, 10]
    same = compare_runs(_side(1.0, "A", "size"), _bump(_side(1.0, "B", "size"), 2, 3, 0.4),
                        threshold=0.10)
    assert {r.verdict for r in same.rows} == {"same"}


def test_a_row_with_too_few_pairs_stays_out_of_the_family():
    """Two pairs left on one row (one degree of freedom) held every other row's +25% back."""
    import dataclasses as dc

    from collbench.analysis.compare import compare_runs

    base, new = _side(1.0, "A", "size"), _side(1.25, "B", "size")
    # side B measured two of its rounds of this row, wildly apart
    r = new.rows[0]
    new.rows[0] = dc.replace(r,
                             time_us_round_p50s=tuple(m * (1.0 if i == 0 else 5.0)
                                                      if i < 2 else None
                                                         for i, m
                                                      in enumerate(r.time_us_round_p50s)))
    c = compare_runs(base, new, threshold=0.10)
    assert [x.verdict for x in c.rows[1:]] == ["slower"] * 5
    assert c.rows[0].verdict != "slower" and c.rows[0].p_adjusted is None
