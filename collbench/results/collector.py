"""Rank 0's growing result: each row's rounds as they arrive, rows rebuilt only when they change.

Rows are kept in plan order (collective, backend, size, timing as the command named them),
not in the shuffled order they were measured in; the metadata's ``rounds`` records that.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Optional

from collbench.results.aggregate import build_row, file_noise, moderate
from collbench.results.records import KEY_FIELDS, RoundData, Row, RowIdentity, RunResult


def _shallow(record) -> dict:
    """A dataclass as a dict of its fields, tuples kept as they are (``asdict`` copies every
    float of every sample, which the journal pays for every size)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


def _tuples(value):
    """A sort key with its lists (as a journal read back gives them) as tuples, so that keys
    made in this launch and in an earlier one compare."""
    return tuple(map(_tuples, value)) if isinstance(value, (list, tuple)) else value


def _key(identity: RowIdentity) -> tuple:
    return tuple(getattr(identity, name) for name in KEY_FIELDS)


@dataclass
class _Entry:
    """One row as the collector holds it."""

    identity: RowIdentity
    sort_key: tuple                                  # its place in plan order
    rounds: list = field(default_factory=list)       # its RoundData, one per round
    row: Optional[Row] = None                        # built from ``rounds``
    moderated: Optional[Row] = None                  # ``row`` moderated by the model; None: to redo


class Collector:
    """Rows are moderated (``aggregate.moderate``) by the noise model of the rows' rounds. That
    model is refitted when a round ends (``round_ended``) and on the first result asked for;
    in between, a row that gets a new round is moderated with the model in force, and the other
    rows stay the same objects, so saving after every size costs one row, not all of them."""

    def __init__(self, metadata: dict) -> None:
        self.result = RunResult(metadata)
        self._entries: dict = {}         # row key -> _Entry
        self._dirty = False
        self._model = None
        self._model_stale = True

    @property
    def metadata(self) -> dict:
        return self.result.metadata

    @property
    def notes(self) -> list:
        return self.result.notes

    def add(self, identity: RowIdentity, sort_key: tuple, data: RoundData) -> Row:
        entry = self._entries.setdefault(_key(identity), _Entry(identity, _tuples(sort_key)))
        entry.rounds = [d for d in entry.rounds if d.round != data.round] + [data]
        entry.row = build_row(identity, entry.rounds)
        entry.moderated = None
        self._dirty = True
        return entry.row

    def rounds_of(self, identity: RowIdentity) -> list:
        """What earlier rounds measured for ``identity``: its RoundData (none yet: empty)."""
        entry = self._entries.get(_key(identity))
        return list(entry.rounds) if entry is not None else []

    @property
    def rows_held(self) -> int:
        return len(self._entries)

    def round_ended(self) -> None:
        """Every row may have a new round: the noise model is worth refitting."""
        self._model_stale = True
        self._dirty = True

    def run_result(self) -> RunResult:
        """The RunResult exporters render; the same object every time (it carries their memo)."""
        if self._dirty:
            ordered = sorted(self._entries.values(), key=lambda e: e.sort_key)
            if self._model_stale:
                self._model = file_noise(e.row for e in ordered)
                self._model_stale = False
                for e in ordered:
                    e.moderated = None
            for e in ordered:
                if e.moderated is None:
                    e.moderated = moderate(e.row, self._model, e.identity.bus_factor)
            self.result.rows[:] = [e.moderated for e in ordered]
            self.result.rounds[:] = [tuple(sorted(e.rounds, key=lambda d: d.round))
                                     for e in ordered]
            self._dirty = False
        return self.result

    def rows_of(self, collective: str) -> list:
        return [r for r in self.run_result().rows if r.collective == collective]

    # --- journal entries (self-launched rounds) ---

    @staticmethod
    def entry(identity: RowIdentity, sort_key: tuple, data: RoundData) -> dict:
        return {"type": "measure", "identity": _shallow(identity), "sort": list(sort_key),
                "data": _shallow(data)}

    def replay(self, entry: dict) -> Optional[Row]:
        identity = RowIdentity(**entry["identity"])
        raw = dict(entry["data"])
        for name in ("samples_us", "rank_means_us"):
            if raw.get(name) is not None:
                raw[name] = tuple(raw[name])
        return self.add(identity, tuple(entry["sort"]), RoundData(**raw))
