"""--init-method env://, tcp://HOST:PORT and file:///PATH for real: gloo ranks self-launched,
under mpiexec (the seed's way: the MPI launcher gives rank and size, -genv/-x the rendezvous)
and under torchrun, on one host and across two (tests/test_multihost.py's network
namespaces); the row records the scheme. What cannot meet is one line, exit 2, and nothing
left running: a file an earlier run left, a folder that is missing or that the ranks do not
share, an address rank 0 cannot listen at or that nobody listens at."""

import os
import socket
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import test_multihost as multihost
from collbench.launch.network.addresses import outward_addresses
from collbench.launch.self_launch.mpiexec import find_mpiexec, mpiexec_command, mpiexec_flavour
from collbench.launch.network.addresses import free_port
from conftest import load_json
from test_adversarial import _env
from test_multihost import hosts  # noqa: F401 (the fixture: two hosts in network namespaces)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

RUN = ["allreduce", "--backend", "gloo", "--sizes", "8,4K", "--iters", "5", "--warmup", "1",
       "--rounds", "1", "-q"]
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent))
needs_torchrun = pytest.mark.skipif(TORCHRUN is None, reason="no torchrun beside this Python")


def _url(scheme: str, folder: Path) -> str:
    return {"env": "env://", "tcp": f"tcp://127.0.0.1:{free_port()}",
            "file": f"file://{folder}/rendezvous"}[scheme]


def _self_launched(args: list, cwd: Path, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "collbench", *args], cwd=cwd, env=_env(env),
                          capture_output=True, text=True, timeout=60)


def _mpiexec(args: list, cwd: Path, export=None) -> subprocess.CompletedProcess:
    """``mpiexec -n 2 collbench ARGS``, exporting ``export`` as a user would (-genv, -x)."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    env = _env()
    cmd = mpiexec_command(mpiexec, 2, [sys.executable, "-m", "collbench", *args], env)
    flags = []
    for name, value in (export or {}).items():
        flags += (["-x", f"{name}={value}"]
                  if mpiexec_flavour(mpiexec) == "openmpi" else ["-genv", name, value])
    cmd[3:3] = flags
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def _torchrun(args: list, cwd: Path, extra_env=None) -> subprocess.CompletedProcess:
    return subprocess.run([TORCHRUN, "--nproc-per-node", "2", "-m", "collbench", *args], cwd=cwd,
                          env=_env(extra_env), capture_output=True, text=True, timeout=60)


def _said(proc) -> list:
    return [line for line in proc.stderr.splitlines() if line.startswith("collbench:")]


def _nothing_left(folder: Path) -> None:
    """No process started in ``folder`` (every rank, launcher and guardian of the run) is alive
    once its proxies have had a moment to go."""
    import time

    deadline = time.monotonic() + 10
    while True:
        left = []
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and os.readlink(f"/proc/{entry}/cwd") == str(folder):
                    with open(f"/proc/{entry}/stat") as fh:
                        if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                            left.append(entry)
            except OSError:
                pass
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, [Path(f"/proc/{pid}/cmdline").read_bytes()[:100] for pid in left]


def _rows_met_by(folder: Path, scheme: str) -> None:
    rows = load_json(folder / "r.json")["rows"]
    assert rows and {r["init_method"] for r in rows} == {f"{scheme}://"}
    assert {r["check"] for r in rows} == {"ok"} and {r["world_size"] for r in rows} == {2}
    assert not list(folder.glob("rendezvous*")), \
        "torch's file, or collbench's mark beside it, is left"


@pytest.mark.parametrize("scheme", ["env", "tcp", "file"])
def test_self_launched(tmp_path, scheme):
    """Two rounds, two launches: torch's file store removes its file when the first one ends."""
    proc = _self_launched([*RUN, "-n", "2", "--rounds", "2", "--init-method",
                           _url(scheme, tmp_path), "-o", "r.json"],
                          tmp_path)
    assert proc.returncode == 0, proc.stderr
    _rows_met_by(tmp_path, scheme)
    _nothing_left(tmp_path)


