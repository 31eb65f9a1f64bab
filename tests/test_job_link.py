"""collbench's own job channel on one host: real ranks, real kills, real stops.

A lost rank ends the job in seconds with one line naming it; a stopped rank is named when the
timeout fires; the death of the self-launching process leaves nothing running; the launcher's
banner never reaches stdout. The same across hosts: tests/test_multihost.py.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collbench.launch.liveness import coordinator, wire
from collbench.launch.liveness.link import connect, hello_message
from collbench.launch.self_launch.mpiexec import find_mpiexec, mpiexec_command
from collbench.run.runner import JOIN_FLOOR
from conftest import FAST
from results_helpers import wait_for_rows

def _long(backend: str) -> list:
    """A quick first size, then one that lasts: the files hold a row when the fault comes. Three
    gloo ranks on 2 cores take 0.4 ms a call of 8 B quiet (5 ms beside two busy loops) and 15 ms
    of 16M: 500 calls are a second or so, then 7 s or more."""
    iters = "2000" if backend == "mpi" else "500"
    # 3 ranks on 2 cores: at thread level single a waiting MPI rank spins, and each call takes a
    # scheduler slice; multiple yields
    level = ["--thread-level", "multiple"] if backend == "mpi" else []
    return ["--sizes", "8,16M", "--iters", iters, "--warmup", "0", "--rounds", "1", "--timeout",
            "0", "--no-shuffle",
            *level]


def _env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE",
                        "COLLBENCH_LAUNCHED")}
    env.update(extra or {})
    return env


def _collbench_pids(marker: str) -> list:
    """Every live process whose command line carries ``marker``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and int(entry.name) != os.getpid():
            out.append(int(entry.name))
    return out


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _rank_process(marker: str, rank: int, variable: str) -> int:
    """The pid of the real rank ``rank``: the one of its two processes whose parent is the
    other (its guardian)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ours = set()
        for pid in _collbench_pids(marker):
            try:
                if (f"{variable}={rank}".encode()
                        in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")):
                    ours.add(pid)
            except OSError:
                continue
        for pid in ours:
            try:
                if _parent(pid) in ours:
                    return pid
            except (OSError, ValueError, IndexError):
                continue
        time.sleep(0.3)
    raise AssertionError(f"rank {rank} never started")


def _collbench_lines(stderr: str) -> list:
    """collbench's lines, less the note that 3 ranks share this 2-CPU host (not about the
    failure)."""
    return [line for line in stderr.splitlines()
            if line.startswith("collbench:") and "oversubscribed" not in line]


def _marker(tmp_path) -> str:
    return f"--results-dir {tmp_path}/m"


@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_a_rank_killed_under_a_users_mpiexec_ends_the_job_naming_it(tmp_path, backend):
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    out = tmp_path / "r.json"
    (tmp_path / "tmp").mkdir()
    env = _env({"TMPDIR": str(tmp_path / "tmp")})     # where rank 0 keeps the run's journal
    cmd = mpiexec_command(mpiexec, 3,
                          [sys.executable, "-m", "collbench", "allreduce", "--backend", backend,
                                       *_long(backend), "-o", str(out), "--results-dir",
                           f"{tmp_path}/m"], env)
    job = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for_rows(out)
        victim = _rank_process(_marker(tmp_path), 2, "PMI_RANK")
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        _, stderr = job.communicate(timeout=30)
        took = time.monotonic() - killed_at
    finally:
        job.kill()
    lines = _collbench_lines(stderr)
    assert took < 10, took
    assert job.returncode != 0
    assert len(lines) == 1, stderr
    assert f"rank 2 (pid {victim} on {socket.gethostname()}) was killed by signal 9" in lines[0]
    assert "16M" in lines[0]
    assert json.loads(out.read_text())["rows"], "the size finished before is kept"
    # mpiexec ends the job's processes once one exits with an error: rank 2's guardian waited
    # for rank 0's, so rank 0 (or its guardian, from the journal) made the files whole and took
    # the journal away
    deadline = time.monotonic() + 5
    while list((tmp_path / "tmp").glob("collbench-journal-*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list((tmp_path / "tmp").glob("collbench-journal-*"))
    assert not _collbench_pids(_marker(tmp_path))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_one_rank_under_a_users_mpiexec_is_named_and_the_file_made_whole(tmp_path,
                                                                                     signum):
    """SIGTERM to rank 1 alone, mid-run: its guardian left with the rank's code (143) at once,
    and MPICH's mpiexec killed the job's other processes 4 ms later. No line, exit 9 or 143, and
    rank 0's files were left to the next run to rebuild from the journal (3 of 3). The guardian
    now waits for the coordinator, which names the rank and stops the others. SIGHUP went to
    UCX's own handler, set as MPI started (it raised UCX's log level): exit 0 and UCX's debug
    lines; collbench's handlers are set again once MPI has started."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    out = tmp_path / "r.json"
    (tmp_path / "tmp").mkdir()
    env = _env({"TMPDIR": str(tmp_path / "tmp")})     # where rank 0 keeps the run's journal
    cmd = mpiexec_command(mpiexec, 2,
                          [sys.executable, "-m", "collbench", "allreduce", *_long("mpi"), "-o",
                           str(out), "--results-dir", f"{tmp_path}/m"], env)
    job = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for_rows(out)
        victim = _rank_process(_marker(tmp_path), 1, "PMI_RANK")
        os.kill(victim, signum)
        _, stderr = job.communicate(timeout=60)
    finally:
        job.kill()
    lines = _collbench_lines(stderr)
    assert job.returncode == 128 + signum and len(lines) == 1, stderr
    assert lines[0].startswith(f"collbench: rank 1 (pid {victim} on {socket.gethostname()}) "
                               f"ended by {signum.name} with code {128 + signum} "), lines[0]
    assert lines[0].endswith(f"the job is stopped; {out} keeps every size finished before"), lines
    assert json.loads(out.read_text())["rows"]
    assert not list((tmp_path / "tmp").glob("collbench-journal-*"))     # the files were whole
    assert not _collbench_pids(_marker(tmp_path))


