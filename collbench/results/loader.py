"""Read result files back: collbench JSON (any schema version up to ``records.SCHEMA_VERSION``) or CSV of rows, with the run
metadata of its first line where it has one.

Version 1 files (before rounds) load as runs of one round: the row's samples become round 1.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from collbench.errors import UsageError
from collbench.results.exporters import CSV_METADATA_COLUMN
from collbench.results.records import (ADDED_LATER, COLUMN_TYPES, ROW_FIELDS, SCHEMA, SCHEMA_VERSION, WIDE_FIELDS,
                                      RoundData, Row, RunResult)

_INT = {name for name, kind in COLUMN_TYPES.items() if kind == "int"}
_STR = {name for name, kind in COLUMN_TYPES.items() if kind == "str"}
_BOOL = {name for name, kind in COLUMN_TYPES.items() if kind == "bool"}


#: Beyond this a figure is not a measurement (a microsecond count of 30 years is 1e15).
_LARGEST = 1e15


def _float(v, limit: float = _LARGEST) -> float:
    """A figure: a number (NaN where it is missing), never infinite nor, beyond ``limit``, so
    large that the statistics downstream overflow (exp, log, sums)."""
    if v is None or v == "":
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"not a number: {v!r}")
    value = float(v)
    if math.isinf(value) or abs(value) > limit:
        raise ValueError(f"out of range: {v!r}")
    return value


def _medians(v, where: str) -> tuple:
    """time_us_round_p50s: a JSON list, or the CSV's space-separated text."""
    if isinstance(v, str):
        v = v.split()
    elif isinstance(v, (int, float)) and not isinstance(v, bool):   # a CSV cell: one median, or empty
        v = [] if math.isnan(v) else [v]
    if not isinstance(v, (list, tuple)):
        raise UsageError(f"{where}: time_us_round_p50s is not a list of numbers")
    try:
        return tuple(_float(x) for x in v)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: time_us_round_p50s is not a list of numbers") from None


def _row(record: dict, where: str) -> Row:
    missing = [f for f in ROW_FIELDS if f not in record and f not in ADDED_LATER]
    if missing:
        raise UsageError(f"{where}: not a collbench result (missing columns: {', '.join(missing[:4])})")
    values = {}
    for name in ROW_FIELDS:
        v = record.get(name, ADDED_LATER.get(name))
        try:
            if name == "time_us_round_p50s":
                continue
            if name in _INT:
                if isinstance(v, bool) or not isinstance(v, (int, float, str)) or not 0 <= float(v) <= _LARGEST:
                    raise ValueError(v)          # counts and sizes: never negative
                values[name] = int(v)
            elif name in _STR:          # an empty CSV cell reads as missing (NaN), as pandas reads it
                values[name] = "" if isinstance(v, float) and math.isnan(v) else str(v)
            elif name in _BOOL:
                values[name] = v if isinstance(v, bool) else str(v).strip().lower() in ("true", "1")
            else:
                values[name] = _float(v, math.inf if name in WIDE_FIELDS else _LARGEST)
        except (TypeError, ValueError):
            raise UsageError(f"{where}: bad value {v!r} in column {name}") from None
    medians = record.get("time_us_round_p50s")
    values["time_us_round_p50s"] = _medians(medians, where) if medians is not None else (values["time_us_p50"],)
    return Row(**values)


def _numbers(v, where: str, name: str):
    if v is None:
        return None
    if not isinstance(v, list):
        raise UsageError(f"{where}: {name} is not a list of numbers")
    try:
        return tuple(_float(x) for x in v)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {name} is not a list of numbers") from None


