"""What a hostile or careless user, a broken environment or a full disk does to collbench.

Each case once broke it (a traceback, a silent exit, a wrong exit code, a file left behind);
each must now give one line on stderr and the promised exit code (2 for bad input or a bad
environment, 0 when nothing is wrong with the run itself). The first table runs the real
command line in a subprocess; the cases after it need a process, a signal or a disk to play
their part.
"""

import contextlib
import errno
import json
import os
import re
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from collbench.results import paths
from conftest import FAST, mpirun
from results_helpers import wait_for_rows
from terminal_helpers import read_rest

LAUNCH_VARS = ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "PMIX_RANK", "PMIX_NAMESPACE",
               "OMPI_COMM_WORLD_SIZE",
               "OMPI_COMM_WORLD_RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
               "MASTER_PORT",
               "TORCHELASTIC_RUN_ID", "COLLBENCH_LAUNCHED", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS")
RUN = ["--sizes", "8", "--iters", "3", "--rounds", "1", "--no-save", "-n", "2"]


def _env(extra=None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(extra or {})
    return env


def _run(args, cwd, extra_env=None, timeout=120, **kw):
    return subprocess.run([sys.executable, "-m", "collbench", *args], cwd=cwd, env=_env(extra_env),
                          capture_output=True, text=True, timeout=timeout, **kw)


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A valid result file, and broken ones."""
    tmp_path = tmp_path_factory.mktemp("files")
    good = tmp_path / "good.json"
    proc = _run(["allreduce", "-n", "2", "--sizes", "8,1K", "--iters", "5", "--rounds", "2", "-o",
                 str(good), "-q"],
                tmp_path)
    assert proc.returncode == 0, proc.stderr
    other = json.loads(good.read_text())
    other["metadata"]["run_id"] = "another-run"          # a second run of the same sweep, for merge
    (tmp_path / "good2.json").write_text(json.dumps(other))
    (tmp_path / "trunc.json").write_text(good.read_text()[:500])
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "deepmeta.json").write_text('{"schema": "collbench.result", "schema_version": 2, '
                                            '"metadata": '
                                            + "[" * 50_000 + "]" * 50_000 + ', "rows": []}')
    (tmp_path / "types.json").write_text('{"schema": "collbench.result", "schema_version": 2, '
                                         '"metadata": [], "rows": {}}')
    (tmp_path / "rowtypes.json").write_text('{"schema": "collbench.result", "schema_version": 2, '
                                            '"metadata": {}, "rows": [{"collective": 1}]}')
    (tmp_path / "binary.json").write_bytes(bytes(range(256)) * 10)
    return tmp_path


NINES = "9" * 5000

# (case, arguments, extra environment, exit code, a fragment of the one line)
CASES = [
    ("a size of 5000 digits", ["allreduce", "--sizes", NINES], {}, 2,
     "larger than the 1 TiB limit"),
    ("a range to a size of 5000 digits", ["allreduce", "--sizes", f"1-{NINES}"], {}, 2, "1 TiB"),
    ("a factor of 5000 digits", ["allreduce", "--sizes", f"1K-1M:x{NINES}"], {}, 2,
     "factor is too large"),
    ("--timeout inf", ["allreduce", "--timeout", "inf"], {}, 2, "--timeout"),
    ("--timeout 1e300", ["allreduce", "--timeout", "1e300"], {}, 2, "--timeout"),
    ("--timeout nan", ["allreduce", "--timeout", "nan"], {}, 2, "--timeout"),
    ("--precision nan", ["allreduce", "--precision", "nan"], {}, 2, "--precision"),
    ("--precision 1e-300", ["allreduce", "--precision", "1e-300"], {}, 2, "--precision"),
    ("--max-time nan", ["allreduce", "--max-time", "nan"], {}, 2, "--max-time"),
    ("--max-time inf", ["allreduce", "--max-time", "inf"], {}, 2, "--max-time"),
    ("MASTER_PORT=abc", ["allreduce", "--backend", "gloo", *RUN], {"MASTER_PORT": "abc"}, 2,
     "MASTER_PORT='abc'"),
    ("MASTER_PORT=99999", ["allreduce", "--backend", "gloo", *RUN], {"MASTER_PORT": "99999"}, 2,
     "not a TCP port"),
    ("a stray RANK", ["allreduce", *RUN], {"RANK": "1"}, 2, "RANK='1' is set"),
    ("a stray RANK and WORLD_SIZE", ["allreduce", *RUN], {"RANK": "1", "WORLD_SIZE": "2"}, 2,
     "MASTER_ADDR and MASTER_PORT are not"),
    ("a stray PMI_RANK", ["allreduce", *RUN], {"PMI_RANK": "1"}, 2, "no open PMI_FD or PMI_PORT"),
    ("HYDRA_LAUNCHER=bogus", ["allreduce", *RUN], {"HYDRA_LAUNCHER": "bogus"}, 2,
     "HYDRA_LAUNCHER=bogus: MPICH's mpiexec has no such launcher (it has ssh"),
    ("HYDRA_LAUNCHER=slurm outside Slurm (a hang)", ["allreduce", *RUN],
     {"HYDRA_LAUNCHER": "slurm"}, 2, "not inside a Slurm allocation (no SLURM_JOB_ID)"),
    ("HYDRA_LAUNCHER=manual (a hang)", ["allreduce", *RUN], {"HYDRA_LAUNCHER": "manual"}, 2,
     "wait for its proxies to be started by hand"),
    ("a stray PMI_PORT that nothing listens on", ["allreduce", *RUN],
     {"PMI_RANK": "0", "PMI_SIZE": "2", "PMI_PORT": "127.0.0.1:1"}, 2,
     "nothing listens at that port on this host"),
    ("mpiexec's own failure is quoted", ["allreduce", *RUN], {"HYDRA_HOST_FILE": "/nonexistent"},
     255,
     "mpiexec ended with code 255 before any rank could say why: "
     "it said 'unable to open host file"),
    ("a stray PMI_RANK does not silence compare", ["compare", "nope.json", "none.json"],
     {"PMI_RANK": "1"}, 2,
     "nope.json: no such file"),
    ("a stray RANK does not silence report", ["report", "nope.json"],
     {"RANK": "3", "WORLD_SIZE": "4"}, 2,
     "nope.json"),
    ("a leftover OMPI_COMM_WORLD_SIZE", ["allreduce", *RUN], {"OMPI_COMM_WORLD_SIZE": "4"}, 2,
     "no Open MPI runtime"),
    ("a leftover PMI_SIZE", ["allreduce", *RUN], {"PMI_SIZE": "4"}, 2, "PMI_SIZE='4' is set"),
    ("-o a.json twice", ["allreduce", *RUN[:-3], "-n", "2", "-o", "a.json", "-o", "a.json"], {}, 2,
     "names the same file"),
    ("-o a.json and ./a.json", ["allreduce", "-n", "2", "-o", "a.json", "-o", "./a.json"], {}, 2,
     "same file"),
    ("compare --alpha nan", ["compare", "good.json", "good.json", "--alpha", "nan"], {}, 2,
     "--alpha"),
    ("compare --threshold nan%", ["compare", "good.json", "good.json", "--threshold", "nan%"], {},
     2, "--threshold"),
    ("report --threshold inf", ["report", "good.json", "--threshold", "inf"], {}, 2, "--threshold"),
]
for _name in ("trunc", "deep", "deepmeta", "types", "rowtypes", "binary"):
    CASES += [(f"compare with {_name}.json", ["compare", "good.json", f"{_name}.json"], {}, 2,
               f"{_name}.json"),
              (f"report of {_name}.json", ["report", f"{_name}.json"], {}, 2, f"{_name}.json"),
              (f"plot of {_name}.json", ["plot", f"{_name}.json", "-o", "p.png"], {}, 2,
               f"{_name}.json")]


@pytest.mark.parametrize("case,args,env,code,fragment", CASES, ids=[c[0] for c in CASES])
def test_one_line_and_the_promised_exit_code(case, args, env, code, fragment, files):
    proc = _run(args, files, env)
    assert proc.returncode == code, proc.stderr
    assert fragment in _one_line(proc.stderr)
    assert not (files / "a.json").exists(), "a refused run leaves nothing"
    assert not list(files.glob(".*.tmp"))


def _limited(files: int = 0, size_kib: int = 0, space_kib: int = 0):
    """For Popen: the child starts with ``ulimit -n files``, ``ulimit -f size_kib`` and
    ``ulimit -v space_kib``."""
    import resource

    def limit():
        if space_kib:
            resource.setrlimit(resource.RLIMIT_AS, (space_kib * 1024, space_kib * 1024))
        if files:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
        if size_kib:
            resource.setrlimit(resource.RLIMIT_FSIZE, (size_kib * 1024, size_kib * 1024))
    return limit


@pytest.mark.parametrize("case,args,env,limits,fragments,bad_environment", [
    ("a PMIx namespace of another job",
     ["allreduce", "--sizes", "8", "--iters", "3", "--rounds", "1", "--no-save"],
     {"PMIX_RANK": "0", "PMIX_NAMESPACE": "x"}, {},
     ["rank 0", "during start-up", "MPI's start-up said '"], True),
    ("UCX_TLS=bogus", ["allreduce", *RUN], {"UCX_TLS": "bogus"}, {},
     ["start-up", "UCX_TLS=bogus is set"], True),
    ("a crash on a netmod MPICH lacks, under a user's mpiexec", ["--mpiexec", "allreduce", *RUN],
     {"MPIR_CVAR_CH4_NETMOD": "bogus"}, {},
     ["rank ", "SIGSEGV", "start-up", "MPIR_CVAR_CH4_NETMOD=bogus names a network module MPICH's "
      "library has not (it has ucx, ofi); unset MPIR_CVAR_CH4_NETMOD or choose one of them"],
     True),
    ("the same self-launched: refused before a rank starts", ["allreduce", *RUN],
     {"MPIR_CVAR_CH4_NETMOD": "Bogus"}, {},
     ["collbench: error: MPIR_CVAR_CH4_NETMOD=Bogus names a network module MPICH's library has "
      "not (it has ucx, ofi), and the library crashes"], True),
    ("ulimit -f 1000", ["allreduce", *RUN], {}, {"size_kib": 1000}, ["ulimit -f is 1000 KiB"],
     True),
])
def test_a_start_up_that_fails_names_its_cause(case, args, env, limits, fragments, bad_environment,
                                               files):
    """MPI's error stack, UCX's, or an exit code alone, where one line naming the cause was due:
    what the library said as it failed to start, the variables that tune it, a low limit. Where
    MPI refused to start and said why, the environment is bad: exit 2, as for a bad option (it
    was 143 or 137, a lost rank's). MPICH's library crashes (SIGSEGV) on a netmod it lacks,
    saying nothing: that was a crash's 139; the name is now checked."""
    if args[0] == "--mpiexec":          # the job's code is mpiexec's: 2, or 9 (see below)
        from collbench.launch.self_launch.mpiexec import find_mpiexec
        proc = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-m", "collbench",
                               *args[1:]], cwd=files, env={**os.environ, **env},
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode in (2, 9), proc.stderr
        assert all(f in _one_line(proc.stderr) for f in fragments), proc.stderr
        return
    proc = _run(args, files, env, preexec_fn=_limited(**limits))
    if bad_environment:
        assert proc.returncode == 2, proc.stderr
    else:
        assert proc.returncode not in (0, 1, 2), proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith("collbench: ") and all(f in line for f in fragments), line


def test_a_netmod_is_compared_as_mpich_does():
    """Case aside (UCX runs), spaces kept (' ucx' crashed, and is shown quoted); unset or empty
    picks MPICH's default."""
    from collbench import environment

    def unknown(value, netmods=environment.NETMODS):
        env = {} if value is None else {environment.NETMOD: value}
        return environment.netmod_unknown(env, netmods)
    assert [unknown(v) for v in (None, "", "ucx", "UCX", "ofi")] == [None] * 5
    assert unknown(" ucx").startswith("MPIR_CVAR_CH4_NETMOD=' ucx' names a network module")
    assert unknown("ofi", ("ucx",)).endswith("(it has ucx)")


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_start_up_every_rank_refuses_under_a_users_mpiexec_is_said(ranks, files):
    """UCX_TLS=bogus under a user's mpiexec: the first rank's MPI aborted the job, mpiexec ended
    the others and their guardians (SIGTERM, then SIGKILL), and nothing was ever said (exit 143
    or 9). Now the first guardian of the host whose rank's library said why says it, and exits
    2. The job's code stays mpiexec's: 2, or 9 (its banner on stdout) where it killed a guardian
    still waiting for its rank. mpiexec's kills race the guardians: a guardian that lost the word
    and left first had mpiexec end the one that had it before it spoke (2 jobs in 60 beside two
    busy loops lost the line; it now waits for that one to leave), and a rare job still says it
    twice, so the test takes the best of three jobs."""
    seen = []
    for _ in range(3):
        proc = mpirun(ranks, ["allreduce", "--sizes", "8", "--iters", "3", "--rounds", "1",
                              "--no-save"], files,
                      env={"UCX_TLS": "bogus"}, timeout=120)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        seen.append((proc.returncode, lines))
        if proc.returncode in (2, 9) and len(lines) == 1:
            break
    code, lines = seen[-1]
    assert code in (2, 9) and len(lines) == 1, seen
    assert re.match(r"collbench: rank \d+ \(pid \d+ on \S+\) could not start its MPI library "
                    r"\(MPI's start-up said 'UCX: no usable transports/devices", lines[0]), lines[0]
    assert "UCX_TLS=bogus is set" in lines[0] and "Traceback" not in lines[0]


def test_ranks_that_each_exit_in_start_up_under_a_users_mpiexec_are_said_once(files):
    """MPIR_CVAR_DEVICE_COLLECTIVES=xyz fails MPICH's start-up on every rank with exit code 15,
    for which mpiexec does not end the job: each guardian reached its line in turn, after the one
    before had left with its claim (2-3 lines at 3-4 ranks). The first one's mark in the
    temporary folder outlives it; the next job on the host removes it."""
    from collbench.launch.self_launch.mpiexec import find_mpiexec

    tmp = files / "said-marks"
    tmp.mkdir()

    def job(variables):
        return subprocess.run([find_mpiexec(), "-n", "4", sys.executable, "-m", "collbench",
                               "allreduce", "--sizes", "8", "--iters", "3", "--rounds", "1",
                               "--no-save"], cwd=files, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "TMPDIR": str(tmp), **variables})
    for _ in range(2):
        proc = job({"MPIR_CVAR_DEVICE_COLLECTIVES": "xyz"})
        line = _one_line(proc.stderr)
        assert proc.returncode == 2 and re.match(r"collbench: rank \d \(pid \d+ on \S+\) exited "
                                                 r"with code 15 \(MPI's start-up said", line), line
        assert len(list(tmp.glob("collbench-said-*"))) == 1
    assert job({}).returncode == 0 and not list(tmp.glob("collbench-said-*"))


