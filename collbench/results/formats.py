"""The file formats of a result: the versioned JSON document and the CSV of rows, one writer
each behind ``render(result) -> str``; ``loader`` reads both back."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from typing import Optional

from collbench.results.rank_view import RANK_FIELDS, RankView, csv_fields, json_fields, row_views
from collbench.results.records import ROW_FIELDS, SCHEMA, SCHEMA_VERSION, Row, RunResult


def _clean(value):
    """JSON has no NaN: store it as null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _round_record(r) -> dict:
    return {"round": r.round, "iterations": r.iterations, "time_us_p50": _clean(r.time_us_p50),
            "time_us_ci_low": _clean(r.time_us_ci_low),
            "time_us_ci_high": _clean(r.time_us_ci_high),
            "precision_reached": r.precision_reached, "check": r.check,
            "calls_per_sample": r.calls_per_sample,
            "samples_us": [round(v, 4) for v in r.samples_us] if r.samples_us is not None else None,
            "rank_means_us": [_clean(round(m, 4)) for m in r.rank_means_us]
            if r.rank_means_us is not None else None,
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
    of every sample measured so far again. The per-rank fields (``rank_view``) come from the rounds
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
            # tuples of the same RoundData: compared by identity
            if cached is None or cached.rounds != rounds:
                cached = _JsonRowMemo(rounds,
                                      json.dumps([_round_record(r) for r in rounds], default=str))
                memo[row.key()] = cached
            if cached.row is not row or cached.view is not view:
                cached.row, cached.view, cached.text = (row, view,
                                                        cls._row_text(row, view, cached.details))
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
    return ({k: v for k, v in record.items() if k not in names}
            if isinstance(record, dict) else record)


def csv_metadata(metadata: dict) -> dict:
    """What a CSV carries of the run metadata: everything ``compare`` checks (hosts, CPU, library
    versions, world size, schema version) and reads (each round's number, run and load), less
    CSV_LEFT_OUT."""
    meta = _without(metadata, CSV_LEFT_OUT["metadata"])
    if isinstance(meta.get("rounds"), list):
        rounds = [_without(r, CSV_LEFT_OUT["round"]) for r in meta["rounds"]]
        meta["rounds"] = [{**r, "load": _without(r["load"], CSV_LEFT_OUT["load"])}
                          if isinstance(r, dict) and isinstance(r.get("load"), dict) else r
                          for r in rounds]
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
            writer.writerow([_cell(record.get(name)) for name in columns]
                            + [metadata if i == 0 else ""])
        return out.getvalue()
