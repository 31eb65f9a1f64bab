"""Calibrate ``collbench compare`` on this machine: false alarms, power, and what it costs.

It runs one sweep (by default the CI recipe's: ``collbench all -n 2 --sizes 8-1M`` with
``--rounds 10``) many times, each run its own launches:

* ``quiet``     — 2×N runs on the machine as it is;
* ``pinned``    — runs under ``taskset -c 0``: both ranks on one core, a real, large slowdown;
* ``neighbour`` — runs beside a CPU-heavy neighbour (``--hogs`` busy-looping processes, one by
  default);
* ``pinned-neighbour`` — ``taskset -c 0`` beside the neighbour: the slowdown on a busy machine;
* with ``--ab N``, N jobs of ``collbench ab`` of each kind: A/A (``spin-mpi`` with
  ``SPIN_FRACTION=0`` on both sides), +``--spin`` (side B's every call spins for that
  fraction of its own time: a real slowdown that meets the same interference) and pinned
  (side B's ranks started under ``taskset -c 0``, through ``--b-python``), each quiet and
  beside the neighbour. They need the plugin: ``pip install -e benchmarks/probe_plugin``.

interleaved, so that drift of the machine hits every kind alike. Then, over many random splits:

* **A/A**: a baseline made of ``--baseline-runs`` quiet runs (their rounds merged, as a baseline
  grown over several runs is) against one other quiet run: how many rows ``compare`` calls
  slower or faster, and how many comparisons would exit 1;
* **A/A beside a neighbour**: the same baseline against a neighbour run;
* **power, real**: against a pinned run: the share of rows called slower, and of comparisons exiting
  1;
* **power, synthetic**: against a quiet run whose round medians are all multiplied by
  1 + shift (``--shifts``, by default +5, 10, 20, 50 and 100%; labelled synthetic): the share of
  rows called slower, overall and among the rows whose spread lets this comparison see that shift
  (``detectable`` at most the shift).

    python benchmarks/calibrate.py                      # about 20 minutes on 2 cores
    python benchmarks/calibrate.py --runs 4 --pinned 2 --neighbour 2 --splits 50   # a quick look
    python benchmarks/calibrate.py --analyse DIR        # analyse the files of an earlier collection

Run it alone on the machine: anything else running is part of what it measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collbench.results.aggregate import build_row, moderate_rows  # noqa: E402
from collbench.results.records import RowIdentity  # noqa: E402
from collbench.benchmarks.registry import get_benchmark  # noqa: E402
from collbench.analysis.compare import compare_runs, parse_threshold  # noqa: E402
from collbench.results.loader import load_result  # noqa: E402
from collbench.analysis.merge import merge_runs  # noqa: E402
from collbench.results.records import RunResult  # noqa: E402

SHIFTS = "5%,10%,20%,25%,50%,100%"


AB_KINDS = tuple(f"ab-{where}-{what}" for where in ("quiet", "neighbour")
                 for what in ("aa", "spin", "pinned"))


def _pinned_python(folder: Path) -> Path:
    """An interpreter that starts its process on CPU 0: side B of a pinned ``ab`` job."""
    wrapper = folder / "python-on-cpu0"
    wrapper.write_text(f'#!/bin/sh\nexec taskset -c 0 {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def _ab_command(kind: str, path: Path, args, extra: list = ()) -> list:
    """An ab job of ``kind``; ``extra``: its variant's arguments, which are ab's own options."""
    spin = str(args.spin) if kind.endswith("-spin") else "0"
    side_b = ["--b-python", str(_pinned_python(path.parent))] if kind.endswith("-pinned") else []
    command = args.command.split()
    return [sys.executable, "-m", "collbench", "ab", "--a-env", "SPIN_FRACTION=0", "--b-env",
            f"SPIN_FRACTION={spin}",
            *side_b, *extra, "-o", str(path), "--force", "-q", "-f", "json", "--threshold",
            args.threshold, "--", *command,
            "--backend", "spin-mpi", "--rounds", str(args.rounds)]


def _complete(path: Path, rounds: int) -> bool:
    """Whether ``path`` holds a finished sweep of ``rounds`` rounds (an interrupted one keeps the
    rounds it finished, and is run again)."""
    try:
        metadata = json.loads(path.read_text())["metadata"]
        # a run of several thread levels launches each round once per level
        return len(metadata["rounds"]) == metadata["settings"]["rounds"] >= rounds
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _variants(args) -> dict:
    """``--variant NAME=ARGS``: each a folder of its own, its runs interleaved with the others'."""
    variants = {}
    for text in args.variant or ():
        name, _, extra = text.partition("=")
        if not name or "/" in name:
            raise SystemExit(f"--variant wants NAME=ARGS, got {text!r}")
        variants[name] = extra.split()
    return variants or {"": []}


