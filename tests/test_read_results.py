"""``collbench.read_results``: result files of real runs as one pandas DataFrame; and the one
schema both formats are read through, a CSV's cells typed by the row's declared columns."""

import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import collbench
from collbench.errors import UsageError
from collbench.results.dataframe import ROW_COLUMNS, RUN_COLUMNS
from collbench.results.formats import csv_metadata
from collbench.results.loader import load_result
from collbench.results.records import COLUMN_TYPES
from conftest import cli

pytestmark = pytest.mark.mpi

SWEEP = ["allreduce", "-n", "2", "--sizes", "8-1K", "--rounds", "2", "--iters", "10", "--warmup",
         "1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """a.json and a.csv, one real run of two ranks on mpi; b.json another, on mpi and mpi-pickle."""
    folder = tmp_path_factory.mktemp("runs")
    for args in (["--backend", "mpi", "-o", "a.json", "-o", "a.csv"],
                 ["--backend", "mpi,mpi-pickle", "-o", "b.json"]):
        proc = cli(SWEEP + args, folder, timeout=180)
        assert proc.returncode == 0, proc.stderr
    return folder


def test_one_file_is_one_line_per_row_with_its_run_and_its_rounds(runs):
    path = runs / "a.json"
    frame, run = collbench.read_results(str(path)), load_result(path)
    assert len(frame) == len(run.rows) == 8
    assert list(frame.columns[:len(RUN_COLUMNS)]) == list(RUN_COLUMNS)
    assert "time_us_round_p50s" not in frame and list(frame.columns[-2:]) == ["time_us_p50_round_1",
                                                                              "time_us_p50_round_2"]
    meta = run.metadata
    assert set(frame["file"]) == {str(path)} and set(frame["run_id"]) == {meta["run_id"]}
    assert set(frame["hostnames"]) == {",".join(meta["hostnames"])}
    assert set(frame["collbench_version"]) == {collbench.__version__}
    for name, version in meta["versions"].items():
        assert set(frame[f"{name}_version"]) == {version}
    for i, row in enumerate(run.rows):
        line = frame.iloc[i]
        for name in ROW_COLUMNS:
            assert line[name] == getattr(row, name) or (COLUMN_TYPES[name] == "float"
                                                        and math.isnan(line[name])), name
        assert ([line["time_us_p50_round_1"], line["time_us_p50_round_2"]]
                == list(row.time_us_round_p50s))
    kinds = {"int": "int64", "float": "float64", "bool": "bool"}
    assert all(str(frame[name].dtype) == kinds[kind] for name, kind in COLUMN_TYPES.items()
               if kind in kinds)
    assert frame.attrs == {**csv_metadata(meta), "notes": run.notes}
    # grows with the ranks
    assert frame.attrs["versions"] == meta["versions"] and "rank_hosts" not in frame.attrs


def test_json_and_csv_of_one_run_read_alike(runs):
    both = collbench.read_results([runs / "a.json", runs / "a.csv"])
    json_rows, csv_rows = (both[both["file"] == str(runs / name)].reset_index(drop=True)
                           for name in ("a.json", "a.csv"))
    assert len(json_rows) == len(csv_rows) == 8
    # the CSV carries the run's metadata
    assert list(json_rows["run_id"]) == list(csv_rows["run_id"])
    floats = [name for name in json_rows if json_rows[name].dtype == "float64"]
    pd.testing.assert_frame_equal(json_rows.drop(columns=["file", *floats]),
                                  csv_rows.drop(columns=["file", *floats]))
    # 6 significant digits
    pd.testing.assert_frame_equal(json_rows[floats], csv_rows[floats], rtol=1e-5)
    assert set(both.attrs) == {str(runs / "a.json"), str(runs / "a.csv")}
    assert (both.attrs[str(runs / "a.csv")]["format"] == "csv"
            and both.attrs[str(runs / "a.json")]["rounds"])


def test_several_runs_side_by_side(runs):
    """The example of docs/python-api.md: a pivot of size × backend, one column group per file."""
    frame = collbench.read_results([runs / "a.json", runs / "b.json"])
    assert list(frame["file"]) == [str(runs / "a.json")] * 8 + [str(runs / "b.json")] * 16
    assert (frame.groupby("file")["run_id"].nunique().tolist() == [1, 1]
            and frame["run_id"].nunique() == 2)
    allreduce = frame[frame.collective == "allreduce"]
    p50 = allreduce.pivot_table(index="size_bytes", columns=["file", "backend"],
                                values="time_us_p50")
    assert p50.shape == (8, 3) and list(p50.index) == [8 << i for i in range(8)]
    ratio = p50[str(runs / "b.json")]["mpi"] / p50[str(runs / "a.json")]["mpi"]
    assert (ratio > 0).all()


def test_a_bad_path_raises_the_loaders_one_line(runs, tmp_path):
    (tmp_path / "garbage.json").write_text("not json\n")
    for paths, message in ((runs / "absent.json", "absent.json: no such file"),
                           ([runs / "a.json", runs / "absent.json"], "absent.json: no such file"),
                           (tmp_path / "garbage.json", "garbage.json is not valid JSON"),
                           (str(runs), "not a result file but a directory"),
                           ([], "read_results: no result files given")):
        with pytest.raises(UsageError) as info:
            collbench.read_results(paths)
        assert message in str(info.value) and "\n" not in str(info.value)
        # not a traceback from deep inside
        assert info.traceback[-1].path.name == "dataframe.py"
        assert info.value.__context__ is None or info.value.__suppress_context__
    with pytest.raises(TypeError, match="a path .* or a list of paths"):
        collbench.read_results(5)


def test_import_collbench_leaves_pandas_out_until_read_results():
    code = ("import sys, collbench\n"
            "assert 'pandas' not in sys.modules\n"
            "assert collbench.read_results.__module__ == 'collbench.results.dataframe'\n"
            "assert 'pandas' in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# -- one schema: a CSV's cells read as the row declares its columns --------------------------------


def _with_cells(path: Path, out: Path, cells: dict, rows=(0,)) -> Path:
    """The CSV at ``path`` with ``cells`` (column: text) in ``rows``, written to ``out``."""
    lines = list(csv.reader(io.StringIO(path.read_text())))
    for i in rows:
        for name, text in cells.items():
            lines[i + 1][lines[0].index(name)] = text
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(lines)
    out.write_text(text.getvalue())
    return out


@pytest.mark.parametrize("text", ["007", "1e3", "NA", "True", "-0"])
def test_a_text_column_keeps_the_digits_and_words_it_holds(runs, tmp_path, text):
    """group_hosts is text: its cells were once typed from what they held, "007" read as 7 and
    "NA" as missing."""
    path = _with_cells(runs / "a.csv", tmp_path / "hosts.csv", {"group_hosts": text}, rows=range(8))
    assert {row.group_hosts for row in load_result(path).rows} == {text}
    assert set(collbench.read_results(path)["group_hosts"]) == {text}


@pytest.mark.parametrize("name, text, message", [
    ("world_size", "\u0662", "bad value '\u0662' in column world_size: not a whole number"),
    ("size_bytes", "5_000", "bad value '5_000' in column size_bytes: not a whole number"),
    ("size_bytes", "8.5", "bad value 8.5 in column size_bytes: not a whole number"),
    ("time_us_p50", "\u0663.5", "bad value '\u0663.5' in column time_us_p50: not a number"),
    ("time_us_p50", "NA", "bad value 'NA' in column time_us_p50: not a number"),
    ("precision_reached", "yes", "bad value 'yes' in column precision_reached: not true or false"),
    ("time_us_round_p50s", "3.5 \u0664", "bad value '\u0664' in time_us_round_p50s: not a number"),
])
def test_a_cell_that_is_not_its_columns_type_is_refused(runs, tmp_path, name, text, message):
    path = _with_cells(runs / "a.csv", tmp_path / "bad.csv", {name: text})
    with pytest.raises(UsageError) as info:
        collbench.read_results(path)
    assert str(info.value) == f"{path} row 0: {message}"


def test_empty_cells_are_missing(runs, tmp_path):
    path = _with_cells(runs / "a.csv", tmp_path / "empty.csv",
                       {"time_us_rank_avg": "", "time_us_ci_low": "", "pair": "",
                        "rounds_disagree": ""})
    row = load_result(path).rows[0]
    assert math.isnan(row.time_us_rank_avg) and math.isnan(row.time_us_ci_low)
    assert row.pair == "" and row.rounds_disagree is False


def test_a_row_without_a_median_loads_from_the_csv_the_exporter_writes(runs, tmp_path):
    """A one-round row whose median could not be computed: the exporter writes an empty
    time_us_p50 and "nan" as its one round median, which typing cells as pandas does refused
    ("rounds says 1 but time_us_round_p50s holds 0 medians")."""
    path = _with_cells(runs / "a.csv", tmp_path / "unmeasured.csv",
                       {"rounds": "1", "time_us_p50": "", "time_us_round_p50s": "nan"})
    row = load_result(path).rows[0]
    assert row.rounds == 1 and math.isnan(row.time_us_p50) and len(row.time_us_round_p50s) == 1
    assert math.isnan(row.time_us_round_p50s[0])


@pytest.mark.parametrize("name, value, message", [
    ("size_bytes", -8, "bad value -8 in column size_bytes: negative"),
    ("world_size", 0, "bad value 0 in column world_size: less than 1"),
    ("check", "wrong:x", "bad value 'wrong:x' in column check: not ok, skipped or wrong:N"),
    ("check", "bogus", "bad value 'bogus' in column check: not ok, skipped or wrong:N"),
    ("pair", "0-7", "bad value '0-7' in column pair: not A-B, two ranks of the 2 of the run"),
])
def test_json_and_csv_refuse_a_bad_value_in_the_same_words(runs, tmp_path, name, value, message):
    doc = json.loads((runs / "a.json").read_text())
    doc["rows"][0][name] = value
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    bad_csv = _with_cells(runs / "a.csv", tmp_path / "bad.csv", {name: str(value)})
    for path in (tmp_path / "bad.json", bad_csv):
        with pytest.raises(UsageError) as info:
            load_result(path)
        assert str(info.value) == f"{path} row 0: {message}"
