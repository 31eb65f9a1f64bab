"""The noise model on one H100's files (issue 32): what the intervals and compare say there.

The files are those of ``../shared/data/h100`` (copies, samples cut to 8 per round, in
``tests/data/h100``): ``nccl-all.json`` (every collective on nccl, 1K-1G, 3 rounds, world size
1) and two runs of allreduce (``cb-ar-1.json``, ``cb-ar-2.json``). It prints

* allgather 1G's 95% CI, as the file wrote it and as the code rebuilds it from its rounds;
* how many rows are marked ‡ (rounds disagree), as written and rebuilt;
* ``compare nccl-all.json nccl-all.json`` at 5%: the rows of 64M and more called same, over the
  15 bandwidth-bound rows and over all 24 (at one rank allreduce, bcast and reduce are in place
  and do nothing: ~22 µs of torch's overhead at every size, with bimodal rounds);
* the same against a copy whose rows of 64M and more are 10% slower (round medians, round CIs
  and samples scaled): the rows called slower there, and any row below 64M called slower;
* ``compare cb-ar-1.json cb-ar-2.json``: verdicts and what the rows can detect.

* with ``--runs``: over ten runs of the same sweep on the H100 (2026-11-27: ``nccl-all-2.json``
  and ``-3.json`` from two sessions, ``benchmarks/data/h100-runs/run-*.json`` back to back in a
  third, five rounds each), how often one run's 95% CI holds another run's p50 and the
  geometric mean of the other nine runs' p50s, by kind of row, and what ``compare`` says of every
  ordered pair (an A/A test: the code is the same).

    python benchmarks/noise_h100.py                    # the code of this tree
    python benchmarks/noise_h100.py --repo /tmp/before # the code of another tree (before/after)
    python benchmarks/noise_h100.py --runs             # run to run, ten H100 runs
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
M64 = 64 << 20
IN_PLACE = {"allreduce", "bcast", "reduce"}


def scaled_copy(path: Path, factor: float, min_size: int, out: Path) -> Path:
    """The file with every row of ``min_size`` bytes or more ``factor`` times slower: its round
    medians, round CIs, samples and figures."""
    doc = json.loads(path.read_text())
    for row in doc["rows"]:
        if row["size_bytes"] < min_size:
            continue
        for name in ("time_us_p50", "time_us_ci_low", "time_us_ci_high", "time_us_mean",
                     "time_us_min", "time_us_p95",
                     "time_us_p99", "time_us_max", "time_us_rank_avg", "slowest_rank_us"):
            if row.get(name) is not None:
                row[name] *= factor
        row["algbw_gbps"] /= factor
        row["busbw_gbps"] /= factor
        row["time_us_round_p50s"] = [m * factor for m in row["time_us_round_p50s"]]
        for d in row.get("round_details") or []:
            for name in ("time_us_p50", "time_us_ci_low", "time_us_ci_high"):
                d[name] *= factor
            for name in ("samples_us", "rank_means_us"):
                if d.get(name):
                    d[name] = [v * factor for v in d[name]]
    out.write_text(json.dumps(doc))
    return out


def _shares(values) -> str:
    values = [v for v in values if math.isfinite(v)]
    return f"{min(values):.1%}–{max(values):.1%}" if values else "-"


def _summary(c) -> str:
    counts = Counter(r.verdict for r in c.rows)
    detect = [r.detectable for r in c.rows if r.rounds_baseline]
    within = [d for d in detect if math.isfinite(d) and d <= c.threshold]
    return (f"{counts['slower']} slower, {counts['faster']} faster, {counts['same']} same, "
            f"{counts['inconclusive']} inconclusive; detects {_shares(detect)} "
            f"({len(within)} row(s) {_shares(within)} within the threshold)")


def _big(c, verdict: str) -> str:
    big = [r for r in c.rows if r.field("size_bytes") >= M64]
    bandwidth = [r for r in big if r.field("collective") not in IN_PLACE]
    a, b = sum(r.verdict == verdict for r in bandwidth), sum(r.verdict == verdict for r in big)
    return (f"{verdict} among rows >= 64M: {a} of {len(bandwidth)} bandwidth-bound "
            f"({a / len(bandwidth):.0%}), {b} of {len(big)} in all ({b / len(big):.0%})")


def _kind(collective: str, size: int) -> str:
    if collective in IN_PLACE:
        return "in place at one rank (torch's overhead alone)"
    if collective == "barrier":
        return "barrier"
    return ("bandwidth-bound (out of place, >= 64M)"
            if size >= M64 else "out of place, < 64M (torch's overhead)")


def run_to_run(paths: list, threshold: float) -> None:
    """Every ordered pair of runs: does the first's CI hold the second's p50, per kind of row; and
    what compare calls (rows slower or faster: false alarms, the code being the same)."""
    from collbench.analysis.compare import compare_runs
    from collbench.results.aggregate import moderate_rows
    from collbench.results.loader import load_result

    results = [load_result(p) for p in paths]
    rows = [{(r.collective, r.size_bytes, r.timing): r for r in moderate_rows(x.rows)}
            for x in results]
    held: Counter = Counter()
    pairs: Counter = Counter()
    for a, mine in enumerate(rows):
        for b, theirs in enumerate(rows):
            if a == b:
                continue
            for key, row in mine.items():
                if key in theirs:
                    kind = _kind(key[0], key[1])
                    pairs[kind] += 1
                    held[kind] += (row.time_us_ci_low <= theirs[key].time_us_p50
                                   <= row.time_us_ci_high)
    # What the other runs settle on: the geometric mean of their p50s (as benchmarks/coverage.py's
    # "next runs" line on the CPU). A 95% CI of the row's own time should hold it about 95% of
    # the time; a single other run's p50 carries that run's own error too, so a CI that is right
    # holds it less often (about 83% where both errors are alike and normal).
    settled: Counter = Counter()
    rounds: Counter = Counter()
    for a, mine in enumerate(rows):
        for key, row in mine.items():
            others = [math.log(theirs[key].time_us_p50) for b, theirs in enumerate(rows)
                      if b != a and key in theirs and theirs[key].time_us_p50 > 0]
            if len(others) >= 2:
                kind = _kind(key[0], key[1])
                rounds[kind] += 1
                settled[kind] += (row.time_us_ci_low <= math.exp(sum(others) / len(others))
                                  <= row.time_us_ci_high)
    print(f"{len(paths)} runs: one run's 95% CI holds another's p50 (ideal about 83%) | what the "
          "others settle on (ideal 95%)")
    for kind in sorted(pairs):
        print(f"  {kind:<46} {held[kind]:>5}/{pairs[kind]:<5} {held[kind] / pairs[kind]:4.0%} | "
              f"{settled[kind]:>4}/{rounds[kind]:<4} {settled[kind] / max(rounds[kind], 1):4.0%}")
    total, flagged, exits = 0, Counter(), 0
    for a, base in enumerate(results):
        for b, new in enumerate(results):
            if a == b:
                continue
            c = compare_runs(base, new, threshold=threshold)
            total += len(c.rows)
            flagged.update(r.verdict for r in c.rows if r.verdict in ("slower", "faster"))
            exits += c.regression
    n = len(results) * (len(results) - 1)
    print(f"compare of every ordered pair at {threshold:.0%} (A/A): rows slower "
          f"{flagged['slower']}, faster {flagged['faster']} of {total} "
          f"({(flagged['slower'] + flagged['faster']) / total:.2%}); comparisons exiting 1: "
          f"{exits}/{n}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(HERE / "tests" / "data" / "h100"),
                        help="folder of the H100 files")
    parser.add_argument("--repo", default=str(HERE), help="the collbench tree whose code to run")
    parser.add_argument("--threshold", type=float, default=0.05)
    parser.add_argument("--runs", action="store_true",
                        help="run to run over the ten H100 runs of 2026-11-27")
    args = parser.parse_args()
    sys.path.insert(0, args.repo)
    if args.runs:
        here = Path(args.data)
        run_to_run([here / "nccl-all-2.json", here / "nccl-all-3.json",
                    *sorted((HERE / "benchmarks" / "data" / "h100-runs").glob("run-*.json"))],
                   args.threshold)
        return 0
    from collbench.analysis.compare import compare_runs
    from collbench.results.aggregate import moderate_rows
    from collbench.results.loader import load_result

    data = Path(args.data)
    nccl = load_result(data / "nccl-all.json")
    rebuilt = moderate_rows(nccl.rows)
    for label, rows in (("as written", nccl.rows), ("rebuilt", rebuilt)):
        row = next(r for r in rows if r.collective == "allgather" and r.size_bytes == 1 << 30)
        print(f"allgather 1G {label}: {row.time_us_p50:.1f} µs, 95% CI "
              f"{row.time_us_ci_low:.1f}–{row.time_us_ci_high:.1f} "
              f"({row.time_us_ci_low / row.time_us_p50 - 1:+.2%} "
              f"{row.time_us_ci_high / row.time_us_p50 - 1:+.2%}); ‡ on "
              f"{sum(r.rounds_disagree for r in rows)} of {len(rows)} rows")
    itself = compare_runs(nccl, nccl, threshold=args.threshold)
    print(f"compare nccl-all nccl-all at {args.threshold:.0%}: {_summary(itself)}")
    print(f"  {_big(itself, 'same')}")
    with tempfile.TemporaryDirectory() as tmp:
        slow = load_result(scaled_copy(data / "nccl-all.json", 1.1, M64, Path(tmp) / "slow.json"))
    c = compare_runs(nccl, slow, threshold=args.threshold)
    below = sum(r.verdict == "slower" for r in c.rows if r.field("size_bytes") < M64)
    print(f"compare nccl-all (rows >= 64M 10% slower) at {args.threshold:.0%}: {_summary(c)}")
    print(f"  {_big(c, 'slower')}; rows below 64M called slower: {below}")
    for r in c.rows:
        if r.field("size_bytes") >= M64 and r.verdict != "slower":
            print(f"    {r.field('collective')} {r.field('size_bytes') >> 20}M: {r.verdict}, CI "
                  f"{r.change_low:+.1%}…{r.change_high:+.1%}, rounds "
                  f"{r.rounds_baseline}/{r.rounds_new}")
    ar = compare_runs(load_result(data / "cb-ar-1.json"), load_result(data / "cb-ar-2.json"),
                      threshold=args.threshold)
    print(f"compare cb-ar-1 cb-ar-2 at {args.threshold:.0%}: {_summary(ar)}; drift: "
          f"{ar.drift_source}")
    for warning in ar.warnings:
        print(f"  warning: {warning}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