def _collect(folder: Path, args) -> dict:
    """Run the sweeps; returns wall seconds per kind."""
    kinds = (["quiet"] * (2 * args.runs) + ["pinned"] * args.pinned + ["neighbour"] * args.neighbour
             + ["pinned-neighbour"] * args.pinned_neighbour
             + [k for k in AB_KINDS if k.rsplit("-", 1)[1] in args.ab_kinds.split(",")
                for _ in range(args.ab)])
    variants = _variants(args)
    jobs = [(variant, kind) for variant in variants for kind in kinds]
    random.Random(args.seed).shuffle(jobs)
    counters: dict = {}
    walls: dict = {}
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_RANK", "PMI_SIZE",
                                                            "COLLBENCH_LAUNCHED")}
    # side B of a pinned ab job runs a wrapper, beside which there is no mpiexec: find this one's
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for i, (variant, kind) in enumerate(jobs, 1):
        counters[variant, kind] = counters.get((variant, kind), 0) + 1
        where = folder / variant
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"{kind}-{counters[variant, kind]:02d}.json"
        cmd = [sys.executable, "-m", "collbench", *args.command.split(), *variants[variant],
               "--rounds",
               str(args.rounds), "-q", "--force", "-o", str(path)]
        if kind.startswith("ab-"):
            path = where / f"{kind}-{counters[variant, kind]:02d}"
            cmd = _ab_command(kind, path, args, variants[variant])
        if kind.startswith("pinned"):
            cmd = ["taskset", "-c", "0"] + cmd
        if not kind.startswith("ab-") and _complete(path, args.rounds):
            print(f"[{i}/{len(jobs)}] {path.relative_to(folder)}: kept from an earlier collection",
                  flush=True)
            continue
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(args.hogs if "neighbour" in kind else 0)]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        wall = time.monotonic() - start
        walls.setdefault(f"{variant} {kind}".strip(), []).append(wall)
        # ab's own verdicts, at its own looks
        if kind.startswith("ab-") and proc.stdout.strip():
            Path(f"{path}-verdicts.json").write_text(json.dumps({**json.loads(proc.stdout),
                                                                 "exit": proc.returncode,
                                                                  "wall_s": wall}))
        status = "ok" if proc.returncode == 0 or (kind.startswith("ab-")
                                                  and proc.returncode in (1, 3)) else \
            f"exit {proc.returncode}: {proc.stderr.strip()[-200:]}"
        print(f"[{i}/{len(jobs)}] {path.relative_to(folder)}: {wall:.1f} s, {status}", flush=True)
    return walls


def merge(results: list) -> RunResult:
    """One run of all the rounds of ``results``, each keeping its run (``collbench merge``)."""
    if len(results) == 1:
        return results[0]
    return merge_runs([(f"run-{id(r)}", r) for r in results])[0]


