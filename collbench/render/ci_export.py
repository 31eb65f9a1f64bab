"""Results in the formats of CI benchmark trackers (``github-action-benchmark``, ``bencher``),
so that their charts and alerts can follow a collbench sweep. Pure: a RunResult in, text out
(``collbench export`` writes it).

Each row becomes one benchmark, named by the fields compare matches rows on, so that names
stay the same from run to run and are unique within a file. The formats, the names and what
each entry holds: docs/results-format.md, "Exports for CI trackers".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from collbench.errors import UsageError
from collbench.measure.sizes import format_size
from collbench.results.records import Row, RunResult, backend_label, root_rank, setup_words
from collbench.render.tables import rank_count_text, root_text

LATENCY, BUS_BANDWIDTH = "latency", "bus-bandwidth"      # BMF measure slugs


@dataclass(frozen=True)
class Export:
    text: str
    benchmarks: int          # entries written
    left_out: int            # rows without a finite median time


def benchmark_name(row: Row, root: int = 0) -> str:
    """What the row measured; a row that moves no data (barrier: size 0) has no dtype nor size;
    a rooted collective's root is named when it is not 0, a point-to-point row's pair, window
    and the pairs measured with it where they are not the default (a tracker must not mix them)."""
    data = bool(row.size_bytes)
    rooted = [text for text in [root_text(row.collective, root)] if text]
    parts = ([row.collective, backend_label(row)] + [row.dtype] * data + [row.op]
             * (row.op != "none") + rooted)
    where = setup_words(row) + [f"group {row.group}"] * bool(row.split)
    return " ".join(parts + [rank_count_text(row.world_size)] + [format_size(row.size_bytes)] * data
                    + [row.timing] + where)


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _named_rows(result: RunResult, source: str) -> tuple:
    """([(name, row)] in file order, rows left out); two rows of one name are refused."""
    named, seen, left_out = [], set(), 0
    root = root_rank(result.metadata)
    for row in result.rows:
        if not (_finite(row.time_us_p50) and row.time_us_p50 > 0):
            left_out += 1
            continue
        name = benchmark_name(row, root)
        if name in seen:
            raise UsageError(f"{source}: two rows would be named {name!r}; a benchmark name must "
                             "be unique")
        seen.add(name)
        named.append((name, row))
    return named, left_out


def _ci(row: Row) -> tuple:
    """(low, high) of the median's 95% CI, or None where the file has none."""
    low, high = row.time_us_ci_low, row.time_us_ci_high
    return ((low, high)
            if _finite(low) and _finite(high) and 0 < low <= row.time_us_p50 <= high else None)


def _extra(row: Row, ci) -> str:
    lines = [f"size_bytes: {row.size_bytes}", f"rounds: {row.rounds}",
             f"iterations: {row.iterations}"]
    if ci:
        lines.insert(0, f"95% CI: {ci[0]:.6g} - {ci[1]:.6g} us")
    if _finite(row.busbw_gbps) and row.busbw_gbps > 0:
        lines.append(f"busbw: {row.busbw_gbps:.6g} GB/s")
    return "\n".join(lines + [f"check: {row.check}"])


def github_action_benchmark(named: list) -> list:
    entries = []
    for name, row in named:
        ci = _ci(row)
        entry = {"name": name, "unit": "us", "value": row.time_us_p50}
        if ci:
            entry["range"] = f"± {max(row.time_us_p50 - ci[0], ci[1] - row.time_us_p50):.6g}"
        entry["extra"] = _extra(row, ci)
        entries.append(entry)
    return entries


def _ns(us: float) -> float:
    return round(us * 1e3, 3)


def _gbps(value: float) -> float:
    return float(f"{value:.6g}")          # a derived figure: six significant digits, as in the CSV


def _bounds(low: float, high: float) -> dict:
    """A measure's lower_value and upper_value; none where an end does not fit a JSON number (a
    CI stretched by a wild round to 1e300 µs is 1e303 ns: infinite)."""
    return {"lower_value": low, "upper_value": high} if _finite(low) and _finite(high) else {}


def bencher(named: list) -> dict:
    doc = {}
    for name, row in named:
        ci = _ci(row)
        latency = {"value": _ns(row.time_us_p50)}
        if ci:
            latency.update(_bounds(_ns(ci[0]), _ns(ci[1])))
        measures = {LATENCY: latency}
        if _finite(row.busbw_gbps) and row.busbw_gbps > 0:        # barrier moves no data
            bandwidth = {"value": _gbps(row.busbw_gbps)}
            if ci:         # bandwidth is size / time: the time's CI, inverted
                bandwidth.update(_bounds(_gbps(row.busbw_gbps * row.time_us_p50 / ci[1]),
                                         _gbps(row.busbw_gbps * row.time_us_p50 / ci[0])))
            measures[BUS_BANDWIDTH] = bandwidth
        doc[name] = measures
    return doc


#: target -> the document of [(name, row)]; json.dumps keeps it ASCII (± as \u00b1), whatever the
#: locale.
TARGETS = {"github-action-benchmark": github_action_benchmark, "bencher": bencher}
#: what a target's values are where its format does not say (Bencher's has no units): said
#: whenever they are written
UNITS = {"bencher": "latency in nanoseconds (Bencher's built-in Latency measure), bus-bandwidth in "
                    "GB/s"}


def export(result: RunResult, target: str, source: str = "result") -> Export:
    """The text of ``result`` for ``target`` (a key of TARGETS); ``source`` names it in errors."""
    if target not in TARGETS:
        raise UsageError(f"unknown export target {target!r}: use one of {', '.join(TARGETS)}")
    named, left_out = _named_rows(result, source)
    if not named:
        raise UsageError(f"{source}: no row with a median time to export")
    return Export(json.dumps(TARGETS[target](named), indent=1) + "\n", len(named), left_out)
