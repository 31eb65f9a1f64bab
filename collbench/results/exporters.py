"""One exporter per file format behind one tiny interface: ``render(result) -> str``.

Files are written atomically (temporary file in the same folder, then rename), so a reader
or a crash never sees half a file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from collbench.errors import UsageError
from collbench.results.ranks import RANK_FIELDS, RankView, csv_fields, json_fields, row_views
from collbench.results.records import ROW_FIELDS, SCHEMA, SCHEMA_VERSION, Row, RunResult, root_rank
from collbench.results.links import Placement, placement
from collbench.results.tables import build_tables, to_markdown


def _clean(value):
    """JSON has no NaN: store it as null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _round_record(r) -> dict:
    return {"round": r.round, "iterations": r.iterations, "time_us_p50": _clean(r.time_us_p50),
            "time_us_ci_low": _clean(r.time_us_ci_low), "time_us_ci_high": _clean(r.time_us_ci_high),
            "precision_reached": r.precision_reached, "check": r.check, "calls_per_sample": r.calls_per_sample,
            "samples_us": [round(v, 4) for v in r.samples_us] if r.samples_us is not None else None,
            "rank_means_us": [_clean(round(m, 4)) for m in r.rank_means_us] if r.rank_means_us is not None else None,
            **({"overall_us": _clean(r.overall_us), "compute_us": _clean(r.compute_us)}
               if math.isfinite(r.overall_us) else {}),
            **({"window": r.window} if r.window else {}), **({"short": True} if r.short else {})}


@dataclass
class _JsonRowMemo:
    """One row's JSON text, kept while its rounds, row and per-rank view stay the same objects."""

    rounds: tuple                 # the row's RoundData when ``details`` was encoded
    details: str                  # its round_details, encoded: the costly part
    row: Optional[Row] = None     # the row and view ``text`` was made from
    view: Optional[RankView] = None
    text: str = ""                # the row's whole JSON object


class JsonExporter:
    """The versioned JSON document. Each row's per-round details (every sample) are encoded once
    and kept in ``result.cache`` while the row's rounds stay the same objects, so rewriting the
    file after every size costs the I/O and the rows' few scalar fields, not the serialisation
    of every sample measured so far again. The per-rank fields (``ranks``) come from the rounds
    and their hosts; they are written for readers and recomputed, never read back."""

    suffix, format = ".json", "json"

    @staticmethod
    def _row_text(row, view, details: str) -> str:
        record = {k: _clean(v) for k, v in row.to_dict().items()}
        record["time_us_round_p50s"] = [_clean(v) for v in row.time_us_round_p50s]
        record.update(json_fields(view))
        return json.dumps(record, default=str)[:-1] + ', "round_details": ' + details + "}"

    @classmethod
    def render(cls, result: RunResult) -> str:
        memo = result.cache.setdefault("json_rows", {})
        texts = []
        for row, rounds, view in zip(result.rows, result.rounds, row_views(result)):
            cached = memo.get(row.key())
            if cached is None or cached.rounds != rounds:    # tuples of the same RoundData: compared by identity
                cached = _JsonRowMemo(rounds, json.dumps([_round_record(r) for r in rounds], default=str))
                memo[row.key()] = cached
            if cached.row is not row or cached.view is not view:
                cached.row, cached.view, cached.text = row, view, cls._row_text(row, view, cached.details)
            texts.append(cached.text)
        head = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "metadata": result.metadata,
                "notes": result.notes}
        body = "[\n  " + ",\n  ".join(texts) + "\n ]" if texts else "[]"
        return json.dumps(head, indent=1, default=str)[:-2] + ',\n "rows": ' + body + "\n}\n"