def shifted(result: RunResult, factor: float) -> RunResult:
    """The run with every round median multiplied by ``factor`` (a synthetic slowdown)."""
    out = RunResult(metadata=result.metadata)
    for row, data in zip(result.rows, result.rounds):
        rounds = tuple(dataclasses.replace(d, time_us_p50=d.time_us_p50 * factor) for d in data)
        identity = RowIdentity.of(row, get_benchmark(row.collective).bus_factor(row.world_size))
        rebuilt = build_row(identity, rounds)
        out.add(rebuilt, rounds)
    return out


def _split(quiet: list, k: int, m: int, rng: random.Random) -> tuple:
    """A baseline of k quiet runs merged, and m other quiet runs merged as the new side."""
    chosen = rng.sample(range(len(quiet)), k + m)
    return merge([quiet[i] for i in chosen[:k]]), merge([quiet[i] for i in chosen[k:]])


def _draw(runs: list, m: int, rng: random.Random) -> RunResult:
    return merge(rng.sample(runs, min(m, len(runs))))


def _analyse_ab(folder: Path, args, options: dict) -> None:
    """Each collected ``collbench ab`` job compared as ab compares it: B against A on the pairs."""
    for kind in AB_KINDS:
        jobs = sorted(folder.glob(f"{kind}-*-a.json"))
        if not jobs:
            continue
        exits = undecided = flagged = slower = same = rows = 0
        pairs, walls = [], []
        for a in jobs:
            own = Path(str(a)[:-len("-a.json")] + "-verdicts.json")
            if own.exists():          # as the job judged itself, at its looks (ab --max-rounds)
                doc = json.loads(own.read_text())
                counts, status = doc["summary"], doc["exit"]
                pairs.append(json.loads(a.read_text())["metadata"]["ab"]["pairs"])
                walls.append(doc["wall_s"])
            else:
                c = compare_runs(load_result(a),
                                 load_result(Path(str(a)[:-len("a.json")] + "b.json")), **options)
                counts, status = c.counts, c.status
            exits += status == 1
            undecided += status == 3
            flagged += counts["slower"] + counts["faster"]
            slower += counts["slower"]
            same += counts["same"]
            rows += sum(counts.values())
        power = not kind.endswith("-aa")
        what = "rows called slower" if power else "rows flagged"
        value = slower if power else flagged
        print(f"{kind + ' (collbench ab, pairs)':<42} {what} {value / rows:6.1%}   same "
              f"{same / rows:6.1%}   jobs exiting 1 {exits}/{len(jobs)}, 3 (undecided) "
              f"{undecided}/{len(jobs)}"
              + (f"; pairs {', '.join(map(str, pairs))}, {', '.join(f'{w:.0f}' for w in walls)} s"
                 if pairs else ""))


def at_level(result: RunResult, level: str) -> RunResult:
    """The rows of ``result`` at one MPI thread level, with the rounds (launches) at that level."""
    meta = dict(result.metadata)
    meta["rounds"] = [r for r in meta.get("rounds", []) if r.get("thread_level", level) == level]
    out = RunResult(metadata=meta)
    for row, data in zip(result.rows, result.rounds):
        if row.thread_level == level:
            out.add(row, data)
    return out


def analyse(folder: Path, args) -> None:
    """Each variant's folder in turn, and in each, each MPI thread level its files hold."""
    variants = sorted(p for p in folder.iterdir() if p.is_dir() and any(p.glob("*.json")))
    for where in variants or [folder]:
        files = {kind: sorted(where.glob(f"{kind}-[0-9]*.json"))
                 for kind in ("quiet", "pinned", "neighbour", "pinned-neighbour")}
        runs = {kind: [load_result(p) for p in paths] for kind, paths in files.items()}
        levels = sorted({row.thread_level for res in runs["quiet"] for row in res.rows})
        for level in levels:
            name = " · ".join(x for x in (where.name if variants else "",
                                          f"thread {level}" if level else "") if x)
            if name:
                print(f"\n===== {name} =====")
            analyse_runs({k: [at_level(r, level) for r in v] for k, v in runs.items()}
                         if len(levels) > 1 else runs, args)
        _analyse_ab(where, args, dict(threshold=parse_threshold(args.threshold), alpha=args.alpha))


