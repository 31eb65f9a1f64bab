"""The JSON exporter: the same document whether rows are encoded at once or one save at a time."""

import json
import math

from collbench.results.collector import Collector
from collbench.results.formats import JsonExporter
from collbench.results.loader import load_result
from collbench.results.records import RunResult
from results_helpers import identity, row_from_samples
from collbench.results.aggregate import round_data


def test_saving_after_each_round_gives_the_whole_document(tmp_path):
    """Rows arrive in a shuffled order, round after round; each save equals a fresh rendering."""
    collector = Collector({"world_size": 2})
    result = collector.run_result()
    for number in (1, 2):
        for size in (32, 8, 16):
            collector.add(identity(size_bytes=size), (0, 0, size, 0),
                          round_data(number, [2.0 * number, 1.51234567, 2.5], [math.nan, 2.0],
                                     precision_reached=True, check="ok"))
            text = JsonExporter.render(collector.run_result())
            fresh = RunResult(result.metadata, list(result.rows), list(result.rounds))
            assert text == JsonExporter.render(fresh)          # the memo changes nothing
            assert len(result.cache["json_rows"]) == len(result.rows)
    doc = json.loads(text)
    # plan order, not measurement order
    assert [r["size_bytes"] for r in doc["rows"]] == [8, 16, 32]
    first = doc["rows"][0]
    assert first["rounds"] == 2 and first["time_us_round_p50s"] == [2.0, 2.5]
    assert first["round_details"][0]["samples_us"] == [2.0, 1.5123, 2.5]
    assert first["round_details"][0]["rank_means_us"] == [None, 2.0]
    path = tmp_path / "run.json"
    path.write_text(text)
    assert [r.size_bytes for r in load_result(path).rows] == [8, 16, 32]


def test_no_rows_is_valid_json():
    doc = json.loads(JsonExporter.render(RunResult({"world_size": 2}, notes=["nothing measured"])))
    assert doc["rows"] == [] and doc["notes"] == ["nothing measured"]


def test_stdout_formats_are_the_file_exporters():
    from collbench.cli.options import FORMATS
    from collbench.render.exporters import EXPORTERS, STDOUT_FORMATS

    assert set(STDOUT_FORMATS) == set(FORMATS)
    assert {e for e in STDOUT_FORMATS.values() if e is not None} == set(EXPORTERS.values())


def test_csv_metadata_is_one_line_whatever_it_holds(tmp_path):
    """Newlines, non-ASCII, NaN and objects JSON cannot hold: still one line, read back as text
    (as printable text: a line end or a line separator in it becomes a space, errors.printable)."""
    from collbench.results.formats import CsvExporter

    meta = {"command_line": ["collbench", "a\nb\r\u2028c"], "cpu_model": "Ryzen™ µ",
            "load": math.nan,
            "environment": {"X": "#,\"'"},
            "rounds": [{"round": 1, "order": [8, 16], "load": {"busy": False}}], "path": tmp_path}
    result = RunResult(meta)
    result.add(row_from_samples([1.0, 2.0, 3.0]))
    text = CsvExporter.render(result)
    header, first = text.splitlines()[:2]
    assert len(text.splitlines()) == 2 and header.startswith("collective,") and first.isascii()
    path = tmp_path / "run.csv"
    path.write_text(text)
    back = load_result(path).metadata
    assert (back["command_line"] == ["collbench", "a b  c"]
            and back["cpu_model"] == meta["cpu_model"])
    assert back["environment"] == meta["environment"] and back["path"] == str(tmp_path)
    assert (back["rounds"] == [{"round": 1, "load": {"busy": False}}]
            and meta["rounds"][0]["order"] == [8, 16])


def test_csv_metadata_follows_the_rounds_as_they_finish(tmp_path):
    from collbench.results.formats import CsvExporter

    collector = Collector({"world_size": 2})
    collector.add(identity(size_bytes=8), (0, 0, 8, 0),
                  round_data(1, [2.0, 2.5], [2.0, 2.0], precision_reached=True, check="ok"))
    assert '""rounds""' not in CsvExporter.render(collector.run_result())
    collector.metadata["rounds"] = [{"round": 1, "load": {"busy": True, "other_cpu_cores": 1.0}}]
    path = tmp_path / "run.csv"
    path.write_text(CsvExporter.render(collector.run_result()))
    assert load_result(path).metadata["rounds"] == collector.metadata["rounds"]
