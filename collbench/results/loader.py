"""Read result files back: collbench JSON (any schema version up to ``records.SCHEMA_VERSION``)
or CSV of rows, with the run metadata of its first line where it has one.

One schema reads both formats: JSON gives its values typed, a CSV's cells are read as the type
their column has in ``records.Row`` (``COLUMN_TYPES``, which the JSON Schema is derived from
too), never guessed from the cells; then the same code checks the values and makes the rows.
Version 1 files (before rounds) load as runs of one round.

A result file is read as something a stranger may have written: what is not a collbench result
is refused in one line (``UsageError``), reading costs bounded memory and time whatever the file
holds (``MAX_FILE_BYTES``, ``MAX_VALUES``), and every text is made printable as it is read. What
is read, which values are taken and how text is shown: docs/results-format.md, "Reading files
back".
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import re
import stat
from collections import Counter
from functools import partial
from pathlib import Path

from collbench.errors import UsageError, printable
from collbench.versions import tidy_library_version
from collbench.results.formats import CSV_METADATA_COLUMN
from collbench.results.paths import NOT_FILES
from collbench.results.records import (ADDED_IN, ADDED_LATER, ASSUMED_SETUP, COLUMN_TYPES,
                                       LONGEST_TEXT,
                                      MPI_BACKENDS, ROW_FIELDS, SCHEMA, SCHEMA_VERSION, WIDE_FIELDS,
                                       RoundData, Row,
                                      RunResult, backend_label, older_value, windows_sent)

#: Larger files are not read: the largest sweep collbench makes (10,000 sizes, 10 rounds of
#: samples) is a few hundred MB, and a file is held twice while it is decoded.
MAX_FILE_BYTES = 1 << 30
#: Nor are files of more values than this (an upper bound counted on the bytes: commas, ``[`` and
#: ``{`` of JSON; commas, line ends and spaces of CSV). Parsed, and with the rows made of them,
#: values cost up to about 100 bytes each (an empty list alone is 64), so this bounds the memory of
#: reading one file to about 2 GB; honest files hold one value per 6-14 bytes (benchmarks/README.md,
#: "Large result files").
MAX_VALUES = 20_000_000

#: Beyond this a figure is not a measurement (a microsecond count of 30 years is 1e15).
_LARGEST = 1e15
#: No collective or message completes in under a picosecond: a positive time below this is not
#: a measurement (and the logarithms of the ratios compare takes would overflow).
SMALLEST_TIME_US = 1e-6
#: Text columns (names, the check) are short and printable: a longer or control-laden value is
#: not collbench's and would garble the tables it is printed in.
_LONGEST_TEXT = LONGEST_TEXT          # one limit for what is written and read

_CHUNK = 1 << 24
#: JSON integers of more digits are read as the floats they overflow to (``_integer``).
_DIGITS = 100


def _cut(text: str) -> str:
    """``text`` cut short for an error message, which stays one short line."""
    return text if len(text) <= 40 else f"{text[:30]}… ({len(text)} characters)"


def _shown(v) -> str:
    """A value for an error message: its repr, cut short."""
    return _cut(repr(v))


# -- reading the bytes -------------------------------------------------------------------------

def _check_regular(name: str, mode: int) -> None:
    for test, kind in NOT_FILES:
        if test(mode):
            hint = ("; to read a stream, pipe it in and give - as the file"
                    if test is stat.S_ISFIFO else "")
            raise UsageError(f"{name}: not a result file but {kind}{hint}")
    if not stat.S_ISREG(mode):
        raise UsageError(f"{name}: not a regular file")


def _reason(exc: OSError) -> str:
    return (exc.strerror or exc.__class__.__name__).lower()


def _read_bounded(stream, name: str, size: int = 0) -> bytearray:
    """Everything a raw binary ``stream`` gives, up to MAX_FILE_BYTES; more is refused.
    ``size``: what the file says it holds, read in place into one buffer (a file that grew since,
    and a stream of unknown size, go on in chunks)."""
    data = bytearray(size)
    filled = 0
    with memoryview(data) as view:
        while filled < size:
            got = stream.readinto(view[filled:])
            if not got:
                break
            filled += got
    if filled < size:                     # it shrank since
        del data[filled:]
    while len(data) <= MAX_FILE_BYTES:
        chunk = stream.read(min(_CHUNK, MAX_FILE_BYTES + 1 - len(data)))
        if not chunk:
            return data
        _no_binary(chunk, name, len(data))
        data += chunk
    raise UsageError(f"{name}: larger than {MAX_FILE_BYTES >> 30} GiB; not a collbench result file")


def _no_binary(chunk: bytes, name: str, offset: int) -> None:
    """A NUL byte is in no JSON or CSV text: a file that holds one is refused before the rest of
    it is read (a disk image or a core file can be most of MAX_FILE_BYTES)."""
    at = chunk.find(b"\0")
    if at >= 0:
        raise UsageError(f"{name}: not a collbench result file (binary: a NUL byte at byte "
                         f"{offset + at})")


def _read_file(path: Path) -> bytearray:
    """The bytes of a regular file. Its kind is checked before it is opened (opening a FIFO
    waits for a writer, opening a device can act on it) and again on what was opened."""
    name = str(path)
    try:
        _check_regular(name, os.stat(path).st_mode)
        fd = os.open(path,
                     os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UsageError(f"{name}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{name}: cannot read ({_reason(exc)})") from None
    with os.fdopen(fd, "rb", buffering=0) as f:
        try:
            info = os.fstat(f.fileno())
            _check_regular(name, info.st_mode)
            if info.st_size > MAX_FILE_BYTES:
                raise UsageError(f"{name}: larger than {MAX_FILE_BYTES >> 30} GiB; not a collbench "
                                 "result file")
            if info.st_size == 0:
                if f.read(1):
                    raise UsageError(f"{name}: a file of no size that still holds bytes (/proc, "
                                     "/sys?); not a result file")
                return bytearray()
            _no_binary(os.pread(f.fileno(), min(info.st_size, _CHUNK), 0), name, 0)
            return _read_bounded(f, name, info.st_size)
        except OSError as exc:
            raise UsageError(f"{name}: cannot read ({_reason(exc)})") from None


def _read_stdin() -> bytearray:
    try:
        with open(0, "rb", buffering=0, closefd=False) as stream:
            return _read_bounded(stream, "-")
    except OSError as exc:
        raise UsageError(f"-: cannot read standard input ({_reason(exc)})") from None


def _count_values(data: bytearray, is_csv: bool, name: str) -> None:
    marks = (b",", b"\n", b" ") if is_csv else (b",", b"[", b"{")
    values = sum(data.count(mark) for mark in marks)
    if values > MAX_VALUES:
        raise UsageError(f"{name}: too large to read: {values:,} values (numbers, lists, objects "
                         f"or cells), more than the {MAX_VALUES:,} collbench reads in bounded "
                         "memory")


# -- values, as JSON types them ----------------------------------------------------------------


def _count(v) -> int:
    """A count or a size: a whole number from 0 to 1e15."""
    if isinstance(v, float):
        if math.isinf(v):
            raise ValueError("out of range")
        if not v.is_integer():
            raise ValueError("not a whole number")
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError("not a whole number")
    if v < 0:
        raise ValueError("negative")
    if v > _LARGEST:
        raise ValueError("out of range")
    return v


def _figure(v, *, limit: float = _LARGEST, smallest: float = 0.0) -> float:
    """A figure: NaN where it is missing (null), never negative, infinite nor beyond ``limit``
    (the statistics downstream would overflow), nor positive below ``smallest``."""
    if v is None:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError("not a number")
    try:
        value = float(v)
    except OverflowError:
        raise ValueError("out of range") from None
    if math.isnan(value):
        return math.nan
    if value < 0:
        raise ValueError("negative")
    if math.isinf(value) or value > limit:
        raise ValueError("out of range")
    if 0 < value < smallest:
        raise ValueError(f"below {smallest:g}")
    return value if value else 0.0          # -0.0 is 0 (and a figure's float is kept, not copied)


_time = partial(_figure, smallest=SMALLEST_TIME_US)


def _text(v) -> str:
    if not isinstance(v, str):
        raise ValueError("not text")
    if len(v) > _LONGEST_TEXT:
        raise ValueError(f"longer than {_LONGEST_TEXT} characters")
    if not v.isprintable():
        raise ValueError("not printable text")
    return v


def _check(v) -> str:
    """ok, skipped or wrong:N (N whole): what every schema version writes (a later version's files
    are refused whole). "bogus" passed report, compare and read_results, and compare counted it
    as a failed check."""
    text = _text(v)
    if text in ("ok", "skipped"):
        return text
    if not (text.startswith("wrong:") and text[6:].isdigit() and text[6:].isascii()
            and len(text) < 26):
        raise ValueError("not ok, skipped or wrong:N")
    return text


def _flag(v) -> bool:
    if isinstance(v, bool):
        return v
    raise ValueError("not true or false")


def _bad(where: str, v, name: str, exc: Exception) -> UsageError:
    why = f": {exc}" if str(exc) else ""
    return UsageError(f"{where}: bad value {_shown(v)} in column {name}{why}")


def _column_check(name: str, kind: str):
    """What checks a value of row column ``name``, of type ``kind`` (``COLUMN_TYPES``)."""
    if name == "check":
        return _check
    if kind == "float":
        return partial(_figure, limit=math.inf if name in WIDE_FIELDS else _LARGEST,
                       # a time in µs, the wide ones (CI ends) excepted: a wild round can put them
                       # anywhere
                       smallest=SMALLEST_TIME_US
                       if name.startswith("time_us") and name not in WIDE_FIELDS else 0.0)
    return {"int": _count, "str": _text, "bool": _flag}[kind]


#: The check of each row column but the round medians (``_medians``).
_CHECKS = {name: _column_check(name, kind) for name, kind in COLUMN_TYPES.items()
           if kind != "tuple"}


# -- CSV cells, read as the type of their column -----------------------------------------------


class _Written(float):
    """A figure read from a CSV cell: a float that an error message shows as the cell wrote it
    (``'-1e9'``, not ``-1000000000.0``). A count's cell becomes a plain int (``_whole_cell``)."""

    def __new__(cls, text: str):
        number = super().__new__(cls, text)
        number.text = text
        return number

    def __repr__(self) -> str:
        return repr(self.text)


