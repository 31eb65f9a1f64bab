"""``collbench merge``: several runs of one sweep as one file, their rounds side by side.

A baseline made of runs taken at different times is what lets ``compare`` see how far whole
runs drift on a machine (``stats.runs.drift_between_runs``), and gives each row more rounds.
Rounds are renumbered one file after the other; each keeps the ``run_id`` of the run it
came from (files without one, version 1 files among them, get one named after the file), and
its busy flag. Rows are rebuilt from their rounds; a row missing from some files simply has
fewer rounds.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from collbench.results.aggregate import build_row, moderate_rows
from collbench.results.records import RowIdentity, RunResult, backend_label, windows_sent
from collbench.benchmarks.registry import BENCHMARKS
from collbench.analysis.comparability import metadata_warnings
from collbench.errors import UsageError, printable
from collbench.stats.calibration import NOISY_RUN_FACTOR


def _bus_factor(row) -> float:
    collective = BENCHMARKS.get(row.collective)
    if collective is not None:
        return collective.bus_factor(row.world_size)
    # a collective this version lacks
    return row.busbw_gbps / row.algbw_gbps if row.algbw_gbps else 1.0


def _round_kind(settings: dict):
    """A run's kind of rounds (launch, communicator, ...): text, or None where the file does not
    say."""
    kind = settings.get("round_kind")
    return kind if kind is None or isinstance(kind, str) else str(kind)


def merge_runs(named: list) -> tuple:
    """(RunResult, warnings) from [(name, RunResult), ...] in the order given."""
    if len(named) < 2:
        raise UsageError("merge needs two or more result files")
    first_name, first = named[0]
    rows: dict = {}
    records: list = []
    sources: list = []
    warnings: list = []
    offset = 0
    seen: dict = {}
    for name, result in named:
        if result.metadata.get("format") == "csv":
            raise UsageError(f"{name}: a CSV has no rounds to merge; merge the JSON files")
        if result is not first:
            warnings += metadata_warnings(first, result, first_name, name)
        run_id = str(result.metadata.get("run_id") or Path(name).name)
        for part in run_id.split("+"):
            if part in seen:
                raise UsageError(f"{seen[part]} and {name} hold the same run ({part}); merge each "
                                 "run once")
            seen[part] = name
        own = {r["round"]: r for r in (result.metadata.get("rounds") or []) if isinstance(r, dict)
               and isinstance(r.get("round"), int)}
        numbers = sorted({d.round for data in result.rounds for d in data} | set(own))
        renumber = {n: offset + i + 1 for i, n in enumerate(numbers)}
        for n in numbers:
            record = dict(own.get(n) or {"round": n})
            record["run_id"] = str(record.get("run_id") or run_id)
            record["round"] = renumber[n]
            records.append(record)
        keys: set = set()
        for row, data in zip(result.rows, result.rounds):
            if not data:
                raise UsageError(f"{name}: row {row.collective} {row.backend} {row.size_bytes} has "
                                 "no rounds to merge")
            if row.key() in keys:         # one run measures each row once: which copy would count?
                raise UsageError(f"{name}: two rows for {row.collective} {backend_label(row)} "
                                 f"{row.size_bytes} B {row.timing}; merge files of one run each")
            keys.add(row.key())
            entry = rows.setdefault(row.key(), [row, []])
            entry[1] += [dataclasses.replace(d, round=renumber[d.round]) for d in data]
        sources.append({"file": str(name), "run_id": run_id,
                        "timestamp": result.metadata.get("timestamp"),
                        "rounds": len(numbers)})
        offset += len(numbers)
    settings = (first.metadata.get("settings")
                if isinstance(first.metadata.get("settings"), dict) else {})
    kinds = {_round_kind(r.metadata["settings"]) for _, r in named
             if isinstance(r.metadata.get("settings"), dict)}
    settings = {**settings, "rounds": offset,
                "round_kind": kinds.pop() if len(kinds) == 1 else "mixed"}
    merged = RunResult(metadata={**first.metadata, "settings": settings, "rounds": records,
                                 "merged_from": sources,
                                 "run_id": "+".join(s["run_id"] for s in sources)})
    mixed = []
    for row, data in rows.values():
        data.sort(key=lambda d: d.round)
        merged.add(build_row(RowIdentity.of(row, _bus_factor(row)), data), tuple(data))
        sent = windows_sent(data, row.window)
        if len(sent) > 1:
            mixed.append((row, sent))
    if mixed:       # one run shrank a slow pair's window, another did not, or to another size
        first, sent = mixed[0]
        warnings.append(f"{len(mixed)} row(s) sent other windows in some of the runs "
                        f"({first.collective}{' pair ' + first.pair if first.pair else ''} at "
                        f"{first.size_bytes} B: {', '.join(map(str, sorted(sent)))}): their rounds "
                        "mix windows, and window_used gives the smallest")
    merged.rows[:] = moderate_rows(merged.rows)
    merged.notes.extend(note for _, result in named for note in result.notes
                        if note not in merged.notes)
    warnings += _runs_apart(named, merged)
    shared = set.intersection(*({r.key() for r in result.rows} for _, result in named))
    if not shared:           # runs of two sweeps: the file is their union, no row has more rounds
        warnings.append("the files share no row (another sweep, collective or backend): the merged "
                        "file holds each file's rows with their own rounds only")
    return merged, warnings


def _runs_apart(named: list, merged: RunResult) -> list:
    """What a merged baseline should know of its runs, by the rules compare reads it with
    (``runs.FileRounds``): a run set aside as a slow state of the machine, and a run left out
    as noisy."""
    from collbench.analysis.runs import FileRounds

    names = {str(r.metadata.get("run_id") or Path(name).name): name for name, r in named}
    rounds = FileRounds.of(merged)
    out = [f"{printable(names.get(run_id, run_id))}: its sweep lay {math.expm1(distance):+.0%} "
           "above the fastest run's on most rows, a state of the machine that outlasted its "
           "launches; compare sets it aside"
           for run_id, distance in rounds.slow.items()]
    out += [f"{printable(names.get(run_id, run_id))}: it lost {share:.0%} of its rounds as "
            f"interference (the median over rows), over {NOISY_RUN_FACTOR:g}x the other runs' "
            "share: it ran in a noisy period, and compare leaves it out; measure it again"
            for run_id, share in rounds.noisy.items()]
    return out
