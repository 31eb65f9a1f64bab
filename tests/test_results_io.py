"""Result files: write with the real exporters, read back with the loader, compare."""

import dataclasses
import json
import math

import pytest

from collbench.errors import UsageError
from collbench.render.exporters import MarkdownExporter
from collbench.results.loader import load_result
from collbench.results.rank_view import RANK_FIELDS
from collbench.results.records import ROW_FIELDS, SCHEMA, SCHEMA_VERSION, Row
from collbench.versions import tidy_library_version
from results_helpers import (metadata, one_line_error, row_from_samples, run_cli, run_of, sweep,
                             write)

SERIES = sweep(backends=("mpi", "mpi-pickle"))
FLOATS = [f for f in ROW_FIELDS
          if f.startswith(("time_us", "algbw", "busbw")) and f != "time_us_round_p50s"]


def test_json_round_trip_keeps_rows_rounds_metadata_and_notes(tmp_path):
    run = run_of(SERIES)
    run.notes.append("a note")
    back = load_result(write(run, tmp_path / "run.json"))
    assert back.rows == run.rows
    for ours, theirs in zip(run.rounds, back.rounds):
        assert [d.round for d in theirs] == [1, 2, 3, 4, 5]
        # samples carry 4 decimals
        assert [d.samples_us for d in theirs] == [d.samples_us for d in ours]
        assert [d.time_us_p50 for d in theirs] == [d.time_us_p50 for d in ours]
    assert back.metadata == _as_read(run.metadata) and back.notes == ["a note"]


def _as_read(metadata: dict) -> dict:
    """What the loader gives back of ``metadata``: an older file's MPI library, kept as the
    library's own lines, tidied."""
    versions = metadata["versions"]
    return {**metadata,
            "versions": {**versions, "mpi_library": tidy_library_version(versions["mpi_library"])}}


def test_json_round_trip_keeps_nan_and_rounds_without_samples(tmp_path):
    run = run_of(SERIES)
    run.rows[0] = dataclasses.replace(run.rows[0], time_us_rank_avg=math.nan,
                                      time_us_ci_low=math.nan, time_us_ci_high=math.nan)
    run.rounds[1] = tuple(dataclasses.replace(d, samples_us=None, rank_means_us=None)
                          for d in run.rounds[1])
    path = write(run, tmp_path / "run.json")
    # valid JSON: no NaN
    assert json.loads(path.read_text())["rows"][0]["time_us_rank_avg"] is None
    back = load_result(path)
    assert math.isnan(back.rows[0].time_us_rank_avg) and math.isnan(back.rows[0].time_us_ci_low)
    assert back.rows[1:] == run.rows[1:] and all(d.samples_us is None for d in back.rounds[1])


def test_json_document_is_the_documented_schema(tmp_path):
    doc = json.loads(write(run_of(SERIES), tmp_path / "run.json").read_text())
    assert doc["schema"] == SCHEMA and doc["schema_version"] == SCHEMA_VERSION == 10
    assert set(doc) == {"schema", "schema_version", "metadata", "notes", "rows"}
    row = doc["rows"][0]
    assert set(row) == set(ROW_FIELDS) | set(RANK_FIELDS) | {"round_details"}
    assert len(row["time_us_round_p50s"]) == row["rounds"] == 5
    assert set(row["round_details"][0]) == {"round", "iterations", "time_us_p50", "time_us_ci_low",
                                            "time_us_ci_high",
                                            "precision_reached", "check", "calls_per_sample",
                                            "samples_us",
                                            "rank_means_us"}


def test_csv_round_trip(tmp_path):
    """CSV keeps the rows only, each number to 6 significant digits."""
    run = run_of(SERIES)
    back = load_result(write(run, tmp_path / "run.csv"))
    assert len(back.rows) == len(run.rows) and back.rounds == [()] * len(run.rows)
    for ours, theirs in zip(run.rows, back.rows):
        assert ours.key() == theirs.key()
        for name in ROW_FIELDS:
            if name in FLOATS or name in ("run_to_run_cv", "time_us_round_p50s", "overall_us",
                                          "compute_us",
                                          "overlap_pct"):
                assert getattr(theirs, name) == pytest.approx(getattr(ours, name), rel=1e-5,
                                                              nan_ok=True), name
            else:
                assert getattr(theirs, name) == getattr(ours, name), name
    assert back.metadata["format"] == "csv"