def _number_cell(text: str):
    """The number a cell writes in ASCII (Python also reads other scripts' digits and underscores,
    "٢" and "5_000", which no collbench file holds); None for an empty cell; else the text,
    which its column's check refuses."""
    if text.isascii() and "_" not in text:
        try:
            return _Written(text)
        except ValueError:
            return text or None
    return text


def _whole_cell(text: str):
    """A count's cell: its number, an int where it is whole (float() reads digits in linear time,
    int() in quadratic)."""
    number = _number_cell(text)
    if isinstance(number, float):
        return int(number) if number.is_integer() else float(number)
    return number


_FLAGS = {"true": True, "1": True, "1.0": True, "false": False, "0": False, "0.0": False, "": False}
#: A cell's text as the value JSON would give, by its column's type (``records.COLUMN_TYPES``): an
#: empty flag is false, an empty text is empty, other empty cells are missing (null); the round
#: medians are numbers separated by spaces (counted as values, ``_count_values``).
_FROM_CELL = {"int": _whole_cell, "float": _number_cell, "str": str,
              "bool": lambda text: _FLAGS.get(text.strip().lower(), text),
              "tuple": lambda text: [_number_cell(x) for x in text.split(" ") if x] or None}


# -- rows --------------------------------------------------------------------------------------


