"""Interleaved A/B in one job: two setups of one measuring command, launched in turns.

Back-to-back runs on a shared machine differ by what the machine did between them (a whole
run drifts by percent, one collective can sit 30% slow for a minute). Measuring both sides in
one job, alternating (Abedi & Brecht's randomized multiple interleaved trials), makes whatever
moves the machine move both alike: round i of side A and round i of side B form a pair,
launched one after the other in a random order, and every pair uses the same shuffled order
of sizes. Each side is an ordinary self-launched run with its own result file; the files
record the job (``metadata.ab``) and each round's turn in its pair (``rounds[].ab_turn``), so
``collbench compare`` knows they were interleaved.

A side differs from the other by its environment (``MPIR_CVAR_*``, ``UCX_*``, ``NCCL_ALGO``),
by its Python interpreter (another build of mpi4py or of the MPI library, with collbench
installed in it; its ``mpiexec`` is the one beside that interpreter), or by its backend.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from typing import Optional

from collbench import __version__
from collbench.errors import UsageError
from collbench.launch.self_launch.spawn import RoundLauncher
from collbench import environment


@dataclass(frozen=True)
class Side:
    label: str
    env: dict = field(default_factory=dict)      # variables set for this side's ranks
    python: str = sys.executable
    backend: Optional[str] = None                # --backend for this side, else the command's

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.env.items()]
        if self.python != sys.executable:
            parts.append(f"python {self.python}")
        if self.backend:
            parts.append(f"backend {self.backend}")
        return ", ".join(parts) or "as given"


def parse_assignments(values, option: str) -> dict:
    """``NAME=VALUE`` strings into a dict; a malformed one is bad input."""
    out = {}
    for text in values:
        name, sep, value = str(text).partition("=")
        if not sep or not name or not (name[0].isalpha() or name[0] == "_") or \
                not all(c.isalnum() or c == "_" for c in name):
            raise UsageError(f"bad {option} {text!r}: expected NAME=VALUE")
        out[name] = value
    return out


def check_interpreter(python: str, option: str) -> None:
    """The interpreter runs collbench of this version: the sides must speak the same protocol."""
    try:
        proc = subprocess.run([python, "-c", "import collbench; print(collbench.__version__)"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"{option} {python}: cannot run it ({exc.__class__.__name__})") from None
    version = proc.stdout.strip()
    if proc.returncode != 0:
        raise UsageError(f"{option} {python}: collbench is not installed there "
                         f"(install it: {python} -m pip install collbench)")
    if version != __version__:
        raise UsageError(f"{option} {python}: it has collbench {version}, this is {__version__}; "
                         "install the same version on both sides")


def pair_orders(pairs: int, seed: int) -> list:
    """For each pair, which side goes first (0: A, 1: B), at random but reproducibly."""
    rng = random.Random(seed)
    return [rng.randrange(2) for _ in range(pairs)]


def run_interleaved(sides: tuple, argv: list, paths: tuple, *, n: int, use_mpi: tuple, rounds: int, seed: int,
                    quiet: bool, verbose: bool, bind: str = "none") -> int:
    """Measure ``argv`` (a measuring command, without outputs) once per side and round, in
    pairs, writing side i's rows to ``paths[i]``; returns 0, or the exit code that stopped it
    (a failed result check, exit 1, lets the pairs go on, as in an ordinary run)."""
    job = uuid.uuid4().hex[:12]
    launchers = []
    try:
        for i, (side, path) in enumerate(zip(sides, paths)):
            described = {"job": job, "side": "AB"[i], "label": side.label, "differs": side.describe(),
                         "other": sides[1 - i].label, "pairs": rounds}
            # --force: ab itself refused existing files unless told to overwrite them
            command = list(argv) + (["--backend", side.backend] if side.backend else []) + \
                ["-o", str(path), "--force", "--seed", str(seed), "--rounds", str(rounds), "-q"]
            launchers.append(RoundLauncher(n, command, use_mpi[i], rounds, seed, python=side.python,
                                           extra_env={**side.env, environment.AB: json.dumps(described)}, bind=bind,
                                           side=side.label))
        for launcher in launchers[:-1]:     # the last one's handler notes the signals between launches
            launcher.stopped_by = launchers[-1].stopped_by
        for number, first in enumerate(pair_orders(rounds, seed), 1):
            order = (first, 1 - first)
            if not quiet:
                print(f"collbench ab: pair {number}/{rounds}: {sides[order[0]].label}, then {sides[order[1]].label}",
                      file=sys.stderr, flush=True)
            for turn, i in enumerate(order):
                code = launchers[i].launch(number, verbose=verbose and number == 1, env={environment.AB_TURN: str(turn)})
                if code is not None:
                    kept = f"{paths[0]} and {paths[1]} keep the pairs before it" if number > 1 else "no pair was completed"
                    if turn == 1:          # the side before it finished its round of this pair
                        done = sides[order[0]].label
                        kept += f"; {paths[order[0]]} keeps {done}'s round {number} too" if number > 1 else \
                            f"; {paths[order[0]]} keeps {done}'s round 1"
                    print(f"collbench ab: stopped in pair {number} of {rounds} ({sides[i].label}); {kept}",
                          file=sys.stderr, flush=True)
                    return code
        return 1 if any(launcher.check_failed for launcher in launchers) else 0
    finally:
        for launcher in reversed(launchers):       # each puts back the handler it found
            launcher.close()