def test_csv_round_trip_is_exact_for_six_digit_values(tmp_path):
    run = run_of({("allreduce", "mpi", 1024): 1.0})
    run.rows[0] = dataclasses.replace(run.rows[0], **{name: 12.3456 for name in FLOATS},
                                      precision_reached=False,
                                      check="wrong:3", time_us_round_p50s=(12.3456, 1.5),
                                      run_to_run_cv=0.5, rounds=2)
    back = load_result(write(run, tmp_path / "run.csv"))
    assert back.rows == run.rows


def test_markdown_export_renders_the_tables(tmp_path):
    path = write(run_of(SERIES, meta=metadata()), tmp_path / "run.md")
    text = path.read_text()
    assert text.startswith("# collbench results")
    assert "## allreduce · float32 sum · 2 ranks · latency" in text
    assert "| size | mpi p50 µs |" in text and MarkdownExporter.suffix == ".md"


@pytest.mark.parametrize("name, content, message", [
    ("garbage.json", "this is not json\n", "not valid JSON"),
    ("empty.json", "", "empty file"),
    ("blank.csv", "  \n\n", "empty file"),
    ("list.json", "[1, 2, 3]", "not a collbench result file"),
    ("other.json", '{"schema": "pyperf", "rows": []}', "not a collbench result file"),
    ("future.json", '{"schema": "collbench.result", "schema_version": 99, "rows": []}',
     "unsupported schema version"),
    ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("rounds.json",
     '{"schema": "collbench.result", "schema_version": 2, "rows": [{"round_details": 5}]}',
     "missing columns"),
    ("garbage.csv", "hello,world\n1,2\n", "missing columns"),
    # no row: the header is still checked
    ("one.csv", "x\n", "missing columns"),
    ("badrow.json", '{"schema": "collbench.result", "schema_version": 1, "rows": [7]}',
     "row 0 is not an object"),
])
def test_loader_rejects_anything_else_with_one_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(UsageError) as info:
        load_result(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_column_twice_is_refused_not_read_from_its_last_copy(tmp_path):
    path = write(run_of(SERIES), tmp_path / "run.csv")
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0] + ",time_us_p50"] + [line + ",999" for line in lines[1:]])
                    + "\n")
    with pytest.raises(UsageError, match="column time_us_p50 appears twice"):
        load_result(path)


def test_report_refuses_a_file_without_rows(tmp_path):
    path = write(run_of(SERIES), tmp_path / "run.csv")
    (tmp_path / "header.csv").write_text(path.read_text().splitlines()[0] + "\n")
    proc = run_cli(["report", "header.csv"], tmp_path)
    assert proc.returncode == 2 and one_line_error(proc) == (
        "collbench: error: header.csv: holds no rows: nothing was measured, or every row was cut "
        "off")


def test_loader_rejects_binary_and_missing_files(tmp_path):
    binary = tmp_path / "image.json"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    for path, message in ((binary,
                           r"not a collbench result file \(binary: a NUL byte at byte 10\)"),
                          (tmp_path / "absent.json", "no such file")):
        with pytest.raises(UsageError, match=message):
            load_result(path)


def test_loader_rejects_a_bad_value(tmp_path):
    run = run_of(SERIES)
    doc = json.loads(write(run, tmp_path / "run.json").read_text())
    doc["rows"][2]["size_bytes"] = "lots"
    (tmp_path / "run.json").write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=r"row 2: bad value 'lots' in column size_bytes"):
        load_result(tmp_path / "run.json")


def test_helpers_build_consistent_rows():
    row = row_from_samples([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], size_bytes=1000)
    assert (isinstance(row, Row) and row.time_us_p50 == 4.0 and row.iterations == 7
            and row.rounds == 1)
    assert row.algbw_gbps == pytest.approx(1000 / 4e-6 / 1e9)


def test_version_1_file_loads_as_one_round():
    from pathlib import Path

    example = Path(__file__).resolve().parent / "data" / "v1-allreduce-mpi-vs-pickle.json"
    run = load_result(example)
    assert ({r.backend for r in run.rows} == {"mpi", "mpi-pickle"}
            and all(r.check == "ok" for r in run.rows))
    assert all(r.rounds == 1 and math.isnan(r.run_to_run_cv) for r in run.rows)
    assert all(len(d) == 1 and len(d[0].samples_us) == r.iterations
               for r, d in zip(run.rows, run.rounds))
    assert run.metadata["schema_version"] == 1