def _medians(v, where: str) -> tuple:
    """time_us_round_p50s: a list of times."""
    if not isinstance(v, (list, tuple)):
        raise UsageError(f"{where}: time_us_round_p50s is not a list of numbers")
    medians = []
    for x in v:
        try:
            medians.append(_time(x))
        except ValueError as exc:
            raise UsageError(f"{where}: bad value {_shown(x)} in time_us_round_p50s: "
                             f"{exc}") from None
    return tuple(medians)


#: Beyond the rank counts of the largest machines: a row's per-rank structures (a host per rank)
#: stay bounded.
MOST_RANKS = 1 << 24
#: Counts a row has at least one of.
_AT_LEAST_ONE = ("world_size", "ranks_per_node", "window", "pairs_at_once", "rounds", "group_size",
                 "window_used")


def _check_identity(values: dict, where: str) -> None:
    """A row's counts agree with each other: ranks between 1 and MOST_RANKS, no more per host
    than in all, a pair of two ranks of the run."""
    for name in _AT_LEAST_ONE:
        if values[name] < 1:
            raise UsageError(f"{where}: bad value {values[name]} in column {name}: less than 1")
    ranks = values["world_size"]
    if ranks > MOST_RANKS:
        raise UsageError(f"{where}: bad value {ranks} in column world_size: more than "
                         f"{MOST_RANKS:,} ranks")
    for name in ("ranks_per_node", "group_size"):
        if values[name] > ranks:
            raise UsageError(f"{where}: {name} ({values[name]}) is more than world_size ({ranks})")
    if values["group"] >= ranks:
        raise UsageError(f"{where}: bad value {values['group']} in column group: not a group of "
                         f"the {ranks} ranks")
    pair = values["pair"]
    if pair:
        a, _, b = pair.partition("-")
        if not (a.isdigit() and b.isdigit() and a.isascii() and b.isascii() and int(a) != int(b)
                and max(int(a), int(b)) < ranks):
            raise UsageError(f"{where}: bad value {_shown(pair)} in column pair: not A-B, two "
                             f"ranks of the {ranks} of the run")


