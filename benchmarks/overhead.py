#!/usr/bin/env python3
"""Is collbench what gets measured? Its own costs, against the targets of SPEC section 9.

    python benchmarks/overhead.py            # every figure, a few minutes on 2 cores
    python benchmarks/overhead.py --quick    # fewer repetitions, about half the time

Figures (see benchmarks/README.md for what each means and how it is taken):

1. harness cost per iteration: the timed loop with a no-op call, against an empty loop (ns);
2. harness against a bare loop: collbench's latency median over a bare mpi4py / torch loop
   timed the same way, side by side in one MPI job, 8 B and 1 MiB allreduce on 2 ranks;
3. start-up: no torch or matplotlib imported by ``--help`` or an MPI-only run (every rank's
   ``-X importtime``), ``--help`` wall time, launch to first timed iteration;
4. sweep time: ``collbench all -n 2 --backend mpi --sizes 8-1M`` adaptive against fixed
   OSU-like counts, and how many rows reached the precision target;
5. memory: peak RSS per rank for allreduce and alltoall up to 256 MiB, against the buffers.

Uses the interpreter running it and the mpiexec collbench itself would use. Exit status 0
when every target holds, 1 when one misses. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from collbench.measure import harness
from collbench.measure.timings.base import LatencySampler, SamplerContext
from collbench.measure.timings.throughput import ThroughputSampler
from collbench.backends.base import Bound, Control
from collbench.benchmarks.registry import get_benchmark
from collbench.benchmarks.base import Roles
from collbench.launch.self_launch.mpiexec import find_mpiexec, mpiexec_command
from collbench.run.metadata import cpu_model
from collbench.measure.sizes import format_size, parse_bytes

HERE = Path(__file__).resolve().parent
RANKS = 2
LAUNCH_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE",
               "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "COLLBENCH_LAUNCHED",
               "TORCHELASTIC_RUN_ID",
               "SLURM_PROCID", "SLURM_STEP_NUM_TASKS")
FORBIDDEN = ("torch", "matplotlib")

# Targets
RATIO_TOLERANCE = 0.05        # harness median within 5 % of the bare loop's
HARNESS_NS_MAX = 1000.0       # "well under a microsecond" per iteration
HELP_S_MAX = 0.5              # collbench --help "answers fast"
SWEEP_S_MAX = 15.0            # the default sweep, rounds included, "within about 15 s"
SWEEP_REACHED_MIN = 0.8       # "precision on most sizes"
MEMORY_FACTOR_MAX = 3.0       # "within about 3x the largest buffer set"

results: list = []            # (figure, measured, target, ok or None)


def record(figure: str, measured: str, target: str, ok) -> None:
    results.append((figure, measured, target, ok))


def section(title: str) -> None:
    print(f"\n== {title}", flush=True)


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(extra)
    return env


def collbench_cmd(*args) -> list:
    return [sys.executable, "-m", "collbench", *args]


def run(cmd, *, cwd, env=None, timeout=600) -> tuple:
    """Run cmd; (CompletedProcess, wall seconds). A failure stops the benchmark loudly."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env or clean_env(), capture_output=True, text=True,
                          timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}): "
                         f"{' '.join(map(str, cmd))}\n{proc.stderr[-3000:]}")
    return proc, wall


# 1. The harness's own cost per iteration ----------------------------------------------------------

class LocalControl(Control):
    """One process, no communication: isolates the harness's bookkeeping."""

    rank, size = 0, 1

    def barrier(self) -> None: ...

    def bcast(self, obj, root=0):
        return obj

    def gather(self, obj, root=0):
        return [obj]

    def reduce_max(self, values, root=0):
        return np.asarray(values, dtype=np.float64)


def _noop() -> None:
    pass


def _best(fn, repeats: int) -> tuple:
    """(best, median) of repeats calls of fn, each returning seconds per iteration."""
    values = [fn() for _ in range(repeats)]
    return min(values), statistics.median(values)