def _cell(value) -> str:
    """One CSV cell as pandas would write it with ``float_format="%.6g"``: empty for a missing
    value (None, NaN), True/False, integers whole, other numbers to six significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


#: The CSV's last column: the run's metadata as JSON in the first row's cell, empty below, so
#: that the file stays one plain table (``pandas.read_csv(path)`` reads it as it did before).
CSV_METADATA_COLUMN = "run_metadata"
#: Left out of the CSV's metadata: lists that grow with the ranks, hosts or sizes of a run (the
#: JSON keeps them), so that rewriting the CSV after each size stays cheap at any scale.
CSV_LEFT_OUT = {"metadata": ("rank_hosts",), "round": ("order", "rank_hosts"), "load": ("hosts",)}


def _without(record, names) -> dict:
    return {k: v for k, v in record.items() if k not in names} if isinstance(record, dict) else record


def csv_metadata(metadata: dict) -> dict:
    """What a CSV carries of the run metadata: everything ``compare`` checks (hosts, CPU, library
    versions, world size, schema version) and reads (each round's number, run and load), less
    CSV_LEFT_OUT."""
    meta = _without(metadata, CSV_LEFT_OUT["metadata"])
    if isinstance(meta.get("rounds"), list):
        rounds = [_without(r, CSV_LEFT_OUT["round"]) for r in meta["rounds"]]
        meta["rounds"] = [{**r, "load": _without(r["load"], CSV_LEFT_OUT["load"])}
                          if isinstance(r, dict) and isinstance(r.get("load"), dict) else r for r in rounds]
    return meta


class CsvExporter:
    """The rows, one per line; the round medians as one space-separated cell; then the per-rank
    columns, for spreadsheets (readers of the file ignore them); last, the run's metadata in the
    first row (CSV_METADATA_COLUMN). Written with the standard library's csv module, in the
    dialect pandas writes and reads, because this is the measuring path: the CSV is rewritten
    after each size, and pandas would add its import to every run and a DataFrame's ``to_csv`` to
    every rewrite (benchmarks/README.md, "Saving after every size"). pandas is for reading
    results afterwards (``collbench.read_results``)."""

    suffix, format = ".csv", "csv"

    @staticmethod
    def render(result: RunResult) -> str:
        out = io.StringIO()
        # json.dumps escapes every control character: the metadata is one line whatever it holds
        metadata = json.dumps(csv_metadata(result.metadata), default=str)
        writer = csv.writer(out, lineterminator="\n")
        columns = ROW_FIELDS + RANK_FIELDS
        writer.writerow(columns + (CSV_METADATA_COLUMN,))
        for i, (r, view) in enumerate(zip(result.rows, row_views(result))):
            record = r.to_dict()
            record["time_us_round_p50s"] = " ".join(f"{v:.6g}" for v in r.time_us_round_p50s)
            record.update(csv_fields(view))
            writer.writerow([_cell(record.get(name)) for name in columns] + [metadata if i == 0 else ""])
        return out.getvalue()


class MarkdownExporter:
    """The run's metadata as a list, then one table per (collective, setup), then the notes.
    On stdout the tables print as each collective completes (``render_tables``)."""

    suffix, format = ".md", "markdown"

    @staticmethod
    def render_tables(rows, root: int = 0, where: Placement = Placement()) -> str:
        return "\n".join(to_markdown(t) for t in build_tables(rows, root, where))

    @staticmethod
    def render(result: RunResult) -> str:
        meta = result.metadata
        head = ["# collbench results", "",
                f"- collbench {meta.get('collbench_version', '?')}, {meta.get('timestamp', '')}",
                f"- {meta.get('world_size', '?')} rank{'' if meta.get('world_size') == 1 else 's'} on "
                f"{', '.join(str(h) for h in meta.get('hostnames', []))}",
                f"- MPI: {meta.get('versions', {}).get('mpi_library', '-')}", "", ""]
        body = [to_markdown(t) for t in build_tables(result.rows, root_rank(meta), placement(meta))]
        notes = [f"- {n}" for n in result.notes]
        return "\n".join(head) + "\n".join(body) + ("\n" + "\n".join(notes) + "\n" if notes else "")


#: One registry for files (by suffix) and stdout (by ``--format``); ``table``, the terminal's
#: rich table, is the one format that is not a file.
EXPORTERS = {e.suffix: e for e in (JsonExporter, CsvExporter, MarkdownExporter)}
STDOUT_FORMATS = {"table": None, **{e.format: e for e in EXPORTERS.values()}}


def exporter_for(path: Path):
    try:
        return EXPORTERS[path.suffix.lower()]
    except KeyError:
        raise UsageError(f"cannot tell the format of {str(path)!r}: use a name ending in "
                         + ", ".join(EXPORTERS)) from None


def _file_mode() -> int:
    """What a plain open() would give (0666 less the umask); mkstemp's own 0600 is too strict."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_MODE = _file_mode()


_in_flight: set = set()      # temporary files being written now


def write_atomic(path: Path, data) -> None:
    """Write ``path`` (text or bytes) whole or not at all: a temporary file beside it, then a
    rename. An OSError names ``path`` (``filename``) whatever step failed."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
        _in_flight.add(tmp)
        os.fchmod(fd, _MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(exc, OSError):
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
        raise
    finally:
        _in_flight.discard(tmp)


def remove_partial() -> None:
    """Remove the temporary files of writes still under way: the process is ending (a signal
    thread calls this while the main thread may be inside ``write_atomic``)."""
    for tmp in list(_in_flight):
        try:
            os.unlink(tmp)
        except OSError:
            pass


#: what a path that is not a regular file is, as a line says it
NOT_FILES = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def refuse_special(path) -> None:
    """Refuse an output that exists and is not a regular file (a device such as /dev/null, a
    FIFO, a socket): a result is written to a temporary file and renamed over the output, which
    would put a file in the device's place (as root, /dev/null itself). --force does not change
    that."""
    try:
        mode = os.stat(path).st_mode
    except OSError:                     # not there (or a dangling link): a file will be made
        return
    if stat.S_ISDIR(mode):
        raise UsageError(f"output {str(path)!r} is a directory; give a file name")
    if not stat.S_ISREG(mode):
        kind = next((kind for test, kind in NOT_FILES if test(mode)), "not a regular file")
        raise UsageError(f"output {str(path)!r} is {kind}: collbench writes a result whole and renames it into "
                         "place, which would replace it; give a file name (--no-save keeps no file)")


def check_writable_path(path, force: bool) -> Path:
    """Refuse, before anything is measured or drawn, a path we could not or must not write: a
    folder, a device or a FIFO (``refuse_special``), a file that exists (without ``force``), a
    folder missing or not writable."""
    path = Path(path)
    refuse_special(path)
    if path.exists() and not force:
        raise UsageError(f"output {str(path)!r} exists; use --force to overwrite it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"cannot write {str(path)!r}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write {str(path)!r}: folder {str(parent)!r} is not writable")
    return path


def check_result_path(path, force: bool) -> None:
    """A result file: a format known by its suffix, and a path we may write."""
    exporter_for(Path(path))
    check_writable_path(path, force)