def _missing_columns(names) -> list:
    return [f for f in ROW_FIELDS if f not in names and f not in ADDED_LATER]


def _row(record: dict, where: str) -> Row:
    """A row from a JSON object, or from a CSV line's cells read as their columns' types."""
    missing = _missing_columns(record)
    if missing:
        raise UsageError(f"{where}: not a collbench result (missing columns: "
                         f"{', '.join(missing[:4])})")
    values = {}
    for name, check in _CHECKS.items():
        v = record[name] if name in record else older_value(name, values)
        try:
            values[name] = check(v)
        except (TypeError, ValueError) as exc:
            raise _bad(where, v, name, exc) from None
    _check_identity(values, where)
    medians = record.get("time_us_round_p50s")
    values["time_us_round_p50s"] = (_medians(medians, where)
                                    if medians is not None else (values["time_us_p50"],))
    if len(values["time_us_round_p50s"]) != values["rounds"]:
        raise UsageError(f"{where}: rounds says {values['rounds']} but time_us_round_p50s holds "
                         f"{len(values['time_us_round_p50s'])} medians")
    for name, most in (("rounds_set_aside", "rounds"), ("rounds_short", "rounds"),
                       ("window_used", "window")):
        if values[name] > values[most]:
            raise UsageError(f"{where}: {name} ({values[name]}) is more than {most} "
                             f"({values[most]})")
    return Row(**values)


def _numbers(v, where: str, name: str):
    if v is None:
        return None
    if not isinstance(v, list):
        raise UsageError(f"{where}: {name} is not a list of numbers")
    try:
        return tuple(_time(x) for x in v)
    except ValueError as exc:
        raise UsageError(f"{where}: {name} is not a list of non-negative times ({exc})") from None


def _round(d, where: str) -> RoundData:
    if not isinstance(d, dict):
        raise UsageError(f"{where}: a round_details entry is not an object")
    for name in ("round", "iterations", "time_us_p50"):
        if name not in d:
            raise UsageError(f"{where}: a round_details entry lacks {name}")
    parsed = {}
    for name, parse, default in (("round", _count, None), ("iterations", _count, None),
                                 ("time_us_p50", lambda v: _figure(v, smallest=SMALLEST_TIME_US),
                                  None),
                                 ("time_us_ci_low", lambda v: _figure(v, limit=math.inf), None),
                                 ("time_us_ci_high", lambda v: _figure(v, limit=math.inf), None),
                                 ("precision_reached", _flag, False), ("check", _check, "skipped"),
                                 ("calls_per_sample", lambda v: _count(v or 1), 1),
                                 ("overall_us", lambda v: _figure(v, limit=math.inf), None),
                                 ("compute_us", lambda v: _figure(v, limit=math.inf), None),
                                 ("window", _count, 0), ("short", _flag, False)):
        v = d.get(name, default)
        try:
            parsed[name] = parse(v)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{where}: bad value {_shown(v)} in round_details {name}: "
                             f"{exc}") from None
    if parsed["round"] < 1:
        raise UsageError(f"{where}: bad value 0 in round_details round: rounds are numbered from 1")
    return RoundData(**parsed, samples_us=_numbers(d.get("samples_us"), where, "samples_us"),
                     rank_means_us=_numbers(d.get("rank_means_us"), where, "rank_means_us"))


