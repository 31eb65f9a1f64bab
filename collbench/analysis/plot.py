"""``collbench plot``: latency and bus bandwidth against size, log–log, one line per series.

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


def plot_rows(rows, path, *, force: bool = False, run_labels=()) -> list:
    """Write the two-panel figure to ``path`` (.png, .svg, .pdf); returns notes for the user.
    ``run_labels``: per row, the label of its run (files of one setup measured again), or nothing."""
    path = check_plot_path(path, force)
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
        image = io.BytesIO()            # drawn in memory, then written whole: a full disk leaves no half image
        figure.savefig(image, format=path.suffix.lstrip(".").lower(), dpi=120)
    try:
        write_atomic(path, image.getvalue())
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r}: {exc.strerror}") from None
    return notes