def test_no_file_at_all_is_one_line_naming_the_limit(files):
    """ulimit -f 0: Python finds no usable temporary folder (it cannot write its test file), and
    said only that; the line named the limit next. A limit under what an MPI launch writes as it
    starts is now refused, naming it, before anything starts."""
    def no_files():
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    proc = _run(["allreduce", *RUN], files, preexec_fn=no_files)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert line == ("collbench: error: ulimit -f is 0 KiB: an MPI launch writes larger files as it "
                    "starts (the host's topology, shared memory), and the result files grow past "
                    "it; raise it to 64 KiB or more"), line


@pytest.mark.parametrize("blocks,said", [
    ("0", "ulimit -f is 0 KiB: "),
    ("1", "the file size limit is 512 bytes: ")])
def test_no_file_at_all_under_a_users_mpiexec_is_said_once(files, blocks, said):
    """ulimit -f 0 under a user's mpiexec of 3 ranks: 2 lines in 2 of 10 jobs. The guardian that
    spoke first could not leave its mark for the later ones: Python found no temporary folder
    for it (it cannot write its test file there), though an empty mark can be made. mpiexec's
    own code varied: its proxy dies writing a file too (255). Under sh's ulimit -f 1 (512
    bytes) the proxy died writing the host's topology before any rank could speak: mpiexec's
    assert alone, exit 255 (an adversarial pass, 2 of 2). A limit under 64 KiB is now refused
    before anything starts, by the first rank of the host."""
    from collbench.launch.self_launch.mpiexec import find_mpiexec

    tmp = files / f"said-marks-without-files-{blocks}"
    tmp.mkdir()
    for _ in range(3):
        proc = subprocess.run(["sh", "-c", f"ulimit -f {blocks}; exec {find_mpiexec()} -n 3 "
                               f"{sys.executable} -m collbench allreduce --sizes 8 --iters 3 "
                               "--rounds 1 --no-save"], cwd=files, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "TMPDIR": str(tmp)})
        lines = [line for line in proc.stderr.splitlines() if line.startswith("collbench")]
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0].startswith(f"collbench: error: {said}"), lines