def _rounds_v1(record: dict, row: Row, where: str) -> tuple:
    """A version 1 row as one round: its samples and CI are that round's."""
    samples = _numbers(record.get("samples_us"), where, "samples_us")
    means = _numbers(record.get("rank_means_us"), where, "rank_means_us")
    try:
        calls = _count(record.get("calls_per_sample") or 1)
    except (TypeError, ValueError) as exc:
        raise _bad(where, record.get("calls_per_sample"), "calls_per_sample", exc) from None
    return (RoundData(1, row.iterations, row.time_us_p50, row.time_us_ci_low, row.time_us_ci_high,
                      row.precision_reached, row.check, calls, samples, means),)


def _checked_rounds(row: Row, rounds: tuple, where: str) -> tuple:
    """A row's round details agree with its count of rounds and its round medians (the medians
    compare reads and the details merge reads must be one measurement)."""
    if not rounds:
        return rounds
    numbers = [d.round for d in rounds]
    if len(set(numbers)) != len(numbers):
        raise UsageError(f"{where}: round_details names round "
                         f"{Counter(numbers).most_common(1)[0][0]} twice")
    if len(rounds) != row.rounds:
        raise UsageError(f"{where}: rounds says {row.rounds} but round_details holds {len(rounds)} "
                         "rounds")
    sent = windows_sent(rounds, row.window)
    if min(sent) != row.window_used or max(sent) > row.window:
        raise UsageError(f"{where}: window_used says {row.window_used} but round_details sent "
                         f"windows of {', '.join(map(str, sorted(sent)))} (window {row.window})")
    for d, median in zip(sorted(rounds, key=lambda d: d.round), row.time_us_round_p50s):
        if d.time_us_p50 != median and not (math.isnan(d.time_us_p50) and math.isnan(median)):
            raise UsageError(f"{where}: round {d.round}'s median in round_details "
                             f"({d.time_us_p50:g}) is not the one in time_us_round_p50s "
                             f"({median:g})")
    return rounds


#: The metadata entries that compare, report and merge read, and the type each must have.
_METADATA_TYPES = {"rounds": list, "settings": dict, "versions": dict, "hostnames": list,
                   "rank_hosts": list,
                   "merged_from": list, "environment": dict}


def _printable(value):
    """``value`` (parsed JSON) with every text in it, keys too, made printable."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [_printable(v) for v in value]
    if isinstance(value, dict):
        return {printable(k): _printable(v) for k, v in value.items()}
    return value


def _checked_metadata(metadata, path) -> dict:
    """The metadata, its entries of the types their readers expect, its texts printable (an
    older file's MPI library, kept as the library's own lines, tidied first)."""
    if not isinstance(metadata, dict):
        raise UsageError(f"{path}: metadata is not an object")
    for key, kind in _METADATA_TYPES.items():
        if metadata.get(key) is not None and not isinstance(metadata[key], kind):
            raise UsageError(f"{path}: metadata.{key} is not "
                             f"{'a list' if kind is list else 'an object'}")
    versions = metadata.get("versions") or {}
    if isinstance(versions.get("mpi_library"), str):
        versions["mpi_library"] = tidy_library_version(versions["mpi_library"])
    try:
        return _printable(metadata)
    except RecursionError:
        raise UsageError(f"{path}: metadata is nested too deeply") from None


def _unique_keys(pairs: list) -> dict:
    """A JSON object; a key given twice is refused rather than read from its last copy."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        twice = next(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        raise _Duplicate(twice)
    return obj


class _Duplicate(ValueError):
    pass


def _integer(text: str):
    """A JSON integer; one of more than _DIGITS digits (no count comes near) as the float it
    rounds to, out of range wherever it stands: Python converts digits to an int in quadratic
    time, two minutes for a file of 4,000-digit integers."""
    return int(text) if len(text) <= _DIGITS else float(text)


def _parse(text: str, where: str):
    """JSON text to objects; what is wrong with it, in one line naming ``where``."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_int=_integer)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except _Duplicate as exc:
        raise UsageError(f"{where}: the key {_shown(exc.args[0])} appears twice in one "
                         "object") from None
    except RecursionError:
        raise UsageError(f"{where} is nested too deeply") from None


def _schema_version(version, path) -> int:
    if (not isinstance(version, int) or isinstance(version, bool) or version > SCHEMA_VERSION
            or version < 1):
        raise UsageError(f"{path}: unsupported schema version {_shown(version)} (this collbench "
                         f"reads 1..{SCHEMA_VERSION})")
    return version


def _notes(notes, path) -> list:
    """The run's notes: a list of texts, each shown as one line (``errors.printable``)."""
    if notes is None:
        return []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise UsageError(f"{path}: notes is not a list of texts")
    return [printable(n) for n in notes]


