"""Interleaved A/B in one job (``collbench ab``): two setups of one measuring command, in turns.

Back-to-back runs on a shared machine differ by whatever the machine did between them; taking
both sides in turns within one job makes that move both alike. Round i of side A and round i
of side B form a pair over the same shuffled order of sizes, taking turns size by size or,
with ``turns="launch"``, launch by launch. Each side is an ordinary self-launched run whose
result file records the job, so compare judges it by pairs. A side differs by its environment,
its Python interpreter (run by the ``mpiexec`` beside it) or its backend. docs/compare.md,
"A/B in one job".
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from typing import Callable, Optional

from collbench import __version__
from collbench.errors import UsageError
from collbench.launch.self_launch.spawn import RoundLauncher
from collbench import environment
from collbench.run import turns


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
    """For each pair, which side goes first (0: A, 1: B), at random but reproducibly; the
    first k of ``pair_orders(n)`` are ``pair_orders(k)``."""
    rng = random.Random(seed)
    return [rng.randrange(2) for _ in range(pairs)]


def looks(rounds: int, max_rounds: int) -> list:
    """The numbers of pairs after which an A/B job judges whether it has decided (``ab
    --max-rounds``): the pairs asked for, then twice as many, and so on, the last at
    ``max_rounds``. Each look is judged at alpha / len(looks) (``ab_command``): over every look
    a job may stop at, the chance of a false call stays within alpha."""
    out = [rounds]
    while out[-1] < max_rounds:
        out.append(min(2 * out[-1], max_rounds))
    return out


def why_not_at_once(argv: list, sides: tuple) -> str:
    """Why the two launches of a pair cannot run at once ("" when they can): a rendezvous the
    user fixed (``--init-method``, ``MASTER_PORT``) would be the same for both."""
    if any(arg == "--init-method" or arg.startswith("--init-method=") for arg in argv):
        return "--init-method names one rendezvous for both sides"
    if environment.MASTER_PORT in os.environ or any(environment.MASTER_PORT in side.env
                                                    for side in sides):
        return f"{environment.MASTER_PORT} names one port for both sides"
    return ""


def run_interleaved(sides: tuple, argv: list, paths: tuple, *, n: int, use_mpi: tuple, rounds: int,
                    seed: int, quiet: bool, verbose: bool, bind: str = "none", turns: str = "size",
                    more: Optional[Callable[[int], int]] = None) -> int:
    """Measure ``argv`` (a measuring command, without outputs) once per side and round, in
    pairs, writing side i's rows to ``paths[i]``; returns 0, or the exit code that stopped it
    (a failed result check, exit 1, lets the pairs go on, as in an ordinary run).

    ``turns``: "size", the two launches of a pair run at once and take turns size by size
    (``run.turns``); "launch", one launch after the other, in a random order. ``more``: called
    with the pairs done once they are all done (both files then hold them), returns how many
    pairs to add (0: none); added pairs keep each round's budget of the first ``rounds``."""
    job = uuid.uuid4().hex[:12]
    launchers = []

    def described(i: int, pairs: int) -> str:
        return json.dumps({"job": job, "side": "AB"[i], "label": sides[i].label,
                           "differs": sides[i].describe(),
                           "other": sides[1 - i].label, "pairs": pairs, "turns": turns})
    try:
        for i, (side, path) in enumerate(zip(sides, paths)):
            # --force: ab itself refused existing files unless told to overwrite them
            command = list(argv) + (["--backend", side.backend] if side.backend else []) + \
                ["-o", str(path), "--force", "--seed", str(seed), "--rounds", str(rounds), "-q"]
            launchers.append(RoundLauncher(n, command, use_mpi[i], rounds, seed, python=side.python,
                                           extra_env={**side.env,
                                                      environment.AB: described(i, rounds)},
                                           bind=bind,
                                           side=side.label, shares_signals=turns == "size"))
        # the last one's handler notes the signals between launches
        for launcher in launchers[:-1]:
            launcher.stopped_by = launchers[-1].stopped_by
        pair = _pair_at_once if turns == "size" else _pair_in_turn
        number, total = 0, rounds
        # pair_orders' draws, one pair at a time, however many are added
        draws = random.Random(seed)
        while number < total:
            number += 1
            first = draws.randrange(2)
            codes = pair(launchers, sides, number, total, first, seed=seed, n=n, quiet=quiet,
                         verbose=verbose and number == 1)
            failed = next((i for i in (0, 1)
                           if codes[i] is not None and codes[i] is not NOT_LAUNCHED), None)
            if failed is not None:
                _say_stopped(sides, paths, number, total, failed, codes,
                             launchers[-1].stopped_by)
                return codes[failed]
            added = more(number) if more is not None and number == total else 0
            if added > 0:
                total += added
                for i, launcher in enumerate(launchers):
                    launcher.extend(total, described(i, total))
        return 1 if any(launcher.check_failed for launcher in launchers) else 0
    finally:
        for launcher in reversed(launchers):       # each puts back the handler it found
            launcher.close()