def _round(d, where: str) -> RoundData:
    if not isinstance(d, dict):
        raise UsageError(f"{where}: a round_details entry is not an object")
    try:
        return RoundData(round=int(d["round"]), iterations=int(d["iterations"]), time_us_p50=_float(d["time_us_p50"]),
                         time_us_ci_low=_float(d.get("time_us_ci_low"), math.inf),
                         time_us_ci_high=_float(d.get("time_us_ci_high"), math.inf),
                         precision_reached=bool(d.get("precision_reached", False)), check=str(d.get("check", "skipped")),
                         calls_per_sample=int(d.get("calls_per_sample") or 1),
                         samples_us=_numbers(d.get("samples_us"), where, "samples_us"),
                         rank_means_us=_numbers(d.get("rank_means_us"), where, "rank_means_us"))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{where}: bad round_details entry ({exc.__class__.__name__}: {exc})") from None


def _rounds_v1(record: dict, row: Row, where: str) -> tuple:
    """A version 1 row as one round: its samples and CI are that round's."""
    samples = _numbers(record.get("samples_us"), where, "samples_us")
    means = _numbers(record.get("rank_means_us"), where, "rank_means_us")
    return (RoundData(1, row.iterations, row.time_us_p50, row.time_us_ci_low, row.time_us_ci_high,
                      row.precision_reached, row.check, int(record.get("calls_per_sample") or 1), samples, means),)


#: The metadata entries that compare, report and merge read, and the type each must have.
_METADATA_TYPES = {"rounds": list, "settings": dict, "versions": dict, "hostnames": list, "rank_hosts": list,
                   "merged_from": list, "environment": dict}


def _checked_metadata(metadata, path: Path) -> dict:
    if not isinstance(metadata, dict):
        raise UsageError(f"{path}: metadata is not an object")
    for key, kind in _METADATA_TYPES.items():
        if metadata.get(key) is not None and not isinstance(metadata[key], kind):
            raise UsageError(f"{path}: metadata.{key} is not {'a list' if kind is list else 'an object'}")
    return metadata


