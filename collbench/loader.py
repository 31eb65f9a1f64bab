"""Read result files back: collbench JSON (any supported schema version) or CSV of rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

from collbench.errors import UsageError
from collbench.results import ROW_FIELDS, SCHEMA, SCHEMA_VERSION, Row, RunResult

_INT = {"world_size", "ranks_per_node", "size_bytes", "per_rank_bytes", "count", "iterations"}
_STR = {"collective", "backend", "dtype", "op", "timing", "check"}


def _row(record: dict, where: str) -> Row:
    missing = [f for f in ROW_FIELDS if f not in record]
    if missing:
        raise UsageError(f"{where}: not a collbench result (missing columns: {', '.join(missing[:4])})")
    values = {}
    for name in ROW_FIELDS:
        v = record[name]
        try:
            if name in _INT:
                values[name] = int(v)
            elif name in _STR:
                values[name] = str(v)
            elif name == "precision_reached":
                values[name] = v if isinstance(v, bool) else str(v).strip().lower() in ("true", "1")
            else:
                values[name] = math.nan if v is None or v == "" else float(v)
        except (TypeError, ValueError):
            raise UsageError(f"{where}: bad value {v!r} in column {name}") from None
    return Row(**values)


def _load_json(path: Path, text: str) -> RunResult:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UsageError(f"{path}: not a collbench result file")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise UsageError(f"{path}: unsupported schema version {version!r} (this collbench reads 1..{SCHEMA_VERSION})")
    result = RunResult(metadata=doc.get("metadata") or {}, notes=list(doc.get("notes") or []))
    for i, record in enumerate(doc.get("rows") or []):
        if not isinstance(record, dict):
            raise UsageError(f"{path}: row {i} is not an object")
        result.add(_row(record, f"{path} row {i}"), record.get("samples_us"), record.get("rank_means_us"))
    return result


def _load_csv(path: Path) -> RunResult:
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except Exception as exc:  # pandas raises several types for unreadable CSV
        raise UsageError(f"{path}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    result = RunResult(metadata={"source": str(path), "format": "csv"})
    for i, record in enumerate(frame.to_dict("records")):
        result.add(_row(record, f"{path} row {i}"))
    return result


def load_result(path) -> RunResult:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read ({exc.__class__.__name__})") from None
    if not text.strip():
        raise UsageError(f"{path}: empty file")
    if path.suffix.lower() == ".csv":
        return _load_csv(path)
    return _load_json(path, text)
