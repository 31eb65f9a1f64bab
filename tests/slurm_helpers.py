"""A real Slurm cluster for tests, started and ended by the test itself.

One ``munged`` with a key and socket of its own, one ``slurmctld`` and one ``slurmd`` per
node, all in the foreground (``-D``, ``-F``) so that the test owns them, with a slurm.conf,
state and spool folders in a temporary folder. A node is this machine (``local_node``) or
whatever ``Node.enter`` runs a command in (tests/test_slurm.py: a network namespace with a
host name of its own). Every process of the cluster, jobs included, carries the cluster's
``SLURM_CONF`` in its environment: that is how ``leftovers`` finds what is still running, and
how ``stop`` ends only what the cluster started; ``stop`` also removes the shared memory its
killed jobs' MPICH left in /dev/shm. Job numbers start at a random ``FirstJobId``, so that a
segment some earlier cluster left there is never taken for one of this cluster's jobs.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from collbench.launch.origin.pmi import SHARED_MEMORY, fnv1a

PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sinfo", "squeue", "scancel",
            "sbatch", "salloc")
#: Launcher variables of the process running the tests, which must not reach the jobs.
LAUNCH_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "RANK",
                    "WORLD_SIZE",
                    "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "COLLBENCH_LAUNCHED",
                    "SLURM_MPI_TYPE")


def why_not() -> str:
    """Why a Slurm cluster cannot be started here ("" when it can)."""
    if not sys.platform.startswith("linux"):
        return "Slurm runs on Linux only"
    if os.geteuid() != 0:
        return "starting slurmd and munged needs root"
    missing = [name for name in PROGRAMS if _which(name) is None]
    if missing:
        return (f"{', '.join(missing)} not installed (apt-get install slurmctld slurmd "
                "slurm-client munge)")
    return ""


def _which(name: str) -> Optional[str]:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/local/sbin")


def srun_mpi_plugins(env: dict) -> list:
    """The MPI plugins this srun offers (``srun --mpi=list``)."""
    out = subprocess.run([_which("srun"), "--mpi=list"], env=env, capture_output=True, text=True,
                         timeout=60)
    text = out.stdout + out.stderr
    return [line.strip() for line in text.splitlines()
            if line.startswith("\t") or line.startswith("  ")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@dataclass
class Node:
    """A node of the cluster: its name, its address, and how to run a command on it."""

    name: str
    address: str
    enter: list = field(default_factory=list)       # the command prefix that runs a command on it

    def command(self, argv: list) -> list:
        return [*self.enter, *[str(a) for a in argv]]


def local_node() -> Node:
    """This machine, under its own host name."""
    return Node(socket.gethostname(), "127.0.0.1")


class Munge:
    """munged in the foreground, with its own key and socket in a folder of its own: munged wants
    every folder above its socket open to all, which pytest's temporary folders are not."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="collbench-munge-"))
        self.folder.chmod(0o755)
        self.socket = self.folder / "socket"
        self.process: Optional[subprocess.Popen] = None

    def start(self, seconds: float = 60.0) -> None:
        key = self.folder / "key"
        subprocess.run([_which("mungekey"), "--create", "--keyfile", str(key)], check=True,
                       capture_output=True)
        self.process = subprocess.Popen(
            [_which("munged"), "--foreground", f"--socket={self.socket}", f"--key-file={key}",
             f"--pid-file={self.folder / 'pid'}", f"--seed-file={self.folder / 'seed'}",
             f"--log-file={self.folder / 'log'}"],
            stdout=subprocess.DEVNULL, stderr=(self.folder / "stderr").open("w"))
        deadline = time.monotonic() + seconds
        while not self.socket.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("munged did not start: "
                                   f"{(self.folder / 'stderr').read_text()[-500:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            _end(self.process)
        shutil.rmtree(self.folder, ignore_errors=True)


CONF = """\
ClusterName=collbench
SlurmctldHost={controller.name}({controller.address})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SchedulerType=sched/builtin
ReturnToService=2
FirstJobId={first_job}
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
SlurmdTimeout=300
KillWait=5
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class Cluster:
    """slurmctld on the first node, a slurmd on each; clients run with ``env``."""

    def __init__(self, root: Path, nodes: list, munge: Munge) -> None:
        self.root = root
        self.nodes = nodes
        self.munge = munge
        self.conf = root / "slurm.conf"
        self.processes: list = []
        cpus = len(os.sched_getaffinity(0))
        lines = "\n".join(f"NodeName={n.name} NodeAddr={n.address} CPUs={cpus} State=UNKNOWN"
                          for n in nodes)
        # Job numbers of their own: MPICH names its shared memory after the job and step, and a
        # segment some earlier cluster's killed job left in /dev/shm must not be taken for ours.
        self.first_job = random.randrange(1_000_000, 60_000_000)
        self.conf.write_text(CONF.format(controller=nodes[0], ctld_port=free_port(),
                                         slurmd_port=free_port(),
                                         munge_socket=munge.socket, root=root, nodes=lines,
                                         first_job=self.first_job))
        (root / "state").mkdir()
        for n in nodes:
            (root / "spool" / n.name).mkdir(parents=True)
        self.env = {k: v for k, v in os.environ.items()
                    if k not in LAUNCH_VARIABLES and not k.startswith("SLURM_")}
        self.env["SLURM_CONF"] = str(self.conf)

    def start(self, seconds: float = 120.0) -> None:
        controller = self.nodes[0]
        self._daemon(controller, [_which("slurmctld"), "-D", "-i"], "slurmctld")
        for n in self.nodes:
            self._daemon(n, [_which("slurmd"), "-D", "-N", n.name], f"slurmd-{n.name}")
        deadline = time.monotonic() + seconds
        while True:
            states = self.node_states()
            if (states and all(s == "idle" for s in states.values())
                    and len(states) == len(self.nodes)):
                return
            dead = [p for p in self.processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not come up (nodes {states}): {self.logs()}")
            time.sleep(0.2)

    def _daemon(self, node: Node, argv: list, name: str) -> None:
        err = (self.root / f"{name}.stderr").open("w")
        self.processes.append(subprocess.Popen(node.command(argv), env=self.env,
                                               stdin=subprocess.DEVNULL,
                                               stdout=err, stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def node_states(self) -> dict:
        out = self.run_client([_which("sinfo"), "-h", "-N", "-o", "%N %T"])
        return dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)

    def run_client(self, argv: list, **kwargs) -> subprocess.CompletedProcess:
        """A client command (sinfo, squeue, scancel), run on the first node, where it ends."""
        return subprocess.run(self.client(argv), env=self.env, capture_output=True, text=True,
                              timeout=60, **kwargs)

    def logs(self) -> str:
        return "\n".join(f"{p.name}: {p.read_text()[-1500:]}"
                         for p in sorted(self.root.glob("*.stderr"))
                         + sorted(self.root.glob("*.log")))

    def client(self, argv: list, node: Optional[Node] = None) -> list:
        """A client command (srun, sbatch, ...) as run on ``node`` (the first by default)."""
        return (node or self.nodes[0]).command(argv)

    def leftovers(self) -> list:
        """Every process still running that belongs to this cluster (its daemons, steps, tasks)."""
        marker = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = Path(f"/proc/{entry.name}/environ").read_bytes()
                state = Path(f"/proc/{entry.name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if marker in environ.split(b"\0") and state != b"Z":
                found.append(int(entry.name))
        return found

    def wait_for_no_jobs(self, seconds: float = 60.0) -> list:
        """The jobs still known to the controller once ``seconds`` have passed (none at once when
        there are none)."""
        deadline = time.monotonic() + seconds
        while True:
            out = self.run_client([_which("squeue"), "-h", "-o", "%i %T"]).stdout.split("\n")
            jobs = [line for line in out if line.strip()]
            if not jobs or time.monotonic() > deadline:
                return jobs
            time.sleep(0.2)

    def stop(self, seconds: float = 30.0) -> list:
        """Cancel every job, end the daemons, then kill what is left; returns what was still
        running after the daemons ended (which a clean cluster leaves empty)."""
        self.run_client([_which("scancel"), "--user", "root", "--full"])
        self.wait_for_no_jobs(seconds)
        for p in reversed(self.processes):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.processes:
            try:
                p.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                pass
        left = self.leftovers()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.processes:
            _end(p)
        deadline = time.monotonic() + seconds
        while self.leftovers() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.remove_shared_memory()
        return left

    def remove_shared_memory(self, jobs: int = 2000, steps: int = 4) -> None:
        """MPICH's shared memory left by this cluster's jobs that were killed (the first ``jobs``
        jobs, their first ``steps`` steps)."""
        ours = {f"{fnv1a(f'{job}.{step}'):x}"
                for job in range(self.first_job, self.first_job + jobs) for step in range(steps)}
        for path in SHARED_MEMORY.iterdir() if SHARED_MEMORY.is_dir() else ():
            parts = path.name.split("_")      # mpich_shm_HASH_NODE
            if (path.name.startswith(("mpich_shm_", "mpich_vci_")) and len(parts) == 4
                    and parts[2] in ours):
                path.unlink(missing_ok=True)


def _end(process: subprocess.Popen, seconds: float = 20.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