def test_curated_example_is_a_small_version_2_file_of_five_rounds():
    from pathlib import Path

    example = (Path(__file__).resolve().parent.parent / "results" / "examples"
               / "allreduce-2ranks-mpi-vs-pickle.json")
    assert example.stat().st_size < 200_000
    run = load_result(example)
    assert run.metadata["schema_version"] == 2 and run.metadata["settings"]["rounds"] == 5
    assert ({r.backend for r in run.rows} == {"mpi", "mpi-pickle"}
            and all(r.check == "ok" for r in run.rows))
    assert all(r.rounds == 5 and len(r.time_us_round_p50s) == 5 and r.run_to_run_cv > 0
               for r in run.rows)


def _run_with_rounds():
    """A run whose metadata has what a real one has: rounds with order, hosts and load, one busy."""
    run = run_of(SERIES)
    for record in run.metadata["rounds"]:
        record.update(run_id="abc123",
                      order=[{"collective": "allreduce", "backend": "mpi", "sizes": [8, 64]}],
                      rank_hosts=["node1", "node1"])
        record["load"].update(other_cpu_cores=0.1,
                              hosts={"node1": {"other_cpu_cores": 0.1, "cpus": 2}})
    run.metadata["rounds"][1]["load"].update(busy=True, other_cpu_cores=1.5)
    run.metadata["settings"] = {"rounds": 5, "seed": 7}
    return run


def test_csv_first_row_carries_the_run_metadata_compare_reads(tmp_path):
    from collbench.analysis.comparability import CHECKED_METADATA, _lookup
    from collbench.analysis.runs import busy_rounds, run_ids
    from collbench.results.formats import CSV_METADATA_COLUMN, csv_metadata

    run = _run_with_rounds()
    path = write(run, tmp_path / "run.csv")
    header = path.read_text().splitlines()[0]
    assert header.startswith("collective,backend,") and header.endswith("," + CSV_METADATA_COLUMN)
    back, twin = load_result(path), load_result(write(run, tmp_path / "run.json"))
    assert back.metadata == {**_as_read(csv_metadata(run.metadata)), "source": str(path),
                             "format": "csv"}
    assert "rank_hosts" not in back.metadata and back.metadata["hostnames"] == ["node1"]
    assert all(set(r) == {"round", "load", "run_id"}
               and set(r["load"]) == {"busy", "other_cpu_cores"}
               # no order, rank_hosts, per-host load
               for r in back.metadata["rounds"])
    for _, where in CHECKED_METADATA:
        assert _lookup(back.metadata, where) == _lookup(twin.metadata, where)
    assert busy_rounds(back) == busy_rounds(twin) == {2: 1.5} and run_ids(back) == run_ids(twin)
    # the run's own is untouched
    assert run.metadata["rounds"][0]["order"] and run.metadata["rank_hosts"]


def test_csv_busy_rounds_count_as_in_the_json(tmp_path):
    from collbench.analysis.compare import compare_runs

    base, new = _run_with_rounds(), run_of(SERIES, seed=3)
    by_csv = compare_runs(load_result(write(base, tmp_path / "b.csv")),
                          load_result(write(new, tmp_path / "n.csv")))
    by_json = compare_runs(load_result(write(base, tmp_path / "b.json")),
                           load_result(write(new, tmp_path / "n.json")))
    assert {r.rounds_baseline for r in by_csv.rows} == {r.rounds_baseline
                                                        for r in by_json.rows} == {5}
    assert by_csv.warnings == by_json.warnings and any("busy machine" in w for w in by_csv.warnings)
    assert [r.verdict for r in by_csv.rows] == [r.verdict for r in by_json.rows]


def test_pandas_reads_the_csv_as_one_plain_table(tmp_path):
    import pandas as pd

    from collbench.results.formats import CSV_METADATA_COLUMN

    path = write(_run_with_rounds(), tmp_path / "run.csv")
    frame = pd.read_csv(path)
    assert (list(frame.columns) == list(ROW_FIELDS + RANK_FIELDS) + [CSV_METADATA_COLUMN]
            and len(frame) == len(SERIES))
    assert list(frame["size_bytes"]) == [r.size_bytes for r in load_result(path).rows]
    assert (frame[CSV_METADATA_COLUMN].notna().sum() == 1
            and frame[CSV_METADATA_COLUMN][0].startswith("{"))


