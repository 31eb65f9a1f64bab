"""Bad input, dead and hung ranks, signals, memory limits and wrong results: for real."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Optional

import pytest

from collbench.results.loader import load_result
from conftest import FAST, cli, mpirun

BAD_INPUTS = [
    (["allreduce", "--sizes", "1X"], "unknown unit"),
    (["allreduce", "--sizes", "8K-1K"], "start is larger than end"),
    (["allreduce", "--sizes", ""], "empty"),
    (["allreduce", "--sizes", "0"], "positive"),
    (["allreduce", "--sizes", "-5"], "START-END"),
    (["allreduce", "--sizes", "1K-1M:x1"], "factor"),
    (["allreduce", "--sizes", "1K-1M:+0"], "step"),
    (["allreduce", "--sizes", "1K-1M:/2"], "use xN"),
    (["allreduc"], "No such command"),
    (["allreduce", "--backend", "foo"], "unknown backend 'foo'"),
    (["allreduce", "--backend", ","], "--backend is empty"),
    (["allreduce", "--dtype", "float8"], "unknown dtype 'float8'"),
    (["allreduce", "--op", "avg"], "MPI has no avg reduction"),
    (["allreduce", "--op", "mean"], "unknown op 'mean'"),
    (["allreduce", "-n", "0"], "-n/--np must be at least 1"),
    (["allreduce", "-n", "-2"], "-n/--np must be at least 1"),
    (["bcast", "-n", "2", "--root", "2"], "--root 2 is outside the world of 2 ranks"),
    (["bcast", "--root", "-1"], "--root must be 0 or more"),
    (["allreduce", "--iters", "0"], "'--iters': 0 is not in the range 1<=x<=1000000"),
    (["allreduce", "--iters", "1000000000000"], "'--iters': 1000000000000 is not in the range"),
    (["allreduce", "--warmup", "-1"], "--warmup"),
    (["allreduce", "--warmup", "99999999999999999999"],
     "'--warmup': 99999999999999999999 is not in the range"),
    (["allreduce", "--precision", "0"], "--precision"),
    (["allreduce", "--max-time", "-1"], "--max-time"),
    (["allreduce", "--timeout", "-1"], "--timeout"),
    (["allreduce", "--timing", "fast"], "--timing"),
    (["allreduce", "--format", "xml"], "--format"),
    (["allreduce", "-o", "run.txt"], "cannot tell the format"),
    (["allreduce", "-o", "missing/run.json"], "does not exist"),
    (["allreduce", "-o", "afile/run.json"], "does not exist"),
    (["allreduce", "-o", "existing.json"], "exists; use --force"),
    (["allreduce", "-o", "."], "cannot tell the format"),
    (["allreduce", "-o", "adir.json"], "is a directory"),
    (["allreduce", "-o", "x.json", "--no-save"], "contradict"),
    (["allreduce", "--iters", "5", "--min-iters", "10"], "--min-iters is larger than --iters"),
    (["allreduce", "--sizes", "64G", "-n", "2"],
     "GiB available there; skipped, as it would run out of memory"),
    (["allreduce", "--results-dir", "afile"], "is not a folder"),
    (["allreduce", "--results-dir", "missing/deeper"], "does not exist"),
    (["allreduce", "--precision", "2"], "--precision"),
    (["allreduce", "--bogus"], "No such option"),
]


@pytest.mark.parametrize("args,fragment", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_and_exit_2(args, fragment, run_dir):
    (run_dir / "existing.json").write_text("{}")
    (run_dir / "afile").write_text("")
    (run_dir / "adir.json").mkdir()
    proc = cli(args, run_dir, timeout=60, env={"COLLBENCH_MEMORY_LIMIT": "8G"})
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert fragment in lines[0]
    assert (run_dir / "existing.json").read_text() == "{}"


@pytest.mark.mpi
@pytest.mark.parametrize("args,fragment", [
    (["bcast", "--root", "3", "--no-save"], "outside the world of 2 ranks"),
    (["allreduce", "--dtype", "float8", "--no-save"], "unknown dtype"),
    # Only rank 0 can judge its output paths; the other ranks must stop with it, not wait.
    (["allreduce", "-o", "existing.json"], "exists; use --force"),
    (["allreduce", "--results-dir", "existing.json"], "is not a folder"),
])
def test_bad_input_under_mpiexec_is_one_line_exit_2(args, fragment, run_dir):
    (run_dir / "existing.json").write_text("{}")
    proc = mpirun(2, args, run_dir, timeout=60)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("collbench")]
    assert len(lines) == 1 and fragment in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_force_overwrites(run_dir):
    (run_dir / "r.json").write_text("{}")
    proc = cli(["barrier", "-n", "2", *FAST, "-o", "r.json", "--force"], run_dir)
    assert proc.returncode == 0, proc.stderr
    assert load_result(run_dir / "r.json").rows[0].collective == "barrier"


def _wait_rows(path: Path, n: int, limit: float = 60.0) -> None:
    end = time.time() + limit
    while time.time() < end:
        try:
            if len(json.loads(path.read_text())["rows"]) >= n:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached {n} rows")


def _rank_pid(rank: int, marker: str) -> int:
    """The real rank process (the guardian's child) whose environment says it is ``rank``."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            parent_cmd = Path(f"/proc/{ppid}/cmdline").read_bytes()
            parent_env = Path(f"/proc/{ppid}/environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        tag = (b"PMI_RANK=%d" % rank, b"RANK=%d" % rank)
        if marker.encode() in cmd and parent_cmd == cmd and any(e in tag for e in env) \
                and any(e in tag for e in parent_env):
            return int(pid)
    raise AssertionError(f"no rank {rank} process found")


def _start(args, cwd, env):
    full = {**os.environ, **env}
    for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE",
                 "COLLBENCH_LAUNCHED"):
        full.pop(name, None)
    return subprocess.Popen([sys.executable, "-m", "collbench", *args], cwd=cwd, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _slow_sweep(backend: str, name: str, run_dir: Path, plugin_env: dict) -> subprocess.Popen:
    """An allreduce sweep paused 0.3 s per size (the faulty plugin wrapping ``backend``),
    returned once two sizes are in its file."""
    if backend == "gloo":
        pytest.importorskip("torch")
    proc = _start(["allreduce", "-n", "2", "--backend", f"faulty-{backend}", "--sizes", "8-1M",
                   *FAST, "-o", name],
                  run_dir, {**plugin_env, "FAULTY_PAUSE": "0.3"})
    _wait_rows(run_dir / name, 2)
    return proc


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_killed_rank_ends_the_job_promptly(backend, run_dir, plugin_env):
    marker = f"kill-{backend}.json"
    proc = _slow_sweep(backend, marker, run_dir, plugin_env)
    victim = _rank_pid(1, marker)
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    ended = time.monotonic() - killed
    assert ended < 10, ended
    assert proc.returncode != 0
    assert re.search(rf"rank 1 \(pid {victim} on .*\) was killed by signal 9 \(SIGKILL\) during "
                     rf"allreduce on faulty-{backend} at \d+", err), err
    partial = load_result(run_dir / marker)
    assert 2 <= len(partial.rows) < 18 and all(r.check == "ok" for r in partial.rows)


@pytest.mark.mpi
@pytest.mark.parametrize("how,says,code", [
    ("_exit-0", r"exited with code 0 without collbench choosing it \(a library or a plugin ended "
                r"the process", 137),
    ("exit-2",
     r"failed at allreduce on faulty-mpi at 64: a backend ended the process \(sys.exit\(2\)\)", 1),
    ("exit-0",
     r"failed at allreduce on faulty-mpi at 64: a backend ended the process \(sys.exit\(0\)\)", 1),
])
def test_a_rank_a_plugin_ends_is_named_at_once(how, says, code, run_dir, plugin_env):
    """os._exit(0) was taken for a clean end (and rank 0, left alone in its collective, named with
    code 138); sys.exit in bind kept the job waiting for --timeout."""
    start = time.monotonic()
    proc = cli(["allreduce", "-n", "2", "--backend", "faulty-mpi", "--sizes", "8-1K", *FAST,
                "--no-shuffle", "--timeout", "60",
                "-o", "x.json"], run_dir, env={**plugin_env, "FAULTY_EXIT": f"1:64:{how}"},
               timeout=120)
    assert time.monotonic() - start < 30
    assert proc.returncode == code, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("collbench:")]
    assert len(said) == 1 and re.search(r"^collbench: rank 1 .*" + says, said[0]), proc.stderr
    assert sorted(r.size_bytes for r in load_result(run_dir / "x.json").rows) == [8, 16, 32]


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2])
def test_a_library_error_of_several_lines_is_named_by_its_first_and_where_it_happened(
        n, run_dir, plugin_env):
    """On a GPU, torch's CUDA error came out as "rank 0 failed at start-up: AcceleratorError:
    Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.": its last line of
    advice, and start-up for a one-rank run (no guardian keeps its position) in mid-sweep."""
    proc = cli(["allreduce", "-n", str(n), "--backend", "faulty-mpi", "--sizes", "8-1K", *FAST,
                "--no-shuffle",
                "-o", "x.json"], run_dir, env={**plugin_env, "FAULTY_EXIT": f"{n - 1}:64:raise-0"},
               timeout=120)
    assert proc.returncode == 1, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("collbench:")]
    assert said and said[0] == (f"collbench: rank {n - 1} failed at allreduce on faulty-mpi at 64: "
                                "RuntimeError: CUDA error: operation not permitted when stream is "
                                "capturing"), proc.stderr
    assert "TORCH_USE_CUDA_DSA" not in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(r.size_bytes for r in load_result(run_dir / "x.json").rows) == [8, 16, 32]


