"""``collbench plot``: latency and bus bandwidth against size, log–log, a section per collective
(and per setup where dtype, op, ranks or timing vary), a colour per backend and a line style
per run; or, for the rows of many pairs (``collbench pairs``), a heat map per link map.

``figure_of`` builds the figure and returns it, ``plot_rows`` writes it. matplotlib is the
optional ``plot`` extra and is imported only here, inside the functions that draw. The figure
is drawn on a bare ``Figure`` with the Agg canvas (no pyplot), so no display, no global state
and no interactive backend are involved.
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from collbench.benchmarks import patterns
from collbench.errors import UsageError
from collbench.measure.sizes import format_size
from collbench.results import link_map
from collbench.results.paths import check_writable_path, write_atomic
from collbench.results.records import (BY_SIZE, KEY_FIELDS, PER_BACKEND, SAID_FIELDS, backend_label,
                                       setup_words)
from collbench.render.tables import rank_count_text

IMAGE_SUFFIXES = (".png", ".svg", ".pdf")
INSTALL_HINT = 'plotting needs matplotlib: pip install "collbench[plot]"'

#: What tells one section of the figure from another: a row's identity less its backend (a
#: colour) and its size (the x axis).
SECTION_FIELDS = tuple(f for f in KEY_FIELDS
                       if f not in ("backend", "group_hosts", "group_size") + BY_SIZE + PER_BACKEND)

#: How a title says a field's value, given the section's whole key; "" where it goes unsaid (no
#: reduction, one window, every rank on one host...). Other fields are said as they are.
_SAID = {
    "op": lambda k: "" if k["op"] == "none" else k["op"],
    "pattern": lambda k: f"pattern {k['pattern']}" if k["pattern"] else "",
    "world_size": lambda k: rank_count_text(k["world_size"]),
    "ranks_per_node": lambda k: ""
    if k["ranks_per_node"] == k["world_size"] else f"{k['ranks_per_node']} per host",
    "group": lambda k: f"group {k['group']}" if k["split"] else "",
}

#: A line style and marker per run: four dashes against five markers, no two runs alike up to 20.
DASHES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v")
#: Sections side by side in a row of the figure once there are more than two.
SECTIONS_PER_ROW = 2


@dataclass(frozen=True)
class Line:
    """One line of a section: a backend's rows of one run, sorted by size; ``backend`` is its
    label (``records.backend_label``: with its buffers or payload where they are not the usual)."""

    backend: str
    run: str            # the run's label; "" when the files merge into one
    rows: tuple


#: the built-in backends, in the order of their colours: the same colour in every figure
BACKEND_COLOURS = ("mpi", "mpi-pickle", "gloo", "nccl")


@dataclass(frozen=True)
class Section:
    """A collective in one setup: its latency and bandwidth panels, a line per backend and run."""

    title: str
    lines: tuple


@dataclass(frozen=True)
class Sweep:
    """What the figure of a sweep shows, before any drawing: its sections, what every section
    shares (the figure's title), and the backends and runs in the order of their colours and
    line styles."""

    sections: tuple
    shared: tuple
    backends: tuple
    runs: tuple

    def colour(self, backend: str) -> int:
        """The backend's place in the palette: the built-in backends keep theirs in every figure
        (mpi is always the first colour); others take the places after them, in order."""
        if backend in BACKEND_COLOURS:
            return BACKEND_COLOURS.index(backend)
        others = [b for b in self.backends if b not in BACKEND_COLOURS]
        return len(BACKEND_COLOURS) + others.index(backend)

    def style(self, run: str) -> tuple:
        i = self.runs.index(run)
        return DASHES[i % len(DASHES)], MARKERS[i % len(MARKERS)]


def _said(field: str, key: dict) -> str:
    if field in _SAID:
        return _SAID[field](key)
    if field in SAID_FIELDS:
        return " ".join(setup_words(key, (field,)))
    return str(key[field])


def sweep_of(rows, run_labels=()) -> Sweep:
    """The sections of the rows that have a size and a time (``run_labels``: per row its run's
    label, "" or none when the files merge). A section per collective and setup; its title names
    the collective and what varies between sections, the figure's title what they share."""
    groups: dict = {}
    for r, run in zip(rows, run_labels or [""] * len(rows)):
        if r.size_bytes > 0 and math.isfinite(r.time_us_p50) and r.time_us_p50 > 0:
            key = tuple(getattr(r, f) for f in SECTION_FIELDS)
            groups.setdefault(key, {}).setdefault((backend_label(r), run), []).append(r)
    at = SECTION_FIELDS.index("collective")
    collectives = list(dict.fromkeys(key[at] for key in groups))
    # a collective's setups together
    keys = sorted(groups, key=lambda key: collectives.index(key[at]))
    varying = [f for i, f in enumerate(SECTION_FIELDS) if len({key[i] for key in keys}) > 1]
    sections = []
    for key in keys:
        named = dict(zip(SECTION_FIELDS, key))
        parts = [named["collective"]] + [_said(f, named) for f in varying if f != "collective"]
        lines = tuple(Line(backend, run, tuple(sorted(group, key=lambda r: r.size_bytes)))
                      for (backend, run), group in groups[key].items())
        sections.append(Section(" · ".join(p for p in parts if p), lines))
    first = dict(zip(SECTION_FIELDS, keys[0])) if keys else {}
    shared = tuple(text for f in SECTION_FIELDS if keys and f != "collective" and f not in varying
                   for text in [_said(f, first)] if text)
    every = [line for s in sections for line in s.lines]
    return Sweep(tuple(sections), shared, tuple(dict.fromkeys(line.backend for line in every)),
                 tuple(dict.fromkeys(line.run for line in every)))


def what_is_drawn(rows) -> tuple:
    """(what a line is, what its band is), in the words of the rows' ``time_us_p50`` and its CI:
    one round's median and its order-statistics CI, or the geometric mean of several rounds'
    medians and the CI from their spread (``collbench.results.aggregate``)."""
    rounds = {r.rounds for r in rows}
    if rounds == {1}:
        return "median time", "its 95% confidence interval (order statistics of the samples)"
    if 1 not in rounds:
        return ("geometric mean of the rounds' median times",
                "its 95% confidence interval (from the spread between rounds)")
    return ("median time (one round) or geometric mean of the rounds' medians (several)",
            "its 95% confidence interval")


def _import_matplotlib():
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    # Text in a figure comes from files and --label: drawn as written, never read as mathtext
    # ("a$^$.json" would be a parse error, "$\undefined$" a traceback)
    matplotlib.rcParams["text.parse_math"] = False
    return Figure, FigureCanvasAgg


def require_matplotlib() -> None:
    """Fail early, before reading any file, when the plot extra is not installed."""
    _import_matplotlib()


def check_plot_path(path, force: bool) -> Path:
    path = Path(path)
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise UsageError(f"cannot tell the image format of {str(path)!r}: "
                         f"use a name ending in {', '.join(IMAGE_SUFFIXES)}")
    return check_writable_path(path, force)


def figure_of(rows, *, run_labels=(), where: link_map.Placement = link_map.Placement()) -> tuple:
    """(the matplotlib Figure, notes for the user), nothing written. ``run_labels``: per row, the
    label of its run (files of one setup measured again), or nothing. Rows that form link maps
    are drawn as heat maps instead (``where``: ``link_map.placement``)."""
    rows = list(rows)
    # before the maps are judged: that takes time too
    _check_heat_maps(link_map.groups(rows))
    maps, rest = link_map.split(rows, where)
    if maps:
        notes = [where.crowded] * bool(where.crowded)
        if rest:
            notes.append(f"{len(rest)} row(s) outside the link maps are not drawn; plot them "
                         "from a file of their own")
        return heat_maps(maps), notes
    sweep = sweep_of(rows, run_labels)
    if not sweep.sections:
        raise UsageError("nothing to plot: no row with a size and a time")
    notes = []
    skipped = sum(1 for r in rows if r.size_bytes == 0)
    if skipped:
        notes.append(f"{skipped} row(s) without a size (barrier) are not on the log–log plot")
    if not any(r.busbw_gbps > 0 for s in sweep.sections for line in s.lines for r in line.rows):
        notes.append("no bus bandwidth to draw: it is 0 for every row (one rank moves nothing to "
                     "others); the bandwidth panels are empty")
    if len(sweep.backends) > len(_palette()):
        notes.append(f"{len(sweep.backends)} backends: past {len(_palette())} their colours come "
                     "again")
    return _sweep_figure(sweep), notes


def plot_rows(rows, path, *, force: bool = False, run_labels=(),
              where: link_map.Placement = link_map.Placement()) -> list:
    """Write ``figure_of`` the rows to ``path`` (.png, .svg, .pdf); returns notes for the user."""
    path = check_plot_path(path, force)
    # a band of 1e-300 to 1e300 µs overflows the log scale's transform
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        figure, notes = figure_of(rows, run_labels=run_labels, where=where)
        _save(figure, path)
    return notes


def _palette() -> tuple:
    """Twenty distinct colours: matplotlib's ten, then their light partners."""
    from matplotlib import colormaps

    pairs = colormaps["tab20"].colors
    return tuple(pairs[0::2]) + tuple(pairs[1::2])


def _size_ticks(x, _) -> str:
    return format_size(int(round(x))) if x >= 1 else f"{x:g}"


#: How far apart labelled sizes are, in powers of 2: divisors and multiples of 10, so that 1K and 1M
#: are among them where the axis reaches them.
SIZE_STEPS = (1, 2, 5, 10, 20, 30)
#: The most labelled sizes on one axis.
SIZE_TICKS = 9


def size_ticks(sizes) -> tuple:
    """(labelled sizes, every power of 2 between) spanning ``sizes``: the labels round, 1K, 32K, 1M,
    at most ``SIZE_TICKS`` of them."""
    low = math.floor(math.log2(min(sizes)))
    high = math.ceil(math.log2(max(sizes)))
    step = next((s for s in SIZE_STEPS if high // s - -(-low // s) + 1 <= SIZE_TICKS),
                SIZE_STEPS[-1])
    return (tuple(2 ** e for e in range(-(-low // step) * step, high + 1, step)),
            tuple(2 ** e for e in range(low, high + 1)))


def _value_ticks(y, _) -> str:
    """1, 20, 0.5, 1e-5: plain figures, exponents without padding."""
    return f"{y:g}".replace("e-0", "e-").replace("e+0", "e")


#: A band is drawn at most this factor either side of its line: a wider one (a CI of 1e-300 to
#: 1e300 µs in a crafted file) took the axis with it and hid every line; the tables and the file
#: keep the whole interval.
BAND_LIMIT = 1000.0


def _bandwidth_band(r, low: bool) -> float:
    """Bus bandwidth at one end of the time CI (the high time is the low bandwidth)."""
    t = _time_band(r, not low)
    if not math.isfinite(t) or t <= 0:
        return r.busbw_gbps
    return r.busbw_gbps * r.time_us_p50 / t


def _time_band(r, low: bool) -> float:
    t = r.time_us_ci_low if low else r.time_us_ci_high
    if not (math.isfinite(t) and t > 0):
        return r.time_us_p50
    return max(t, r.time_us_p50 / BAND_LIMIT) if low else min(t, r.time_us_p50 * BAND_LIMIT)


def _sweep_figure(sweep: Sweep):
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogFormatter, NullFormatter

    Figure, FigureCanvasAgg = _import_matplotlib()
    colours = _palette()
    groups = _key(sweep, colours)
    count = len(sweep.sections)
    across = 1 if count <= SECTIONS_PER_ROW else SECTIONS_PER_ROW
    down = -(-count // across)
    key_height = 0.2 * (1 + max(len(handles) for _, handles in groups)) + 0.1
    traffic = [_traffic(section) for section in sweep.sections]
    wide = 10.5 if any(traffic) else 7.5    # room for a traffic map
    figure = Figure(figsize=(wide * across, 3.1 * down + key_height + 0.5), layout="constrained")
    FigureCanvasAgg(figure)
    key, body = figure.subfigures(2, 1, height_ratios=(key_height, 3.1 * down))
    places = body.subfigures(down, across, squeeze=False, wspace=0.02, hspace=0.02,
                             edgecolor="0.85", linewidth=1.0).ravel()
    for place in places[count:]:
        place.set_visible(False)
    labelled, every = size_ticks([r.size_bytes for s in sweep.sections for line in s.lines
                                  for r in line.rows])
    shade = 0.18 / math.sqrt(len(sweep.runs))        # the bands of more runs overlap: each lighter
    # an empty log axis (no bandwidth on one rank): said on the panel
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for place, section, its_traffic in zip(places, sweep.sections, traffic):
            place.suptitle(section.title, fontweight="bold")
            if its_traffic is None:
                latency, bandwidth = place.subplots(1, 2)
            else:
                latency, bandwidth, beside = place.subplots(1, 3, width_ratios=(1, 1, 0.8))
                _traffic_map(figure, beside, *its_traffic)
            for line in section.lines:
                colour = colours[sweep.colour(line.backend) % len(colours)]
                dash, mark = sweep.style(line.run)
                drawn = dict(color=colour, linestyle=dash, marker=mark, markersize=3, linewidth=1.3,
                             label=" · ".join(t for t in (line.backend, line.run) if t))
                sizes = [r.size_bytes for r in line.rows]
                latency.plot(sizes, [r.time_us_p50 for r in line.rows], **drawn)
                latency.fill_between(sizes, [_time_band(r, True) for r in line.rows],
                                     [_time_band(r, False) for r in line.rows], color=colour,
                                     alpha=shade, linewidth=0)
                moved = [r for r in line.rows if r.busbw_gbps > 0]
                sizes = [r.size_bytes for r in moved]
                bandwidth.plot(sizes, [r.busbw_gbps for r in moved], **drawn)
                bandwidth.fill_between(sizes, [_bandwidth_band(r, True) for r in moved],
                                       [_bandwidth_band(r, False) for r in moved], color=colour,
                                       alpha=shade, linewidth=0)
            if not any(r.busbw_gbps > 0 for line in section.lines for r in line.rows):
                bandwidth.text(0.5, 0.5, "no bus bandwidth:\n0 for every row",
                               transform=bandwidth.transAxes, ha="center", va="center", color="0.4")
            for axes, ylabel in ((latency, "time (µs)"), (bandwidth, "bus bandwidth (GB/s)")):
                axes.set_xscale("log", base=2)
                axes.set_yscale("log")
                axes.xaxis.set_major_locator(FixedLocator(labelled))
                axes.xaxis.set_minor_locator(FixedLocator(every))
                axes.xaxis.set_major_formatter(FuncFormatter(_size_ticks))
                axes.xaxis.set_minor_formatter(NullFormatter())
                axes.yaxis.set_major_formatter(FuncFormatter(_value_ticks))
                axes.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False,
                                                            minor_thresholds=(1, 0.4)))
                axes.set_xlabel("message size (bytes)", fontsize="small")
                axes.set_ylabel(ylabel, fontsize="small")
                axes.tick_params(labelsize="small")
                axes.tick_params(which="minor", labelsize="x-small")
                axes.grid(True, which="major", alpha=0.3)
    figure.suptitle(" · ".join(["collbench", *sweep.shared]), fontsize="x-large")
    _legend(key, groups)
    return figure


#: the most ranks whose traffic a section draws beside its times
MOST_TRAFFIC_RANKS = 64


def _traffic(section: Section) -> Optional[tuple]:
    """(pattern, ranks) of a section whose pattern spreads the bytes unevenly and is known here
    (a matrix: read, or kept in its file), for a map beside its times; None otherwise."""
    first = section.lines[0].rows[0]
    n = first.group_size or first.world_size
    if not first.pattern or first.pattern == patterns.UNIFORM or not patterns.known(first.pattern) \
            or not 1 < n <= MOST_TRAFFIC_RANKS or patterns.problem(first.pattern, n):
        return None
    return first.pattern, n


def _traffic_map(figure, axes, pattern: str, n: int) -> None:
    """The pattern as a heat map: each rank pair's share of all the bytes, from row to column."""
    import numpy as np

    grid = np.array(patterns.shares(pattern, n)) * 100
    image = axes.imshow(grid, cmap="viridis", interpolation="nearest", vmin=0.0)
    figure.colorbar(image, ax=axes, shrink=0.8, label="share of the bytes (%)")
    if n <= 8:
        for y in range(n):
            for x in range(n):
                axes.text(x, y, f"{grid[y, x]:.3g}", ha="center", va="center", fontsize="x-small",
                          color="white" if grid[y, x] < grid.max() / 2 else "black")
    ticks = range(0, n, max(1, n // 8))
    axes.set_xticks(ticks, [str(t) for t in ticks], fontsize="small")
    axes.set_yticks(ticks, [str(t) for t in ticks], fontsize="small")
    axes.set_xlabel("to rank", fontsize="small")
    axes.set_ylabel("from rank", fontsize="small")
    axes.set_title(f"pattern {pattern}", fontsize="small")


def _key(sweep: Sweep, colours) -> list:
    """The legend's groups, (heading, handles): the backends' colours, the runs' line styles
    (when there are runs), what a line and a band are."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    groups = [("backend",
               [Line2D([], [], color=colours[sweep.colour(b) % len(colours)], linewidth=2.5,
                       label=b)
                           for b in sweep.backends])]
    if any(sweep.runs):
        groups.append(("run",
                       [Line2D([], [], color="black", linestyle=dash, marker=mark, markersize=4,
                               label=run)
                               for run in sweep.runs for dash, mark in [sweep.style(run)]]))
    line_means, band_means = what_is_drawn([r for s in sweep.sections for line in s.lines
                                            for r in line.rows])
    groups.append(("line and band", [Line2D([], [], color="0.3", label=line_means),
                                     Patch(facecolor="0.3", alpha=0.3, label=band_means)]))
    return groups


def _legend(key, groups: list) -> None:
    """One legend in the strip above the sections (``key``): a column per group, under its heading
    in bold. matplotlib fills a legend column by column, so each group is padded to the longest."""
    from matplotlib.lines import Line2D

    depth = 1 + max(len(handles) for _, handles in groups)
    handles, labels, headings = [], [], []
    for heading, group in groups:
        headings.append(len(handles))
        padding = depth - 1 - len(group)
        handles += [Line2D([], [], linestyle="none"), *group,
                    *[Line2D([], [], linestyle="none")] * padding]
        labels += [heading, *(h.get_label() for h in group), *[""] * padding]
    legend = key.legend(handles=handles, labels=labels, loc="center", ncols=len(groups),
                        fontsize="small",
                        frameon=False, handlelength=3)
    for i in headings:
        legend.get_texts()[i].set_fontweight("bold")


def _save(figure, path: Path) -> None:
    # drawn in memory, then written whole: a full disk leaves no half image
    image = io.BytesIO()
    figure.savefig(image, format=path.suffix.lstrip(".").lower(), dpi=120)
    try:
        write_atomic(path, image.getvalue())
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r}: {exc.strerror}") from None


#: past this many ranks a heat map's cells carry no figures (the colour alone says it)
ANNOTATED_RANKS = 16
#: The most heat maps in one image, three a row: their panels shrink (to 2 inches at the most
#: maps) so that the image stays within TALLEST_INCHES.
MOST_HEAT_MAPS = 240
TALLEST_INCHES = 160


def _check_heat_maps(groups: list) -> None:
    """Refuse, in one line, heat maps too many or too large to draw (``groups``: the rows of
    each map, ``link_map.groups``)."""
    ranks = max((len(link_map.ranks_of(members)) for members in groups), default=0)
    if ranks > link_map.MOST_DRAWN_RANKS:
        raise UsageError(f"a heat map of {ranks:,} ranks is more than plot draws "
                         f"({link_map.MOST_DRAWN_RANKS} ranks at most): collbench report names the "
                         "hosts, ranks and pairs that lie out, and the result file holds every "
                         "pair")
    if len(groups) > MOST_HEAT_MAPS:
        raise UsageError(f"{len(groups):,} heat maps (sizes and backends of collbench pairs) are "
                         f"more than plot draws in one image ({MOST_HEAT_MAPS} at most): measure "
                         "fewer sizes per file")


def heat_maps(maps: list):
    """The Figure of one heat map per link map, rank against rank: latency (µs) or bandwidth from
    row to column (GB/s), on a scale from 0 where darker is slower; lines between hosts; what lies
    out framed in red, named hosts' and ranks' labels in red."""
    import numpy as np

    Figure, FigureCanvasAgg = _import_matplotlib()
    columns = min(len(maps), 3)
    rows_of_panels = -(-len(maps) // columns)
    largest = max(len(m.ranks) for m in maps)
    side = min(max(3.6, 0.32 * largest + 1.5), 12.0, TALLEST_INCHES / rows_of_panels)
    figure = Figure(figsize=(side * columns + 1.0, side * rows_of_panels), constrained_layout=True)
    FigureCanvasAgg(figure)
    axes_list = np.atleast_1d(figure.subplots(rows_of_panels, columns)).ravel()
    for axes in axes_list[len(maps):]:
        axes.set_visible(False)
    for axes, lmap in zip(axes_list, maps):
        ranks = lmap.ranks
        index = {r: i for i, r in enumerate(ranks)}
        grid = np.full((len(ranks), len(ranks)), np.nan)
        for (a, b) in lmap.rows:
            value = link_map.figure(lmap, lmap.time((a, b)))
            grid[index[a], index[b]] = value
            if not lmap.one_way:
                grid[index[b], index[a]] = value
        finite = grid[np.isfinite(grid)]
        top = float(finite.max()) if finite.size else 1.0
        # from 0: figures that differ by a few percent look alike, a link at a third stands out
        image = axes.imshow(grid, cmap="magma" if lmap.one_way else "magma_r",
                            interpolation="nearest",
                            vmin=0.0, vmax=top)
        figure.colorbar(image, ax=axes, shrink=0.8, label=link_map.unit(lmap))
        labels = [str(r) for r in ranks]
        axes.set_xticks(range(len(ranks)), labels, fontsize="small")
        axes.set_yticks(range(len(ranks)), labels, fontsize="small")
        named = {r for f in lmap.findings if f.what == "host" for r in ranks
                 if lmap.host(r) == f.name}
        named |= {int(f.name) for f in lmap.findings if f.what == "rank"}
        for tick in list(axes.get_xticklabels()) + list(axes.get_yticklabels()):
            if int(tick.get_text()) in named:
                tick.set_color("red")
        for i in range(1, len(ranks)):                # host boundaries
            if lmap.host(ranks[i]) != lmap.host(ranks[i - 1]):
                axes.axhline(i - 0.5, color="white", linewidth=1.5)
                axes.axvline(i - 0.5, color="white", linewidth=1.5)
        for f in lmap.findings:
            if f.what == "pair":
                a, b = (int(x) for x in f.name.split("-"))
                for y, x in {(index[a], index[b]),
                             (index[b], index[a]) if not lmap.one_way else (index[a], index[b])}:
                    axes.add_patch(_frame(x, y))
        if len(ranks) <= ANNOTATED_RANKS:
            middle = top / 2
            for y in range(len(ranks)):
                for x in range(len(ranks)):
                    if np.isfinite(grid[y, x]):
                        dark = grid[y, x] < middle if lmap.one_way else grid[y, x] > middle
                        axes.text(x, y, f"{grid[y, x]:.3g}", ha="center", va="center",
                                  fontsize="x-small",
                                  color="white" if dark else "black")
        axes.set_xlabel("to rank" if lmap.one_way else "rank")
        axes.set_ylabel("from rank" if lmap.one_way else "rank")
        row = lmap.first
        axes.set_title(f"{row.collective} · {backend_label(row)} · {format_size(row.size_bytes)} · "
                       f"{link_map.unit(lmap)}"
                       + (" (from row to column)" if lmap.one_way else ""), fontsize="medium")
    figure.suptitle("collbench pairs" + ("" if not any(m.findings for m in maps) else
                                          " · red: lies out (see the terminal or report)"))
    return figure


def _frame(x: int, y: int):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2)
