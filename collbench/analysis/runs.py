"""The runs and rounds inside a result file, as compare and report need them: which rounds ran
on a busy host, which run each round came from, each row's round medians grouped by run, and
the drift of whole runs (assumed from the rounds' spread, or measured over merged runs)."""

from __future__ import annotations

import math

import numpy as np

from collbench.measure.distributions import chi2_quantile
from collbench.measure.runstats import drift_between_runs
from collbench.results.records import RunResult

#: Run-to-run spread (sd of log round medians) assumed when neither file has two rounds of a
#: row: about the largest seen per row on a noisy 2-core VM (benchmarks/README.md), so that a
#: one-round comparison flags only changes far beyond what launches alone do there.
ASSUMED_LOG_SD = 0.25
#: Whole runs made minutes apart move together (a machine-wide factor) by this fraction of the
#: typical spread between the rounds of one run, unless a file merged from three or more runs
#: measures more. Calibrated on a shared 2-core VM, where it measured about 0.6 (benchmarks/README.md).
DRIFT_FACTOR = 0.75


def _round_records(result: RunResult) -> list:
    records = result.metadata.get("rounds")
    return records if isinstance(records, list) else []


def busy_rounds(result: RunResult) -> dict:
    """Round number -> the CPU cores other processes used, for rounds recorded as busy."""
    out = {}
    for record in _round_records(result):
        if not isinstance(record, dict):
            continue
        load = record.get("load") if isinstance(record.get("load"), dict) else {}
        if load.get("busy") is True and isinstance(record.get("round"), int):
            out[record["round"]] = load.get("other_cpu_cores")
    return out


def run_ids(result: RunResult) -> dict:
    """Round number -> the run it belongs to (rounds of one invocation share one; files merged
    from several runs keep theirs). Rounds without a record belong to one unnamed run."""
    return {r["round"]: str(r.get("run_id", "")) for r in _round_records(result)
            if isinstance(r, dict) and isinstance(r.get("round"), int)}


def rounds_by_run(result: RunResult, i: int, busy: dict, ids: dict) -> tuple:
    """(round medians grouped by run, whether they all come from busy rounds)."""
    row = result.rows[i]
    pairs = list(zip(result.round_numbers(i), row.time_us_round_p50s))
    quiet = [(n, m) for n, m in pairs if n not in busy]
    chosen = quiet or pairs
    runs: dict = {}
    for number, median in chosen:
        runs.setdefault(ids.get(number, ""), []).append(median)
    return list(runs.values()), not quiet and bool(pairs)


def estimate_drift(spreads: list, sides: list, assumed_log_sd: float = ASSUMED_LOG_SD) -> tuple:
    """((sd, df), description) of the drift of whole runs: DRIFT_FACTOR times the typical
    spread of rounds within a run, or what a side merged from enough runs measured, whichever
    is larger. ``sides``: per side, every row's rounds grouped by run. One machine-wide value:
    the factor moves every row alike."""
    measured = [p for p in spreads if p.source != "assumed"]
    typical = float(np.median([p.log_sd for p in measured])) if measured else assumed_log_sd
    # The typical spread over many rows is known precisely: the assumption is what is uncertain.
    assumed = DRIFT_FACTOR * typical
    best = ((assumed, math.inf), f"assumed: {DRIFT_FACTOR:g} × the rounds' typical spread")
    for rows in sides:
        found = drift_between_runs([runs for runs in rows if runs])
        # A side of several runs that drifted clearly more than assumed (beyond the 95th
        # percentile of what the assumption allows for that many runs) overrules it.
        if found is not None and found[0] ** 2 > assumed ** 2 * chi2_quantile(0.95, found[1]) / found[1] \
                and found[0] > best[0][0]:
            best = (found, f"measured over {int(found[1]) + 1} runs")
    return best


def round_warnings(baseline: RunResult, new: RunResult, baseline_name: str, new_name: str, busy_base: dict,
                    busy_new: dict, compared, assumed_log_sd: float) -> list:
    notes = []
    for name, result, busy in ((baseline_name, baseline, busy_base), (new_name, new, busy_new)):
        if busy:
            total = len(_round_records(result))
            worst = max((v for v in busy.values() if isinstance(v, (int, float))), default=math.nan)
            notes.append(f"{name}: {len(busy)} of {total} round(s) ran while other processes used up to "
                         f"{worst:.2f} CPU cores beyond the idle ones; "
                         + ("they are left out where quiet rounds remain"
                            if len(busy) < total else "no row of it can be called slower or faster"))
    if any(r.noise == "assumed" for r in compared):
        notes.append(f"neither file has two or more rounds of some rows: their run-to-run spread is assumed "
                     f"to be {assumed_log_sd:.0%} (sd of log medians), so only large changes are called; "
                     f"measure with --rounds 3 or more")
    return notes