def harness_cost(n: int, repeats: int) -> None:
    section("1. harness cost per iteration (in-process, no-op call and barrier)")
    clock = time.perf_counter

    bound = Bound(run=_noop, run_blocking=_noop, checked=lambda: None)

    def empty():
        t0 = clock()
        for _ in range(n):
            pass
        return (clock() - t0) / n

    def latency_loop():
        out: list = []
        t0 = clock()
        LatencySampler(_noop, _noop).take(n, out)
        return (clock() - t0) / n

    def throughput_loop():
        out: list = []
        k = 1000
        t0 = clock()
        ThroughputSampler(SamplerContext(bound, _noop, _noop, k, None, None, 0,
                                         True)).take(n // k, out)
        return (clock() - t0) / (n // k * k)

    floor_samples: list = []
    LatencySampler(_noop, _noop).take(n, floor_samples)

    def measure(settings):
        def once():
            t0 = clock()
            m = harness.measure(bound, bench=get_benchmark("allreduce"), roles=Roles(),
                                barrier=_noop, sync=_noop,
                                control=LocalControl(), settings=settings)
            once.iterations = m.iterations
            return (clock() - t0) / m.iterations
        return once

    fixed = measure(harness.TimingSettings(iters=n, warmup=0))
    adaptive = measure(harness.TimingSettings(precision=1e-9, max_time=0.2))   # never converges
    e_best, e_med = _best(empty, repeats)
    l_best, l_med = _best(latency_loop, repeats)
    t_best, t_med = _best(throughput_loop, repeats)
    f_best, f_med = _best(fixed, repeats)
    a_best, a_med = _best(adaptive, repeats)
    ns = 1e9
    floor = float(np.median(floor_samples)) * ns

    def show(label, best, median, unit="ns/iteration", note=""):
        print(f"  {label:<44} {best * ns:7.1f} {unit}  (median {median * ns:.1f}){note}")

    print(f"  {n:,} iterations, best of {repeats} runs")
    show("empty Python loop", e_best, e_med)
    show("harness latency loop (_latency_loop)", l_best, l_med)
    show("  harness cost = latency loop - empty loop", l_best - e_best, l_med - e_med,
         note="  timer calls, append, the two calls")
    print(f"  {'  inside the timed window (median sample)':<44} {floor:7.1f} ns            "
          "two perf_counter calls around a no-op")
    show("harness throughput loop, k=1000", t_best, t_med, unit="ns/call     ")
    show(f"measure(), --iters {n:,}", f_best, f_med, note="  first call, reduction, statistics")
    show("measure(), adaptive, never converging", a_best, a_med,
         note=f"  {adaptive.iterations:,} iterations, every stop-rule round to max-time 0.2 s")
    cost = (l_best - e_best) * ns
    record("harness cost per iteration", f"{cost:.0f} ns", f"< {HARNESS_NS_MAX:.0f} ns",
           cost < HARNESS_NS_MAX)
    record("timed-window floor", f"{floor:.0f} ns", "(info)", None)
    record("measure() per iteration, adaptive", f"{a_best * ns:.0f} ns",
           f"< {HARNESS_NS_MAX:.0f} ns",
           a_best * ns < HARNESS_NS_MAX)


# 2. Harness against a bare loop
#    ---------------------------------------------------------------------

def side_by_side(mpiexec: str, pairs: int, workdir: str) -> None:
    backends = ["mpi", "mpi-pickle"] + (["gloo"] if importlib.util.find_spec("torch") else [])
    section(f"2. harness against a bare loop: allreduce, {RANKS} ranks, latency mode, "
            f"{pairs} A/B pairs of ~10 ms blocks ({', '.join(backends)})")
    env = clean_env()
    cmd = mpiexec_command(mpiexec, RANKS,
                          [sys.executable, str(HERE / "_side_by_side.py"), "--pairs", str(pairs),
                                           "--backends", ",".join(backends), "--sizes",
                           "8,1048576"], env)
    proc, wall = run(cmd, cwd=workdir, env=env)
    print(f"  {'backend':<11} {'size':>5} {'block':>5}  {'harness p50 µs [95% CI]':>26}  "
          f"{'bare p50 µs [95% CI]':>26}  {'ratio':>6}  {'pooled':>6}  "
          "pair ratios (min, quartiles, max)")
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        case = json.loads(line)
        if "skipped" in case:
            print(f"  {case['backend']}: skipped ({case['skipped']})")
            continue
        size = format_size(case["size_bytes"])
        a_lo, a_hi = case["harness_ci_us"]
        b_lo, b_hi = case["bare_ci_us"]
        spread = np.percentile(case["pair_ratios"], [0, 25, 50, 75, 100])
        print(f"  {case['backend']:<11} {size:>5} {case['block_iterations']:>5}  "
              f"{case['harness_us']:>9.2f} [{a_lo:>6.2f}, {a_hi:>6.2f}]  "
              f"{case['bare_us']:>9.2f} [{b_lo:>6.2f}, {b_hi:>6.2f}]  {case['ratio']:>6.3f}  "
              f"{case['pooled_ratio']:>6.3f}  " + " ".join(f"{r:.2f}" for r in spread))
        record(f"{case['backend']} {size} harness / bare", f"{case['ratio']:.3f}",
               f"{1 - RATIO_TOLERANCE:.2f}–{1 + RATIO_TOLERANCE:.2f}",
               abs(case["ratio"] - 1) <= RATIO_TOLERANCE)
    print("  block = samples per block on each side; ratio = median over pairs of (harness median "
          "/ bare median);\n  pooled = median of all harness samples / median of all bare samples "
          f"({wall:.0f} s)")


# 3. Start-up
#    ------------------------------------------------------------------------------------------

def imported_modules(stderr: str) -> list:
    """Module names from -X importtime lines (all processes mixed)."""
    names = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.append(name)
    return names


def forbidden_in(names: list) -> list:
    return sorted({n for n in names if n.split(".")[0] in FORBIDDEN})


def startup(workdir: str, repeats: int) -> None:
    section("3. start-up")
    proc, _ = run([sys.executable, "-X", "importtime", "-m", "collbench", "--help"], cwd=workdir)
    names = imported_modules(proc.stderr)
    bad = forbidden_in(names)
    print(f"  collbench --help imports {len(names)} modules; torch/matplotlib among them: "
          f"{bad or 'none'}")
    record("--help imports torch/matplotlib", ", ".join(bad) or "no", "no", not bad)

    env = clean_env(PYTHONPROFILEIMPORTTIME="1")
    proc, _ = run(collbench_cmd("allreduce", "-n", str(RANKS), "--backend", "mpi,mpi-pickle",
                                "--sizes", "8",
                                "--iters", "5", "--rounds", "1", "--no-save", "-q"), cwd=workdir,
                  env=env)
    names = imported_modules(proc.stderr)
    processes = names.count("mpi4py.MPI")          # imported by the ranks only, once each
    bad = forbidden_in(names)
    print(f"  MPI-only run (launcher + {RANKS} ranks, PYTHONPROFILEIMPORTTIME=1): import lists "
          f"from {processes} rank processes; torch/matplotlib among them: {bad or 'none'}")
    if processes != RANKS:
        print(f"  warning: expected import lists from {RANKS} ranks, got {processes}")
    record("MPI-only run imports torch/matplotlib", ", ".join(bad) or "no", "no",
           not bad and processes == RANKS)

    console = Path(sys.executable).parent / "collbench"
    help_cmd = [str(console), "--help"] if console.exists() else collbench_cmd("--help")
    walls = [run(help_cmd, cwd=workdir)[1] for _ in range(max(5, repeats))]
    help_s = statistics.median(walls)
    print(f"  `{Path(help_cmd[0]).name} --help` wall: median {help_s * 1e3:.0f} ms, best "
          f"{min(walls) * 1e3:.0f} ms over {len(walls)} runs")
    record("collbench --help wall time", f"{help_s * 1e3:.0f} ms", f"< {HELP_S_MAX * 1e3:.0f} ms",
           help_s < HELP_S_MAX)

    cases = [("mpi", "mpiexec")]
    if importlib.util.find_spec("torch"):
        cases.append(("gloo", "local processes, imports torch"))
    for backend, how in cases:
        firsts, walls = [], []
        for _ in range(repeats):
            first, wall = time_to_first_iteration(backend, workdir)
            firsts.append(first)
            walls.append(wall)
        first_s = statistics.median(firsts)
        print(f"  launch to first timed iteration, `collbench allreduce -n {RANKS} --backend "
              f"{backend} --sizes 8` ({how}): median {first_s:.2f} s (range "
              f"{min(firsts):.2f}–{max(firsts):.2f}); whole run {statistics.median(walls):.2f} s")
        record(f"launch to first timed iteration ({backend})", f"{first_s:.2f} s", "(info)", None)


def probe_plugin(workdir: str) -> str:
    """Install benchmarks/probe_plugin (the probe backends) into ``workdir``; returns the folder
    to put on PYTHONPATH. The probe lives outside collbench, as any plugin would."""
    target = os.path.join(workdir, "probe-site")
    if not os.path.isdir(target):
        source = Path(__file__).resolve().parent / "probe_plugin"
        build = os.path.join(workdir, "probe-source")
        shutil.copytree(source, build)
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", target, build]
        if importlib.util.find_spec("setuptools") is not None:
            cmd.insert(4, "--no-build-isolation")
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    return target


def time_to_first_iteration(backend: str, workdir: str) -> tuple:
    """Seconds from starting collbench to the last rank's first timed iteration, as the probe
    backend of that name (``probe-mpi``, ``probe-gloo``) reports it."""
    path = os.pathsep.join(p for p in (probe_plugin(workdir), os.environ.get("PYTHONPATH", ""))
                           if p)
    env = clean_env(PYTHONPATH=path, PROBE_CALL="2")
    start = time.time()
    proc, wall = run(collbench_cmd("allreduce", "-n", str(RANKS), "--backend", f"probe-{backend}",
                                   "--sizes", "8",
                                   "--iters", "5", "--warmup", "0", "--rounds", "1", "--no-save",
                                   "-q"),
                     cwd=workdir, env=env)
    stamps = [float(m) for m in re.findall(r"collbench-probe: rank \d+ first timed iteration at "
                                           r"([0-9.]+)",
                                           proc.stderr)]
    if len(stamps) != RANKS:
        raise SystemExit(f"start-up probe: expected {RANKS} probe lines, got "
                         f"{len(stamps)}:\n{proc.stderr[-2000:]}")
    return max(stamps) - start, wall


# 4. Sweep time
#    ---------------------------------------------------------------------------------------

def sweep(workdir: str) -> None:
    section(f"4. sweep time: collbench all -n {RANKS} --backend mpi --sizes 8-1M")
    base = ["all", "-n", str(RANKS), "--backend", "mpi", "-q", "--force"]
    adaptive = Path(workdir, "adaptive.json")
    _, wall = run(collbench_cmd(*base, "--sizes", "8-1M", "-o", str(adaptive)), cwd=workdir)
    rows = json.loads(adaptive.read_text())["rows"]
    reached = sum(r["precision_reached"] for r in rows)
    missed = [f"{r['collective']} {format_size(r['size_bytes'])}" for r in rows
              if not r["precision_reached"]]
    iters = sum(r["iterations"] for r in rows)
    print(f"  adaptive (defaults: {rows[0]['rounds']} rounds, precision 2 %, max-time 1 s): "
          f"{wall:.1f} s, {len(rows)} rows, {reached} reached precision, "
          f"{iters:,} timed iterations")
    if missed:
        print("    not reached: " + ", ".join(missed))
    fixed_wall, fixed_rows = 0.0, []
    for sizes, iters_n, warmup in (("8-4K", 1000, 200), ("8K-1M", 100, 10)):
        path = Path(workdir, f"osu-{iters_n}.json")
        _, w = run(collbench_cmd(*base, "--sizes", sizes, "--iters", str(iters_n), "--warmup",
                                 str(warmup), "--rounds", "1", "-o", str(path)), cwd=workdir)
        fixed_wall += w
        fixed_rows += json.loads(path.read_text())["rows"]
    fixed_reached = sum(r["precision_reached"] for r in fixed_rows)
    print("  fixed OSU-like counts (1000 iterations + 200 warm-up below 8 KiB, 100 + 10 from 8 "
          f"KiB; two runs): {fixed_wall:.1f} s, {len(fixed_rows)} rows, {fixed_reached} reached "
          "precision")
    print(f"  adaptive / fixed wall time: {wall / fixed_wall:.2f}")
    record("sweep wall time, adaptive", f"{wall:.1f} s", f"< {SWEEP_S_MAX:.0f} s",
           wall < SWEEP_S_MAX)
    record("rows reaching precision, adaptive", f"{reached}/{len(rows)}",
           f">= {SWEEP_REACHED_MIN:.0%}",
           reached >= SWEEP_REACHED_MIN * len(rows))
    record("sweep wall time, fixed OSU-like",
           f"{fixed_wall:.1f} s ({fixed_reached}/{len(fixed_rows)} reached)",
           "(info)", None)


# 5. Memory
#    ------------------------------------------------------------------------------------------

def peak_rss(mpiexec: str, args: list, workdir: str) -> tuple:
    """(peak RSS in bytes of each rank, wall seconds, stderr) of collbench ARGS under mpiexec."""
    env = clean_env()
    cmd = mpiexec_command(mpiexec, RANKS, [sys.executable, str(HERE / "_peak_rss.py"), *args], env)
    proc, wall = run(cmd, cwd=workdir, env=env)
    found = re.findall(r"peak-rss: rank (\S+) vmhwm_kib (\d+)", proc.stderr)
    if len(found) != RANKS:
        raise SystemExit(f"peak RSS: expected {RANKS} lines, got "
                         f"{len(found)}:\n{proc.stderr[-2000:]}")
    return [int(kib) * 1024 for _, kib in sorted(found)], wall, proc.stderr


def memory(mpiexec: str, workdir: str, top: str) -> None:
    section(f"5. memory: peak RSS per rank, --sizes 1K-{top} --iters 3, check on")
    mib = 2 ** 20
    base, _, _ = peak_rss(mpiexec, ["allreduce", "--sizes", "1K", "--iters", "3", "--rounds", "1",
                                    "--no-save", "-q"],
                          workdir)
    print(f"  baseline (allreduce at 1K only): {max(base) / mib:.0f} MiB per rank")
    largest = parse_bytes(top)
    for name in ("allreduce", "alltoall"):
        peaks, wall, err = peak_rss(mpiexec,
                                    [name, "--sizes", f"1K-{top}", "--iters", "3", "--rounds", "1",
                                              "--no-save", "-q"],
                                    workdir)
        if "skipped" in err:
            print("  note: " + "; ".join(line for line in err.splitlines() if "skipped" in line))
        send, recv = get_benchmark(name).lengths(largest // 4, RANKS)
        buffers = (send + recv) * 4
        ratio = max(peaks) / buffers
        print(f"  {name:<9}: peak "
              + ", ".join(f"rank {r} {p / mib:.0f} MiB" for r, p in enumerate(peaks))
              + f"; largest buffer set (send + receive, {format_size(largest)}) "
              f"{buffers / mib:.0f} MiB; ratio {ratio:.2f} ({wall:.0f} s)")
        record(f"peak RSS / buffers, {name}", f"{ratio:.2f}x", f"<= {MEMORY_FACTOR_MAX:.0f}x",
               ratio <= MEMORY_FACTOR_MAX)


# Report
# ----------------------------------------------------------------------------------------------

def machine() -> str:
    from importlib.metadata import PackageNotFoundError, version

    def package(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    probe = subprocess.run([sys.executable, "-c", "from mpi4py import MPI; "
                            "print(MPI.Get_library_version().strip().splitlines()[0])"],
                           capture_output=True, text=True, env=clean_env(), timeout=60)
    library = " ".join(probe.stdout.split()) or "MPI library unknown"
    return (f"{cpu_model()}, {os.cpu_count()} cores, {platform.platform()}; Python "
            f"{platform.python_version()}, {library}, mpi4py {package('mpi4py')}, numpy "
            f"{package('numpy')}, torch {package('torch')}")


def summary(started: float) -> int:
    section("summary")
    print(f"  machine: {machine()}")
    print(f"  date: {time.strftime('%Y-%m-%d %H:%M %Z')}; load average before: {LOAD_BEFORE}; "
          f"after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    width = max(len(r[0]) for r in results)
    mwidth = max(len(r[1]) for r in results)
    twidth = max(len(r[2]) for r in results)
    for figure, measured, target, ok in results:
        verdict = "" if ok is None else ("PASS" if ok else "MISS")
        print(f"  {figure:<{width}}  {measured:>{mwidth}}  {target:<{twidth}}  {verdict}".rstrip())
    misses = [r for r in results if r[3] is False]
    print(f"  {len(results) - len(misses)} of {len(results)} figures on target or informative, "
          f"{len(misses)} missed; benchmark took {time.perf_counter() - started:.0f} s")
    return 1 if misses else 0


LOAD_BEFORE = ""


def main() -> int:
    global LOAD_BEFORE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions (about half the time)")
    parser.add_argument("--pairs", type=int,
                        help="A/B pairs per harness-vs-bare case [default: 40, quick 20]")
    parser.add_argument("--only", default="1,2,3,4,5",
                        help="comma list of sections to run, e.g. 2,5")
    parser.add_argument("--memory-top", default="256M",
                        help="largest size of the memory figure [256M]")
    args = parser.parse_args()
    started = time.perf_counter()
    LOAD_BEFORE = " ".join(f"{x:.2f}" for x in os.getloadavg())
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise SystemExit('no mpiexec beside Python or on PATH; pip install "collbench[mpich]"')
    only = set(args.only.split(","))
    pairs = args.pairs or (20 if args.quick else 40)
    repeats = 3 if args.quick else 5
    print(f"collbench overhead benchmark: {sys.executable}, {mpiexec}, {RANKS} ranks")
    with tempfile.TemporaryDirectory(prefix="collbench-overhead-") as workdir:
        if "1" in only:
            harness_cost(200_000 if args.quick else 1_000_000, repeats)
        if "2" in only:
            side_by_side(mpiexec, pairs, workdir)
        if "3" in only:
            startup(workdir, repeats)
        if "4" in only:
            sweep(workdir)
        if "5" in only:
            memory(mpiexec, workdir, args.memory_top)
    return summary(started)


if __name__ == "__main__":
    sys.exit(main())