def test_a_library_error_that_says_its_cause_last_keeps_it(run_dir, plugin_env):
    """torch's NCCL errors open with where and close with why ("Cuda failure 'out of memory'"):
    the line keeps both."""
    proc = cli(["allreduce", "-n", "1", "--backend", "faulty-mpi", "--sizes", "8-1K", *FAST,
                "--no-save"], run_dir,
               env={**plugin_env, "FAULTY_EXIT": "0:64:raise-1"}, timeout=120)
    assert proc.returncode == 1, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("collbench:")]
    assert (said and said[0].startswith("collbench: rank 0 failed at allreduce on faulty-mpi "
                                        "at 64: RuntimeError: NCCL error in: ")
            and said[0].endswith(" … Cuda failure 'out of memory'")), said


@pytest.mark.mpi
@pytest.mark.parametrize("at,saving,says", [
    (8, ["-o", "w.json"], "; the job is stopped; w.json keeps no size yet (none had finished)"),
    (64, ["-o", "w.json"], "; the job is stopped; w.json keeps every size finished before"),
    (64, ["--no-save"], "; the job is stopped; nothing was saved"),
])
def test_the_line_about_an_early_end_says_what_the_files_keep(
        at, saving, says, run_dir, plugin_env):
    """It said "keeps every size finished before" of a file with none, and "result files keep…"
    under --no-save."""
    proc = cli(["allreduce", "-n", "2", "--backend", "faulty-mpi", "--sizes", "8-1K", *FAST,
                "--no-shuffle", *saving],
               run_dir, env={**plugin_env, "FAULTY_EXIT": f"1:{at}:_exit-3"}, timeout=120)
    assert proc.returncode == 137, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("collbench:")]
    assert (len(said) == 1 and said[0].startswith("collbench: rank 1 ")
            and said[0].endswith(says)), proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("how", ["same", "new"])
