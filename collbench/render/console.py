"""Tables on a terminal: a ``TableModel`` drawn by rich at the width it is given.

A table wider than that width loses its least important columns (the model's ``priorities``:
0 is never dropped, higher numbers go first) until it fits, and a last note names what was
left out; its ``wrapped`` columns (prose) wrap at the width instead. Notes are printed under
the table as left-aligned paragraphs wrapped at the width. With no width (output piped,
``COLUMNS`` unset) every column is kept, unwrapped, for the machines that read it.
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import textwrap
from typing import Optional

from collbench import environment
from collbench.render.tables import TableModel, flat_header, header_group

MIN_WIDTH = 20          # below this a COLUMNS value is a mistake, not a terminal
STREAM_ERRORS = "collbench-ascii"      # the error handler collbench's standard streams write with


def output_width(is_terminal: bool, terminal_width: int) -> Optional[int]:
    """The width tables must fit: ``COLUMNS`` when it is set to a number, else the terminal's;
    None (no limit) when the output is not a terminal and ``COLUMNS`` is not set."""
    value = os.environ.get(environment.COLUMNS, "").strip()
    if value.isdigit() and int(value) >= MIN_WIDTH:
        return min(int(value), 10_000)
    return terminal_width if is_terminal else None


def to_rich(table: TableModel, plain: bool = False, flat: bool = False):
    """The table's grid (its title and notes are printed around it by ``print_table``); ``flat``:
    every header on one line, as programs reading piped output want them."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    t = Table(box=box.ASCII if plain else box.SIMPLE_HEAVY, show_header=any(table.headers))
    for i, h in enumerate(table.headers):
        prose = i in table.wrapped
        t.add_column(escape(flat_header(h) if flat else h),
                     justify="left" if i == 0 or prose else "right",
                     # a long path folds, whole
                     no_wrap=not prose, overflow="fold" if prose else "ellipsis",
                     min_width=10 if prose else None)
    for line in table.cells:
        # cells are text, never rich markup ("[plot]")
        t.add_row(*(escape(cell) for cell in line))
    return t


def _priorities(table: TableModel) -> tuple:
    if table.priorities:
        return table.priorities
    # A table that does not say: its first two columns stay, later ones go first.
    return tuple(0 if i < 2 else i for i in range(len(table.headers)))


def without(table: TableModel, dropped: set) -> TableModel:
    keep = [i for i in range(len(table.headers)) if i not in dropped]

    def pick(values) -> tuple:
        return tuple(values[i] for i in keep)

    return TableModel(table.title, pick(table.headers), tuple(pick(line) for line in table.cells),
                      table.notes, pick(table.priorities) if table.priorities else (),
                      tuple(keep.index(i) for i in table.wrapped if i in keep))


def fit(table: TableModel, width: Optional[int], measure) -> TableModel:
    """``table`` with its least important columns dropped until ``measure(table)`` (characters)
    fits ``width``; a note names the dropped columns."""
    if width is None or measure(table) <= width:
        return table
    priorities = _priorities(table)
    order = sorted((i for i, p in enumerate(priorities) if p > 0),
                   key=lambda i: (-priorities[i], -i))
    if not order:            # nothing may go: the table runs past the edge, and says nothing of it
        return table
    dropped: set = set()
    fitted = table
    for i in order:
        dropped.add(i)
        fitted = without(table, dropped)
        if measure(fitted) <= width:
            break
    names = _names([table.headers[i] for i in sorted(dropped)], table.headers)
    note = (f"not shown at {width} columns: {names} (a wider terminal, COLUMNS=200, -f markdown "
            f"or the result files have them)")
    return dataclasses.replace(fitted, notes=fitted.notes + (note,))


def _names(dropped: list, headers: tuple) -> str:
    """The dropped headers; a column group's ("mpi\\np50 µs") said once for all groups."""
    every = {header_group(h)[0] for h in headers if "\n" in h}
    groups: dict = {}
    for h in dropped:
        group, what = header_group(h)
        groups.setdefault(what, []).append(group)
    parts = []
    for what, owners in groups.items():
        named = [o for o in owners if o]
        parts.append(f"{what} ({', '.join(named)})" if named and set(named) != every else what)
    whole = every and all(set(o for o in owners if o) == every for owners in groups.values()
                          if any(owners))
    return ", ".join(parts) + (" of every backend" if whole and len(every) > 1 and all(
        any(o for o in owners) for owners in groups.values()) else "")


