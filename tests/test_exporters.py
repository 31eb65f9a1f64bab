"""The JSON exporter: the same document whether rows are encoded at once or one save at a time."""

import json
import math

from collbench.exporters import JsonExporter
from collbench.loader import load_result
from collbench.results import Row, RunResult


def _row(size: int) -> Row:
    return Row("allreduce", "mpi", "float32", "sum", 2, 2, size, size, size // 4, "latency", 3,
               2.0, 1.5, 2.5, 2.1, 1.5, 2.5, 2.5, 2.5, math.nan, 0.1, 0.1, "ok", True)


def test_saving_after_each_row_gives_the_whole_document(tmp_path):
    result = RunResult({"world_size": 2})
    for size in (8, 16, 32):
        result.add(_row(size), [2.0, 1.51234567, 2.5], [2.1, 2.0])
        text = JsonExporter.render(result)
        fresh = RunResult(result.metadata, result.rows, result.samples, result.rank_means)
        assert text == JsonExporter.render(fresh)          # the memo changes nothing
        assert len(result.cache["json_rows"]) == len(result.rows)
    doc = json.loads(text)
    assert [r["size_bytes"] for r in doc["rows"]] == [8, 16, 32]
    assert doc["rows"][0]["samples_us"] == [2.0, 1.5123, 2.5]
    assert doc["rows"][0]["time_us_rank_avg"] is None
    path = tmp_path / "run.json"
    path.write_text(text)
    assert [r.size_bytes for r in load_result(path).rows] == [8, 16, 32]


def test_no_rows_is_valid_json():
    doc = json.loads(JsonExporter.render(RunResult({"world_size": 2}, notes=["nothing measured"])))
    assert doc["rows"] == [] and doc["notes"] == ["nothing measured"]
