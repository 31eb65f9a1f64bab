"""The runs and rounds inside a result file, as compare and report need them: which rounds ran
on a busy host, which run each round came from, the file's noise model and each row's prior
from it (``stats.noise``), each row's counted round medians grouped by run (interference set
aside, ``noise.clean_rounds``), and the drift of whole runs (assumed as a multiple of each
row's modelled spread, or measured over merged runs)."""

from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass

import numpy as np

from collbench.results.aggregate import file_noise, noise_stratum
from collbench.results.records import RunResult
from collbench.stats.calibration import ASSUMED_LOG_SD, NOISY_RUN_FACTOR, NOISY_RUN_SHARE
from collbench.stats.noise import clean_rounds, interference_window
from collbench.stats.rounds import row_clean_sd
from collbench.stats.runs import floor_gap, slow_runs


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


def cpu_shares(result: RunResult) -> dict:
    """Round number -> (the smallest share of their usable cores that a host's ranks used, the
    most ranks on one host), for rounds whose every host recorded it (``cpuload.round_load``)."""
    out = {}
    for record in _round_records(result):
        load = (record.get("load")
                if isinstance(record, dict) and isinstance(record.get("load"), dict) else {})
        hosts = load.get("hosts") if isinstance(load.get("hosts"), dict) else {}
        shares = [(h.get("cpu_share"), h.get("ranks")) for h in hosts.values()
                  if isinstance(h, dict)]
        if shares and isinstance(record.get("round"), int) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and v > 0 for pair in shares for v in pair):
            out[record["round"]] = (float(min(v for v, _ in shares)),
                                    int(max(r for _, r in shares)))
    return out


def run_ids(result: RunResult) -> dict:
    """Round number -> the run it belongs to (rounds of one invocation share one; files merged
    from several runs keep theirs). Rounds without a record belong to one unnamed run."""
    return {r["round"]: str(r.get("run_id", "")) for r in _round_records(result)
            if isinstance(r, dict) and isinstance(r.get("round"), int)}


@dataclass(frozen=True)
class SideRounds:
    """One side's rounds of one row, as a comparison uses them."""

    runs: list              # the counted round medians, grouped by run
    set_aside: int          # rounds set aside as interference (or as a lone fast round, or in a
                            # slow run)
    busy_share: float       # the share of the counted rounds that ran on a busy machine
    fast_gap: float         # log distance from the counted rounds down to a lone faster round, else
                            # 0: which of the two is the row's own time is uncertain by that much
    by_round: dict          # round number -> counted median
    floor_var: float        # how far below its counted mean each run's fastest round lay, squared
                            # and weighted as one run's drift is (``stats.runs.floor_gap``)
    run_keys: tuple = ()    # the run id of each group in ``runs``
    cpu_share: float = math.nan   # the median over counted rounds of the share of their usable
                                  # cores the ranks used (``cpu_shares``); nan where a round did not
                                  # record it
    ranks_per_host: int = 0       # the most ranks one host had in those rounds
    fastest: float = math.nan     # log of the fastest counted round
    positive: int = 0             # its rounds with a median, counted or not
    reach_runs: tuple = ()        # per run, a slow run set aside among them, how slow each of its
                                  # rounds ran: its log, plus the interference window where it was
                                  # set aside above (``state_reach``)
    measured: dict = dataclasses.field(default_factory=dict)   # round number -> median, counted or
                                                               # not (the
                                  # pairs of an interleaved job: what moved both sides cancels in a
                                  # pair)