def as_written(table: TableModel, encoding: str) -> TableModel:
    """``table`` as a stream in ``encoding`` will write it: a character the encoding lacks (µ, ±,
    … under ``PYTHONIOENCODING=ascii``) becomes the stand-in the stream writes instead (u, +/-,
    ...; ``collbench.cli.streams``), so that the table is fitted on what is drawn."""
    if encoding.lower().replace("-", "").startswith("utf"):      # holds every character
        return table
    try:
        codecs.lookup_error(STREAM_ERRORS)
        errors = STREAM_ERRORS
    except LookupError:           # used without collbench's streams: what Python would write
        errors = "replace"

    def written(text: str) -> str:
        try:
            return text.encode(encoding, errors).decode(encoding)
        except LookupError:       # an encoding Python does not know: leave the text
            return text

    def cells(values: tuple) -> tuple:
        return tuple(written(v) for v in values)

    return dataclasses.replace(table, title=written(table.title), headers=cells(table.headers),
                               cells=tuple(cells(line) for line in table.cells),
                               notes=cells(table.notes))


def print_table(console, table: TableModel, width: Optional[int], plain: bool,
                said: Optional[set] = None) -> None:
    """Draw ``table`` on a rich ``console``, fitted to ``width`` (None: every column). ``said``:
    the notes printed under earlier tables of the same output, which are not repeated (and
    this table's are added to it)."""
    table = as_written(table, console.encoding)

    # wrapped columns at their narrowest (their longest word)
    def measure(t: TableModel) -> int:
        size = console.measure(to_rich(t, plain), options=console.options.update_width(100_000))
        return size.minimum if t.wrapped else size.maximum

    parts = in_parts(fit(table, width, measure), width, measure)
    for fitted in parts:
        _print_fitted(console, fitted, width, plain, said)


def in_parts(table: TableModel, width: Optional[int], measure) -> list:
    """``table`` as one table, or, when its column groups (a backend each) do not fit ``width``
    side by side even with every other column dropped, as several: each with the columns that
    belong to no group (the size) and as many whole groups as fit, in order; the notes go under
    the last."""
    if width is None or measure(table) <= width:
        return [table]
    groups: dict = {}
    for i, header in enumerate(table.headers):
        if "\n" in header:
            groups.setdefault(header_group(header)[0], []).append(i)
    if len(groups) < 2:
        return [table]
    every = {i for members in groups.values() for i in members}
    chosen: list = [[]]
    for members in groups.values():
        trial = chosen[-1] + members
        if chosen[-1] and measure(without(table, every - set(trial))) > width:
            chosen.append(list(members))
        else:
            chosen[-1] = trial
    if len(chosen) == 1:
        return [table]
    parts = []
    for number, members in enumerate(chosen, 1):
        part = without(table, every - set(members))
        parts.append(dataclasses.replace(part, title=f"{table.title} ({number} of {len(chosen)})",
                                         notes=table.notes if number == len(chosen) else ()))
    return parts


def _print_fitted(console, fitted: TableModel, width: Optional[int], plain: bool,
                  said: Optional[set]) -> None:
    from rich.console import Console
    from rich.text import Text

    rendered = to_rich(fitted, plain, flat=width is None)
    natural = console.measure(rendered, options=console.options.update_width(100_000)).maximum
    # A table that still does not fit (nothing left to drop) runs past the edge rather than
    # cutting cells; so does every table when there is no width to fit. Wrapped columns wrap
    # at the width.
    drawn = min(natural, width) if width is not None and fitted.wrapped else natural
    target = console if width is not None and drawn <= console.width else \
        Console(file=console.file, highlight=False, force_terminal=not plain, no_color=plain,
                width=max(drawn, MIN_WIDTH))
    wrap = width or max(natural, 100)
    # at the width, not the table's
    for line in textwrap.wrap(fitted.title, wrap, break_on_hyphens=False):
        console.print(Text(line, style="bold" if not plain else ""), no_wrap=True, crop=False,
                      width=max(wrap, len(line)))
    target.print(rendered, width=drawn if fitted.wrapped else None)
    for note in fitted.notes:
        if said is not None:
            if note in said:
                continue
            said.add(note)
        for line in textwrap.wrap(note, wrap, break_on_hyphens=False) or [""]:
            console.print(Text(line), no_wrap=True, crop=False, width=max(wrap, len(line)))
    console.print()
