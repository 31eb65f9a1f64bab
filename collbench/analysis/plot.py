"""``collbench plot``: latency and bus bandwidth against size, log–log, one line per series; or,
for the rows of many pairs (``collbench pairs``), a heat map per link map (``heat_maps``).

matplotlib is the optional ``plot`` extra and is imported only here, inside ``plot_rows``.
The figure is drawn on a bare ``Figure`` with the Agg canvas (no pyplot), so no display,
no global state and no interactive backend are involved.
"""

from __future__ import annotations

import io
import math
import warnings
from pathlib import Path

from collbench.errors import UsageError
from collbench.results import links
from collbench.results.exporters import check_writable_path, write_atomic
from collbench.measure.sizes import format_size
from collbench.results.tables import rank_count_text

IMAGE_SUFFIXES = (".png", ".svg", ".pdf")
SERIES_FIELDS = ("collective", "backend", "dtype", "op", "world_size", "timing")
INSTALL_HINT = 'plotting needs matplotlib: pip install "collbench[plot]"'


def _import_matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter, LogFormatter
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    return Figure, FigureCanvasAgg, FuncFormatter, LogFormatter


def require_matplotlib() -> None:
    """Fail early, before reading any file, when the plot extra is not installed."""
    _import_matplotlib()


def check_plot_path(path, force: bool) -> Path:
    path = Path(path)
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise UsageError(f"cannot tell the image format of {str(path)!r}: "
                         f"use a name ending in {', '.join(IMAGE_SUFFIXES)}")
    return check_writable_path(path, force)


def _part(field: str, value) -> str:
    return rank_count_text(value) if field == "world_size" else str(value)


def _shown(field: str, value) -> bool:
    return not ((field == "op" and value == "none") or (field == "run" and value == ""))


def _lines(rows, run_labels=()) -> tuple:
    """[(label, setup index, run index, rows sorted by size)] and the title parts (what every
    line shares). A line per setup (SERIES_FIELDS) and run (``run_labels``: per row its run's
    label, "" or none when the files merge); labelled by what varies between lines."""
    fields = SERIES_FIELDS + ("run",)
    groups: dict = {}
    for r, run in zip(rows, run_labels or [""] * len(rows)):
        if r.size_bytes > 0 and math.isfinite(r.time_us_p50) and r.time_us_p50 > 0:
            groups.setdefault(tuple(getattr(r, f) for f in SERIES_FIELDS) + (run,), []).append(r)
    varying = [i for i in range(len(fields)) if len({k[i] for k in groups}) > 1]
    shown = varying if varying else [1]
    setups = list(dict.fromkeys(k[:-1] for k in groups))
    run_names = list(dict.fromkeys(k[-1] for k in groups))
    lines = []
    for key, group in groups.items():
        label = " · ".join(_part(fields[i], key[i]) for i in shown if _shown(fields[i], key[i]))
        lines.append((label, setups.index(key[:-1]), run_names.index(key[-1]),
                      sorted(group, key=lambda r: r.size_bytes)))
    first = next(iter(groups), None)
    shared = [_part(fields[i], first[i]) for i in range(len(fields))
              if first and i not in shown and _shown(fields[i], first[i])]
    return lines, shared


def series(rows, run_labels=()) -> tuple:
    """({label: rows sorted by size} per line, title parts): see ``_lines``."""
    lines, shared = _lines(rows, run_labels)
    return {label: group for label, _, _, group in lines}, shared


def _band(r, low: bool) -> float:
    """Bus bandwidth at one end of the time CI (the high time is the low bandwidth)."""
    t = r.time_us_ci_high if low else r.time_us_ci_low
    if not math.isfinite(t) or t <= 0:
        return r.busbw_gbps
    return r.busbw_gbps * r.time_us_p50 / t


