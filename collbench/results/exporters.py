"""One exporter per file format behind one tiny interface: ``render(result) -> str``.

Files are written atomically (temporary file in the same folder, then rename), so a reader
or a crash never sees half a file.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from collbench.errors import UsageError
from collbench.results.records import ROW_FIELDS, SCHEMA, SCHEMA_VERSION, RunResult
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
            "rank_means_us": [_clean(round(m, 4)) for m in r.rank_means_us] if r.rank_means_us is not None else None}


class JsonExporter:
    """The versioned JSON document. Each row's per-round details (every sample) are encoded once
    and kept in ``result.cache`` while the row's rounds stay the same objects, so rewriting the
    file after every size costs the I/O and the rows' few scalar fields, not the serialisation
    of every sample measured so far again."""

    suffix, format = ".json", "json"

    @staticmethod
    def _row_text(row, details: str) -> str:
        record = {k: _clean(v) for k, v in row.to_dict().items()}
        record["time_us_round_p50s"] = [_clean(v) for v in row.time_us_round_p50s]
        return json.dumps(record, default=str)[:-1] + ', "round_details": ' + details + "}"

    @classmethod
    def render(cls, result: RunResult) -> str:
        memo = result.cache.setdefault("json_rows", {})
        texts = []
        for row, rounds in zip(result.rows, result.rounds):
            cached = memo.get(row.key())
            if cached is None or cached[0] != rounds:        # tuples of the same RoundData: compared by identity
                cached = [rounds, json.dumps([_round_record(r) for r in rounds], default=str), None, None]
                memo[row.key()] = cached
            if cached[2] is not row:
                cached[2], cached[3] = row, cls._row_text(row, cached[1])
            texts.append(cached[3])
        head = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "metadata": result.metadata,
                "notes": result.notes}
        body = "[\n  " + ",\n  ".join(texts) + "\n ]" if texts else "[]"
        return json.dumps(head, indent=1, default=str)[:-2] + ',\n "rows": ' + body + "\n}\n"


class CsvExporter:
    """The rows, one per line; the round medians as one space-separated cell."""

    suffix, format = ".csv", "csv"

    @staticmethod
    def render(result: RunResult) -> str:
        import pandas as pd

        records = []
        for r in result.rows:
            record = r.to_dict()
            record["time_us_round_p50s"] = " ".join(f"{v:.6g}" for v in r.time_us_round_p50s)
            records.append(record)
        frame = pd.DataFrame(records, columns=list(ROW_FIELDS))
        return frame.to_csv(index=False, float_format="%.6g")


class MarkdownExporter:
    """The run's metadata as a list, then one table per (collective, setup), then the notes.
    On stdout the tables print as each collective completes (``render_tables``)."""

    suffix, format = ".md", "markdown"

    @staticmethod
    def render_tables(rows) -> str:
        return "\n".join(to_markdown(t) for t in build_tables(rows))

    @staticmethod
    def render(result: RunResult) -> str:
        meta = result.metadata
        head = ["# collbench results", "",
                f"- collbench {meta.get('collbench_version', '?')}, {meta.get('timestamp', '')}",
                f"- {meta.get('world_size', '?')} ranks on {', '.join(meta.get('hostnames', []))}",
                f"- MPI: {meta.get('versions', {}).get('mpi_library', '-')}", ""]
        body = [to_markdown(t) for t in build_tables(result.rows)]
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


def write_atomic(path: Path, text: str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        os.fchmod(fd, _MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def check_output_path(path, force: bool) -> Path:
    """Refuse, before anything is measured or drawn, an output we could not or must not write."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"output {str(path)!r} is a directory; give a file name")
    if path.exists() and not force:
        raise UsageError(f"output {str(path)!r} exists; use --force to overwrite it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"cannot write {str(path)!r}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write {str(path)!r}: folder {str(parent)!r} is not writable")
    return path


def check_writable(path, force: bool) -> None:
    """A result file: a known format, and a path we may write."""
    exporter_for(Path(path))
    check_output_path(path, force)