def _parse(text: str, where: str):
    """JSON text to objects; what is wrong with it, in one line naming ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise UsageError(f"{where} is nested too deeply") from None


def _schema_version(version, path: Path) -> int:
    if not isinstance(version, int) or isinstance(version, bool) or version > SCHEMA_VERSION or version < 1:
        raise UsageError(f"{path}: unsupported schema version {version!r} (this collbench reads 1..{SCHEMA_VERSION})")
    return version


def _load_json(path: Path, text: str) -> RunResult:
    doc = _parse(text, str(path))
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UsageError(f"{path}: not a collbench result file")
    version = _schema_version(doc.get("schema_version"), path)
    metadata = _checked_metadata(doc.get("metadata", {}), path)
    rows = doc.get("rows", [])
    if not isinstance(rows, list):
        raise UsageError(f"{path}: rows is not a list")
    result = RunResult(metadata=metadata, notes=[str(n) for n in (doc.get("notes") or [])])
    for i, record in enumerate(rows):
        where = f"{path} row {i}"
        if not isinstance(record, dict):
            raise UsageError(f"{where} is not an object")
        row = _row(record, where)
        if version == 1:
            rounds = _rounds_v1(record, row, where)
        else:
            details = record.get("round_details") or []
            if not isinstance(details, list):
                raise UsageError(f"{where}: round_details is not a list")
            rounds = tuple(_round(d, where) for d in details)
        result.add(row, rounds)
    return result


def _csv_metadata(path: Path, cell) -> dict:
    """The run metadata of a CSV's first row (its ``run_metadata`` cell), checked as the JSON's is."""
    if not isinstance(cell, str):
        raise UsageError(f"{path}: row 0: {CSV_METADATA_COLUMN} is not JSON text")
    metadata = _checked_metadata(_parse(cell, f"{path}: row 0: {CSV_METADATA_COLUMN}"), path)
    _schema_version(metadata.get("schema_version", SCHEMA_VERSION), path)
    return metadata


#: Cells read as missing (NaN), as ``pandas.read_csv`` reads them.
_MISSING = {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>",
            "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"}


_TRUE, _FALSE = ("True", "TRUE", "true"), ("False", "FALSE", "false")


def _reads_as(kind, cells: list) -> bool:
    """Whether every cell is a number of ``kind`` (int, float) as pandas reads numbers."""
    try:
        for cell in cells:
            if not cell.isascii() or "_" in cell:     # digits Python reads and pandas does not
                return False
            kind(cell)
    except ValueError:
        return False
    return True


def _typed(cells: list) -> list:
    """One column's cells typed as ``pandas.read_csv`` types a column: missing cells NaN, the
    others all True or False, all integers (floats when some are missing), all numbers, or text."""
    present = [c for c in cells if c not in _MISSING]
    if present and all(c in _TRUE + _FALSE for c in present):
        parse = (lambda c: c in _TRUE)
    elif len(present) == len(cells) and _reads_as(int, present):
        parse = int
    elif _reads_as(float, present):
        parse = float
    else:
        parse = str
    return [math.nan if c in _MISSING else parse(c) for c in cells]


def _csv_lines(path: Path, text: str) -> list:
    """The CSV's lines as lists of cells, blank (or white) lines left out; a line longer than
    the header is not a table."""
    csv.field_size_limit(max(csv.field_size_limit(), min(MAX_FILE_BYTES, 2 ** 31 - 1)))   # the metadata cell
    try:
        lines = [line for line in csv.reader(io.StringIO(text.removeprefix("\ufeff")), strict=True)
                 if line and not (len(line) == 1 and not line[0].strip())]
    except csv.Error as exc:
        raise UsageError(f"{path}: not a readable CSV ({exc})") from None
    if not lines:
        raise UsageError(f"{path}: not a readable CSV (no columns to parse)")
    for number, line in enumerate(lines[1:], start=2):
        if len(line) > len(lines[0]):
            raise UsageError(f"{path}: not a readable CSV (expected {len(lines[0])} fields in line {number}, "
                             f"saw {len(line)})")
    return lines


def _load_csv(path: Path, text: str) -> RunResult:
    """Rows from the CSV; run metadata from its first row where it has one (CSVs written before
    it carry none). ``format: csv`` says the file holds rows only, no rounds. Read with the csv
    module: each column typed as pandas would read it (``_typed``); the metadata cell is text."""
    header, *lines = _csv_lines(path, text)
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise UsageError(f"{path}: not a readable CSV (column {twice[0]} appears twice)")
    missing = [f for f in ROW_FIELDS if f not in header and f not in ADDED_LATER]
    if missing:               # said even when there is no row to read
        raise UsageError(f"{path}: not a collbench result (missing columns: {', '.join(missing[:4])})")
    lines = [line + [""] * (len(header) - len(line)) for line in lines]      # short lines: missing cells
    metadata = {}
    if CSV_METADATA_COLUMN in header and lines:
        cell = lines[0][header.index(CSV_METADATA_COLUMN)]
        metadata = _csv_metadata(path, None if cell in _MISSING else cell)
    columns = [_typed(list(cells)) for cells in zip(*lines)] if lines else []
    records = [dict(zip(header, values)) for values in zip(*columns)]
    result = RunResult(metadata={**metadata, "source": str(path), "format": "csv"})
    for i, record in enumerate(records):
        result.add(_row(record, f"{path} row {i}"))
    return result


#: Larger files are not read: the largest sweep collbench makes (10,000 sizes, 10 rounds of
#: samples) is a few hundred MB, and reading an arbitrary file whole could exhaust memory.
MAX_FILE_BYTES = 2 << 30


def load_result(path) -> RunResult:
    path = Path(path)
    try:
        if path.is_file() and path.stat().st_size > MAX_FILE_BYTES:
            raise UsageError(f"{path}: larger than {MAX_FILE_BYTES >> 30} GiB; not a collbench result file")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read ({exc.__class__.__name__})") from None
    if not text.strip():
        raise UsageError(f"{path}: empty file")
    if path.suffix.lower() == ".csv":
        return _load_csv(path, text)
    return _load_json(path, text)