def plot_rows(rows, path, *, force: bool = False, run_labels=(), where: links.Placement = links.Placement()) -> list:
    """Write the two-panel figure to ``path`` (.png, .svg, .pdf); returns notes for the user.
    ``run_labels``: per row, the label of its run (files of one setup measured again), or nothing.
    Rows that form link maps are drawn as heat maps instead (``where``: ``links.placement``)."""
    path = check_plot_path(path, force)
    maps, rest = links.split(list(rows), where)
    if maps:
        return heat_maps(maps, path) + [where.crowded] * bool(where.crowded) + ([f"{len(rest)} row(s) outside the link maps are not drawn; plot them "
                                         "from a file of their own"] if rest else [])
    Figure, FigureCanvasAgg, FuncFormatter, LogFormatter = _import_matplotlib()
    lines, shared = _lines(rows, run_labels)
    if not lines:
        raise UsageError("nothing to plot: no row with a size and a time")
    notes = []
    skipped = sum(1 for r in rows if r.size_bytes == 0)
    if skipped:
        notes.append(f"{skipped} row(s) without a size (barrier) are not on the log–log plot")
    if not any(r.busbw_gbps > 0 for *_, group in lines for r in group):
        notes.append("no bus bandwidth to draw: it is 0 for every row (one rank moves nothing to others); "
                     "the bandwidth panel is empty")
    with warnings.catch_warnings():      # an empty log axis (no bandwidth on one rank): said in a note
        warnings.simplefilter("ignore", UserWarning)
        figure = Figure(figsize=(11, 4.5), constrained_layout=True)
        FigureCanvasAgg(figure)
        latency, bandwidth = figure.subplots(1, 2)
        size_label = FuncFormatter(lambda x, _: format_size(int(round(x))) if x >= 1 else f"{x:g}")
        # A colour per setup (per run when there is one setup), a line style and marker per run; past
        # ten setups the colours come again with the next styles: no two lines alike.
        colours = [f"C{i}" for i in range(10)]
        styles = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D")]
        setups = max(setup for _, setup, _, _ in lines) + 1
        blocks = -(-setups // len(colours))
        for label, setup, run, group in lines:
            sizes = [r.size_bytes for r in group]
            dash, mark = styles[(run * blocks + setup // len(colours)) % len(styles)]
            colour = colours[(setup if setups > 1 else run) % len(colours)]
            line, = latency.plot(sizes, [r.time_us_p50 for r in group], marker=mark, markersize=3, label=label,
                                 color=colour, linestyle=dash)
            lows = [r.time_us_ci_low if math.isfinite(r.time_us_ci_low) else r.time_us_p50 for r in group]
            highs = [r.time_us_ci_high if math.isfinite(r.time_us_ci_high) else r.time_us_p50 for r in group]
            latency.fill_between(sizes, lows, highs, color=line.get_color(), alpha=0.25, linewidth=0)
            bandwidth.plot(sizes, [r.busbw_gbps for r in group], marker=mark, markersize=3, color=line.get_color(),
                           linestyle=dash,
                           label=label)
            bandwidth.fill_between(sizes, [_band(r, True) for r in group], [_band(r, False) for r in group],
                                   color=line.get_color(), alpha=0.25, linewidth=0)
        for axes, ylabel in ((latency, "median time (µs)"), (bandwidth, "bus bandwidth (GB/s)")):
            axes.set_xscale("log", base=2)
            axes.set_yscale("log")
            axes.xaxis.set_major_formatter(size_label)
            axes.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
            axes.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))
            axes.set_xlabel("message size (bytes)")
            axes.set_ylabel(ylabel)
            axes.grid(True, which="major", alpha=0.3)
        latency.set_title("latency (band: 95% CI of the median)")
        bandwidth.set_title("bus bandwidth")
        bandwidth.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.02, 0.5))
        figure.suptitle(" · ".join(["collbench", *shared]))
        _save(figure, path)
    return notes


def _save(figure, path: Path) -> None:
    image = io.BytesIO()            # drawn in memory, then written whole: a full disk leaves no half image
    figure.savefig(image, format=path.suffix.lstrip(".").lower(), dpi=120)
    try:
        write_atomic(path, image.getvalue())
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r}: {exc.strerror}") from None


#: past this many ranks a heat map's cells carry no figures (the colour alone says it)
ANNOTATED_RANKS = 16


def heat_maps(maps: list, path: Path) -> list:
    """One heat map per link map, rank against rank: latency (µs) or bandwidth from row to column
    (GB/s), on a scale from 0 where darker is slower; lines between hosts; what lies out framed
    in red, named hosts' and ranks' labels in red."""
    import numpy as np

    Figure, FigureCanvasAgg, _, _ = _import_matplotlib()
    columns = min(len(maps), 3)
    rows_of_panels = -(-len(maps) // columns)
    largest = max(len(m.ranks) for m in maps)
    side = min(max(3.6, 0.32 * largest + 1.5), 12.0)
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
            value = links.figure(lmap, lmap.time((a, b)))
            grid[index[a], index[b]] = value
            if not lmap.one_way:
                grid[index[b], index[a]] = value
        finite = grid[np.isfinite(grid)]
        top = float(finite.max()) if finite.size else 1.0
        # from 0: figures that differ by a few percent look alike, a link at a third stands out
        image = axes.imshow(grid, cmap="magma" if lmap.one_way else "magma_r", interpolation="nearest",
                            vmin=0.0, vmax=top)
        figure.colorbar(image, ax=axes, shrink=0.8, label=links.unit(lmap))
        labels = [str(r) for r in ranks]
        axes.set_xticks(range(len(ranks)), labels, fontsize="small")
        axes.set_yticks(range(len(ranks)), labels, fontsize="small")
        named = {r for f in lmap.findings if f.what == "host" for r in ranks if lmap.host(r) == f.name}
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
                for y, x in {(index[a], index[b]), (index[b], index[a]) if not lmap.one_way else (index[a], index[b])}:
                    axes.add_patch(_frame(x, y))
        if len(ranks) <= ANNOTATED_RANKS:
            middle = top / 2
            for y in range(len(ranks)):
                for x in range(len(ranks)):
                    if np.isfinite(grid[y, x]):
                        dark = grid[y, x] < middle if lmap.one_way else grid[y, x] > middle
                        axes.text(x, y, f"{grid[y, x]:.3g}", ha="center", va="center", fontsize="x-small",
                                  color="white" if dark else "black")
        axes.set_xlabel("to rank" if lmap.one_way else "rank")
        axes.set_ylabel("from rank" if lmap.one_way else "rank")
        row = lmap.first
        axes.set_title(f"{row.collective} · {row.backend} · {format_size(row.size_bytes)} · {links.unit(lmap)}"
                       + (" (from row to column)" if lmap.one_way else ""), fontsize="medium")
    figure.suptitle("collbench pairs" + ("" if not any(m.findings for m in maps) else
                                          " · red: lies out (see the terminal or report)"))
    _save(figure, path)
    return []


def _frame(x: int, y: int):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2)
