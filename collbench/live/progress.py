"""The progress bar on rank 0's terminal: what runs now, sizes done of all, and the time left.

The time left is estimated from the time measurements take here, not from a count of sizes:
the rounds done before this one (their ``seconds`` and start times, in the run's metadata,
launch included) give a round's cost, and this round's own pace takes over as it advances.
Sizes are measured in a shuffled order, so a round's pace so far is a fair sample of the rest.
"""

from __future__ import annotations

import datetime
import math
import time
from typing import Optional

REFRESH_S = 1.0          # the estimate is redrawn at most this often, so it does not flicker


def _cycle_seconds(rounds: list) -> Optional[float]:
    """The mean cost of one earlier round, launch included when the start times say it."""
    seconds = [r["seconds"] for r in rounds if isinstance(r.get("seconds"), (int, float))]
    if not seconds:
        return None
    starts = []
    for r in rounds:
        try:
            starts.append(datetime.datetime.fromisoformat(r["started"]).timestamp())
        except (KeyError, TypeError, ValueError):
            pass
    if len(starts) >= 2 and len(starts) == len(rounds):
        gaps = [b - a for a, b in zip(starts, starts[1:])]
        if all(g > 0 for g in gaps):
            return max(sum(gaps) / len(gaps), sum(seconds) / len(seconds))
    return sum(seconds) / len(seconds)


class Estimate:
    """Seconds left in a run of ``rounds_left + 1`` rounds of ``steps`` measurements each."""

    def __init__(self, steps: int, rounds_left: int, earlier_rounds: list) -> None:
        self.steps = max(steps, 1)
        self.rounds_left = rounds_left           # after the current one
        self.round_seconds = _cycle_seconds(earlier_rounds)
        # at the round's first measurement, not its set-up
        self.round_started: Optional[float] = None
        self.done = 0

    def round_begins(self) -> None:
        if self.round_started is None:
            self.round_started = time.monotonic()

    def step_done(self) -> None:
        self.done += 1

    def next_round(self, finished_round_seconds: float) -> None:
        self.round_seconds = (finished_round_seconds
                              if self.round_seconds is None
                              else (self.round_seconds + finished_round_seconds) / 2)
        self.rounds_left = max(self.rounds_left - 1, 0)
        self.round_started = None
        self.done = 0

    def seconds_left(self) -> Optional[float]:
        elapsed = 0.0 if self.round_started is None else time.monotonic() - self.round_started
        share = min(self.done / self.steps, 1.0)
        own = elapsed / share if share > 0 else None          # this round's cost at its own pace
        if own is None and self.round_seconds is None:
            return None
        # Early in a round, the rounds before it know best; its own pace takes over as it goes.
        per_round = (own if self.round_seconds is None else self.round_seconds
                     if own is None else share * own + (1 - share) * self.round_seconds)
        return max(per_round - elapsed, 0.0) + self.rounds_left * per_round


def _clock(seconds: Optional[float]) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "estimating time left"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"about {seconds // 3600} h {seconds % 3600 // 60:02d} min left"
    if seconds >= 60:
        return f"about {seconds // 60} min {seconds % 60:02d} s left"
    return f"about {seconds} s left"


def shorten(text: str, room: int) -> str:
    """"round 2/5 · allreduce on mpi-pickle at 1K" in ``room`` characters: the size being
    measured stays; "round" goes first, then the middle is cut."""
    if len(text) <= room:
        return text
    text = text.replace("round ", "", 1)
    if len(text) <= room:
        return text
    head, at, size = text.rpartition(" at ")
    tail = at + size if at else ""
    keep = room - len(tail) - 1
    return (head[:keep] + "…" + tail) if keep > 0 else text[:max(room - 1, 0)] + "…"


class ProgressBar:
    """A transient rich progress bar on stderr: "round 2/5 · allreduce on mpi at 1K", a bar,
    "37/120 sizes" and the time left."""

    def __init__(self, console, total: int, done: int, steps: int, rounds_left: int,
                 earlier_rounds: list) -> None:
        from rich.progress import BarColumn, Progress, TextColumn
        from rich.table import Column

        self.estimate = Estimate(steps, rounds_left, earlier_rounds)
        self.total_rounds = max(total // max(steps, 1), 1)
        self._shown_at = 0.0
        # One line at any width: the counter goes on a narrow terminal, what runs is cut short.
        width = console.width
        counter = width >= 70
        left_room = 24 + (len(f"{total}/{total} sizes") + 1 if counter else 0)
        self.room = max(width - left_room - 8, 8)
        columns = [TextColumn("{task.description}", table_column=Column(
                       no_wrap=True, overflow="ellipsis", max_width=self.room)),
                   BarColumn(bar_width=None, table_column=Column(ratio=1, min_width=3))]
        if counter:
            columns.append(TextColumn("{task.completed}/{task.total} sizes",
                                      table_column=Column(no_wrap=True)))
        columns.append(TextColumn("{task.fields[left]}", table_column=Column(no_wrap=True)))
        self.progress = Progress(*columns, console=console, transient=True, expand=True)
        self.task = self.progress.add_task("collbench", total=total, completed=done,
                                           left=_clock(self.estimate.seconds_left()))
        self._ended = False
        self.progress.start()

    def describe(self, text: str) -> None:
        self.estimate.round_begins()
        self.progress.update(self.task, description=shorten(text, self.room))

    def advance(self) -> None:
        self.estimate.step_done()
        now = time.monotonic()
        fields = {}
        if now - self._shown_at >= REFRESH_S:
            self._shown_at = now
            fields["left"] = _clock(self.estimate.seconds_left())
        self.progress.update(self.task, advance=1, **fields)

    def round_done(self, seconds: float) -> None:
        """The round's end: the bar goes to the end of the round even where a size gave no row
        (skipped for memory, or past the time budget)."""
        self.estimate.next_round(seconds)
        steps = self.estimate.steps
        (task,) = [t for t in self.progress.tasks if t.id == self.task]
        end = min(-(-int(task.completed) // steps) * steps, int(task.total or 0))
        self.progress.update(self.task, completed=max(end, int(task.completed)),
                             left=_clock(self.estimate.seconds_left()))

    def stop(self) -> None:
        self.progress.stop()

    def start(self) -> None:
        if not self._ended:
            self.progress.start()

    def end(self) -> None:
        """The job ends (a signal, a timeout, on another thread perhaps): the bar goes for good,
        with the hold it has on stderr, and shows the cursor again."""
        self._ended = True
        self.progress.stop()