@pytest.mark.mpi
@pytest.mark.parametrize("scheme", ["env", "tcp", "file"])
def test_under_mpiexec(tmp_path, scheme):
    export = {"MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": str(free_port())} if scheme == "env" else {}
    proc = _mpiexec([*RUN, "--init-method", _url(scheme, tmp_path), "-o", "r.json"], tmp_path,
                    export)
    assert proc.returncode == 0, proc.stderr
    _rows_met_by(tmp_path, scheme)
    _nothing_left(tmp_path)


@needs_torchrun
@pytest.mark.parametrize("scheme", ["env", "tcp", "file"])
def test_under_torchrun(tmp_path, scheme):
    proc = _torchrun([*RUN, "--init-method", _url(scheme, tmp_path), "-o", "r.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    _rows_met_by(tmp_path, scheme)
    _nothing_left(tmp_path)


#: Each rank, once its run has ended well and its backends are closed (``closed``), writes when,
#: and whether the file:// rendezvous is still there.
_AFTER_CLOSED = """
import os, time

if "LOCAL_RANK" in os.environ:         # torchrun's workers, not its agent
    from collbench.backends import _torch

    _remove = _torch.remove_rendezvous_file

    def _seen(control):
        _remove(control)
        with open(os.environ["SEEN_LOG"], "a") as fh:
            fh.write(f"{time.monotonic()} {os.path.exists(os.environ['SEEN_FILE'])}\\n")

    _torch.remove_rendezvous_file = _seen
"""


@needs_torchrun
def test_under_torchrun_the_file_goes_when_the_run_ends(tmp_path):
    """torch removes a file:// store's file when the last rank's store object is destroyed,
    which happened as the interpreters exited, where a thread's frame or the job's abort may
    still hold it: beside two busy loops the file was left twice in about 25 runs. Each rank now
    lets go of its store when the run ends, through ``remove_rendezvous_file``: both ranks pass
    there, and the file is gone when the job has ended. Once the last rank has closed its
    backends the file was gone in 4 of 5 whole-suite runs (before the change, it was still there
    on both ranks every time); the fifth saw it on both, 2.7 ms apart, and not after the job:
    a store still held at close, not explained, so that moment is not asserted."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_AFTER_CLOSED)
    log = tmp_path / "seen.log"
    proc = _torchrun([*RUN, "--init-method", _url("file", tmp_path), "-o", "r.json"], tmp_path,
                     {"PYTHONPATH": os.pathsep.join(filter(None, (str(site),
                                                                  os.environ.get("PYTHONPATH")))),
                      "SEEN_LOG": str(log),
                      "SEEN_FILE": str(tmp_path / "rendezvous")})
    assert proc.returncode == 0, proc.stderr
    seen = sorted((float(when), there)
                  for when, there in map(str.split, log.read_text().splitlines()))
    assert len(seen) == 2, seen
    _rows_met_by(tmp_path, "file")


@pytest.mark.parametrize("launch", ["self", pytest.param("mpiexec", marks=pytest.mark.mpi),
                                    pytest.param("torchrun", marks=needs_torchrun)])
def test_a_file_an_earlier_run_left_is_refused_and_kept(tmp_path, launch):
    stale = tmp_path / "rendezvous"
    stale.write_bytes(b"what a killed run's file store left")
    args = [*RUN, "--no-save", "--init-method", f"file://{stale}"]
    if launch == "self":
        proc = _self_launched([*args, "-n", "2", "-v"], tmp_path)
    else:
        proc = _mpiexec(args, tmp_path) if launch == "mpiexec" else _torchrun(args, tmp_path)
    # torchrun: a rank failed
    assert proc.returncode == (2 if launch != "torchrun" else 1), proc.stderr
    assert _said(proc) == [f"collbench: error: --init-method file://{stale}: {stale} exists on "
                           f"{os.uname().nodename}, left by a run that did not end cleanly "
                           "(torch's file store removes it when every rank ends normally) or in "
                           "use by a run now; remove it if no run uses it, or name another path"], \
        proc.stderr
    if launch == "self":
        assert "launching" not in proc.stderr          # said before any rank started
    # torchrun reports its failed ranks its own way
    if launch != "torchrun":
        assert "Traceback" not in proc.stderr
    assert stale.read_bytes() == b"what a killed run's file store left"
    assert [p.name for p in tmp_path.iterdir()] == ["rendezvous"]
    _nothing_left(tmp_path)


@pytest.mark.parametrize("launch", ["self", pytest.param("mpiexec", marks=pytest.mark.mpi)])
def test_a_missing_folder_is_one_line(tmp_path, launch):
    args = [*RUN, "--no-save", "--init-method", f"file://{tmp_path}/gone/rendezvous"]
    proc = (_self_launched([*args, "-n", "2"], tmp_path)
            if launch == "self" else _mpiexec(args, tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert _said(proc) == [f"collbench: error: --init-method file://{tmp_path}/gone/rendezvous: "
                           f"the folder {tmp_path}/gone does not exist on "
                           f"{os.uname().nodename}"], proc.stderr
    assert "Traceback" not in proc.stderr
    _nothing_left(tmp_path)


@pytest.mark.mpi
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare")
def test_a_folder_the_ranks_do_not_share_is_one_line(tmp_path):
    """Rank 1 sees a folder of its own at the same path (a tmpfs over it, in a mount namespace
    of its own), as a rank on another host sees its own /tmp."""
    mpiexec = find_mpiexec()
    if mpiexec is None or mpiexec_flavour(mpiexec) != "mpich":
        pytest.skip("needs MPICH's mpiexec (its MPMD form)")
    shared = tmp_path / "shared"
    shared.mkdir()
    rank = [sys.executable, "-m", "collbench", *RUN, "--no-save", "--init-method",
            f"file://{shared}/rendezvous"]
    hidden = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
              f'mount -t tmpfs none "{shared}" && exec "$@"', "rank1", *rank]
    proc = subprocess.run([mpiexec, "-n", "1", *rank, ":", "-n", "1", *hidden], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    said = _said(proc)
    assert (len(said) == 1
            and f"is not there on rank 1's host {os.uname().nodename} after 5 s: the ranks do "
                f"not share {shared}; file:// needs a path every host sees" in said[0]), proc.stderr
    assert not list(shared.iterdir())                  # rank 0's mark went with the run
    _nothing_left(tmp_path)


@pytest.mark.parametrize("url,why", [
    ("tcp://127.0.0.1", "no port"), ("tcp://127.0.0.1:70000", "port out of range"),
    ("tcp://collbench-nowhere.invalid:29577", "'collbench-nowhere.invalid' does not resolve"),
    ("file://tmp/rendezvous", "a file:// path starts after the third slash"),
    ("udp://127.0.0.1:1", "give env://")])
def test_a_bad_form_is_one_line_before_any_rank_starts(tmp_path, url, why):
    proc = _self_launched([*RUN, "-n", "2", "-v", "--no-save", "--init-method", url], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert len(_said(proc)) == 1 and why in _said(proc)[0] and url in _said(proc)[0], proc.stderr
    assert "launching" not in proc.stderr


def test_an_address_not_of_rank_0s_host_is_one_line(tmp_path):
    elsewhere = next(a for a in ("198.51.100.7", "203.0.113.7") if a not in outward_addresses())
    proc = _self_launched([*RUN, "-n", "2", "-v", "--no-save", "--init-method",
                           f"tcp://{elsewhere}:29577"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert _said(proc) == [f"collbench: error: --init-method tcp://{elsewhere}:29577: {elsewhere} "
                           f"is not an address of {os.uname().nodename}, rank 0's host, where it "
                           "listens; give one of its addresses (127.0.0.1 when every rank runs "
                           "there)"], proc.stderr
    assert "launching" not in proc.stderr


@pytest.mark.mpi
def test_a_port_taken_on_rank_0s_host_is_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _mpiexec([*RUN, "--no-save", "--init-method", f"tcp://127.0.0.1:{port}"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert _said(proc) == [f"collbench: error: --init-method tcp://127.0.0.1:{port}: rank 0 cannot "
                           f"listen at port {port} on {os.uname().nodename} (address already in "
                           "use); choose a free port"], proc.stderr
    _nothing_left(tmp_path)


def test_a_rank_nobody_listens_for_says_so_naming_the_address(tmp_path):
    """Rank 1 of 2, started by hand (RANK, WORLD_SIZE, MASTER_*), with no rank 0 anywhere."""
    port = free_port()
    proc = _self_launched([*RUN, "--no-save", "--init-method", f"tcp://127.0.0.1:{port}"], tmp_path,
                          env={"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                               "MASTER_ADDR": "127.0.0.1",
                               "MASTER_PORT": str(free_port())})
    assert proc.returncode == 2, proc.stderr
    said = _said(proc)
    assert len(said) == 1 and said[0].startswith(
        f"collbench: error: rendezvous of rank 1 at tcp://127.0.0.1:{port} cannot succeed: "
        f"nothing at 127.0.0.1:{port} accepted a connection from {os.uname().nodename} within "
        "10 s"), proc.stderr
    _nothing_left(tmp_path)


def test_env_names_the_init_methods_usable_here(tmp_path):
    proc = _self_launched(["env"], tmp_path, env={"COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if "init methods" in line)
    assert "env://" in line and "tcp://ADDRESS:PORT with ADDRESS one of 127.0.0.1" in line
    assert "file:///PATH in " in line and str(tmp_path) in line


@pytest.mark.mpi
@pytest.mark.skipif(bool(multihost._WHY_NOT), reason=multihost._WHY_NOT or "ok")
def test_file_under_mpiexec_across_two_hosts(hosts, tmp_path):
    """node1 and node2 (tests/test_multihost.py) share tmp_path's file system: each sees rank
    0's mark, and the file store works across them."""
    multihost._names(hosts, "nowhere")
    cmd = multihost._mpiexec(hosts, tmp_path, (1, 1),
                             [*RUN, "--init-method", f"file://{tmp_path}/rendezvous",
                                                       "-o", tmp_path / "r.json"])
    proc = subprocess.run(cmd, cwd=tmp_path, env=multihost._env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert load_json(tmp_path / "r.json")["metadata"]["hostnames"] == ["node1", "node2"]
    _rows_met_by(tmp_path, "file")
    assert not multihost._nothing_left(hosts)


@needs_torchrun
@pytest.mark.skipif(bool(multihost._WHY_NOT), reason=multihost._WHY_NOT or "ok")
def test_tcp_under_torchrun_across_two_hosts(hosts, tmp_path):
    """torchrun on each host, its agents meeting at node1:29500; the ranks meet at node1's
    address on another port, where rank 0 listens rather than torchrun's agent."""
    multihost._names(hosts, ("nowhere", "loopback"))
    args = [*RUN, "--init-method", f"tcp://{hosts[0].address}:29577", "-o", tmp_path / "r.json"]
    jobs = [subprocess.Popen(multihost._torchrun(h, i, hosts[0].address, args), cwd=tmp_path,
                             env=multihost._env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i, h in enumerate(hosts)]
    try:
        ended = [job.communicate(timeout=60) for job in jobs]
    finally:
        for job in jobs:
            job.kill()
    assert [job.returncode for job in jobs] == [0, 0], [err[-2000:] for _, err in ended]
    assert load_json(tmp_path / "r.json")["metadata"]["hostnames"] == ["node1", "node2"]
    _rows_met_by(tmp_path, "tcp")
    assert not multihost._nothing_left(hosts)


@pytest.mark.mpi
def test_env_with_a_master_port_taken_is_one_line_under_mpiexec(tmp_path):
    """MASTER_ADDR/MASTER_PORT exported to the ranks, the port held by another program: rank 0
    says so for every rank before torch tries to listen (torch's own error was exit 1)."""
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = _mpiexec([*RUN, "--no-save", "--init-method", "env://"], tmp_path,
                        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    assert proc.returncode == 2, proc.stderr
    said = _said(proc)
    assert said == [f"collbench: error: MASTER_PORT {port}: rank 0 cannot listen there on "
                    f"{socket.gethostname()} (address already in use); choose a free port, or "
                    "unset MASTER_ADDR and MASTER_PORT and collbench finds one"], proc.stderr
    _nothing_left(tmp_path)