def _with_metadata_cell(path, cell) -> str:
    """The CSV at ``path`` with its first row's metadata cell replaced by ``cell`` (csv-quoted)."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(path.read_text())))
    rows[1][-1] = cell
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def test_csv_without_the_metadata_column_still_loads(tmp_path):
    """CSVs written before the metadata column: rows only."""
    import pandas as pd

    path = write(run_of(SERIES), tmp_path / "run.csv")
    old = tmp_path / "old.csv"
    pd.read_csv(path).drop(columns=["run_metadata"]).to_csv(old, index=False)
    back = load_result(old)
    assert (len(back.rows) == len(load_result(path).rows)
            and back.metadata == {"source": str(old), "format": "csv"})


@pytest.mark.parametrize("cell, message", [
    ("{\"hostnames\": [\"a\"", "row 0: run_metadata is not valid JSON"),
    ("[1, 2]", "metadata is not an object"),
    ("{\"rounds\": 5}", "metadata.rounds is not a list"),
    ("{\"versions\": \"MPICH\"}", "metadata.versions is not an object"),
    ("{\"schema_version\": 99}", "unsupported schema version 99"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("", "run_metadata is not JSON text"),
    ("12", "metadata is not an object"),
])
def test_a_corrupted_metadata_cell_is_refused_in_one_line(tmp_path, cell, message):
    good = write(run_of(SERIES), tmp_path / "good.csv")
    path = tmp_path / "bad.csv"
    path.write_text(_with_metadata_cell(good, cell))
    with pytest.raises(UsageError) as info:
        load_result(path)
    assert (message in str(info.value) and "\n" not in str(info.value)
            and str(path) in str(info.value))


def test_a_corrupted_metadata_cell_exits_2_with_one_line(tmp_path):
    from results_helpers import one_line_error, run_cli

    good = write(run_of(SERIES), tmp_path / "good.csv")
    (tmp_path / "bad.csv").write_text(_with_metadata_cell(good, '{"rounds": {"1": 2}}'))
    proc = run_cli(["compare", "bad.csv", "good.csv"], tmp_path)
    assert proc.returncode == 2 and "bad.csv: metadata.rounds is not a list" in one_line_error(proc)


@pytest.mark.parametrize("name", ["size_bytes", "world_size", "iterations", "count"])
def test_a_negative_count_or_size_is_refused(tmp_path, name):
    path = write(run_of(SERIES), tmp_path / "run.json")
    doc = json.loads(path.read_text())
    doc["rows"][0][name] = -5
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=f"bad value -5 in column {name}"):
        load_result(path)


def _violations(value, schema: dict, where: str = "$") -> list:
    """What of ``value`` breaks ``schema``: the keywords collbench's schema uses (type, const,
    required, properties, items, minimum, maximum), checked as JSON Schema defines them."""
    kinds = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list,
             "object": dict, "null": type(None)}
    out = []
    if "type" in schema:
        allowed = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        ok = any(isinstance(value, kinds[k])
                 and not (isinstance(value, bool) and k in ("integer", "number")) for k in allowed)
        if not ok:
            return [f"{where}: {type(value).__name__} is not {allowed}"]
    if "const" in schema and value != schema["const"]:
        out.append(f"{where}: {value!r} is not {schema['const']!r}")
    if (isinstance(value, (int, float)) and not isinstance(value, bool)
            and value < schema.get("minimum", value)):
        out.append(f"{where}: {value} below {schema['minimum']}")
    if (isinstance(value, (int, float)) and not isinstance(value, bool)
            and value > schema.get("maximum", value)):
        out.append(f"{where}: {value} above {schema['maximum']}")
    if isinstance(value, dict):
        out += [f"{where}: lacks {k}" for k in schema.get("required", []) if k not in value]
        for k, sub in schema.get("properties", {}).items():
            if k in value:
                out += _violations(value[k], sub, f"{where}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += _violations(item, schema["items"], f"{where}[{i}]")
    return out


def test_the_published_schema_is_the_one_the_rows_declare_and_files_follow_it(tmp_path):
    """docs/result.schema.json is derived from records.Row; a file written now and the real
    recorded runs of tests/data follow it, and every row column is described there."""
    from pathlib import Path

    from collbench.results.schema import json_schema

    root = Path(__file__).resolve().parent.parent
    published = json.loads((root / "docs" / "result.schema.json").read_text())
    assert published == json_schema(), ("docs/result.schema.json is stale: collbench schema > "
                                        "docs/result.schema.json")
    row_schema = published["properties"]["rows"]["items"]
    assert set(ROW_FIELDS) <= set(row_schema["properties"])
    assert all(row_schema["properties"][name]["description"] for name in ROW_FIELDS)
    written = write(run_of(sweep(), rounds=3), tmp_path / "r.json")
    for path in [written, *sorted((root / "tests" / "data" / "gate").glob("*.json"))]:
        document = json.loads(path.read_text())
        assert _violations(document, published) == [], path.name
    broken = json.loads(written.read_text())
    broken["rows"][0]["size_bytes"] = -8
    del broken["rows"][1]["backend"]
    assert _violations(broken, published) == ["$.rows[0].size_bytes: -8 below 0",
                                              "$.rows[1]: lacks backend"]
    assert json.loads(run_cli(["schema"], tmp_path).stdout) == published


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_a_file_holding_a_row_twice_is_refused_by_every_command_alike(tmp_path, suffix):
    """report and plot printed the row twice ("mean over 3 sizes" for 2); compare and export
    refused: now the loader, which every command reads through, refuses it."""
    from collbench.results.loader import load_result
    from results_helpers import run_of, sweep, write

    doubled = run_of(sweep(sizes=(8, 64)), rounds=2)
    doubled.add(doubled.rows[0], doubled.rounds[0])
    path = write(doubled, tmp_path / f"dup{suffix}")
    with pytest.raises(UsageError,
                       match=r"dup\.(json|csv): two rows for allreduce mpi 8 B latency"):
        load_result(path)


@pytest.mark.parametrize("p50", [99999.0, float("nan")])
def test_a_p50_its_rounds_contradict_is_a_corrupt_file(tmp_path, p50):
    """A p50 of 99999 where the rounds give 145.7 was shown, exported and compared as "+0.0%";
    a nan p50 beside finite rounds was read as a row not measured (exit 1), not as corrupt (2)."""
    import json

    from collbench.results.loader import load_result
    from results_helpers import run_of, sweep, write

    path = write(run_of(sweep(sizes=(8, 64)), rounds=3), tmp_path / "r.json")
    assert load_result(path).rows[0].time_us_p50 > 0
    doc = json.loads(path.read_text())
    doc["rows"][1]["time_us_p50"] = p50
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=r"r\.json: allreduce mpi 64 B latency: its p50 .* lies "
                                         r"outside its round medians .*: the file is corrupt"):
        load_result(path)


@pytest.mark.parametrize("field, value", [("time_us_ci_low", 1e6), ("time_us_ci_high", 1e-3)])
def test_a_confidence_interval_that_misses_its_p50_is_a_corrupt_file(tmp_path, field, value):
    """An adversary set time_us_ci_low to 1e6 (above both the p50 and ci_high): report, export
    and read_results took the file, and compare judged it."""
    import json

    from collbench.results.loader import load_result
    from results_helpers import run_of, sweep, write

    path = write(run_of(sweep(sizes=(8, 64)), rounds=3), tmp_path / "r.json")
    doc = json.loads(path.read_text())
    doc["rows"][1][field] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=r"r\.json: allreduce mpi 64 B latency: its 95% CI .* does "
                                         r"not hold its p50 .*: the file is corrupt"):
        load_result(path)


def test_an_output_another_run_holds_is_refused_and_its_lock_goes_with_the_run(tmp_path):
    """Two runs with -o same.json --force at once both said "wrote same.json"; the file held one."""
    from collbench.live import files

    path = tmp_path / "same.json"
    files._lock(path)
    try:
        with pytest.raises(UsageError, match=r"same\.json' is being written by another collbench "
                                             r"run \(pid \d+\)"):
            files._lock(path)          # another open of the lock, as another process's would be
        assert (tmp_path / ".same.json.lock").exists()
    finally:
        files._unlock()
    assert not (tmp_path / ".same.json.lock").exists()
    files._lock(path)                  # free again
    files._unlock()