#: A side's entry in a pair's codes when its launch was never started (the other one stopped the
#: job).
NOT_LAUNCHED = False


def _pair_in_turn(launchers: list, sides: tuple, number: int, rounds: int, first: int,
                  **how) -> list:
    """One pair, one launch after the other: each side's code (None: its round completed;
    NOT_LAUNCHED: the other side's stopped the job first)."""
    order = (first, 1 - first)
    if not how["quiet"]:
        print(f"collbench ab: pair {number}/{rounds}: {sides[order[0]].label}, then "
              f"{sides[order[1]].label}",
              file=sys.stderr, flush=True)
    codes: list = [NOT_LAUNCHED, NOT_LAUNCHED]
    for turn, i in enumerate(order):
        codes[i] = launchers[i].launch(number, verbose=how["verbose"],
                                       env={environment.AB_TURN: str(turn)})
        if codes[i] is not None:
            break
    return codes


def _pair_at_once(launchers: list, sides: tuple, number: int, rounds: int, first: int, *, seed: int,
                  n: int, quiet: bool, verbose: bool) -> list:
    """One pair, both launches at once, taking turns size by size (``turns.Referee``): each
    side's code. Side A is waited for on a thread of its own, B on this one, which signals reach."""
    if not quiet:
        print(f"collbench ab: pair {number}/{rounds}: {sides[0].label} and {sides[1].label}, size "
              "by size",
              file=sys.stderr, flush=True)
    # In side A's state folder, which its stand-in removes should this process be killed; a
    # folder of its own where that path is too long for a Unix socket (108 bytes)
    path = os.path.join(launchers[0].state, f"turns-{number}")
    folder = tempfile.mkdtemp(prefix="collbench-ab-", dir="/tmp") if len(path) > 100 else None
    referee = turns.Referee(os.path.join(folder, "turns") if folder else path, n,
                            seed * 1000 + number)
    codes: list = [None, None]
    errors: list = []

    def run(i: int) -> None:
        try:
            codes[i] = launchers[i].launch(number, verbose=verbose,
                                           env={environment.AB_TURN: "size",
                                                environment.AB_TURNS: referee.path})
        except BaseException as exc:      # said on this thread, after the other side's launch ended
            errors.append(exc)
        finally:
            referee.ended("AB"[i])

    other = threading.Thread(target=run, args=(0,), name="collbench-ab-side-a", daemon=True)
    try:
        other.start()
        run(1)
        other.join()
    finally:
        referee.close()
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    if errors:
        raise errors[0]
    return codes


def _say_stopped(sides: tuple, paths: tuple, number: int, rounds: int, failed: int,
                 codes: list, signals: list) -> None:
    """The line of a pair that a side's launch, or a signal to this process, stopped: what each
    file keeps. The sides leave a signal passed on from here to this line, one for both."""
    kept = (f"{paths[0]} and {paths[1]} keep the pairs before it"
            if number > 1 else "no pair was completed")
    done = [i for i in (0, 1) if i != failed and codes[i] is None]
    for i in done:                  # the other side finished its round of this pair
        kept += f"; {paths[i]} keeps {sides[i].label}'s round {number} too" if number > 1 else \
            f"; {paths[i]} keeps {sides[i].label}'s round 1"
    if not signals:
        print(f"collbench ab: stopped in pair {number} of {rounds} ({sides[failed].label}); "
              f"{kept}", file=sys.stderr, flush=True)
        return
    # the sides it stopped in the middle of their round: what they measured of it
    cut = [str(paths[i]) for i in (0, 1) if codes[i] is not None
           and codes[i] is not NOT_LAUNCHED and os.path.exists(paths[i])]
    if len(cut) == 2 and number > 1:
        kept += f" and what pair {number} measured"
    elif cut:
        kept += (f"; {' and '.join(cut)} keep{'s' * (len(cut) == 1)} what pair {number} "
                 f"measured{' too' if number > 1 else ''}")
    print(f"collbench ab: interrupted by {signal.Signals(signals[0]).name} in pair {number} of "
          f"{rounds}; {kept}", file=sys.stderr, flush=True)