def test_a_sigterm_to_one_rank_with_under_a_second_left_still_ends_the_job(tmp_path):
    """A rank other than 0 gives rank 0 a second to speak first before it leaves on a signal.
    Meanwhile its main thread went on measuring: a run with less than that left finished, and
    ended with exit 0 and every size, as if the signal had never come (an adversarial pass, 3 of
    6). The main thread now stops at its next size, or at the round's end after its last."""
    out = tmp_path / "r.json"
    # the sizes in the order given: shuffled, the signal came at times after the last size
    job = subprocess.Popen([sys.executable, "-m", "collbench", "allreduce", "-n", "2", "--sizes",
                            "8,512K,1M", "--iters", "2000", "--rounds", "1", "--no-shuffle",
                            "-o", str(out), "--results-dir", f"{tmp_path}/m"],
                           cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        # 512K is done: the last size takes half a second, and the signal comes during it or
        # after it (without a step at the round's end, rank 0 then wrote every size, 3 of 4)
        wait_for_rows(out, pause=0.01, job=job, rows=2)
        os.kill(_rank_process(_marker(tmp_path), 1, "PMI_RANK"), signal.SIGTERM)
        _, stderr = job.communicate(timeout=60)
    finally:
        job.kill()
    lines = _collbench_lines(stderr)
    assert job.returncode == 143 and len(lines) == 1, stderr
    assert re.match(r"collbench: rank 1 \(pid \d+ on .*\) ended by SIGTERM with code 143 "
                    r"while the other ranks went on; the job is stopped; .*r.json keeps every "
                    "size finished before$", lines[0]), lines[0]
    assert 2 <= len(json.loads(out.read_text())["rows"]) <= 3


def test_a_signal_to_one_rank_in_start_up_under_a_users_mpiexec_is_named_at_once(tmp_path):
    """SIGTERM to rank 1 as it appeared, under a user's mpiexec: it left with 143 in its start-up,
    which nothing told the others, and rank 0 waited in MPI_Init until its guardian gave up 20 s
    later: "another rank may have failed while starting", exit 255 (an adversarial pass, 3 of
    3). Its guardian now says so and ends by the same signal, for mpiexec to end the job."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    env = _env({"TMPDIR": str(tmp_path)})
    job = subprocess.Popen(mpiexec_command(mpiexec, 2,
                                           [sys.executable, "-m", "collbench", "allreduce",
                                            "--sizes", "8", "--iters", "3", "--rounds", "1",
                                            "--no-save", "--results-dir", f"{tmp_path}/m"],
                                           env),
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        victim = None
        deadline = time.monotonic() + 60
        while victim is None and job.poll() is None and time.monotonic() < deadline:
            ranks = [pid for pid in _collbench_pids(_marker(tmp_path))
                     if b"PMI_RANK=1" in _environ(pid)]
            victim = next((pid for pid in ranks if _parent(pid) in ranks), None)
        assert victim is not None, "rank 1 never appeared"
        signalled = time.monotonic()
        os.kill(victim, signal.SIGTERM)
        _, stderr = job.communicate(timeout=60)
        took = time.monotonic() - signalled
    finally:
        job.kill()
    lines = _collbench_lines(stderr)
    assert took < 10 and len(lines) == 1, (took, stderr)
    assert lines[0].startswith(f"collbench: rank 1 (pid {victim} on {socket.gethostname()}) "
                               "ended by SIGTERM with code 143 during start-up"), lines[0]
    assert not _collbench_pids(_marker(tmp_path))


def _environ(pid: int) -> list:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


#: rank 1 dies of SIGKILL as it starts MPI: a sitecustomize of the test's, in rank 1's rank
#: process alone (its guardian never imports mpi4py.MPI)
_KILLED_STARTING = """
import os, signal, sys

if os.environ.get("PMI_RANK") == "1":
    class _Kill:
        def find_spec(self, name, path=None, target=None):
            if name == "mpi4py.MPI":
                os.kill(os.getpid(), signal.SIGKILL)
            return None

    sys.meta_path.insert(0, _Kill())
"""


@pytest.mark.mpi
def test_a_rank_killed_in_start_up_under_a_users_mpiexec_ends_the_job_at_once(tmp_path):
    """Its guardian said so and exited 137; MPICH's mpiexec, which ends a job at once when one of
    its processes is killed, waited for an exit code until rank 0's guardian gave up on joining:
    29 s, a second line ("another rank may have failed"), exit 253. The guardian now ends by its
    rank's signal: 0.4 s, one line, mpiexec's 9."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_KILLED_STARTING)
    env = _env({"PYTHONPATH": os.pathsep.join(filter(None, (str(site),
                                                             os.environ.get("PYTHONPATH"))))})
    cmd = mpiexec_command(mpiexec, 2, [sys.executable, "-m", "collbench", "allreduce", "--sizes",
                                       "8", "--iters", "3", "--rounds", "1", "--timeout", "5",
                                       "--no-save", "--results-dir", f"{tmp_path}/m"], env)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
    took = time.monotonic() - started
    lines = _collbench_lines(proc.stderr)
    assert len(lines) == 1 and proc.returncode not in (0, 1, 2), proc.stderr
    assert re.match(r"collbench: rank 1 \(pid \d+ on \S+\) was killed by signal 9 \(SIGKILL\) "
                    r"during start-up.*its guardian ends by the same signal", lines[0]), lines[0]
    # the join limit under --timeout 5 is 15 s: the job ended before anyone waited it out
    assert took < 14, (took, proc.stderr)
    assert not _collbench_pids(_marker(tmp_path))


@pytest.mark.mpi
def test_a_journal_left_by_a_launcher_that_killed_everything_is_rebuilt_by_the_next_run(tmp_path):
    """A launcher that kills all of a job's processes at once (mpiexec itself SIGKILLed with its
    process group, a scheduler's kill -9) leaves rank 0 and its guardian no moment to make the
    files whole: the run's journal stayed in $TMPDIR, and no later run looked at it."""
    from collbench.launch import processes

    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    (tmp_path / "tmp").mkdir()
    env = _env({"TMPDIR": str(tmp_path / "tmp")})
    first = tmp_path / "first.json"
    cmd = mpiexec_command(mpiexec, 2, [sys.executable, "-m", "collbench", "allreduce",
                                       *_long("mpi"), "-o", str(first),
                                       "--results-dir", f"{tmp_path}/m"], env)
    job = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, start_new_session=True)
    quick = ["allreduce", "--sizes", "8", "--iters", "3", "--rounds", "1"]
    try:
        wait_for_rows(first)
        beside = subprocess.run(mpiexec_command(mpiexec, 2,
                                                [sys.executable, "-m", "collbench", *quick, "-o",
                                                             str(tmp_path / "beside.json")], env),
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        # a live run's is its own
        assert beside.returncode == 0 and "earlier run" not in beside.stderr, beside.stderr
        for pid in processes.tree(job.pid):
            os.kill(pid, signal.SIGSTOP)          # none of them may act on another's death
        for pid in processes.tree(job.pid):
            os.kill(pid, signal.SIGKILL)
        job.wait(timeout=30)
    finally:
        job.kill()
    (left,) = list((tmp_path / "tmp").glob("collbench-journal-*"))
    rows = json.loads(first.read_text())["rows"]
    cmd = mpiexec_command(mpiexec, 2, [sys.executable, "-m", "collbench", *quick, "-o",
                                       str(tmp_path / "second.json")], env)
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "earlier run" in line]
    assert said == ["collbench: an earlier run on this host ended before it could finish its "
                    f"files: rebuilt {first} from its journal"], proc.stderr
    assert not left.exists() and not list((tmp_path / "tmp").glob("collbench-journal-*"))
    assert json.loads(first.read_text())["rows"][:len(rows)] == rows


