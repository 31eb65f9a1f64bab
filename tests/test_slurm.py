"""collbench under a real Slurm: srun with each MPI plugin, sbatch and salloc, faults, two nodes.

The tests start their own cluster (``slurm_helpers``): munged, slurmctld and a slurmd on this
machine, with ``MpiDefault=none`` as Slurm ships it; the two-node case puts a slurmd in each of
two network namespaces (the hosts of tests/test_multihost.py). Skipped with the reason where the
Slurm packages are not installed or the tests do not run as root; the checks of the launcher's
lines that need no Slurm run everywhere.
"""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from collbench.errors import SharedUsageError
from collbench.launch.origin import pmi
from collbench.launch.liveness.coordinator import Coordinator, _Peer
from collbench.launch.origin.launcher import detect
from collbench.launch.origin.pmi import mpi_start_problem, world_mismatch
from results_helpers import wait_for_rows
from slurm_helpers import Cluster, Munge, Node, local_node, srun_mpi_plugins, why_not

WHY_NOT = why_not()
QUICK = ["--iters", "20", "--warmup", "1", "--rounds", "1", "--no-shuffle", "--timeout", "60"]
COLLBENCH = [sys.executable, "-m", "collbench"]


def _lines(stderr: str) -> list:
    return [line for line in stderr.splitlines() if line.startswith("collbench:")]


@pytest.fixture(scope="module")
def munge():
    """Every test that needs Slurm needs this: it skips them where Slurm cannot run."""
    if WHY_NOT:
        pytest.skip(WHY_NOT)
    m = Munge()
    try:
        m.start()
        yield m
    finally:
        m.stop()


@pytest.fixture(scope="module")
def cluster(munge, tmp_path_factory):
    """One node, this machine; nothing of it left running afterwards."""
    c = Cluster(tmp_path_factory.mktemp("slurm"), [local_node()], munge)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        assert not c.leftovers(), "processes of the cluster left running"


