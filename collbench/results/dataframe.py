"""Result files as one pandas DataFrame: ``collbench.read_results``, the Python API for notebooks.

The rows come from the loader (``loader.load_result``), so a DataFrame holds what ``compare`` and
``report`` read, checked as they check it. pandas is imported here, at the top: nothing on the
measuring path imports this module, and ``collbench`` exposes ``read_results`` lazily, so that
``import collbench`` and a run leave pandas out.
"""

from __future__ import annotations

import os

import pandas as pd

from collbench.errors import UsageError
from collbench.results.formats import csv_metadata
from collbench.results.loader import load_result
from collbench.results.records import COLUMN_TYPES, ROW_FIELDS

#: The run each row came from: the file as given, then what the file's metadata says of the run
#: (missing where it does not: a CSV written before its metadata column). Its ``versions``
#: follow, one ``<name>_version`` column each (``mpi_library_version``, ``mpi4py_version``...).
RUN_COLUMNS = ("file", "run_id", "timestamp", "hostnames", "cpu_model", "collbench_version")
#: A row's columns, less its round medians (``ROUND_COLUMN``, spread one per round).
ROW_COLUMNS = tuple(name for name in ROW_FIELDS if name != "time_us_round_p50s")
#: The column of round N's median time (µs).
ROUND_COLUMN = "time_us_p50_round_{}"
_DTYPES = {"int": "int64", "float": "float64", "bool": "bool"}


def read_results(path_or_paths) -> pd.DataFrame:
    """Read collbench result files (JSON or CSV) into one DataFrame, one line per result row.

    ``path_or_paths``: a path (``str`` or ``os.PathLike``) or a list of them; rows follow in the
    order of the files, then of each file.

    Columns, in this order:

    * the run's: ``file`` (the path as given), ``run_id``, ``timestamp``, ``hostnames`` (the
      run's hosts, comma-separated), ``cpu_model``, ``collbench_version``, then one
      ``<name>_version`` column per library version the file records (``python_version``,
      ``numpy_version``, ``mpi_library_version``, ``mpi4py_version``, ``torch_version``...).
      Missing (NaN) where a file does not record them.
    * the row's: every field of ``collbench.results.records.Row`` (docs/results-format.md, Row
      fields), typed as the row declares them: counts ``int64``, figures ``float64`` (NaN where
      a figure could not be computed), flags ``bool``, names text.
    * the round medians: ``time_us_p50_round_1``, ``time_us_p50_round_2``... one ``float64``
      column per round, NaN where a row was measured in fewer rounds. They replace the row's
      ``time_us_round_p50s`` list: numeric columns are what pandas computes on directly
      (``frame.filter(like="time_us_p50_round_").std(axis=1)``, a plot per round, ``to_csv``),
      where a column of lists holds Python objects that every operation has to unpack first.

    ``DataFrame.attrs`` holds the metadata: for one file, that file's (versions, settings, each
    round with its load, and its ``notes``); for several, a dict of them keyed by the ``file``
    column's value. It is what a CSV carries of the metadata (``formats.csv_metadata``): all
    but the lists that grow with the ranks, hosts and sizes of a run (``rank_hosts``, each
    round's ``order``), which pandas would deep-copy into the result of every operation
    (``collbench.results.loader.load_result(path).metadata`` has them).

    A file that is missing, unreadable or not a collbench result raises
    ``collbench.errors.UsageError`` with the one-line message the ``collbench`` commands give.
    """
    paths = _paths(path_or_paths)
    runs = []
    for path in paths:
        try:
            runs.append(load_result(path))
        except UsageError as exc:
            raise UsageError(str(exc)) from None          # its one line says it all
    records = []
    for path, run in zip(paths, runs):
        of_run = _run_values(path, run.metadata)
        for i, row in enumerate(run.rows):
            record = {**of_run, **{name: getattr(row, name) for name in ROW_COLUMNS}}
            for number, median in zip(sorted(run.round_numbers(i)), row.time_us_round_p50s):
                record[ROUND_COLUMN.format(number)] = median
            records.append(record)
    names = _ordered({name for record in records for name in record})
    frame = pd.DataFrame(records, columns=names)
    frame = frame.astype({name: _dtype(name) for name in names if _dtype(name)})
    metadata = {path: {**csv_metadata(run.metadata), "notes": list(run.notes)}
                for path, run in zip(paths, runs)}
    frame.attrs = metadata[paths[0]] if len(paths) == 1 else metadata
    return frame


def _paths(path_or_paths) -> list:
    """The paths as text; one path is a list of one."""
    if isinstance(path_or_paths, (str, bytes, os.PathLike)):
        path_or_paths = [path_or_paths]
    try:
        paths = [os.fsdecode(path) for path in path_or_paths]
    except TypeError:
        raise TypeError("read_results takes a path (str or os.PathLike) or a list of paths, not "
                        f"{path_or_paths!r:.80}") from None
    if not paths:
        raise UsageError("read_results: no result files given")
    return paths


def _run_values(path: str, metadata: dict) -> dict:
    """The run columns of a file's rows."""
    hosts = metadata.get("hostnames")
    values = {"file": path, "run_id": metadata.get("run_id"),
              "timestamp": metadata.get("timestamp"),
              "hostnames": ",".join(map(str, hosts)) if isinstance(hosts, list) else None,
              "cpu_model": metadata.get("cpu_model"),
              "collbench_version": metadata.get("collbench_version")}
    for name, version in (metadata.get("versions") or {}).items():
        values.setdefault(f"{name}_version", version)
    return values


def _ordered(names: set) -> list:
    """The run columns, the row's, then the round medians by round."""
    versions = sorted(name for name in names
                      if name.endswith("_version") and name not in RUN_COLUMNS)
    rounds = sorted((name for name in names if name.startswith(ROUND_COLUMN.format(""))),
                    key=lambda name: int(name.rsplit("_", 1)[1]))
    return [*RUN_COLUMNS, *versions, *ROW_COLUMNS, *rounds]


def _dtype(name: str):
    if name.startswith(ROUND_COLUMN.format("")):
        return "float64"
    return _DTYPES.get(COLUMN_TYPES.get(name, "str"))