def test_a_stopped_rank_is_named_when_the_timeout_fires(tmp_path):
    out = tmp_path / "r.json"
    args = [sys.executable, "-m", "collbench", "allreduce", "-n", "3", "--backend", "gloo",
            "--sizes", "8,16M",
            "--iters", "100", "--warmup", "0", "--rounds", "1", "--no-shuffle", "--timeout", "15",
            "-o", str(out), "--results-dir", f"{tmp_path}/m"]
    job = subprocess.Popen(args, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        # --timeout is per size: 100 calls of 8 B take under a second even beside two busy loops
        # (5 ms a call), and of 16M 1.5 s quiet, so rank 1 is stopped inside 16M, found before the
        # first row so that it is stopped within a poll of it
        victim = _rank_process(_marker(tmp_path), 1, "RANK")
        wait_for_rows(out, seconds=300, job=job, pause=0.05)
        os.kill(victim, signal.SIGSTOP)
        _, stderr = job.communicate(timeout=90)
    finally:
        job.kill()
    lines = _collbench_lines(stderr)
    assert job.returncode == 124, stderr
    assert len(lines) == 1, stderr
    assert "did not finish within 15 s" in lines[0]
    assert "rank 1 on" in lines[0] and "stopped (SIGSTOP" in lines[0], lines[0]
    assert "ranks 0,2 on" in lines[0] and "still in allreduce on gloo at 16M" in lines[0], lines[0]
    assert not _collbench_pids(_marker(tmp_path))


@pytest.mark.mpi
def test_a_rank_stopped_between_its_start_up_and_its_first_size_is_named_soon(tmp_path,
                                                                             plugin_env):
    """Rank 1 stops (SIGSTOP) as its backend's set-up ends, after it joined the job: rank 0 went
    on to open the files and waited in collbench's own next step, which only the start-up limit
    bounded (120 s, for MPI's and torch's own start-up). collbench's own steps take as long as
    joining may (at least 15 s), and a rank of the host stopped there is named once it has been
    stopped for --timeout (5 s here)."""
    out = tmp_path / "r.json"
    args = [sys.executable, "-m", "collbench", "allreduce", "-n", "2", "--backend", "faulty-mpi",
            "--sizes", "8", *FAST, "--thread-level", "multiple", "--timeout", "5", "-o", str(out),
            "--results-dir", f"{tmp_path}/m"]
    job = subprocess.Popen(args, cwd=tmp_path, env=_env({**plugin_env, "FAULTY_STOP": "1"}),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = job.communicate(timeout=75)
    finally:
        job.kill()
    lines = _collbench_lines(stderr)
    assert job.returncode == 124, stderr
    assert lines == [lines[0]] and "did not finish within 5 s (--timeout)" in lines[0], stderr
    assert "rank 1 on" in lines[0] and "stopped (SIGSTOP or a debugger) at set-up of backend " \
        "faulty-mpi" in lines[0], lines[0]
    assert "rank 0 on" in lines[0] and "before the first size" in lines[0], lines[0]
    assert not out.exists(), (stderr, out.read_text()[-300:])
    assert not _collbench_pids(_marker(tmp_path))


@pytest.mark.mpi
def test_a_rank_stopped_with_its_guardian_does_not_keep_the_ended_job_waiting(tmp_path):
    """Rank 1 and its guardian both stopped (SIGSTOP) mid-sweep: the coordinator's line came ("lost
    contact … the job is stopped"), and then nothing, for ever: mpiexec waited for the stopped
    processes, and collbench for mpiexec. The launch now ends a little after the coordinator
    ended the job, with its code, and nothing of it is left."""
    out = tmp_path / "r.json"
    args = [sys.executable, "-m", "collbench", "allreduce", "-n", "2", "--sizes", "8,16M",
            "--iters", "100000",
            "--warmup", "0", "--rounds", "1", "--no-shuffle", "--thread-level", "multiple",
            "--timeout", "30",          # 8 B's 100,000 calls took 10 s beside other tests
            "-o", str(out), "--results-dir", f"{tmp_path}/m"]
    job = subprocess.Popen(args, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for_rows(out, seconds=120, job=job)
        rank = _rank_process(_marker(tmp_path), 1, "PMI_RANK")
        guardian = _parent(rank)
        os.kill(guardian, signal.SIGSTOP)
        os.kill(rank, signal.SIGSTOP)
        stopped = time.monotonic()
        _, stderr = job.communicate(timeout=90)
    finally:
        job.kill()
    lines = _collbench_lines(stderr)
    assert job.returncode == 137, stderr            # a rank lost (docs/failures.md)
    assert time.monotonic() - stopped < 60
    assert len(lines) == 1 and "lost contact with" in lines[0] and "(rank 1)" in lines[0], stderr
    # where its guardian last heard it was: 8 B or 16M, by when the signals came
    assert "(rank 1 was last at allreduce on mpi (thread multiple) at " in lines[0], lines[0]
    assert ("its guardian is stopped" in lines[0]
            and "r.json keeps every size finished before" in lines[0])
    assert [r["size_bytes"] for r in json.loads(out.read_text())["rows"]] == [8]
    deadline = time.monotonic() + 5
    while _collbench_pids(_marker(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _collbench_pids(_marker(tmp_path))


def _signal_round_2s_rank_1_in_start_up(tmp_path, signum, after: float = 0.0,
                                        number: int = 2) -> tuple:
    """(the job's code, its stderr, the rank signalled) of a 2-round run whose round ``number``
    rank 1 got ``signum`` ``after`` seconds after it appeared, before it joined."""
    out = tmp_path / "r.json"
    args = [sys.executable, "-m", "collbench", "allreduce", "-n", "2", "--sizes", "8", "--iters",
            "3", "--rounds", "2", "--timeout", "5", "-o", str(out), "--force", "--results-dir",
            f"{tmp_path}/m"]
    job = subprocess.Popen(args, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    victim = None
    try:
        deadline = time.monotonic() + 60
        while victim is None and job.poll() is None and time.monotonic() < deadline:
            ours = set()
            for pid in _collbench_pids(_marker(tmp_path)):
                try:
                    variables = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"PMI_RANK=1" in variables and b"COLLBENCH_ROUND=%d" % number in variables:
                    ours.add(pid)
            victim = next((pid for pid in ours if _parent(pid) in ours), None)
        assert victim is not None, f"round {number}'s rank 1 never appeared"
        time.sleep(after)
        os.kill(victim, signum)
        _, stderr = job.communicate(timeout=90)
    finally:
        job.kill()
    return job.returncode, stderr, victim


@pytest.mark.parametrize("number,after", [(2, 0.0), (1, 0.05)])
def test_a_rank_stopped_in_start_up_is_named(tmp_path, number, after):
    """Rank 1 of round 2's launch stopped (SIGSTOP) before it joined the job: rank 0 waited in
    MPI's start-up and its guardian said "another rank may have failed while starting", naming
    nobody. Now the guardian that waited names the stopped rank of its host.

    Round 1's rank 1 stopped 0.05 s after it appeared, as it loads collbench and MPI (round 2's
    is past its join by then; with collbench's bytecode compiled, 0.15 s found it measuring at
    times): a second line followed (an adversarial pass, 7 of 7). Rank 0 said
    "interrupted by SIGTERM" as the launching process stopped it, or the coordinator said rank 1
    "was lost" as its guardian was killed, with exit 137 or 253. A line after the one that ended
    the job is its echo, and mpiexec's own code after it is the job's (137)."""
    code, stderr, victim = _signal_round_2s_rank_1_in_start_up(tmp_path, signal.SIGSTOP, after,
                                                               number)
    lines = _collbench_lines(stderr)
    assert code == 137 and len(lines) == 1, stderr
    # said by rank 0's guardian ("in start-up: rank 0 (pid …) waited …"), or by its own once it
    # had reached MPI_Init ("in start-up (MPI or torch initialisation) and had not joined …")
    assert lines[0].startswith(f"collbench: rank 1 (pid {victim} on {socket.gethostname()}) was "
                               "stopped (SIGSTOP or a debugger) in start-up"), lines[0]
    if number == 2:
        assert "keeps round 1" in lines[0] and json.loads((tmp_path / "r.json").read_text())["rows"]
    # named once stopped for --timeout (5 s), not after the join limit's floor for slow start-ups
    waited = re.search(r"(?:after|waited) (\d+) s", lines[0])
    assert waited and int(waited.group(1)) < JOIN_FLOOR, lines[0]
    assert not _collbench_pids(_marker(tmp_path))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_rank_signalled_in_a_later_rounds_start_up_is_named_and_the_file_is_kept(tmp_path,
                                                                                    signum):
    """SIGTERM to round 2's rank 1 before it joined: "a rank ended during its start-up with code
    143; the job is stopped; nothing was measured", while r.json held round 1 (this stop's
    adversarial pass, 5 of 5). The line now names the rank and what the file keeps.

    The rank is signalled as soon as it appears, often before its first instruction after the
    fork: the kernel then delivers the signal inside fork, and Python's after-fork reset dropped
    it, so the run ended well (exit 0, every round; 5 of 8 jobs). The signals are now blocked
    across the fork."""
    code, stderr, _ = _signal_round_2s_rank_1_in_start_up(tmp_path, signum)
    lines = _collbench_lines(stderr)
    assert code not in (0, 1, 2) and len(lines) == 1, stderr
    assert lines[0].startswith("collbench: rank 1 ") and "keeps round 1" in lines[0], lines[0]
    assert json.loads((tmp_path / "r.json").read_text())["rows"]
    assert not _collbench_pids(_marker(tmp_path))


@pytest.mark.parametrize("backend,how",
                         [("mpi", signal.SIGKILL), ("gloo", signal.SIGKILL),
                          ("mpi", signal.SIGHUP)])
def test_no_rank_outlives_the_self_launching_process(tmp_path, backend, how):
    out = tmp_path / "r.json"
    args = [sys.executable, "-m", "collbench", "allreduce", "-n", "2", "--backend", backend,
            *_long(backend), "-o", str(out), "--results-dir", f"{tmp_path}/m"]
    job = subprocess.Popen(args, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
    try:
        wait_for_rows(out)
        # us, and every rank with its guardian
        assert len(_collbench_pids(_marker(tmp_path))) >= 3
        job.send_signal(how)
        job.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _collbench_pids(_marker(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _collbench_pids(_marker(tmp_path))
    finally:
        job.kill()
        for pid in _collbench_pids(_marker(tmp_path)):
            os.kill(pid, signal.SIGKILL)
    assert not left, (f"left running after {signal.Signals(how).name} to the self-launching "
                      f"process: {left}")
    assert json.loads(out.read_text())["rows"]


@pytest.mark.parametrize("coordinator", ["free", "frozen"])
def test_a_killed_guardian_under_self_launch_is_one_line_and_no_banner_on_stdout(
        tmp_path, coordinator):
    """mpiexec SIGKILLs every other process the moment one dies by a signal: whether rank 0's
    guardian (the coordinator) says the line first is a race, so the self-launching process
    names the rank from what it noted. Frozen: the coordinator cannot speak at all."""
    out = tmp_path / "r.json"
    args = [sys.executable, "-m", "collbench", "allreduce", "-n", "3", "--backend", "mpi",
            *_long("mpi"), "-f", "json",
            "-o", str(out), "--results-dir", f"{tmp_path}/m"]
    job = subprocess.Popen(args, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        # 3 ranks on 2 cores: at load 6 the first size once took over 90 s
        wait_for_rows(out, seconds=300)
        rank = _rank_process(_marker(tmp_path), 1, "PMI_RANK")
        guardian = _parent(rank)
        if coordinator == "frozen":
            os.kill(_parent(_rank_process(_marker(tmp_path), 0, "PMI_RANK")), signal.SIGSTOP)
        os.kill(guardian, signal.SIGKILL)
        stdout, stderr = job.communicate(timeout=30)
    finally:
        job.kill()
    assert job.returncode == 137, stderr
    assert "BAD TERMINATION" not in stdout and "=====" not in stdout
    lines = _collbench_lines(stderr)
    assert len(lines) == 1 and "rank 1 (pid" in lines[0] and "was lost" in lines[0], stderr
    assert "BAD TERMINATION" not in stderr


def test_a_normal_run_joins_every_rank_and_ends_cleanly(tmp_path):
    from conftest import cli

    proc = cli(["bcast", "-n", "3", "--backend", "mpi,gloo", "--sizes", "8-1K:x8", *FAST, "-o",
                "r.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "lost" not in proc.stderr and "Abort" not in proc.stderr


# The coordinator itself, over real sockets, with guardians played by this test.

def _coordinator():
    stopped = []
    listener = coordinator.open_listener()
    c = coordinator.Coordinator(listener, "secret", stopped.append)
    c.start()
    return c, listener.getsockname()[1], stopped


def test_a_connection_without_the_token_is_turned_away():
    _, port, stopped = _coordinator()
    with pytest.raises(OSError, match="no answer from a collbench coordinator"):
        connect(["127.0.0.1"], port, hello_message("wrong", 1, 2, 4242))
    assert not stopped


def test_a_silent_host_is_named_after_the_silence_limit(capfd):
    c, port, stopped = _coordinator()
    first = connect(["127.0.0.1"], port, hello_message("secret", 0, 2, 1111))
    second = connect(["127.0.0.1"], port,
                     dict(hello_message("secret", 1, 2, 2222), host="far-away"))
    started = time.monotonic()
    while not stopped and time.monotonic() - started < wire.LOST_AFTER + 5:
        wire.send_message(first[0], {"t": "beat", "where": "allreduce on mpi at 8", "state": "S"})
        time.sleep(0.3)                  # rank 1 says nothing: its host went quiet
    assert stopped == [wire.EXIT_LOST]
    assert wire.LOST_AFTER <= time.monotonic() - started < wire.LOST_AFTER + 3
    err = capfd.readouterr().err
    assert "lost contact with far-away (rank 1)" in err
    second[0].close()
    first[0].close()


def test_a_guardian_that_reports_a_death_is_acknowledged_and_the_others_told(capfd):
    c, port, stopped = _coordinator()
    rank0 = connect(["127.0.0.1"], port, hello_message("secret", 0, 3, 10))
    rank1 = connect(["127.0.0.1"], port, hello_message("secret", 1, 3, 11))
    rank2 = connect(["127.0.0.1"], port, hello_message("secret", 2, 3, 12))
    wire.send_message(rank2[0], {"t": "died", "how": "was killed by signal 9 (SIGKILL)",
                                 "where": "gather on gloo at 4K", "code": 137})
    heard = {}
    for name, (sock, _, _, lines) in (("rank1", rank1), ("rank2", rank2)):
        sock.settimeout(5)
        deadline = time.monotonic() + 5
        while name not in heard and time.monotonic() < deadline:
            for m in lines.feed() or []:
                if m.get("t") in ("abort", "ack"):
                    heard[name] = m
    assert heard["rank2"]["t"] == "ack"
    assert heard["rank1"] == {"t": "abort", "code": 137}
    deadline = time.monotonic() + 5          # rank 0 is stopped right after the others are told
    while not stopped and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stopped == [137]
    assert "rank 2 (pid 12 on" in capfd.readouterr().err
    for sock in (rank0[0], rank1[0], rank2[0]):
        sock.close()


_SIGNAL_MID_SEND = r'''
import json, signal, socket, subprocess, sys, threading, time
from collbench.launch.liveness.guardian import Guardian
from collbench.launch.liveness.link import Link
from collbench.launch.liveness.supervise import _Position
from collbench.launch.liveness.wire import MessageReader

# a SIGINT that the test's own shell ignores (a job in the background) must still end the rank
rank = subprocess.Popen(["sleep", "30"],
                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
ours, coordinators = socket.socketpair()
guardian = Guardian(rank.pid, 0, 2, _Position(), None, None, None)
guardian.link = Link(ours, MessageReader(ours), 0, rank.pid, lambda: "bcast on mpi at 8",
                     guardian.stop)
ours.settimeout(30)                      # the send below may wait on the coordinator's side
signal.signal(signal.SIGINT, guardian._forward)
main, heard = threading.get_ident(), []

def the_coordinator():
    time.sleep(0.3)                      # the main thread is inside send by now: the socket is full
    signal.pthread_kill(main, signal.SIGINT)
    time.sleep(0.2)
    coordinators.settimeout(10)
    got = b""
    while got.count(b"\n") < 2:
        data = coordinators.recv(1 << 20)
        if not data:
            break
        got += data
    heard.extend(json.loads(line)["t"] for line in got.split(b"\n") if line)

reader = threading.Thread(target=the_coordinator)
reader.start()
guardian.link.send({"t": "bye", "code": 0, "pad": "x" * (4 << 20)})
reader.join()
print(json.dumps({"heard": heard, "rank": rank.wait(10)}))
'''



def test_a_signal_that_comes_while_the_guardian_speaks_does_not_silence_its_line(tmp_path):
    """A Ctrl-C reaches rank 0 and its guardian at once: the rank ends, its guardian tells the
    coordinator so, and the guardian's own SIGINT came while it was doing that. Its handler
    waited for the line's lock that its own thread held: rank 0's line went silent for good, and
    the coordinator reported rank 0's host lost. The handler's word now follows the other, from
    a thread of the guardian's."""
    try:
        proc = subprocess.run([sys.executable, "-c", _SIGNAL_MID_SEND], capture_output=True,
                              text=True, timeout=30, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("the guardian's main thread never came back from its signal handler")
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout)
    assert said["heard"] == ["bye", "signalled"], said      # whole, and in turn
    assert said["rank"] == -signal.SIGINT                    # the rank got the signal passed on