def _load_json(path, text: str) -> RunResult:
    doc = _parse(text, str(path))
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UsageError(f"{path}: not a collbench result file")
    version = _schema_version(doc.get("schema_version"), path)
    metadata = _checked_metadata(doc.get("metadata", {}), path)
    rows = doc.get("rows", [])
    if not isinstance(rows, list):
        raise UsageError(f"{path}: rows is not a list")
    result = RunResult(metadata=metadata, notes=_notes(doc.get("notes"), path))
    for i, record in enumerate(rows):
        # its parsed object goes as its row comes: one of the two at a time
        rows[i] = None
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
            rounds = _checked_rounds(row, tuple(_round(d, where) for d in details), where)
        result.add(row, rounds)
    return _assumed(result, version < ADDED_IN["thread_level"])


# -- CSV ---------------------------------------------------------------------------------------


#: The longest line of a CSV collbench reads (the first row holds the run's metadata in one
#: cell; a header may name a million columns, as a spreadsheet's export can). A 600 MB file of
#: one field was copied, line and cell, and peaked at 3.5 GB before it was refused; now it goes
#: once this much of it has been looked at, and nothing of it is copied.
MAX_CSV_LINE = 256 << 20


def _text_lines(path, text: str):
    """The lines of ``text``, ends kept, one at a time (``io.StringIO`` would hold the text a
    second time, four bytes a character); a line longer than MAX_CSV_LINE is refused before it
    is copied."""
    start = 0
    while start < len(text):
        end = text.find("\n", start, start + MAX_CSV_LINE + 1)
        if end < 0 and len(text) - start > MAX_CSV_LINE:
            line = text.count("\n", 0, start) + 1
            raise UsageError(f"{path}: not a collbench result (line {line} is over "
                             f"{MAX_CSV_LINE:,} characters long)")
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def _csv_lines(path, text: str):
    """The CSV's lines as lists of cells, one at a time, blank (or white) lines left out; a line
    longer than the header is not a table."""
    csv.field_size_limit(max(csv.field_size_limit(), MAX_CSV_LINE))   # the metadata cell
    width = None
    try:
        for number, line in enumerate(csv.reader(_text_lines(path, text), strict=True), start=1):
            if not line or (len(line) == 1 and not line[0].strip()):
                continue
            if width is not None and len(line) > width:
                raise UsageError(f"{path}: not a readable CSV (expected {width} fields in line "
                                 f"{number}, saw {len(line)})")
            width = width or len(line)
            yield line
    except csv.Error as exc:
        raise UsageError(f"{path}: not a readable CSV ({exc})") from None
    if width is None:
        raise UsageError(f"{path}: not a readable CSV (no columns to parse)")


def _csv_header(path, header: list) -> dict:
    """Column name -> its place; a column twice, or a row column missing, is refused."""
    twice = sorted(name for name, n in Counter(header).items() if n > 1)
    if twice:
        raise UsageError(f"{path}: not a readable CSV (column {_cut(ascii(twice[0])[1:-1])} "
                         "appears twice)")
    missing = _missing_columns(header)
    if missing:               # said even when there is no row to read
        raise UsageError(f"{path}: not a collbench result (missing columns: "
                         f"{', '.join(missing[:4])})")
    return {name: i for i, name in enumerate(header)}


def _cell(line: list, i: int) -> str:
    return line[i] if i < len(line) else ""          # a short line: its last cells are empty


def _csv_metadata(path, cell: str) -> dict:
    """The run metadata of a CSV's first row (its ``run_metadata`` cell), checked as the JSON's
    is."""
    if not cell:
        raise UsageError(f"{path}: row 0: {CSV_METADATA_COLUMN} is not JSON text")
    metadata = _checked_metadata(_parse(cell, f"{path}: row 0: {CSV_METADATA_COLUMN}"), path)
    _schema_version(metadata.get("schema_version", SCHEMA_VERSION), path)
    return metadata