def test_what_a_rank_starts_hears_signals_and_ends_with_it(how, run_dir, plugin_env):
    """A plugin's helper (``sleep 1000``, in the rank's session or one of its own) inherited the
    ranks' blocked signals (SigBlk HUP, INT, USR1, TERM), so SIGTERM did nothing to it, and
    outlived the run."""
    from collbench.launch.processes import alive

    folder = run_dir / "helpers"
    folder.mkdir()
    proc = cli(["allreduce", "-n", "2", "--backend", "faulty-mpi", "--sizes", "8-64", *FAST,
                "--no-save"], run_dir,
               env={**plugin_env, "FAULTY_CHILD": f"{folder}:{how}"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    helpers = [path.read_text().split() for path in folder.iterdir()]
    assert len(helpers) == 2
    # SIGUSR1 alone stays blocked in a rank (MPICH's launcher's notice of a process that ended)
    deaf = (1 << signal.SIGINT - 1) | (1 << signal.SIGTERM - 1) | (1 << signal.SIGHUP - 1)
    assert [int(blocked, 16) & deaf for _, blocked in helpers] == [0, 0]
    deadline = time.monotonic() + 5
    while any(alive(int(pid)) for pid, _ in helpers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(int(pid)) for pid, _ in helpers), helpers


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_sigterm_to_one_rank_names_that_rank(backend, run_dir, plugin_env):
    """MPICH's launcher tells the other ranks with a SIGUSR1, which is not their guardian's: they
    wait for the coordinator, which names the rank the signal ended. Under gloo, rank 0 said
    "Connection reset by peer ... GLHF!" and a line on SIGTERM, which only rank 1 had got."""
    proc = _slow_sweep(backend, "term.json", run_dir, plugin_env)
    os.kill(_rank_pid(1, "term.json"), signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    said = [line for line in err.splitlines() if line.startswith("collbench:")]
    assert len(said) == 1 and re.search(r"^collbench: rank 1 \(pid \d+ on .*\) ended by SIGTERM "
                                        r"with code 143 ", said[0]), err


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_sigterm_to_rank_0_alone_ends_the_job_at_once(backend, run_dir, plugin_env):
    """Rank 0 said "interrupted by SIGTERM" and left; rank 1, inside a collective that waited
    for it, spun at 100% CPU until --timeout (300 s), then a second line and exit 124."""
    proc = _slow_sweep(backend, "term0.json", run_dir, plugin_env)
    os.kill(_rank_pid(0, "term0.json"), signal.SIGTERM)
    start = time.monotonic()
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)          # the job ends with its parent
            proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert time.monotonic() - start < 30, err
    said = [line for line in err.splitlines() if line.startswith("collbench:")]
    assert len(said) == 1 and said[0].startswith("collbench: interrupted by SIGTERM; term0.json "
                                                 "keeps"), err
    assert 1 <= len(load_result(run_dir / "term0.json").rows) < 18


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_hung_rank_is_aborted_by_timeout(backend, run_dir, plugin_env):
    if backend == "gloo":
        pytest.importorskip("torch")
    start = time.monotonic()
    proc = cli(["allreduce", "-n", "2", "--backend", f"faulty-{backend}", "--sizes", "8-4K", *FAST,
                "--no-shuffle",
                "--timeout", "3", "-o", "h.json"], run_dir,
               env={**plugin_env, "FAULTY_HANG": "1:allreduce:1024"},
               timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode == 124, proc.stderr
    assert f"timeout: allreduce on faulty-{backend} at 1K did not finish within 3 s" in proc.stderr
    assert elapsed < 60
    sizes = [r.size_bytes for r in load_result(run_dir / "h.json").rows]
    assert sizes == [8, 16, 32, 64, 128, 256, 512]


@pytest.mark.mpi
@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_signal_on_launching_process(signum, code, backend, run_dir, plugin_env):
    name = f"sig{int(signum)}-{backend}.json"
    proc = _slow_sweep(backend, name, run_dir, plugin_env)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert f"{name} keeps every size finished before" in err, err
    assert "Traceback" not in err
    rows = load_result(run_dir / name).rows
    assert 2 <= len(rows) < 18
    deadline = time.time() + 5            # a rank may take its one-second grace to leave
    while (subprocess.run(["pgrep", "-f", name], capture_output=True).returncode == 0
           and time.time() < deadline):
        time.sleep(0.1)
    assert (subprocess.run(["pgrep", "-f", name], capture_output=True).returncode
            == 1), "ranks left behind"


def _default_signals() -> None:
    """For Popen: the signals' default actions, whatever this test runs under (a shell's
    background job starts with SIGINT ignored, and collbench leaves an ignored signal ignored)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (SigCgt in /proc)."""
    try:
        line = next(row for row in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if row.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)


@pytest.mark.mpi
@pytest.mark.parametrize("signum,delay,group", [
    (signal.SIGINT, 0.0, True), (signal.SIGINT, 0.1, True), (signal.SIGINT, 0.3, True),
    (signal.SIGINT, 0.6, True),
    (signal.SIGINT, 1.0, True), (signal.SIGINT, 0.3, False), (signal.SIGINT, 0.8, False),
    (signal.SIGTERM, 0.3, True), (signal.SIGTERM, 0.3, False), (signal.SIGHUP, 0.5, True),
])
def test_a_signal_while_collbench_starts_is_one_line(signum, delay, group, run_dir):
    """While Python imports collbench, MPI or torch, or the ranks start: KeyboardInterrupt
    tracebacks, Python's fatal init_import_site, blank lines with exit 130, or exit 143 and no line
    were what a Ctrl-C or a SIGTERM got. From the moment collbench's code runs (it takes SIGTERM:
    the kernel's record of caught signals says so), whenever it comes: one line, the signal's code.
    (Before that moment the interpreter itself is starting, which no Python code can speak for.)"""
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_RANK", "PMI_SIZE", "RANK",
                                                            "WORLD_SIZE")}
    # four rounds: two once ended in 1.3 s on a quiet machine, and a signal 1.0 s after collbench
    # took SIGTERM found it past its "wrote" line (exit 130, and that line only)
    proc = subprocess.Popen([sys.executable, "-m", "collbench", "allreduce", "-n", "2", "--sizes",
                             "8-64K",
                             "--rounds", "4", "-o", "s.json"], cwd=run_dir, env=env,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_default_signals)
    deadline = time.monotonic() + 20
    while not _catches(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(delay)
    if group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 128 + signum, err
    assert len(lines) == 1 and lines[0].startswith("collbench: interrupted by "
                                                   f"{signal.Signals(signum).name}"), err


def _relayed(tmp_path, ranks_source: str, quiet_after: float = 0.0,
             wrap_width: Optional[int] = None) -> tuple:
    """What mpiexec's relay passes on of what ``ranks_source`` prints on stderr, with the relay
    made ``quiet`` (a signal ends the job) ``quiet_after`` seconds after it started, and without:
    the stderr of each, as (quiet, loud). ``wrap_width``: what the ranks wrap their lines at."""
    ranks = tmp_path / "ranks.py"
    ranks.write_text(textwrap.dedent(ranks_source))
    relay = tmp_path / "relay.py"
    relay.write_text(textwrap.dedent(f"""
        import subprocess, sys, time
        from collbench.launch.self_launch.relay import Relay
        proc = subprocess.Popen([sys.executable, {str(ranks)!r}], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        relay = Relay(proc, {wrap_width!r})
        time.sleep({quiet_after!r})
        relay.quiet = sys.argv[1] == "quiet"
        proc.wait()
        relay.join()
    """))
    return tuple(subprocess.run([sys.executable, str(relay), how], capture_output=True, text=True,
                                timeout=60).stderr for how in ("quiet", "loud"))


def test_the_parts_of_a_collbench_line_wrapped_by_a_rank_go_on_together(tmp_path):
    """On a terminal a rank wraps collbench's lines at its width: while a signal ended the job,
    the relay passed on the line's first part and left out the rest, so a Ctrl-C printed
    "collbench: interrupted by SIGINT;" and not where the results are (CI, beside two busy
    loops). The parts go on; a stray line after another rank's traceback still does not."""
    said = ("collbench: interrupted by SIGINT; /tmp/a-folder-of-the-run/r.json keeps every size "
            "finished before")
    wrapped = textwrap.wrap(said, 40, break_on_hyphens=False)
    quiet, loud = _relayed(tmp_path, f"""
        import sys
        for line in ("KeyboardInterrupt", "import enum", *{wrapped!r}):
            sys.stderr.write(line + "\\n")
            sys.stderr.flush()
    """, wrap_width=40)
    assert len(wrapped) > 2 and quiet == "\n".join(wrapped) + "\n", quiet
    assert "import enum" in loud


def test_a_frames_line_that_lost_its_indent_between_two_tracebacks_is_left_out(tmp_path):
    """The launcher passed one rank's source line on without its indent, after the other's
    exception line had closed a traceback: "import enum" reached the terminal beside
    "collbench: interrupted by SIGINT" (CI, once,
    test_a_signal_while_collbench_starts_is_one_line)."""
    quiet, loud = _relayed(tmp_path, """
        import sys
        for line in ("Traceback (most recent call last):", "Traceback (most recent call last):",
                     '  File "<frozen runpy>", line 198, in _run_module_as_main',
                     '  File "/usr/lib/python3.11/re/__init__.py", line 125, in <module>',
                     "KeyboardInterrupt", "import enum", "KeyboardInterrupt",
                     "collbench: interrupted by SIGINT"):
            sys.stderr.write(line + "\\n")
            sys.stderr.flush()
    """)
    assert quiet == "collbench: interrupted by SIGINT\n", quiet
    assert "import enum" in loud


def test_interleaved_tracebacks_of_interrupted_ranks_are_left_out_whole(tmp_path):
    """Two ranks interrupted while Python starts print their tracebacks through one launcher,
    line by line in turn: one's exception line came amid the other's frames, and the frames
    after it reached the terminal (seen once in CI beside "collbench: interrupted by SIGINT").
    While a signal ends the job only collbench's own lines go on; without one, every line."""
    quiet, loud = _relayed(tmp_path, """
        import collections, sys, traceback
        def fail(chained):
            try:
                try:
                    collections.namedtuple("Row", ["a", "b"], defaults=eval("1/0"))
                except ZeroDivisionError:
                    if chained:
                        raise KeyboardInterrupt
                    raise
            except BaseException:
                return traceback.format_exc().splitlines()
        one, two = fail(True), fail(False)
        for i in range(max(len(one), len(two))):
            for lines in (one, two):
                if i < len(lines):
                    sys.stderr.write(lines[i] + "\\n")
                    sys.stderr.flush()
        sys.stderr.write("collbench: interrupted by SIGINT\\n")
    """)
    assert quiet == "collbench: interrupted by SIGINT\n", quiet
    assert loud.count("Traceback (most recent call last):") == 3 and "KeyboardInterrupt" in loud
    assert loud.endswith("collbench: interrupted by SIGINT\n")


def test_a_starting_ranks_fatal_error_that_comes_before_the_handler_runs_is_left_out(tmp_path):
    """A Ctrl-C reaches the starting ranks and collbench at once: a rank's "Fatal Python error:
    init_import_site" came through mpiexec before collbench's main thread had run its handler,
    and reached the terminal above "collbench: interrupted by SIGINT" (seen once in CI). Such a
    block is held back a moment and judged once the handler has run; without a signal, it goes
    on."""
    quiet, loud = _relayed(tmp_path, """
        import sys, time
        sys.stderr.write("Fatal Python error: init_import_site: Failed to import the site module\\n"
                         "Python runtime state: initialized\\n"
                         "Traceback (most recent call last):\\n")
        sys.stderr.flush()
        time.sleep(0.4)
        sys.stderr.write('  File "<frozen site>", line 1, in <module>\\nKeyboardInterrupt\\n')
        sys.stderr.write("collbench: interrupted by SIGINT\\n")
    """, quiet_after=0.2)         # the first lines are through; the handler runs now
    assert quiet == "collbench: interrupted by SIGINT\n", quiet
    assert loud.startswith("Fatal Python error: init_import_site") and "KeyboardInterrupt\n" in loud
    assert loud.endswith("collbench: interrupted by SIGINT\n"), loud


def test_a_fatal_errors_first_piece_before_its_line_ends_is_held_too(tmp_path):
    """Python writes "Fatal Python error: " and the rest of the line in two writes: the relay
    passed the first piece on at once, as a partial line (a progress bar, say), and "collbench
    ab: interrupted by SIGINT …" came out after "Fatal Python error: " on one line (CI, beside two
    busy loops). A partial line that begins such a block is held with it."""
    quiet, loud = _relayed(tmp_path, """
        import sys, time
        sys.stderr.write("Fatal Python error: ")
        sys.stderr.flush()
        time.sleep(0.4)
        sys.stderr.write("init_import_site: Failed to import the site module\\n"
                         "KeyboardInterrupt\\n")
        sys.stderr.write("collbench: interrupted by SIGINT\\n")
    """, quiet_after=0.2)
    assert quiet == "collbench: interrupted by SIGINT\n", quiet
    assert loud.startswith("Fatal Python error: init_import_site") and "KeyboardInterrupt\n" in loud


def test_a_signal_that_python_cannot_raise_where_it_lands_is_said_once(tmp_path):
    """A Ctrl-C that lands in a weak reference's callback (the lock of a module being imported:
    seen once in a full suite) cannot be raised there: Python printed "Exception ignored in …"
    before collbench's own line. The signal is kept and raised again; that report is left out,
    and other such reports are not."""
    script = tmp_path / "swallowed.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys, weakref
        from collbench.errors import Interrupted, check_interrupted, interrupt_on_signals
        interrupt_on_signals()

        class Thing:
            pass

        def callback(_ref):
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(100000))                 # the handler runs here, inside the callback

        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing
        other = Thing()
        other_ref = weakref.ref(other, lambda _ref: 1 / 0)
        del other
        try:
            check_interrupted()
        except Interrupted as exc:
            print("raised again:", exc.signum)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ,
                               "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
                          # a job started in the background ignores SIGINT
                          preexec_fn=_default_signals)
    assert proc.stdout.strip() == f"raised again: {int(signal.SIGINT)}", proc.stdout + proc.stderr
    assert "Interrupted" not in proc.stderr and "ZeroDivisionError" in proc.stderr, proc.stderr