@dataclass(frozen=True)
class FileRounds:
    """A file's rounds as a comparison or a report reads them, worked out once per file: each
    row's prior from the file's noise model, which run and which busy host each round had, and
    the runs of a merged file set aside as interference (``stats.runs.slow_runs``)."""

    result: RunResult
    priors: tuple                  # per row: its noise.SpreadPrior, or None without a model
    ids: dict                      # round number -> run id
    busy: dict                     # round number -> other processes' CPU cores, busy rounds only
    shares: dict                   # round number -> (share of usable cores the ranks used, ranks
                                   # per host)
    slow: dict                     # run id -> log distance of its sweep above the fastest run's
    kept_spread: float = math.nan  # with runs set aside: how far the kept runs' sweeps spread
                                   # (their drift), in units of each row's clean spread
                                   # (``stats.runs.slow_runs``)
    noisy: dict = dataclasses.field(default_factory=dict)   # run id -> its rounds' spread, for runs
                                                            # of a merged
                                   # file that ran in a noisy period (``noisy_runs``): set aside

    @classmethod
    def of(cls, result: RunResult) -> "FileRounds":
        model = file_noise(result.rows)
        priors = tuple(model.noise(r.time_us_round_p50s, noise_stratum(r))
                       if model is not None else None for r in result.rows)
        every = cls(result, priors, run_ids(result), busy_rounds(result), cpu_shares(result), {})
        rows = [every.row(i) for i in range(len(result.rows))]
        keys = list(dict.fromkeys(k for side in rows for k in side.run_keys))
        aligned = [[dict(zip(side.run_keys, side.runs)).get(k, []) for k in keys] for side in rows]
        distance, kept = slow_runs(aligned,
                                   [row_clean_sd(p) for p in priors]) if keys else ([], math.nan)
        slow = {k: float(d) for k, d in zip(keys, distance) if d > 0}
        noisy = noisy_runs(result, every.ids, [row_clean_sd(p) for p in priors])
        if noisy:
            every = dataclasses.replace(every, noisy=noisy)
        return dataclasses.replace(every, slow=slow, kept_spread=kept) if slow else every

    @property
    def runs(self) -> int:
        return len(set(self.ids.values())) or 1

    def clean_sd(self, i: int) -> float:
        """Row ``i``'s clean spread, which sets its interference window (nan without a model)."""
        return row_clean_sd(self.priors[i])

    def row(self, i: int) -> SideRounds:
        """Row ``i``'s rounds as a comparison counts them, judged run by run (the runs merged into
        a baseline drift apart; each has its own fastest round). Busy rounds count like any
        other: what a neighbour added shows in the round's median, and the rounds far above their
        run's fastest are set aside whatever the CPU meter said; so are a slow run's."""
        row = self.result.rows[i]
        clean_sd = self.clean_sd(i)
        grouped: dict = {}
        for number, median in zip(self.result.round_numbers(i), row.time_us_round_p50s):
            grouped.setdefault(self.ids.get(number, ""), []).append((number, median))
        # per_run: (counted rounds, fast gap, floor gap)
        runs, keys, by_round, per_run = [], [], {}, []
        busy_counted = positive = 0
        window = interference_window(clean_sd)
        # per run: how slow each round ran (state_reach)
        reach_runs = []
        measured = {}
        for key, entries in grouped.items():
            medians = [m for _, m in entries]
            positive += sum(map(_measured, medians))
            if key in self.noisy:
                continue
            measured.update((n, m) for n, m in entries if _measured(m))
            if key in self.slow:
                reach_runs.append(tuple(math.log(m) + window for m in medians if _measured(m)))
                continue
            keep = clean_rounds(medians, clean_sd)
            top = max((m for m, k in zip(medians, keep) if k), default=math.inf)
            reach_runs.append(tuple(math.log(m) + (window if not k and m > top else 0.0)
                                    for m, k in zip(medians, keep) if _measured(m)))
            counted = [(n, m) for (n, m), k in zip(entries, keep) if k]
            if not counted:
                continue
            runs.append([m for _, m in counted])
            keys.append(key)
            by_round.update(counted)
            busy_counted += sum(n in self.busy for n, _ in counted)
            fastest = math.log(min(m for m in medians if _measured(m)))
            logs = np.log([m for _, m in counted])
            prior = self.priors[i]
            per_run.append((len(logs), float(logs.min()) - fastest,
                            floor_gap(logs, fastest,
                                      prior.log_sd if prior is not None else math.nan)))
        total = len(by_round)
        weighted = [(k / total) ** 2 for k, _, _ in per_run]
        shares = [self.shares.get(n) for n in by_round]
        known = bool(shares) and all(s is not None for s in shares)
        return SideRounds(runs, positive - total, busy_counted / total if total else 0.0,
                          math.sqrt(sum(w * g * g for w, (_, g, _) in zip(weighted, per_run))),
                          by_round,
                          sum(w * f * f for w, (_, _, f) in zip(weighted, per_run)), tuple(keys),
                          float(np.median([s for s, _ in shares])) if known else math.nan,
                          max(r for _, r in shares) if known else 0,
                          math.log(min(by_round.values())) if by_round else math.nan, positive,
                          tuple(reach_runs), measured)


