"""A row's number is its own: which rounds it sets aside and its p50 come from its own rounds and
fixed rules, so neither the other rows of its file nor a merge moves them (the file's noise
model shapes only the interval and ‡)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "benchmarks" / "data" / "h100-runs"


def _only(path: Path, collective: str, out: Path) -> Path:
    """``path`` as a run of one collective: the same rows, and rounds, as ``collbench gather``
    would write."""
    data = json.loads(path.read_text())
    data["rows"] = [r for r in data["rows"] if r["collective"] == collective]
    out.write_text(json.dumps(data))
    return out


def _merge(tmp_path: Path, name: str, *files: Path) -> dict:
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, "-m", "collbench", "merge", *map(str, files), "-o",
                           str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {(r["collective"], r["size_bytes"]): r for r in json.loads(out.read_text())["rows"]}


def test_a_rows_p50_is_the_same_in_a_file_of_one_collective_and_of_the_whole_sweep(tmp_path):
    """Merging two H100 runs with or without the other collectives used to move gather 1 GiB from
    759.7 to 752.9 µs: the file's model decided which rounds each row set aside."""
    one, two = H100 / "run-1.json", H100 / "run-2.json"
    whole = _merge(tmp_path, "whole", one, two)
    for collective in ("gather", "bcast", "allreduce"):
        alone = _merge(tmp_path, collective,
                       _only(one, collective, tmp_path / f"1-{collective}.json"),
                       _only(two, collective, tmp_path / f"2-{collective}.json"))
        assert alone, collective
        for key, row in alone.items():
            assert row["time_us_p50"] == whole[key]["time_us_p50"], key
            assert row["rounds_set_aside"] == whole[key]["rounds_set_aside"], key
    # the rule had rounds to set aside
    assert any(r["rounds_set_aside"] for r in whole.values())


def test_a_rows_p50_does_not_depend_on_which_rows_ran_beside_it():
    """Each row of a sweep rebuilt from its rounds alone (no model: too few rows) and within the
    whole sweep (the file's model): the same p50 and rounds set aside, in process."""
    sys.path.insert(0, str(ROOT))
    from collbench.benchmarks.registry import get_benchmark
    from collbench.results.aggregate import build_row, moderate_rows
    from collbench.results.loader import load_result
    from collbench.results.records import RowIdentity

    result = load_result(H100 / "run-3.json")
    rows = [build_row(RowIdentity.of(r, get_benchmark(r.collective).bus_factor(r.world_size)),
                      rounds)
            for r, rounds in zip(result.rows, result.rounds)]
    whole = moderate_rows(rows)
    assert whole != rows                                   # the model did shape the intervals
    for alone, within in zip(rows, whole):
        assert (alone.time_us_p50, alone.rounds_set_aside) == (within.time_us_p50,
                                                               within.rounds_set_aside)