def _srun(cluster, args: list, *, cwd, timeout: float = 240, env=None,
          node=None) -> subprocess.CompletedProcess:
    return subprocess.run(cluster.client(["srun", *args], node), cwd=cwd,
                          env={**cluster.env, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("how", ["--mpi=pmi2", "SLURM_MPI_TYPE=pmi2"])
def test_srun_with_pmi2_runs_every_rank_and_writes_their_rows(cluster, tmp_path, how):
    pytest.importorskip("mpi4py")
    option, env = ([how], {}) if how.startswith("--") else ([], dict([how.split("=")]))
    out = tmp_path / "r.json"
    proc = _srun(cluster, [*option, "-n", "2", *COLLBENCH, "allreduce", "--sizes", "8-1K", *QUICK,
                           "-o", out],
                 cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["metadata"]["launcher"] == "srun"
    assert len(doc["metadata"]["rank_hosts"]) == 2
    assert [r["size_bytes"] for r in doc["rows"]] == [8 << i for i in range(8)]
    for row in doc["rows"]:
        assert row["world_size"] == 2 and row["check"] == "ok"
        assert len(row["round_details"][0]["rank_means_us"]) == 2      # both ranks measured
    assert not cluster.wait_for_no_jobs()


@pytest.mark.parametrize("plugin", [["--mpi=none"], []], ids=["--mpi=none", "MpiDefault=none"])
def test_srun_without_an_mpi_plugin_says_once_to_use_pmi2(cluster, tmp_path, plugin):
    """Each task's MPI is a world of its own: one line from rank 0, exit 2, no MPI_Abort."""
    pytest.importorskip("mpi4py")
    proc = _srun(cluster, [*plugin, "-n", "2", *COLLBENCH, "alltoall", "--sizes", "8-1K", *QUICK],
                 cwd=tmp_path)
    lines = _lines(proc.stderr)
    print(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert "srun started 2 tasks, but MPI sees each one alone" in lines[0]
    assert "srun --mpi=pmi2" in lines[0] and "SLURM_MPI_TYPE=pmi2" in lines[0]
    assert "Abort" not in proc.stderr and "left over" not in proc.stderr
    assert not (tmp_path / "results").exists()


def _pmix_usable(cluster, cwd) -> str:
    """Why srun --mpi=pmix cannot be tried here ("" when it can)."""
    if "pmix" not in srun_mpi_plugins(cluster.env):
        return "this srun has no pmix plugin (srun --mpi=list)"
    probe = _srun(cluster, ["--mpi=pmix", "-n", "1", "true"], cwd=cwd, timeout=60)
    if probe.returncode != 0:       # Debian's plugin loads libpmix.so, which libpmix-dev installs
        return f"srun --mpi=pmix does not start here: {probe.stderr.strip().splitlines()[0]}"
    return ""


def test_srun_with_pmix_and_an_mpich_without_pmix_says_to_use_pmi2(cluster, tmp_path):
    """Known before MPI starts: one line from rank 0, exit 2, none of MPICH's abort."""
    pytest.importorskip("mpi4py")
    why = _pmix_usable(cluster, tmp_path)
    if why:
        pytest.skip(why)
    library = pmi.mpi_library_description()
    if not library.startswith("MPICH") or "pmix" in library.lower():
        pytest.skip("the MPI library here is not an MPICH without PMIx")
    proc = _srun(cluster,
                 ["--mpi=pmix", "-n", "2", *COLLBENCH, "alltoall", "--sizes", "8-1K", *QUICK],
                 cwd=tmp_path)
    lines = _lines(proc.stderr)
    print(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert "PMIx plugin (--mpi=pmix)" in lines[0] and "built without PMIx" in lines[0]
    assert "srun --mpi=pmi2" in lines[0]
    assert "unsupported PMI version" not in proc.stderr and "keep" not in proc.stderr


def test_srun_on_a_terminal_fits_its_tables_and_wraps_its_lines(cluster, tmp_path):
    """The tasks descend from slurmstepd, not srun: srun is found by the port the tasks report
    to, and its terminal's width counts, as mpiexec's does; into a file, every column stays."""
    pytest.importorskip("pyte")
    from test_terminal import _on_terminal

    srun = " ".join(cluster.client(["srun"]))
    conf = f"SLURM_CONF={cluster.env['SLURM_CONF']}"
    code, lines, _ = _on_terminal([], tmp_path,
                                  command=f"{conf} {srun} --mpi=pmi2 -n 2 {sys.executable} -m "
                                          "collbench allreduce --sizes 8-4K --rounds 2")
    text = "\n".join(lines)
    assert code == 0 and not [line for line in lines if len(line) > 80], text
    assert "not shown at 80 columns" in text
    code, lines, _ = _on_terminal([], tmp_path,
                                  command=f"{conf} {srun} -n 2 {sys.executable} -m collbench "
                                                         "alltoall --sizes 8-1K")
    text = "\n".join(lines)
    assert (code == 2 and not [line for line in lines if len(line) > 80]
            and "srun --mpi=pmi2" in text), text
    code, _, _ = _on_terminal([], tmp_path, command=f"{conf} {srun} --mpi=pmi2 -n 2 "
                                                    f"{sys.executable} -m collbench allreduce "
                                                    "--sizes 8-1K --rounds 2 > out.txt")
    written = (tmp_path / "out.txt").read_text()
    assert code == 0 and "\x1b" not in written and "max µs" in written


@pytest.mark.parametrize("how", ["sbatch", "salloc"])
def test_sbatch_and_salloc_run_srun_with_pmi2(cluster, tmp_path, how):
    """What docs/slurm.md shows: a batch script and an allocation, each with srun --mpi=pmi2."""
    pytest.importorskip("mpi4py")
    out = tmp_path / "r.json"
    step = " ".join(["srun", "--mpi=pmi2", *COLLBENCH, "allreduce", "--sizes", "8-64", *QUICK, "-o",
                     str(out)])
    if how == "sbatch":
        script = tmp_path / "job.sh"
        script.write_text(f"#!/bin/bash\n#SBATCH -n 2\n#SBATCH -o {tmp_path}/job.out\n{step}\n")
        argv = ["sbatch", "--wait", str(script)]
    else:
        argv = ["salloc", "-n", "2", "bash", "-c", step]
    proc = subprocess.run(cluster.client(argv), cwd=tmp_path, env=cluster.env, capture_output=True,
                          text=True, timeout=240)
    job_out = tmp_path / "job.out"
    assert proc.returncode == 0, proc.stderr + (job_out.read_text() if job_out.exists() else "")
    doc = json.loads(out.read_text())
    assert doc["metadata"]["launcher"] == "srun" and len(doc["metadata"]["rank_hosts"]) == 2
    assert {r["check"] for r in doc["rows"]} == {"ok"}


def test_a_shared_memory_file_left_by_a_job_of_the_same_number_is_named_before_mpi_hangs(
        cluster, tmp_path):
    """MPICH names its shared memory after the Slurm job and step: a segment an earlier job of
    the same number left behind (as a killed one does) would make MPI_Init wait forever. One
    line names it, exit 2, at once."""
    pytest.importorskip("mpi4py")
    granted = cluster.run_client(["salloc", "-n", "2", "--no-shell"])
    job = next(word for word in granted.stderr.split() if word.isdigit())
    stale = pmi.SHARED_MEMORY / f"mpich_shm_{pmi.fnv1a(f'{job}.0'):x}_0"
    stale.write_bytes(bytes(4096))
    an_hour_ago = time.time() - 3600
    os.utime(stale, (an_hour_ago, an_hour_ago))
    try:
        proc = _srun(cluster, [f"--jobid={job}", "--mpi=pmi2", "-n", "2", *COLLBENCH, "allreduce",
                               "--sizes", "8",
                               *QUICK, "--no-save"], cwd=tmp_path, timeout=120)
    finally:
        stale.unlink(missing_ok=True)
        cluster.run_client(["scancel", job])
    lines = _lines(proc.stderr)
    print(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert f"{stale}, from " in lines[0] and f"Slurm job step {job}.0" in lines[0]
    assert f"rm /dev/shm/mpich_*_{pmi.fnv1a(f'{job}.0'):x}_*" in lines[0]


def _long() -> list:
    """A quick first size, then one that lasts: the file holds a row when the fault comes."""
    return ["allreduce", "--sizes", "8,16M", "--iters", "500", "--warmup", "0", "--rounds", "1",
            "--timeout", "0",
            "--no-shuffle"]




def _rank_process(cluster, rank: int) -> int:
    """The pid of the rank itself (not its guardian, whose child it is) with SLURM_PROCID
    ``rank``."""
    ours = set(cluster.leftovers())
    for pid in ours:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if (f"SLURM_PROCID={rank}".encode() in environ and argv[1:3] == [b"-m", b"collbench"]
                and parent in ours):
            parent_argv = Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0")
            if parent_argv[1:3] == [b"-m", b"collbench"]:
                return pid
    raise AssertionError(f"rank {rank} is not running")


@pytest.mark.parametrize("fault", ["scancel", "kill a rank"])
def test_a_job_ended_by_slurm_or_by_a_killed_rank_keeps_its_files(cluster, tmp_path, fault):
    """scancel: every rank ends on SIGTERM (143); a rank killed outright: the job ends with 137,
    one line naming it. Either way the file keeps the size finished before, and nothing is left."""
    pytest.importorskip("mpi4py")
    out = tmp_path / "r.json"
    job = subprocess.Popen(cluster.client(["srun", "--mpi=pmi2", "-n", "2", *COLLBENCH, *_long(),
                                           "-o", str(out)]),
                           cwd=tmp_path, env=cluster.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for_rows(out, 120, job=job)
        if fault == "scancel":
            cluster.run_client(["scancel", "--user", "root"])
        else:
            os.kill(_rank_process(cluster, 1), signal.SIGKILL)
        _, stderr = job.communicate(timeout=120)
    finally:
        job.kill()
    lines = _lines(stderr)
    print(stderr)
    assert len(lines) == 1, stderr
    if fault == "scancel":
        assert job.returncode == 143, stderr
        assert "interrupted by SIGTERM" in lines[0]
    else:
        assert job.returncode == 137, stderr
        assert "rank 1" in lines[0] and "killed by signal 9" in lines[0] and "16M" in lines[0]
    assert "r.json keeps" in lines[0]
    assert json.loads(out.read_text())["rows"], "the size finished before is kept"
    assert not cluster.wait_for_no_jobs()


FAILING_MPI4PY = "import os, sys\nsys.stderr.write('mpi4py: cannot load\\n')\nos._exit(16)\n"


def test_a_rank_that_fails_in_start_up_says_the_others_wait_and_claims_no_files(cluster, tmp_path):
    """Rank 1 dies as it loads MPI (an mpi4py of its own that exits 16), rank 0 waits for it in
    MPI's start-up: the line says so, and claims no result file. srun --kill-on-bad-exit ends
    the step at once (without it rank 0 would wait for its start-up limit)."""
    pytest.importorskip("mpi4py")
    broken = tmp_path / "broken" / "mpi4py"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(FAILING_MPI4PY)
    command = " ".join([*COLLBENCH, "allreduce", "--sizes", "8", *QUICK, "-o",
                        str(tmp_path / "r.json")])
    step = f'if [ "$SLURM_PROCID" = 1 ]; then export PYTHONPATH={broken.parent}; fi; exec {command}'
    proc = _srun(cluster, ["--mpi=pmi2", "--kill-on-bad-exit", "-n", "2", "bash", "-c", step],
                 cwd=tmp_path)
    lines = _lines(proc.stderr)
    print(proc.stderr)
    assert proc.returncode != 0
    assert len(lines) == 1, proc.stderr
    assert "rank 1" in lines[0] and "exited with code 16 (MPI's start-up said '" in lines[0] \
        and ") during start-up" in lines[0]
    assert "the other ranks cannot be told" in lines[0] and "--kill-on-bad-exit" in lines[0]
    assert "keep" not in lines[0]
    assert not (tmp_path / "r.json").exists()


# Two nodes: a slurmd in each of two network namespaces.

SUBNET = "192.168.233"
#: A node sees its own network devices in /sys, as a host does (MPI's UCX looks for them there,
#: and ``nsenter --net`` alone leaves the machine's), and keeps the cgroup tree slurmd needs
#: (``ip netns exec``'s new /sys hides it).
OWN_SYS = ('mkdir -p "$2/cgroup" && mount --rbind /sys/fs/cgroup "$2/cgroup" && mount -t sysfs '
           'sysfs /sys && mount --move "$2/cgroup" /sys/fs/cgroup && ')


@pytest.fixture
def two_nodes(munge, tmp_path):
    """node1 (slurmctld, a slurmd, where srun runs) and node2 (a slurmd), joined by a veth pair
    as the hosts of tests/test_multihost.py are, each with its host name, /etc/hosts, boot id and
    /sys (``OWN_SYS``), entered with ``nsenter --net``. The cluster, then the hosts with whatever
    runs on them, are torn down afterwards."""
    multihost = pytest.importorskip("test_multihost")
    if multihost._WHY_NOT or not shutil.which("nsenter"):
        pytest.skip(multihost._WHY_NOT or "needs nsenter")
    prefix = f"cbsl-{secrets.token_hex(3)}"
    made, cluster, left, root = [], None, [], None
    try:
        for i in (1, 2):
            netns = f"{prefix}-{i}"
            subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True)
            made.append(multihost.Host(f"node{i}", netns, f"{prefix}-v", f"{SUBNET}.{i}",
                                       tmp_path / f"node{i}"))
        a, b = made
        subprocess.run(["ip", "link", "add", a.iface, "netns", a.netns, "type", "veth", "peer",
                        "name", b.iface,
                        "netns", b.netns], check=True, capture_output=True)
        for h in made:
            for argv in (["addr", "add", f"{h.address}/24", "dev", h.iface],
                         ["link", "set", "lo", "up"],
                         ["link", "set", h.iface, "up"]):
                subprocess.run(["ip", "-n", h.netns, *argv], check=True, capture_output=True)
            h.etc.mkdir()
            (h.etc / "hosts").write_text("127.0.0.1 localhost\n"
                                         + "".join(f"{o.address} {o.name}\n" for o in made))
            (h.etc / "boot_id").write_text(f"{uuid.uuid4()}\n")
        multihost._wait_linked(a, b)
        nodes = [Node(h.name, h.address, ["nsenter", f"--net=/run/netns/{h.netns}", "unshare",
                                          "--uts", "--mount", "sh",
                                          "-c", OWN_SYS + multihost.ENTER, "enter", h.name,
                                          str(h.etc)])
                 for h in made]
        # slurmstepd's PMI socket lives under the spool folder, and a Unix socket's path holds
        # 108 bytes: under tmp_path it was 102 (112 under pytest-xdist's longer folders)
        root = Path(tempfile.mkdtemp(prefix="cbsl-"))
        cluster = Cluster(root, nodes, munge)
        cluster.start()
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
            left = cluster.leftovers()
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
        multihost._tear_down(made)
    assert not left, "processes of the cluster left running"


def test_srun_across_two_nodes_runs_a_rank_on_each(two_nodes, tmp_path):
    pytest.importorskip("mpi4py")
    out = tmp_path / "r.json"
    proc = _srun(two_nodes, ["--mpi=pmi2", "-N", "2", "-n", "2", *COLLBENCH, "allreduce", "--sizes",
                             "8,64K", *QUICK,
                             "-o", out], cwd=tmp_path)
    print(proc.stderr)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["metadata"]["launcher"] == "srun"
    assert doc["metadata"]["rank_hosts"] == ["node1", "node2"]
    assert {(r["size_bytes"], r["check"]) for r in doc["rows"]} == {(8, "ok"), (65536, "ok")}


# The launcher's side, without Slurm.

def test_detect_says_how_mpi_reaches_the_launcher():
    pmi2 = {"PMI_FD": "2", "PMI_RANK": "1", "PMI_SIZE": "2", "SLURM_STEP_ID": "0",
            "SLURM_PROCID": "1",
            "SLURM_STEP_NUM_TASKS": "2"}
    pmix = {"PMIX_RANK": "1", "PMIX_NAMESPACE": "slurm.pmix.5.0", "SLURM_STEP_ID": "0",
            "SLURM_PROCID": "1",
            "SLURM_STEP_NUM_TASKS": "2"}
    none = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"}
    assert [(detect(e).name, detect(e).pmi) for e in (pmi2, pmix, none, {})] == [
        ("srun", "pmi"), ("srun", "pmix"), ("srun", ""), ("none", "")]


def test_a_world_of_one_under_srun_without_a_plugin_is_said_by_rank_0_alone():
    srun = detect({"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "4"})
    error = world_mismatch(srun, 1)
    assert isinstance(error, SharedUsageError) and "srun --mpi=pmi2" in str(error)
    leftover = detect({"PMI_FD": "2", "PMI_RANK": "0", "PMI_SIZE": "4"})
    error = world_mismatch(leftover, 2)
    assert (not isinstance(error, SharedUsageError)
            and "PMI_SIZE=4 says 4 ranks, but 2 started" in str(error))


MPICH = ("MPICH Version:      5.0.2\nMPICH Release date: Fri Sep 25 20:45:26 UTC 2026\n"
         "MPICH ABI:          18:2:6\nMPICH Device:       ch4:ucx ofi\nMPICH configure:    "
         "--with-device=ch4:ucx,ofi --with-pm=hydra:gforker\n")


@pytest.mark.parametrize("library,refused", [
    (MPICH, True),
    (MPICH.replace("--with-pm=hydra:gforker", "--with-pmix=/usr"), False),
    ("Open MPI v5.0.8, package: Open MPI conda@host Distribution, ident: 5.0.8", False),
    ("", False),                 # the library could not be asked: MPI says what it will
])
def test_srun_pmix_is_refused_before_mpi_starts_only_for_an_mpich_without_pmix(
        monkeypatch, library, refused):
    monkeypatch.setattr(pmi, "mpi_library_description", lambda: library)
    srun = detect({"PMIX_RANK": "0", "PMIX_NAMESPACE": "slurm.pmix.5.0", "SLURM_STEP_ID": "0",
                   "SLURM_PROCID": "0",
                   "SLURM_STEP_NUM_TASKS": "2"})
    problem = mpi_start_problem(srun)
    assert bool(problem) == refused
    if refused:
        assert "MPICH 5.0.2, built without PMIx" in problem and "srun --mpi=pmi2" in problem


def test_mpich_names_its_shared_memory_by_the_fnv_hash_of_the_job_step():
    """mpich_shm_14f46f28_0 is what MPICH made for Slurm's PMI job id 7.0."""
    assert f"{pmi.fnv1a('7.0'):x}" == "14f46f28"


def test_only_a_segment_older_than_the_rank_counts_as_left_over(monkeypatch, tmp_path):
    monkeypatch.setattr(pmi, "SHARED_MEMORY", tmp_path)
    # the task started now
    monkeypatch.setattr(pmi.processes, "started_at", lambda pid: time.time())
    srun = detect({"PMI_FD": "2", "PMI_RANK": "0", "PMI_SIZE": "2", "PMI_JOBID": "7.0",
                   "SLURM_STEP_ID": "0"})
    env = {"PMI_JOBID": "7.0"}
    segment = tmp_path / "mpich_shm_14f46f28_0"
    segment.write_bytes(b"")                     # a peer of this step made it just now
    (tmp_path / "mpich_shm_14f46f29_0").write_bytes(b"")
    assert mpi_start_problem(srun, env) is None
    os.utime(segment, (time.time() - 3600, time.time() - 3600))
    problem = mpi_start_problem(srun, env)
    assert problem.startswith(f"{segment}, from ") and "rm " in problem and "\n" not in problem


def test_a_start_up_timeout_names_the_ranks_that_never_joined():
    """rank 0 joined collbench's channel and waits in start-up; ranks 1-2 of 3 never arrived."""
    with socket.socket() as listener, socket.socket() as sock:
        referee = Coordinator(listener, "token", lambda code: None)
        rank0 = _Peer(sock, ("127.0.0.1", 1))
        rank0.rank, rank0.host, rank0.position = 0, "node1", "start-up (joining the other ranks)"
        referee.peers, referee.size = {0: rank0}, 3
        line = referee._timeout_line(rank0, {"what": "start-up", "limit": 120})
    assert line == ("timeout: start-up did not finish within 120 s (--timeout): rank 0 on node1 "
                    "still in start-up (joining the other ranks); ranks 1-2 not joined yet (still "
                    "starting, or never started)")