def test_a_file_size_limit_under_a_kib_is_said_in_bytes():
    """dash counts ulimit -f in blocks of 512 bytes: its ulimit -f 1 was said as "0 KiB"."""
    script = ("import resource\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (512, resource.RLIM_INFINITY))\n"
              "from collbench.launch.processes import low_limits\n"
              "print(low_limits())")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert out == " (the file size limit is 512 bytes)\n", out


@pytest.mark.parametrize("variable,value,cause", [
    ("GLOO_SOCKET_IFNAME", "bogus0", "Unable to find address for: bogus0"),
    ("GLOO_DEVICE_TRANSPORT", "bogus", "unsupported gloo device"),
])
def test_a_gloo_start_up_that_every_rank_fails_is_one_line_and_exit_2(
        variable, value, cause, files):
    """Each rank said its own line, then a summary line, and the job exited 1, the code of a
    failed result check."""
    pytest.importorskip("torch")
    proc = _run(["allreduce", "--backend", "gloo", *RUN], files, {variable: value})
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc.stderr)
    assert (line.startswith("collbench: rank ") and "failed at start-up" in line
            and cause in line), line


def test_a_gloo_set_up_every_rank_fails_under_a_users_mpiexec_is_one_line_and_exit_2(files):
    """Each rank said its own line, and the job exited 1, a failed result check's code: a rank
    claimed the word under its guardian's name, and a backend's set-up was not start-up. A rank
    now claims it as its guardian does, for the host."""
    pytest.importorskip("torch")
    from collbench.launch.self_launch.mpiexec import find_mpiexec

    proc = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-m", "collbench",
                           "allreduce", "--backend", "gloo", "--sizes", "8", "--iters", "3",
                           "--rounds", "1", "--no-save"], cwd=files, capture_output=True,
                          text=True, timeout=120, env=_env({"GLOO_SOCKET_IFNAME": "bogus0"}))
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc.stderr)
    assert re.match(r"collbench: rank \d failed at set-up of backend gloo: RuntimeError: .*"
                    r"Unable to find address for: bogus0", line), line