def _load_csv(path, text: str) -> RunResult:
    """Rows from the CSV, read in one pass with the csv module (a line at a time; compare and
    report read CSVs without importing pandas); run metadata from its first row where it has one
    (CSVs written before it carry none). ``format: csv`` says the file holds rows only, no rounds.
    Only the row's columns are read (other columns, however many, are carried by no row), each
    cell as its column's type."""
    lines = _csv_lines(path, text)
    index = _csv_header(path, next(lines))
    columns = [(name, index[name], _FROM_CELL[COLUMN_TYPES[name]]) for name in ROW_FIELDS
               if name in index]
    first = next(lines, None)
    metadata = {}
    if first is not None and CSV_METADATA_COLUMN in index:
        metadata = _csv_metadata(path, _cell(first, index[CSV_METADATA_COLUMN]))
    result = RunResult(metadata={**metadata, "source": str(path), "format": "csv"})
    for number, line in enumerate(itertools.chain([first] if first is not None else [], lines)):
        result.add(_row({name: read(_cell(line, i)) for name, i, read in columns},
                        f"{path} row {number}"))
    return _assumed(result, "thread_level" not in index)


def _assumed(result: RunResult, predates: bool) -> RunResult:
    """``result``, with a note where its MPI rows' thread level and binding were assumed."""
    if predates and any(r.backend in MPI_BACKENDS for r in result.rows):
        result.notes.append(ASSUMED_SETUP)
    return result


_BOM = "\ufeff".encode()
_JSON_START = re.compile(rb"(?:\xef\xbb\xbf)?\s*[{\[]")
_BLANK = re.compile(r"\s*\Z")


def load_result(path) -> RunResult:
    """The run in a result file (``-``: standard input); UsageError, in one line, for anything
    else."""
    if str(path) == "-":
        name, data = "-", _read_stdin()
        is_csv = not _JSON_START.match(data)
    else:
        path = Path(path)
        name, data = str(path), _read_file(path)
        is_csv = path.suffix.lower() == ".csv"
    _count_values(data, is_csv, name)
    if data.startswith(_BOM):           # skipped: some editors write one
        del data[:len(_BOM)]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{name}: cannot read (not UTF-8 text: byte {exc.start})") from None
    del data
    if _BLANK.match(text):
        raise UsageError(f"{name}: empty file")
    result = _load_csv(name, text) if is_csv else _load_json(name, text)
    _rows_hold_together(name, result)
    return result


#: How far a row's p50 may lie outside the range of its round medians: what the files' rounding
#: of the two allows (every rule collbench has used takes a mean of some of those medians).
_ROUNDING = 0.01


def _rows_hold_together(name: str, result: RunResult) -> None:
    """A run measures each row once, and a row's p50 is a mean of some of its round medians. A
    file holding a row twice (an edit, a bad merge) was printed twice by report and averaged over;
    a p50 of 99999 where the rounds give 145.7 was shown, exported and compared as "+0.0%"; a
    nan p50 beside finite rounds was taken for a row not measured. Every command refuses them."""
    seen: set = set()
    for row in result.rows:
        what = f"{row.collective} {backend_label(row)} {row.size_bytes} B {row.timing}"
        if row.key() in seen:
            raise UsageError(f"{name}: two rows for {what}; a file holds one run, each row once")
        seen.add(row.key())
        medians = [m for m in row.time_us_round_p50s
                   if m is not None and math.isfinite(m) and m > 0]
        if not medians:
            continue
        p50 = row.time_us_p50
        if not (math.isfinite(p50)
                and min(medians) * (1 - _ROUNDING) <= p50 <= max(medians) * (1 + _ROUNDING)):
            raise UsageError(f"{name}: {what}: its p50 {p50:g} µs lies outside its round medians "
                             f"({min(medians):g}-{max(medians):g} µs): the file is corrupt")
        low, high = row.time_us_ci_low, row.time_us_ci_high
        if all(isinstance(v, (int, float)) and math.isfinite(v) for v in (low, high)) and not (
                low <= p50 * (1 + _ROUNDING) and high >= p50 * (1 - _ROUNDING)):
            raise UsageError(f"{name}: {what}: its 95% CI {low:g}-{high:g} µs does not hold its "
                             f"p50 {p50:g} µs: the file is corrupt")