def noisy_runs(result: RunResult, ids: dict, clean_sds: list) -> dict:
    """Run id -> the share of its rounds set aside as interference (the median over rows), for
    the runs of a file merged from three or more that lost most of their rounds, and over
    NOISY_RUN_FACTOR times the other runs' share: a run in a noisy period says little of the
    code, and its slow rounds would excuse any slowdown as a state of the machine."""
    shares: dict = {}
    for i, row in enumerate(result.rows):
        grouped: dict = {}
        for number, median in zip(result.round_numbers(i), row.time_us_round_p50s):
            grouped.setdefault(ids.get(number, ""), []).append(median)
        for key, medians in grouped.items():
            shares.setdefault(key, []).append(
                1.0 - float(np.mean(clean_rounds(medians, clean_sds[i]))))
    medians = {k: float(np.median(v)) for k, v in shares.items()}
    out = {}
    for key, share in medians.items():
        others = [v for k, v in medians.items() if k != key]
        if len(others) >= 2 and share > max(NOISY_RUN_SHARE,
                                            NOISY_RUN_FACTOR * float(np.median(others))):
            out[key] = share
    return out


def _measured(median) -> bool:
    """Whether a round median is a time (not missing, not nan, above 0)."""
    return median is not None and math.isfinite(median) and median > 0


def ab_turns(result: RunResult) -> str:
    """How the sides of an interleaved A/B job took turns: "size" (at once, size by size) or
    "launch" (one launch after the other, as every job before ``--turns`` did)."""
    ab = result.metadata.get("ab")
    return "size" if isinstance(ab, dict) and ab.get("turns") == "size" else "launch"


def ab_job(result: RunResult) -> str:
    """The interleaved A/B job a file is one side of (``collbench ab``); "" for an ordinary run."""
    ab = result.metadata.get("ab")
    return str(ab.get("job", "")) if isinstance(ab, dict) else ""


def round_warnings(files: tuple, names: tuple, compared, set_aside: dict,
                   assumed_log_sd: float = ASSUMED_LOG_SD) -> list:
    """What the rounds say about the machine: busy rounds, interference set aside (rounds, and
    runs of a merged file), rows whose spread had to be assumed. ``files``: each side's
    FileRounds; ``set_aside``: per file name, (rounds set aside, rounds in all)."""
    notes = []
    for name, side in zip(names, files):
        aside, total = set_aside.get(name, (0, 0))
        share = f"{aside} of {total} round medians ({aside / total:.0%})" if total else "none"
        if side.slow:
            above = ", ".join(f"+{math.expm1(d):.0%}" for d in side.slow.values())
            one = len(side.slow) == 1
            notes.append(f"{name}: {len(side.slow)} of {side.runs} merged runs lay far above the "
                         f"fastest run on most rows ({above}) and {'was' if one else 'were'} set "
                         "aside as interference: a state of the machine that outlasted "
                         f"{'its' if one else 'their'} launches")
        if side.noisy:
            lost = ", ".join(f"{v:.0%}" for v in side.noisy.values())
            notes.append(f"{name}: {len(side.noisy)} of {side.runs} merged runs ran in a noisy "
                         f"period ({lost} of their rounds set aside as interference, over "
                         f"{NOISY_RUN_FACTOR:g}x the other runs' share) and "
                         f"{'was' if len(side.noisy) == 1 else 'were'} left out: merge a run "
                         "measured again instead")
        if side.busy:
            rounds_total = len(_round_records(side.result))
            worst = max((v for v in side.busy.values() if isinstance(v, (int, float))),
                        default=math.nan)
            notes.append(f"{name}: {len(side.busy)} of {rounds_total} round(s) ran while other "
                         f"processes used up to {worst:.2f} CPU cores beyond the idle ones (a busy "
                         "machine); every round counts, and those far above their row's fastest "
                         f"are set aside as interference: {share}")
        elif total and aside / total > 0.2 and not side.slow:
            notes.append(f"{name}: {share} lay far above their row's fastest round and were set "
                         "aside as interference: the rounds varied beyond what the rows' noise "
                         "model expects (the load meter saw no other work)")
    single = [r for r in compared if r.noise == "assumed"]
    if single:
        measured_once = all(r.baseline.rounds < 2 and r.new.rounds < 2 for r in single)
        notes.append(f"{len(single)} row(s) have a single counted round on each side: their "
                     f"run-to-run spread is assumed to be {assumed_log_sd:.0%} (sd of log "
                     "medians), so only large changes are called; "
                     + ("measure with --rounds 3 or more" if measured_once else
                        "interference set the other rounds aside: measure again on a quieter "
                        "machine, or with more rounds"))
    return notes
