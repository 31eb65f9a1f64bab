"""Rank 0's growing result: each row's rounds as they arrive, rows rebuilt only when they change.

Rows are kept in plan order (collective, backend, size, timing as the command named them),
not in the shuffled order they were measured in; the metadata's ``rounds`` records that.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional

from collbench.results.aggregate import RowIdentity, build_row, moderate_rows
from collbench.results.records import KEY_FIELDS, RoundData, Row, RunResult


def _key(identity: RowIdentity) -> tuple:
    return tuple(getattr(identity, name) for name in KEY_FIELDS)


class Collector:
    def __init__(self, metadata: dict) -> None:
        self.result = RunResult(metadata)
        self._entries: dict = {}         # key -> [identity, sort key, [RoundData], Row or None]
        self._dirty = False

    @property
    def metadata(self) -> dict:
        return self.result.metadata

    @property
    def notes(self) -> list:
        return self.result.notes

    def add(self, identity: RowIdentity, sort_key: tuple, data: RoundData) -> Row:
        entry = self._entries.setdefault(_key(identity), [identity, tuple(sort_key), [], None])
        entry[2] = [d for d in entry[2] if d.round != data.round] + [data]
        entry[3] = build_row(identity, entry[2])
        self._dirty = True
        return entry[3]

    def run_result(self) -> RunResult:
        """The RunResult exporters render; the same object every time (it carries their memo)."""
        if self._dirty:
            ordered = sorted(self._entries.values(), key=lambda e: e[1])
            self.result.rows[:] = moderate_rows([e[3] for e in ordered])
            self.result.rounds[:] = [tuple(sorted(e[2], key=lambda d: d.round)) for e in ordered]
            self._dirty = False
        return self.result

    def rows_of(self, collective: str) -> list:
        return [r for r in self.run_result().rows if r.collective == collective]

    # --- journal entries (self-launched rounds) ---

    @staticmethod
    def entry(identity: RowIdentity, sort_key: tuple, data: RoundData) -> dict:
        return {"type": "measure", "identity": asdict(identity), "sort": list(sort_key), "data": asdict(data)}

    def replay(self, entry: dict) -> Optional[Row]:
        identity = RowIdentity(**entry["identity"])
        raw = dict(entry["data"])
        for name in ("samples_us", "rank_means_us"):
            if raw.get(name) is not None:
                raw[name] = tuple(raw[name])
        return self.add(identity, tuple(entry["sort"]), RoundData(**raw))