def analyse_runs(runs: dict, args) -> None:
    quiet = runs["quiet"]
    if not quiet:
        return  # an ab-only collection
    if len(quiet) < args.baseline_runs + args.new_runs:
        raise SystemExit(f"need at least {args.baseline_runs + args.new_runs} quiet runs, found "
                         f"{len(quiet)}")
    threshold, rng = parse_threshold(args.threshold), random.Random(args.seed)
    options = dict(threshold=threshold, alpha=args.alpha)
    rows_total = len(quiet[0].rows)
    print(f"\n{len(quiet)} quiet, {len(runs['pinned'])} pinned, {len(runs['neighbour'])} neighbour "
          f"runs of {rows_total} rows, {len(quiet[0].metadata.get('rounds', []))} rounds each; "
          f"baseline = {args.baseline_runs} quiet run(s) merged, new = {args.new_runs} run(s) "
          f"merged; threshold {args.threshold}, alpha {args.alpha}; {args.splits} random splits "
          "per line")
    spread = [r.run_to_run_cv for r in merge(quiet).rows if np.isfinite(r.run_to_run_cv)]
    print(f"run-to-run cv per row over every quiet round: median {np.median(spread):.1%}, "
          f"90th percentile {np.percentile(spread, 90):.1%}, max {np.max(spread):.1%}")
    written = sum(r.rounds_disagree for res in quiet for r in res.rows)
    rebuilt = sum(r.rounds_disagree for res in quiet for r in moderate_rows(res.rows))
    print(f"rows marked ‡ (rounds disagree) in the quiet runs: {rebuilt} of "
          f"{rows_total * len(quiet)} with this code's rule, {written} as the files were written")
    busy = [rec["load"]["other_cpu_cores"] for res in runs["neighbour"]
            for rec in res.metadata.get("rounds", [])]
    calm = [rec["load"]["other_cpu_cores"] for res in quiet
            for rec in res.metadata.get("rounds", [])]
    if calm:
        print(f"other processes' CPU per round (cores): quiet median {np.median(calm):.2f} max "
              f"{np.max(calm):.2f}"
              + (f"; beside the neighbour median {np.median(busy):.2f} min {np.min(busy):.2f}"
                 if busy else ""))

    def trials(make_new, label: str, power: bool = False, gate: float = None) -> None:
        exits = flagged = slower = rows = seen = seen_slower = same = undecided = 0
        drifts = []
        for _ in range(args.splits):
            baseline, other = _split(quiet, args.baseline_runs, args.new_runs, rng)
            c = compare_runs(baseline, make_new(other), **options)
            drifts.append((c.drift_sd, c.drift_source.split(":")[0]))
            exits += c.regression
            undecided += c.status == 3
            flagged += c.counts["slower"] + c.counts["faster"]
            slower += c.counts["slower"]
            same += c.counts["same"]
            rows += len(c.rows)
            if gate is not None:
                able = [r for r in c.rows if np.isfinite(r.detectable) and r.detectable <= gate]
                seen += len(able)
                seen_slower += sum(r.verdict == "slower" for r in able)
        if power:
            extra = (f"; among rows able to see it ({seen / max(1, args.splits):.0f} of "
                     f"{rows_total} per comparison): {seen_slower / max(1, seen):.1%}"
                     if gate is not None else "")
            print(f"{label:<42} rows called slower {slower / rows:6.1%}{extra}; comparisons "
                  f"exiting 1 {exits}/{args.splits}")
        else:
            measured = sum(1 for _, source in drifts if source.startswith("measured"))
            print(f"{label:<42} rows flagged {flagged / rows:6.2%}   same {same / rows:6.1%}   "
                  f"comparisons exiting 1 {exits}/{args.splits}, 3 (undecided) "
                  f"{undecided}/{args.splits}   (drift used: median "
                  f"±{np.median([d for d, _ in drifts]):.1%}, measured in {measured})")

    trials(lambda other: other, "A/A, quiet")
    if runs["neighbour"]:
        trials(lambda other: _draw(runs["neighbour"], args.new_runs, rng),
               "A/A, new run beside a CPU-heavy neighbour")
    if runs["pinned"]:
        trials(lambda other: _draw(runs["pinned"], args.new_runs, rng),
               "power: taskset -c 0 (real)", power=True)
    if runs["pinned-neighbour"]:
        trials(lambda other: _draw(runs["pinned-neighbour"], args.new_runs, rng),
               "power: taskset -c 0 beside the neighbour", power=True)
    for shift in (parse_threshold(s) for s in args.shifts.split(",")):
        trials(lambda other, s=shift: shifted(other, 1 + s), f"power: +{shift:.0%} (synthetic)",
               power=True, gate=shift)
        if runs["neighbour"]:
            trials(lambda other,
                   s=shift: shifted(_draw(runs["neighbour"], args.new_runs, rng), 1 + s),
                   f"power: +{shift:.0%} beside the neighbour (synth.)", power=True, gate=shift)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--command", default="all -n 2 --sizes 8-1M",
                        help="the collbench sweep to calibrate")
    parser.add_argument("--rounds", type=int, default=10, help="rounds per run (the CI recipe's)")
    parser.add_argument("--runs", type=int, default=10, help="N: 2N quiet runs")
    parser.add_argument("--pinned", type=int, default=4)
    parser.add_argument("--neighbour", type=int, default=4)
    parser.add_argument("--pinned-neighbour", type=int, default=2,
                        help="taskset -c 0 runs beside the neighbour")
    parser.add_argument("--hogs", type=int, default=1,
                        help="busy loops the neighbour runs [default: 1]")
    parser.add_argument("--ab", type=int, default=0, metavar="N",
                        help="N collbench ab jobs of each kind (A/A and --spin, quiet and beside "
                             "the neighbour)")
    parser.add_argument("--ab-kinds", default="aa,spin,pinned",
                        help="which ab jobs --ab runs: aa, spin, pinned [default: %(default)s]")
    parser.add_argument("--spin", type=float, default=0.25,
                        help="side B's slowdown in the spin jobs [default: 0.25]")
    parser.add_argument("--baseline-runs", type=int, default=3,
                        help="quiet runs merged into one baseline")
    parser.add_argument("--new-runs", type=int, default=1, help="runs merged into the new side")
    parser.add_argument("--splits", type=int, default=200)
    parser.add_argument("--threshold", default="10%")
    parser.add_argument("--shifts", default=SHIFTS,
                        help="synthetic slowdowns to apply [default: %(default)s]")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", help="folder for the result files; sweeps whose file is already "
                                      "there are kept, so an interrupted collection goes on "
                                      "[default: a new temporary folder]")
    parser.add_argument("--variant", action="append", metavar="NAME=ARGS",
                        help="a variant of the command (e.g. bound='--bind core'), its runs in "
                             "DIR/NAME, interleaved with the other variants'; repeat for each. For "
                             "ab jobs ARGS are ab's own options (e.g. launch='--turns launch')")
    parser.add_argument("--analyse", metavar="DIR",
                        help="only analyse the files collected earlier in DIR")
    args = parser.parse_args()
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}; load average "
          f"before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.analyse:
        folder = Path(args.analyse)
    else:
        folder = Path(args.out or tempfile.mkdtemp(prefix="collbench-calibration-"))
        folder.mkdir(parents=True, exist_ok=True)
        print(f"collecting into {folder}: collbench {args.command} --rounds {args.rounds}")
        walls = _collect(folder, args)
        for kind, values in walls.items():
            print(f"wall time per run, {kind}: median {np.median(values):.1f} s, max "
                  f"{np.max(values):.1f} s")
        print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    analyse(folder, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