@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_too_few_open_files_is_one_line_before_anything_starts(backend, files):
    """ulimit -n 16: under gloo torch's store retried for a minute, printing C++ frames, and the
    job ended 137; under MPI, mpiexec failed ('assert (!closed) failed'). A soft limit alone
    (ulimit -Sn) is raised as far as the hard one lets it, as the user could."""
    if backend == "gloo":
        pytest.importorskip("torch")
    args = ["allreduce", "--backend", backend, *RUN]
    proc = _run(args, files, preexec_fn=_limited(files=16))
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith("collbench: error: ulimit -n is 16, and a rank of a 2-rank job needs "
                           "about ") and \
        line.endswith("raise it"), line

    def soft_only():
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (16, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    proc = _run(args, files, preexec_fn=soft_only)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr


def test_an_address_space_too_small_to_load_mpi_is_said_so(files):
    """Two ranks each said "MPI is not usable here (...failed to map segment...); install it",
    and below that the guardian could not start a thread and left the other rank waiting 45 s in
    MPI's start-up. Since collbench's own threads keep to one or two malloc arenas and 1 MiB
    stacks, 160-180 MB was where libmpi no longer fits (it ran from 200 MB); since numpy keeps to
    one BLAS thread, 120 MB (below 110 MB collbench refuses before it loads numpy)."""
    proc = _run(["allreduce", *RUN], files, preexec_fn=_limited(space_kib=120_000))
    line = _one_line(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert "ulimit -v is 120000 KiB" in line and "raise" in line and "MPI" in line, line


def test_an_address_space_too_small_for_the_buffers_is_said_so(files):
    """It said "needs about 0 MiB more ..., more than the 0 MiB its ulimit -v leaves". A limit
    that leaves no room at all sits where MPI's own start-up runs out too (at 250000 KiB: the
    note, a rank ended in UCX's start-up, or UCX's lines beside the note, from run to run): the
    limit here starts every rank and leaves too little for a 256 MiB allreduce's buffers."""
    proc = _run(["allreduce", "-n", "2", "--sizes", "256M", "--iters", "3", "--rounds", "1",
                 "--no-save"], files,
                preexec_fn=_limited(space_kib=600_000))
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and "nothing to measure" in line, line
    needed = re.search(r"needs about (\d+) MiB more address space in rank 0 on \S+, more than the "
                       r"(\d+) MiB its ulimit -v leaves;", line)
    assert needed and int(needed[1]) > int(needed[2]) > 0, line


def test_an_ascii_terminal_gets_ascii_not_a_traceback(files):
    for args in (["compare", "good.json", "good.json", "--min-decided", "0%"],
                 ["report", "good.json"],
                 ["allreduce", *RUN]):
        proc = _run(args, files, {"PYTHONIOENCODING": "ascii"})
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        assert proc.stdout.isascii() and "us" in proc.stdout



def _verdict_code(files) -> int:
    """What ``compare good.json good.json`` exits with, its streams whole: 3 (too few rows
    decided) as a rule, but good.json is a live run of two rounds, and in one run beside other
    tests both tests that expected 3 got another code together (the file's verdict, not the
    stream, decides it)."""
    proc = subprocess.run([sys.executable, "-m", "collbench", "compare", "good.json", "good.json"],
                          cwd=files, env=_env(), timeout=120, capture_output=True)
    assert proc.returncode in (0, 3), proc.stderr
    return proc.returncode

@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_closed_stream_changes_nothing(files, closed):
    stream = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    kw = {k: v for k, v in stream.items() if k != closed}
    close = 1 if closed == "stdout" else 2
    for args, code in ((["compare", "good.json", "good.json"], _verdict_code(files)),
                       (["compare", "good.json", "nope.json"], 2),
                       (["allreduce", "-n", "2", "--sizes", "8", "--iters", "3", "--rounds", "1",
                         "-o", "c.json",
                         "--force"], 0)):
        proc = subprocess.run([sys.executable, "-m", "collbench", *args], cwd=files, env=_env(),
                              timeout=120, preexec_fn=lambda: os.close(close), **kw)
        assert proc.returncode == code, args
    assert json.loads((files / "c.json").read_text())["rows"], ("the file is written, "
                                                                "not the closed stream")


@pytest.mark.parametrize("args",
                         [["allreduce", *RUN, "-f", "json"], ["allreduce", *RUN, "-f", "csv"],
                                  ["compare", "good.json", "good.json", "-f", "json"],
                          ["allreduce", *RUN]])
def test_output_lost_on_a_full_device_is_one_line_and_exit_2(files, args):
    """What the user asked for on stdout that could not be written is an error, not exit 0."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "collbench", *args], cwd=files, env=_env(),
                              timeout=120, stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "No space left on device" in _one_line("\n".join(
        line for line in proc.stderr.splitlines() if "error" in line or "Traceback" in line))


def test_a_document_asked_for_on_a_closed_stdout_is_an_error_and_a_full_stderr_changes_no_code(
        files):
    proc = subprocess.run([sys.executable, "-m", "collbench", "allreduce", *RUN, "-f", "csv"],
                          cwd=files, env=_env(),
                          timeout=120, preexec_fn=lambda: os.close(1), stderr=subprocess.PIPE,
                          text=True)
    assert (proc.returncode == 2
            and "standard output is closed: -f csv went nowhere" in _one_line(proc.stderr))
    with open("/dev/full", "w") as full:
        for args in (["allreduce", "--sizes", "0"], ["compare", "good.json", "missing.json"]):
            code = subprocess.run([sys.executable, "-m", "collbench", *args], cwd=files, env=_env(),
                                  timeout=60, stdout=subprocess.DEVNULL, stderr=full).returncode
            assert code == 2, args


def test_a_file_name_with_a_line_end_or_esc_is_said_on_one_printable_line(files):
    proc = _run(["allreduce", *[a for a in RUN if a != "--no-save"], "-o", "new\nline.json", "-o",
                 "e\x1b[31mred.json"],
                files)
    assert proc.returncode == 0, proc.stderr
    assert ("collbench: wrote new line.json, e\\x1b[31mred.json" in proc.stderr
            and "\x1b" not in proc.stderr)
    assert (files / "new\nline.json").exists() and (files / "e\x1b[31mred.json").exists()


@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_warnings_as_errors_find_nothing_left_open(files, backend):
    """PYTHONWARNINGS=error: the launching process's pipes, a rank's guardian channel and the
    torch store's listening socket were left to the interpreter (32 lines of ResourceWarning)."""
    if backend == "gloo":
        pytest.importorskip("torch")
    proc = _run(["allreduce", *RUN, "--rounds", "2", "--backend", backend], files,
                {"PYTHONWARNINGS": "error"})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_an_address_space_limit_too_low_for_python_is_one_line_and_exit_2(files):
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (100_000 * 1024, 100_000 * 1024))
    proc = subprocess.run([sys.executable, "-m", "collbench", "allreduce", *RUN], cwd=files,
                          env=_env(), timeout=120, preexec_fn=limit, capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "out of memory" in proc.stderr and "ulimit -v" in proc.stderr


_ROOM_AFTER_LOADING = r'''
import resource, sys
import collbench.cli.app            # what collbench loads before any command
size = next(int(line.split()[1]) for line in open("/proc/self/status")
            if line.startswith("VmSize:")) * 1024
room = size + int(float(sys.argv[1]) * (1 << 20))
resource.setrlimit(resource.RLIMIT_AS, (room, room))
sys.argv = ["collbench", *sys.argv[2:]]
import collbench.__main__ as entry
# past the check at the start: the room runs out as modules load
entry.has_room = lambda nbytes: True
entry.main()
'''


@pytest.mark.parametrize("room_mib", [0.05, 0.1, 0.2, 0.3, 0.5, 2])
def test_an_address_space_that_runs_out_as_a_command_loads_its_modules_is_one_line(files, room_mib):
    """CI ran out of room at a module the command loads when it runs (the dynamic loader "failed
    to map segment": an ImportError and its traceback; with less room, hashlib's own logged
    errors). Wherever the room runs out: one line, exit 2."""
    proc = subprocess.run([sys.executable, "-c", _ROOM_AFTER_LOADING, str(room_mib), "allreduce",
                           *RUN], cwd=files,
                          env=_env(), timeout=120, capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    assert (proc.returncode == 2 and len(lines) == 1
            and lines[0].startswith("collbench: error:")), proc.stderr
    assert "ulimit -v" in lines[0], proc.stderr


@pytest.mark.parametrize("kib", [40000, 80000, 100000, 120000, 140000, 200000])
def test_any_ulimit_v_too_low_to_run_is_one_line_and_exit_2(tmp_path, kib):
    """From 80 to 120 MB numpy's OpenBLAS ended the run with "Memory allocation still failed after
    10 retries, giving up." and exit 1; from 200 MB a rank "needed about 215 bytes more address
    space". Wherever the limit falls, one line that names it, and exit 2."""
    proc = subprocess.run(["bash", "-c", f"ulimit -v {kib}; exec {sys.executable} -m collbench "
                                         f"allreduce {' '.join(RUN)}"],
                          cwd=tmp_path, env=_env(), timeout=120, capture_output=True, text=True)
    said = [line for line in proc.stderr.splitlines() if line.strip()]
    assert (proc.returncode == 2 and len(said) == 1
            and said[0].startswith("collbench: ")), proc.stderr
    assert ("ulimit -v" in said[0] and "OpenBLAS" not in proc.stderr
            and "bytes more" not in said[0]), said[0]


def test_numpy_gets_one_blas_thread_unless_the_user_chose(monkeypatch):
    from collbench.__main__ import _one_blas_thread

    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    _one_blas_thread()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    _one_blas_thread()
    assert "OPENBLAS_NUM_THREADS" not in os.environ


def test_a_broken_pipe_is_not_a_verdict(files):
    """`collbench compare … | head -1` under pipefail: the verdict decides the exit code (3:
    this file against itself decides too few rows; 0 where asked to pass it)."""
    for args, code in ((["compare", "good.json", "good.json"], _verdict_code(files)),
                       (["compare", "good.json", "good.json", "-f", "json"], _verdict_code(files)),
                       (["compare", "good.json", "good.json", "--min-decided", "0%"], 0),
                       (["report", "good.json"], 0)):
        proc = subprocess.Popen([sys.executable, "-m", "collbench", *args], cwd=files, env=_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.readline()
        proc.stdout.close()                 # head -1 has what it wanted
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == code, err.decode()
        assert b"Traceback" not in err and b"BrokenPipe" not in err


# --- disks that fill up ---------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (root only), filled by the test to what it needs."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs",
                       str(mount)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)])


def _fill(mount: Path, leave: int) -> None:
    (mount / "filler").write_bytes(b"")
    with open(mount / "filler", "wb") as fh:
        try:
            while os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize > leave:
                fh.write(b"\0" * 4096)
                fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_a_full_disk_at_the_start_leaves_nothing(small_disk, files):
    _fill(small_disk, 0)
    for args in (["allreduce", "-n", "2", "--sizes", "8", "--iters", "3", "--rounds", "1", "-o",
                  str(small_disk / "r.json"), "-o", str(small_disk / "r.csv")],
                 ["allreduce", "-n", "2", "--sizes", "8", "--iters", "3", "--rounds", "1",
                  "--results-dir",
                  str(small_disk)],
                 ["plot", "good.json", "-o", str(small_disk / "p.png")],
                 ["merge", "good.json", "good2.json", "-o", str(small_disk / "m.json")]):
        proc = _run(args, files)
        assert proc.returncode == 2, proc.stderr
        line = _one_line(proc.stderr)
        assert "No space left on device" in line and str(small_disk) in line
        assert sorted(p.name for p in small_disk.iterdir()) == ["filler"], "nothing left behind"


def test_a_disk_that_fills_up_mid_run_is_one_line_and_keeps_what_was_written(small_disk, tmp_path):
    _fill(small_disk, 24 * 1024)
    out = small_disk / "r.json"
    proc = _run(["allreduce", "-n", "2", "--sizes", "8-1M", "--iters", "100", "--rounds", "1",
                 "--no-shuffle",
                 "-o", str(out)], tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc.stderr)
    rows = json.loads(out.read_text())["rows"]
    assert f"cannot write {out}: No space left on device; it keeps the {len(rows)} row(s)" in line
    assert 0 < len(rows) < 18
    assert "wrote" not in proc.stderr
    assert (sorted(p.name for p in small_disk.iterdir())
            == ["filler", "r.json"]), "no temporary file left"


# --- signals and kills ----------------------------------------------------------------------

def test_an_interrupted_write_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "big.json"
    failed = []

    def write():
        try:
            paths.write_atomic(target, "x" * (400 << 20))
        except OSError as exc:
            failed.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    deadline = time.monotonic() + 10
    while not list(tmp_path.glob(".big.json.*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.001)
    paths.remove_partial()            # what the signal thread does while the main thread writes
    writer.join()
    assert failed and not target.exists()
    assert not list(tmp_path.glob(".*.tmp"))


def _pty_run(args, cwd, env, after_rows: Path):
    """Run collbench on a pseudo-terminal of its own, as from a shell, and press Ctrl-C there
    once ``after_rows`` holds a row: the terminal sends SIGINT to the whole foreground group."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "collbench", *args], cwd=cwd, env=env,
                            stdin=secondary,
                            stdout=secondary, stderr=secondary, start_new_session=True,
                            preexec_fn=lambda: (__import__("fcntl")
                                                .ioctl(0, __import__("termios").TIOCSCTTY, 0)))
    os.close(secondary)
    seen = b""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        ready, _, _ = select.select([primary], [], [], 0.2)
        if ready:
            try:
                seen += os.read(primary, 65536)
            except OSError:
                break
        try:
            if json.loads(after_rows.read_text())["rows"]:
                break
        except (OSError, ValueError, KeyError):
            pass
    time.sleep(0.5)
    os.write(primary, b"\x03")                # Ctrl-C
    seen += read_rest(primary, proc, timeout=120)
    proc.wait(timeout=60)
    os.close(primary)
    return proc.returncode, seen.decode(errors="replace")


@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_ctrl_c_on_a_terminal_ends_with_collbench_own_line(tmp_path, backend):
    out = tmp_path / "r.json"
    code, screen = _pty_run(["allreduce", "-n", "2", "--backend", backend, "--sizes", "8-64M",
                             "--iters", "200",
                             "--rounds", "1", "-o", str(out)], tmp_path, _env({"TERM": "dumb"}),
                            out)
    assert code == 130, screen
    lines = [line.strip() for line in screen.replace("\r", "\n").splitlines()
             if "collbench:" in line]
    assert len(lines) == 1, screen
    flat = " ".join(screen.split())         # on a terminal the line wraps between words
    assert f"interrupted by SIGINT; {out} keeps every size finished before" in flat
    for noise in ("Press Ctrl-C again", "Ctrl-C caught", "BAD TERMINATION", "Traceback",
                  "Assertion"):
        assert noise not in screen
    assert json.loads(out.read_text())["rows"]
    assert not list(tmp_path.glob(".*.tmp"))


def _private_tmp(tmp_path: Path) -> Path:
    """A TMPDIR of the test's own, where the run's journal and state folders go."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    return folder


def test_backend_all_without_a_loadable_mpi_library_skips_mpi_in_one_line(tmp_path):
    pytest.importorskip("torch")
    proc = _run(["bcast", "--backend", "all", *RUN], tmp_path,
                {"MPI4PY_LIBMPI": "/nonexistent/libmpi.so"})
    assert proc.returncode == 0, proc.stderr
    mpi_lines = [line for line in proc.stderr.splitlines() if "mpi" in line.split(":")[1]]
    assert (len(mpi_lines) == 1
            and "skipping backends mpi, mpi-pickle: no MPI library could be loaded" in mpi_lines[0])
    assert "gloo" in proc.stdout


@pytest.mark.parametrize("launch", ["self", "mpiexec"])
def test_a_rank_that_fails_before_mpi_starts_does_not_leave_the_others_waiting(
        tmp_path, plugin_env, launch):
    """One node lacks a library: its rank stops before MPI_Init, where the other ranks wait
    for it (holding the interpreter, so their own watchdog cannot run)."""
    from collbench.launch.self_launch.mpiexec import find_mpiexec, mpiexec_command

    args = ["allreduce", "--backend", "unusable-on-one-rank", "--sizes", "8", *FAST, "--no-save"]
    env = _env({**plugin_env, "FAULTY_UNUSABLE_ON": "2"})
    if launch == "self":
        cmd = [sys.executable, "-m", "collbench", *args, "-n", "3"]
    else:
        mpiexec = find_mpiexec()
        if mpiexec is None:
            pytest.skip("no mpiexec")
        cmd = mpiexec_command(mpiexec, 3, [sys.executable, "-m", "collbench", *args], env)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr
    assert took < 30, took
    lines = [line for line in proc.stderr.splitlines() if line.startswith("collbench:")]
    assert lines == ["collbench: error: backend unusable-on-one-rank is not usable: its library is "
                     "missing on this node (rank 2)"], proc.stderr


def _rank_process(marker: str, rank: int, variable: str) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ours = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if (marker.encode() in (entry / "cmdline").read_bytes()
                        and f"{variable}={rank}".encode()
                        in (entry / "environ").read_bytes().split(b"\0")):
                    ours.add(int(entry.name))
            except OSError:
                continue
        for pid in ours:
            try:
                if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) in ours:
                    return pid
            except (OSError, ValueError, IndexError):
                continue
        time.sleep(0.3)
    raise AssertionError(f"rank {rank} never started")


def test_rank_0_killed_outright_under_mpiexec_its_files_are_rebuilt_from_the_journal(tmp_path):
    """Neither a signal handler nor a final write: the guardian rebuilds the files from the
    journal, removes temporary files of the interrupted write, and the journal goes."""
    from collbench.launch.self_launch.mpiexec import find_mpiexec, mpiexec_command

    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    out = tmp_path / "r.json"
    marker = f"{tmp_path}/marker"
    private = _private_tmp(tmp_path)
    env = _env({"TMPDIR": str(private)})
    cmd = mpiexec_command(mpiexec, 2,
                          [sys.executable, "-m", "collbench", "allreduce", "--sizes", "8,16,1M",
                                       "--iters", "60000", "--warmup", "0", "--rounds", "1",
                           "--no-shuffle",
                                       "--timeout", "0", "-o", str(out), "--results-dir", marker],
                          env)
    job = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for_rows(out)
        stale = tmp_path / ".r.json.interrupted.tmp"
        stale.write_text("half a file")            # as a write cut short by the kill would leave
        os.kill(_rank_process(marker, 0, "PMI_RANK"), signal.SIGKILL)
        _, err = job.communicate(timeout=60)
    finally:
        job.kill()
    assert job.returncode != 0
    rows = json.loads(out.read_text())["rows"]
    assert rows and rows[0]["size_bytes"] == 8
    assert not list(tmp_path.glob(".*.tmp")), "temporary files of the cut write are gone"
    assert not list(private.iterdir()), "the journal of the run is gone once the files are rebuilt"
    assert "Traceback" not in err


def _processes_naming(text: str) -> list:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("killed", ["parent", "whole job"])
def test_the_state_of_a_self_launched_run_goes_with_its_killed_parent(tmp_path, killed):
    """Killed alone, the self-launching process leaves its ranks and guardians to end; killed with
    all of them at once (as when mpiexec's clean-up SIGKILLs the guardians before they act), it
    leaves nobody in the job to finish its files. Its stand-in does, either way."""
    out = tmp_path / "r.json"
    private = _private_tmp(tmp_path)
    job = subprocess.Popen([sys.executable, "-m", "collbench", "allreduce", "-n", "2", "--sizes",
                            "8,1M", "--iters",
                            "60000", "--warmup", "0", "--rounds", "2", "--no-shuffle", "--timeout",
                            "0", "-o",
                            str(out)], cwd=tmp_path, env=_env({"TMPDIR": str(private)}),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_rows(out)
        if killed == "whole job":           # stopped first, none of them can act on another's death
            job.send_signal(signal.SIGSTOP)
            everyone = _processes_naming(str(out))
            for how in (signal.SIGSTOP, signal.SIGKILL):
                for pid in everyone:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, how)
        job.kill()
        job.wait(timeout=10)
        deadline = time.monotonic() + 30
        while ((list(private.iterdir()) or _processes_naming(str(private)))
               and time.monotonic() < deadline):
            time.sleep(0.2)
    finally:
        job.kill()
        for pid in _processes_naming(str(out)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert not list(private.iterdir()), "no state folder left behind"
    assert not _processes_naming(str(private)), "the stand-in ends once the folder is gone"
    assert json.loads(out.read_text())["rows"]


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_what_mpi_prints_as_it_starts_never_reaches_the_results_on_stdout(files, fmt):
    """UCX writes its warnings on stdout: `UCX_NET_DEVICES=bogus0 ... -q -f json > x.json` exited 0
    and x.json began with "[…] UCX WARN network device 'bogus0' is not available"."""
    proc = _run(["allreduce", "-n", "2", "--sizes", "8,1K", "--rounds", "1", "--no-save", "-q",
                 "-f", fmt], files,
                {"UCX_NET_DEVICES": "bogus0"})
    assert proc.returncode == 0, proc.stderr
    assert "UCX  WARN" not in proc.stdout and "UCX  WARN" in proc.stderr and "bogus0" in proc.stderr
    if fmt == "json":
        assert json.loads(proc.stdout)["rows"]
    else:
        assert proc.stdout.splitlines()[0].startswith(("collective", "#"))


def test_what_mpi_prints_as_it_ends_never_follows_the_results_on_stdout(files):
    """UCX_LOG_LEVEL=debug: about 490 lines that UCX writes on stdout in MPI_Finalize followed the
    JSON document, which no longer parsed (this stop's adversarial pass, 3 of 3)."""
    proc = _run(["allreduce", "-n", "2", "--sizes", "8", "--iters", "3", "--rounds", "1",
                 "--no-save", "-q", "-f", "json"], files, {"UCX_LOG_LEVEL": "debug"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["rows"] and "UCX  DEBUG" in proc.stderr


def test_mpiexecs_debug_output_never_reaches_a_document_on_stdout(files):
    """HYDRA_DEBUG=1: the mpiexec that collbench starts printed its debug dump ("host: vm",
    "mpiexec options: ...") on stdout, where `-f json` went (an adversarial pass, 2 of 2). A run
    refuses it in one line; ab's sides print nothing on stdout, so their mpiexec's goes to
    stderr, and ab's own document parses."""
    proc = _run(["allreduce", "-n", "2", "--sizes", "8", "--rounds", "1", "--no-save", "-q",
                 "-f", "json"], files, {"HYDRA_DEBUG": "1"})
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    assert proc.stderr == ("collbench: error: HYDRA_DEBUG=1 makes the mpiexec collbench starts "
                           "print its debug output on standard output, where -f json goes; unset "
                           "HYDRA_DEBUG, or write the document to a file (-o results.json)\n")
    proc = _run(["ab", "-o", "h", "-f", "json", "--", "allreduce", "-n", "2", "--sizes", "8",
                 "--iters", "3", "--rounds", "2"], files, {"HYDRA_DEBUG": "1"})
    assert proc.returncode in (0, 3) and "mpiexec options:" in proc.stderr, proc.stderr[-2000:]
    assert json.loads(proc.stdout)


def test_two_runs_writing_one_file_at_once_the_second_is_refused(files, tmp_path):
    """Both exited 0 and said "wrote same.json", which held one run; with -o s.json -o s.csv
    against -o s.csv, the JSON and the CSV came from different runs."""
    first = subprocess.Popen([sys.executable, "-m", "collbench", "allreduce", "-n", "2", "--sizes",
                              "8-1M", "--rounds",
                              "3", "-o", "s.json", "-o", "s.csv", "--force", "-q"], cwd=tmp_path,
                             env=_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / ".s.csv.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = _run(["allreduce", "-n", "2", "--sizes", "8", "--rounds", "1", "-o", "s.csv",
                       "--force", "-q"],
                      tmp_path)
        assert second.returncode == 2, second.stderr
        line = _one_line(second.stderr)
        assert f"'s.csv' is being written by another collbench run (pid {first.pid})" in line, line
    finally:
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    from collbench.results.loader import load_result

    both = [load_result(tmp_path / name) for name in ("s.json", "s.csv")]       # one run's, whole
    assert (both[0].metadata["run_id"] == both[1].metadata["run_id"]
            and len(both[0].rows) == len(both[1].rows) == 18)
    assert not list(tmp_path.glob(".*.lock"))


def test_collbenchs_own_line_in_a_start_up_file_is_not_the_librarys_words(tmp_path):
    """A rank interrupted while MPI started says so into the file that keeps the library's output;
    the guardian then named it as MPI's words ("could not start its MPI library (MPI's start-up
    said 'collbench: interrupted by SIGTERM; …')", seen once in an adversarial pass)."""
    from collbench.launch import notes

    path = tmp_path / "startup"
    path.write_text("collbench: interrupted by SIGTERM; s.json keeps round 1\n")
    assert notes.startup_words(str(path)) == ""
    path.write_text("[1] UCX  ERROR no usable transports/devices\ncollbench: interrupted by "
                    "SIGTERM\n")
    assert notes.startup_words(str(path)) == "UCX: no usable transports/devices"


def test_start_up_files_of_guardians_that_are_gone_are_removed(monkeypatch, tmp_path):
    """Under a user's launcher a guardian that the launcher killed left its empty
    collbench-startup-PID file in the temporary folder (126 on this machine after a day of
    tests); the next guardian removes those whose process is gone, and no other."""
    import tempfile
    from collbench.launch import notes

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = 4194305                 # above the kernel's largest pid (2**22): never a live process
    (tmp_path / f"collbench-startup-{gone}").write_text("")
    (tmp_path / f"collbench-startup-{os.getpid()}").write_text("")
    (tmp_path / "collbench-startup-x").write_text("")
    notes.remove_stale_startup_outputs()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"collbench-startup-{os.getpid()}",
                                                          "collbench-startup-x"]


def test_a_file_size_limit_too_low_for_mpiexecs_own_processes_is_exit_2(files):
    """ulimit -f 1: mpiexec's proxy died in start-up and the job ended 137, a lost rank's code,
    though the line named the limit. A limit that low is the environment's fault: exit 2."""
    proc = _run(["allreduce", *RUN], files, {}, preexec_fn=_limited(size_kib=1))
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc.stderr)
    assert "ulimit -f is 1 KiB" in line, line


@pytest.mark.parametrize("error, said, limits, printable, room, ends", [
    # the line said, then the exit itself ran out of room
    (SystemError, True, "", True, True, True),
    (SystemError, False, " (ulimit -v is 1000 KiB)", True, True, True),
    # no room to wrap the line: said as it is
    (SystemError, False, " (ulimit -v is 1000 KiB)", False, True, True),
    (SystemError, False, "", True, False, False),   # no limit explains it: a bug, its traceback
    # the compiler, out of room, says what it says; with room left the same error is a bug
    (ValueError, False, " (ulimit -v is 1000 KiB)", True, False, True),
    (ValueError, False, " (ulimit -v is 1000 KiB)", True, True, False),
])
def test_an_error_for_want_of_room_at_the_edge_is_the_memory_line_and_exit_2(
        monkeypatch, capfd, error, said, limits, printable, room, ends):
    """Whole runs of the address-space test twice printed a traceback: CPython's exit, or the
    out-of-memory line itself (wrapping it loads a module), ran out of room where the command
    line's handlers no longer reach (SystemError: error return without exception set)."""
    import collbench.__main__ as entry
    from collbench.cli import app

    def run(argv):
        if said:
            app._said_out_of_memory.append(True)
        raise error("error return without exception set")

    def no_room(*args, **kwargs):
        raise SystemError("error return without exception set")

    ended = []

    def exit_now(code):
        ended.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(app, "main", run)
    monkeypatch.setattr(app, "_said_out_of_memory", [])
    monkeypatch.setattr(app, "_low_limits", lambda: limits)
    monkeypatch.setattr(app, "has_room", lambda nbytes: room)
    if not printable:
        monkeypatch.setattr(app, "print", no_room, raising=False)
    monkeypatch.setattr(entry, "interrupt_on_signals", lambda: None)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setattr(os, "_exit", exit_now)
    with pytest.raises(SystemExit if ends else error):
        entry.main([])
    assert ended == ([2] if ends else [])
    said_now = capfd.readouterr().err
    assert said_now == ("" if said or not ends else
                        f"collbench: error: out of memory{limits}\n")
