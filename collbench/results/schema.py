"""The JSON Schema of collbench's result files, for the CI tools that read them.

Derived, not written: a row's properties come from the columns of ``records.Row`` and a
round's from ``records.RoundData`` (their types and descriptions), so a new column reaches the
files, the loader, ``compare`` and this schema from one place. ``collbench schema`` prints it;
docs/result.schema.json is a copy the tests keep identical.
"""

from __future__ import annotations

from dataclasses import MISSING, fields

from collbench.results.records import (ADDED_IN, ADDED_LATER, KEY_FIELDS, SCHEMA, SCHEMA_VERSION,
                                       RoundData, Row)

_JSON_TYPES = {"str": {"type": "string"}, "int": {"type": "integer", "minimum": 0},
               "bool": {"type": "boolean"},
               # JSON has no NaN: a figure that could not be computed is null
               "float": {"type": ["number", "null"]},
               "tuple": {"type": "array", "items": {"type": ["number", "null"]}},
               "Optional[tuple]": {"type": ["array", "null"],
                                   "items": {"type": ["number", "null"]}}}

def _described(f) -> dict:
    """A declared column (``records.column``) as a JSON Schema property."""
    return dict(_JSON_TYPES[str(f.type)], description=f.metadata["doc"])


_ROUND = {
    "type": "object",
    "description": "what one round (one launch) measured for this row",
    "required": [f.name for f in fields(RoundData) if f.default is MISSING],
    "properties": {f.name: _described(f) for f in fields(RoundData)},
}

_RANKS = {
    "slowest_rank": {"type": ["integer", "null"],
                     "description": "written for readers, never read back"},
    "slowest_rank_host": {"type": ["string", "null"]},
    "slowest_rank_us": {"type": ["number", "null"]},
    "slowest_rank_rel": {"type": ["number", "null"]},
    "outlier_ranks": {"type": ["array", "null"], "items": {"type": "object"}},
}


def _added() -> str:
    """Which columns each version after 2 added: "rounds_set_aside: 3; pair, window: 4"."""
    by_version: dict = {}
    for name, version in ADDED_IN.items():
        if version > 2:
            by_version.setdefault(version, []).append(name)
    return "; ".join(f"{', '.join(names)}: {version}"
                     for version, names in sorted(by_version.items()))


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of a result file of the current schema version."""
    row_fields = fields(Row)
    # older files lack the others
    required = [f.name for f in row_fields if f.name not in ADDED_LATER]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://collbench.invalid/schema/result-v{SCHEMA_VERSION}.json",
        "title": "collbench result file",
        "description": "One run of collbench: its metadata, and one row per "
                       f"({', '.join(KEY_FIELDS)}) with what each round measured. Older files "
                       f"(schema_version 1 to {SCHEMA_VERSION - 1}) lack the columns added since "
                       "and still load.",
        "type": "object",
        "required": ["schema", "schema_version", "metadata", "rows"],
        "properties": {
            "schema": {"const": SCHEMA},
            "schema_version": {"type": "integer", "minimum": 2, "maximum": SCHEMA_VERSION,
                               "description": f"{SCHEMA_VERSION} now; earlier versions lack the "
                                              f"columns added since ({_added()}); version 1, "
                                              "before rounds, still loads and is not described "
                                              "here"},
            "metadata": {"type": "object",
                         "description": "the run: versions, hosts, settings, rounds"},
            "notes": {"type": "array", "items": {"type": "string"}},
            "rows": {"type": "array", "items": {
                "type": "object",
                "required": required,
                "properties": {**{f.name: _described(f) for f in row_fields}, **_RANKS,
                               "round_details": {"type": "array", "items": _ROUND}},
            }},
        },
    }