@pytest.mark.mpi
def test_sigint_reaches_ranks_blocked_in_mpi(run_dir, plugin_env):
    # Rank 1 hangs before 1K; rank 0 then waits inside an MPI call, where no Python signal
    # handler could run. Ctrl-C must still end the job at once.
    proc = _start(["allreduce", "-n", "2", "--backend", "faulty-mpi", "--sizes", "8-4K", *FAST,
                   "--no-shuffle",
                   "--timeout", "100", "-o", "b.json"], run_dir,
                  {**plugin_env, "FAULTY_HANG": "1:allreduce:1024"})
    _wait_rows(run_dir / "b.json", 7)
    time.sleep(1.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 10
    assert proc.returncode == 130, err
    assert ([r.size_bytes for r in load_result(run_dir / "b.json").rows]
            == [8, 16, 32, 64, 128, 256, 512])


@pytest.mark.mpi
def test_sigint_under_mpiexec(run_dir, plugin_env):
    from collbench.launch.self_launch.mpiexec import find_mpiexec
    env = {**os.environ, **plugin_env, "FAULTY_PAUSE": "0.3"}
    proc = subprocess.Popen([find_mpiexec(), "-n", "2", sys.executable, "-m", "collbench",
                             "allreduce",
                             "--backend", "faulty-mpi", "--sizes", "8-1M", *FAST, "-o", "m.json"],
                            cwd=run_dir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_rows(run_dir / "m.json", 2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    # Every rank exits 130; MPICH's mpiexec reports 130, or 9 when it killed a rank still exiting.
    assert proc.returncode in (130, 9), err
    assert "interrupted by SIGINT" in err
    assert len(load_result(run_dir / "m.json").rows) >= 2


@pytest.mark.mpi
def test_memory_guard_skips_what_does_not_fit(run_dir):
    proc = cli(["allreduce", "-n", "2", "--backend", "mpi,mpi-pickle", "--sizes", "1K,16G", *FAST,
                "-o", "m.json"], run_dir, env={"COLLBENCH_MEMORY_LIMIT": "8G"})
    assert proc.returncode == 0, proc.stderr
    result = load_result(run_dir / "m.json")
    assert [(r.backend, r.size_bytes) for r in result.rows] == [("mpi", 1024), ("mpi-pickle", 1024)]
    assert any(n.startswith("allreduce on mpi at 16G: needs about")
               and "(2 ranks), more than the" in n
               and n.endswith("skipped, as it would run out of memory")
               for n in result.notes), result.notes
    assert "16G" in proc.stderr and "skipped" in proc.stderr


@pytest.mark.mpi
def test_pickle_message_limit_skips_with_note(run_dir, plugin_env):
    proc = cli(["allgather", "-n", "2", "--backend", "mpi,small-pickle", "--sizes", "1K-16K", *FAST,
                "-o", "p.json"],
               run_dir, env=plugin_env)
    assert proc.returncode == 0, proc.stderr
    result = load_result(run_dir / "p.json")
    pickled = [r.size_bytes for r in result.rows if r.backend == "small-pickle"]
    assert pickled == [1024, 2048, 4096]
    assert ([r.size_bytes for r in result.rows if r.backend == "mpi"]
            == [1024, 2048, 4096, 8192, 16384])
    assert any("8K: a message beyond small-pickle's 4K limit; skipped" in n for n in result.notes)


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpi", "mpi-pickle", "gloo"])
def test_check_catches_corruption(backend, run_dir, plugin_env):
    """Rank 1 sends three wrong elements through the real library; both ranks' sums are wrong
    there."""
    if backend == "gloo":
        pytest.importorskip("torch")
    proc = cli(["allreduce", "-n", "2", "--backend", f"faulty-{backend}", "--sizes", "1K,4K", *FAST,
                "-o", "c.json"],
               run_dir, env={**plugin_env, "FAULTY_CORRUPT": "1"})
    assert proc.returncode == 1
    assert (f"CHECK FAILED: allreduce on faulty-{backend}" in proc.stderr
            and "6 wrong elements" in proc.stderr)
    rows = load_result(run_dir / "c.json").rows
    assert [r.check for r in rows] == ["wrong:6", "wrong:6"]
    assert "FAILED the result check" in proc.stdout


def _listening_addresses(pids) -> set:
    inodes = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":                       # LISTEN
                inodes[fields[9]] = fields[1].split(":")[0]
    found = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                m = re.match(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
                if m and m.group(1) in inodes:
                    found.add(inodes[m.group(1)])
        except OSError:
            continue
    return found


def test_self_launched_torch_listens_on_loopback_only(run_dir, plugin_env):
    proc = _slow_sweep("gloo", "l.json", run_dir, plugin_env)
    try:
        pids = [_rank_pid(0, "l.json"), _rank_pid(1, "l.json")]
        addresses = _listening_addresses(pids)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert addresses, "expected the rendezvous store and gloo to listen"
    loopback = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}
    assert addresses <= loopback, addresses


def test_a_signal_after_a_guardian_of_the_host_spoke_is_not_echoed(monkeypatch, capsys):
    """srun --kill-on-bad-exit: rank 1 failed in start-up and its guardian said so, then srun
    ended rank 0 with SIGTERM, which added "interrupted by SIGTERM; nothing was saved" under the
    line (test_slurm, beside two busy loops). Rank 0 says its line only where no process of its
    host's part of the job has claimed the word; it never waits for one."""
    import signal

    from collbench import environment
    from collbench.cli.interrupt import interrupted
    from collbench.launch import notes

    for name in (environment.LAUNCHED, environment.STATE, "PMI_RANK", "RANK", "SLURM_PROCID",
                 "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(name, raising=False)
    # this process stands for rank 0, pytest's parent for the launcher's process of the host
    monkeypatch.setattr(notes, "_host_parent", [os.getppid()])
    with pytest.raises(SystemExit) as ended:
        interrupted(signal.SIGTERM)
    assert ended.value.code == 143
    assert capsys.readouterr().err == "collbench: interrupted by SIGTERM; nothing was saved\n"
    assert notes._first_here()          # a guardian of the host takes the word, and speaks
    try:
        with pytest.raises(SystemExit) as ended:
            interrupted(signal.SIGTERM)
        assert ended.value.code == 143 and capsys.readouterr().err == ""
    finally:
        for claim in notes._held:
            claim.close()
        notes._held.clear()
        os.remove(notes._said_mark())
