"""collbench plot: the figure it builds (a section per collective, a colour per backend, a line
style per run, one legend that says what the bands are), the images it writes, and without
matplotlib, how to get it."""

import re
import subprocess
import sys

import pytest

from collbench.errors import UsageError
from collbench.analysis.plot import INSTALL_HINT, figure_of, plot_rows, sweep_of, what_is_drawn
from results_helpers import row_from_samples, run_cli, run_of, sweep, write

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SIZES = (8, 64, 1024, 65536)
BACKENDS = ("mpi", "mpi-pickle", "gloo")


def collectives(backends=BACKENDS, names=("allreduce", "bcast", "allgather")) -> dict:
    """Medians (µs) for each collective, backend and size, a backend slower than the one before."""
    return {(c, b, s): (2.0 + i) * (1 + j) + s / 1e3 for i, c in enumerate(names)
            for j, b in enumerate(backends) for s in SIZES}


def rows_two_backends():
    run = run_of(sweep(backends=("mpi", "mpi-pickle")))
    run.add(row_from_samples([5.0] * 8, collective="barrier", size_bytes=0), [5.0] * 8)
    return run.rows


def panels(figure) -> dict:
    """{section title: (latency axes, bandwidth axes)}, from the Figure as drawn."""
    found = {}
    for axes in figure.axes:
        found.setdefault(axes.get_figure(root=False).get_suptitle(), []).append(axes)
    assert all([a.get_ylabel() for a in pair] == ["time (µs)", "bus bandwidth (GB/s)"]
               for pair in found.values())
    return {title: tuple(pair) for title, pair in found.items()}


def legends(figure) -> list:
    """Every legend anywhere in the figure: on it, its sections, their axes."""
    found, todo = [], [figure]
    while todo:
        part = todo.pop()
        found += part.legends
        todo += part.subfigs
    return found + [axes.get_legend() for axes in figure.axes if axes.get_legend() is not None]


def line_styles(figure) -> dict:
    """{line label ("backend · run"): {(colour, line style, marker) of every panel it is drawn
    in}}."""
    styles = {}
    for axes in figure.axes:
        for line in axes.get_lines():
            styles.setdefault(line.get_label(), set()).add((line.get_color(), line.get_linestyle(),
                                                            line.get_marker()))
    return styles


def _two_runs(tmp_path, series=None):
    """before/run.json and after/run.json: the same setup measured twice, the second 3x slower."""
    series = series or sweep()
    for folder in ("before", "after"):
        (tmp_path / folder).mkdir(exist_ok=True)
    return [write(run_of(series, seed=1), tmp_path / "before" / "run.json"),
            write(run_of(series, seed=2, scale=3.0), tmp_path / "after" / "run.json")]


def test_a_section_per_collective_titled_by_what_varies():
    rows = run_of(collectives()).rows
    drawn = sweep_of(rows)
    assert [s.title for s in drawn.sections] == ["allreduce · sum", "bcast", "allgather"]
    assert drawn.shared == ("float32", "2 ranks", "latency")
    assert drawn.backends == BACKENDS and drawn.runs == ("",)
    assert all([line.backend for line in s.lines] == list(BACKENDS) for s in drawn.sections)
    assert all([r.size_bytes for r in line.rows] == list(SIZES) for s in drawn.sections
               for line in s.lines)


def test_setups_that_vary_are_sections_of_their_own():
    base = dict(collective="allreduce", size_bytes=1024)
    rows = [row_from_samples([5.0] * 8, backend=b, timing=t, dtype=d, **base)
            for b in ("mpi", "gloo") for t in ("latency", "throughput")
            for d in ("float32", "float64")]
    rows.append(row_from_samples([5.0] * 8, backend="mpi", world_size=4, **base))
    drawn = sweep_of(rows)
    assert [s.title for s in drawn.sections] == [
        "allreduce · float32 · 2 ranks · latency", "allreduce · float64 · 2 ranks · latency",
        "allreduce · float32 · 2 ranks · throughput", "allreduce · float64 · 2 ranks · throughput",
        "allreduce · float32 · 4 ranks · latency"]
    assert drawn.shared == ("sum",)
    assert [len(s.lines) for s in drawn.sections] == [2, 2, 2, 2, 1]


def test_the_legend_says_what_a_line_and_a_band_are_as_the_rows_were_measured():
    one_round = row_from_samples([5.0] * 8)
    several = run_of(sweep()).rows
    assert what_is_drawn([one_round]) == ("median time",
                                          "its 95% confidence interval (order statistics of the "
                                          "samples)")
    assert what_is_drawn(several) == ("geometric mean of the rounds' median times",
                                      "its 95% confidence interval (from the spread between "
                                      "rounds)")
    assert "95% confidence interval" in what_is_drawn(several + [one_round])[1]


def test_two_runs_read_back_draw_a_section_per_collective_colours_by_backend_styles_by_run(
        tmp_path):
    pytest.importorskip("matplotlib")
    from collbench.analysis.overlay import load_runs
    runs = load_runs(_two_runs(tmp_path, collectives()))
    figure, notes = figure_of(runs.rows(), run_labels=runs.row_run_labels())
    assert notes == []
    drawn = panels(figure)
    assert list(drawn) == ["allreduce · sum", "bcast", "allgather"]
    assert len(figure.axes) == 2 * len(drawn)
    styles = line_styles(figure)
    assert set(styles) == {f"{b} · {run}" for b in BACKENDS for run in runs.labels}
    assert all(len(seen) == 1 for seen in styles.values())              # the same in every panel
    colour = {b: {next(iter(styles[f"{b} · {run}"]))[0] for run in runs.labels} for b in BACKENDS}
    # a backend's colour, whatever the run
    assert all(len(c) == 1 for c in colour.values())
    assert len({next(iter(c)) for c in colour.values()}) == len(BACKENDS)
    dash = {run: {next(iter(styles[f"{b} · {run}"]))[1:] for b in BACKENDS} for run in runs.labels}
    assert (all(len(d) == 1 for d in dash.values())
            and len({next(iter(d)) for d in dash.values()}) == 2)
    assert all(len(axes.get_lines()) == len(BACKENDS) * 2 for axes in figure.axes)
    # bands
    assert [len(axes.collections) for axes in figure.axes] == [len(BACKENDS) * 2] * len(figure.axes)
    legend, = legends(figure)                                           # one, above the sections
    texts = [t.get_text() for t in legend.get_texts()]
    assert [t for t in texts if t in BACKENDS] == list(BACKENDS)
    assert [t for t in texts if t in runs.labels] == list(runs.labels)
    assert "its 95% confidence interval (from the spread between rounds)" in texts
    assert figure.get_suptitle() == "collbench · float32 · 2 ranks · latency"


def test_a_band_is_the_ci_of_the_line(tmp_path):
    pytest.importorskip("matplotlib")
    import numpy as np
    rows = run_of(sweep()).rows
    figure, _ = figure_of(rows)
    (latency, bandwidth), = panels(figure).values()
    line, = latency.get_lines()
    assert list(line.get_ydata()) == [r.time_us_p50 for r in rows]
    band = latency.collections[0].get_paths()[0].vertices
    for r in rows:
        at = band[np.isclose(band[:, 0], r.size_bytes), 1]
        assert (at.min() == pytest.approx(r.time_us_ci_low)
                and at.max() == pytest.approx(r.time_us_ci_high))
    assert list(bandwidth.get_lines()[0].get_ydata()) == [r.busbw_gbps for r in rows]
    band = bandwidth.collections[0].get_paths()[0].vertices
    # the same interval: the high time is the low bandwidth
    for r in rows:
        at = band[np.isclose(band[:, 0], r.size_bytes), 1]
        assert at.min() == pytest.approx(r.busbw_gbps * r.time_us_p50 / r.time_us_ci_high)


def test_axes_are_log_log_with_sizes_said_as_1k_1m(tmp_path):
    pytest.importorskip("matplotlib")
    series = {("allreduce", "mpi", 1 << k): 3.0 + (1 << k) / 1e3 for k in range(3, 23)}
    figure, _ = figure_of(run_of(series).rows)
    figure.canvas.draw()
    for axes in figure.axes:
        assert axes.get_xscale() == axes.get_yscale() == "log"
        ticks = [t.get_text() for t in axes.get_xticklabels() if t.get_text()]
        assert ticks and all(re.fullmatch(r"\d+[KM]?", t) for t in ticks), ticks
        assert "1K" in ticks or "1M" in ticks


def test_many_runs_all_look_different():
    pytest.importorskip("matplotlib")
    rows, labels = [], []
    for i in range(6):
        run = run_of(sweep(), seed=i).rows
        rows += run
        labels += [f"run {i}"] * len(run)
    figure, _ = figure_of(rows, run_labels=labels)
    styles = line_styles(figure)
    assert len(styles) == 6 and len({next(iter(s)) for s in styles.values()}) == 6


def test_one_rank_has_no_bandwidth_and_the_panel_says_so():
    pytest.importorskip("matplotlib")
    rows = [row_from_samples([5.0] * 8, size_bytes=s, world_size=1) for s in SIZES]
    figure, notes = figure_of(rows)
    assert any("no bus bandwidth to draw" in note for note in notes)
    (latency, bandwidth), = panels(figure).values()
    assert len(latency.get_lines()[0].get_xdata()) == len(SIZES)
    assert "no bus bandwidth" in bandwidth.texts[0].get_text()


def test_rows_of_many_pairs_are_heat_maps():
    pytest.importorskip("matplotlib")
    rows = [row_from_samples([5.0 + a + b] * 8, collective="pingpong", size_bytes=8, world_size=4,
                             pair=(a, b))
            for a in range(4) for b in range(a + 1, 4)]
    figure, notes = figure_of(rows)
    assert notes == []
    axes = [a for a in figure.axes if a.images]
    assert len(axes) == 1 and axes[0].images[0].get_array().shape == (4, 4)
    assert axes[0].get_title().startswith("pingpong · mpi · 8")


def test_plot_writes_a_png_that_reads_back(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    out = tmp_path / "plot.png"
    notes = plot_rows(rows_two_backends(), out)
    assert out.read_bytes()[:8] == PNG_MAGIC
    pixels = image.imread(out)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 200
    assert pixels.std() > 0                                   # something was drawn
    assert notes == ["1 row(s) without a size (barrier) are not on the log–log plot"]


def test_dollar_signs_in_names_and_labels_are_drawn_as_written(tmp_path):
    """A file named a$^$.json and a --label of $\\undefinedmacro$ were mathtext tracebacks."""
    pytest.importorskip("matplotlib")
    odd = write(run_of(sweep(), seed=1), tmp_path / "a$^$.json")
    plain = write(run_of(sweep(), seed=2), tmp_path / "b.json")
    for args in (["plot", odd, plain, "-o", "p.svg"],
                 ["plot", plain, odd, "--label", "$\\undefinedmacro$",
                                                        "--label", "x", "-o", "q.svg"]):
        proc = run_cli(args, tmp_path)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "undefinedmacro" in (tmp_path / "q.svg").read_text()


def test_plot_without_o_writes_a_png_in_results_made_as_a_run_makes_it(tmp_path):
    pytest.importorskip("matplotlib")
    write(run_of(sweep(), seed=1), tmp_path / "a.json")
    write(run_of(sweep(), seed=2), tmp_path / "b.json")
    proc = run_cli(["plot", "a.json", "b.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    made = list((tmp_path / "results").iterdir())
    assert (len(made) == 1 and made[0].name.startswith("plot-")
            and made[0].read_bytes()[:8] == PNG_MAGIC)
    assert f"wrote results/{made[0].name}" in proc.stderr
    bad = run_cli(["plot", "missing.json"], tmp_path / "results")
    assert bad.returncode == 2 and not (tmp_path / "results" / "results").exists()


def test_plot_writes_svg_and_refuses_to_overwrite(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "plot.svg"
    plot_rows(rows_two_backends(), out)
    assert "<svg" in out.read_text()[:500]
    with pytest.raises(UsageError, match="exists; use --force"):
        plot_rows(rows_two_backends(), out)
    plot_rows(rows_two_backends(), out, force=True)


def test_plot_refuses_bad_names_and_nothing_to_plot(tmp_path):
    pytest.importorskip("matplotlib")
    with pytest.raises(UsageError, match="image format"):
        plot_rows(rows_two_backends(), tmp_path / "plot.txt")
    with pytest.raises(UsageError, match="does not exist"):
        plot_rows(rows_two_backends(), tmp_path / "no" / "plot.png")
    barrier = [row_from_samples([5.0] * 8, collective="barrier", size_bytes=0)]
    with pytest.raises(UsageError, match="nothing to plot"):
        plot_rows(barrier, tmp_path / "plot.png")


def test_missing_matplotlib_is_one_line_with_the_install_hint(tmp_path):
    path = write(run_of(sweep()), tmp_path / "run.json")
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from collbench.cli.app import main\n"
            f"main(['plot', {str(path)!r}, '-o', {str(tmp_path / 'x.png')!r}])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"collbench: error: {INSTALL_HINT}"
    assert not (tmp_path / "x.png").exists()


def test_runs_of_one_setup_are_runs_read_back_from_files(tmp_path):
    from collbench.analysis.overlay import load_runs
    runs = load_runs(_two_runs(tmp_path))
    assert runs.separate and runs.labels == ("before/run.json", "after/run.json")
    drawn = sweep_of(runs.rows(), runs.row_run_labels())
    assert drawn.runs == ("before/run.json", "after/run.json") and drawn.backends == ("mpi",)
    section, = drawn.sections
    assert section.title == "allreduce" and drawn.shared == ("float32", "sum", "2 ranks", "latency")
    assert [(line.run, len(line.rows)) for line in section.lines] == [("before/run.json", 5),
                                                                      ("after/run.json", 5)]
    two = load_runs(_two_runs(tmp_path, sweep(backends=("mpi", "mpi-pickle"))), ["old", "new"])
    drawn = sweep_of(two.rows(), two.row_run_labels())
    assert [(line.backend, line.run) for line in drawn.sections[0].lines] == [
        ("mpi", "old"), ("mpi-pickle", "old"), ("mpi", "new"), ("mpi-pickle", "new")]


def test_files_of_different_setups_still_merge(tmp_path):
    from collbench.analysis.overlay import load_runs
    mpi = write(run_of(sweep(backends=("mpi",))), tmp_path / "mpi.json")
    pickle = write(run_of(sweep(backends=("mpi-pickle",))), tmp_path / "pickle.json")
    runs = load_runs([mpi, pickle])
    assert not runs.separate and set(runs.row_run_labels()) == {""}
    drawn = sweep_of(runs.rows(), runs.row_run_labels())
    assert drawn.backends == ("mpi", "mpi-pickle") and drawn.runs == ("",)
    labelled = load_runs([mpi, pickle], ["a", "b"])          # --label makes runs of them anyway
    drawn = sweep_of(labelled.rows(), labelled.row_run_labels())
    assert ([(line.backend, line.run) for line in drawn.sections[0].lines]
            == [("mpi", "a"), ("mpi-pickle", "b")])


def test_plot_of_two_runs_draws_both_in_the_backends_colour(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    from collbench.analysis.overlay import load_runs
    runs = load_runs(_two_runs(tmp_path))
    out = tmp_path / "runs.png"
    assert plot_rows(runs.rows(), out, run_labels=runs.row_run_labels()) == []
    pixels = image.imread(out)[:, :, :3]
    # C0: the one backend
    near = (abs(pixels - [c / 255 for c in (0x1f, 0x77, 0xb4)]).max(axis=2) < 0.02).sum()
    assert near > 400
    styles = line_styles(figure_of(runs.rows(), run_labels=runs.row_run_labels())[0])
    assert {s[1] for seen in styles.values() for s in seen} == {"-", "--"}


@pytest.mark.mpi
def test_plot_of_two_real_runs_of_every_collective(tmp_path):
    """Two short real ``collbench all`` runs, plotted by the command and read back as a Figure."""
    from collbench.analysis.overlay import load_runs
    from collbench.launch.self_launch.mpiexec import find_mpiexec

    if find_mpiexec() is None:
        pytest.skip("no mpiexec")
    pytest.importorskip("matplotlib")
    for name in ("a.json", "b.json"):
        proc = run_cli(["all", "-n", "2", "--sizes", "8-512:x8", "-b", "mpi,mpi-pickle", "--rounds",
                        "1",
                        "--max-time", "0.02", "--warmup", "1", "-q", "-o", name], tmp_path)
        assert proc.returncode == 0, proc.stderr
    proc = run_cli(["plot", "a.json", "b.json", "-o", "two.png"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "two.png").read_bytes()[:8] == PNG_MAGIC
    runs = load_runs([tmp_path / "a.json", tmp_path / "b.json"])
    figure, notes = figure_of(runs.rows(), run_labels=runs.row_run_labels())
    sized = {r.collective for r in runs.rows() if r.size_bytes}
    drawn = panels(figure)
    assert {title.split(" · ")[0] for title in drawn} == sized and len(drawn) == len(sized)
    assert any("barrier" in note for note in notes)
    styles = line_styles(figure)
    assert set(styles) == {f"{b} · {f}" for b in ("mpi", "mpi-pickle")
                           for f in ("a.json", "b.json")}
    assert all(len(seen) == 1 for seen in styles.values())
    assert "its 95% confidence interval (order statistics of the samples)" in [
        t.get_text() for t in legends(figure)[0].get_texts()]


def test_file_labels_tell_clashing_names_apart():
    from collbench.analysis.overlay import file_labels
    assert file_labels(["a.json", "b/c.json"]) == ("a.json", "c.json")
    assert file_labels(["before/run.json", "after/run.json", "x.json"]) == ("before/run.json",
                                                                             "after/run.json",
                                                                             "x.json")
    assert file_labels(["a/b/run.json", "c/b/run.json"]) == ("a/b/run.json", "c/b/run.json")
    assert file_labels(["run.json", "/tmp/old/run.json"]) == ("run.json", "old/run.json")


def test_runs_with_different_roots_are_tables_of_their_own_each_named_by_its_root(tmp_path):
    from collbench.analysis.overlay import load_runs, run_tables
    from results_helpers import metadata

    for folder, root in (("r1", 1), ("r0", 0)):
        (tmp_path / folder).mkdir()
        bcast = {("bcast", "mpi", size): 3.0 + size / 2e3 for size in (8, 1024, 65536)}
        write(run_of(bcast, meta=metadata(settings={"root": root})), tmp_path / folder / "b.json")
    titles = [t.title for t in run_tables(load_runs([tmp_path / "r1" / "b.json",
                                                     tmp_path / "r0" / "b.json"]))]
    assert len(titles) == 2 and "root 1" in titles[0] and "root" not in titles[1]


def test_a_backend_keeps_its_colour_from_one_figure_to_the_next():
    from collbench.analysis.plot import BACKEND_COLOURS, Sweep

    alone = Sweep((), (), ("gloo",), ("",))
    beside = Sweep((), (), ("mpi", "my-plugin", "gloo"), ("",))
    assert alone.colour("gloo") == beside.colour("gloo") == BACKEND_COLOURS.index("gloo")
    assert beside.colour("my-plugin") == len(BACKEND_COLOURS)          # after the built-in ones


def test_a_band_of_absurd_width_neither_warns_nor_takes_the_axis(tmp_path):
    """A crafted file's row with a CI of 1e-300 to 1e300 µs (which holds its p50, so it loads):
    matplotlib's log scale overflowed and warned on stderr ('RuntimeWarning: overflow
    encountered in exp'), and the band set the axis to 1-10, hiding every line. The band is
    drawn at most BAND_LIMIT either side of its line."""
    import dataclasses
    import warnings
    from collbench.analysis.plot import BAND_LIMIT

    rows = list(rows_two_backends())
    rows[0] = dataclasses.replace(rows[0], time_us_ci_low=1e-300, time_us_ci_high=1e300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figure, _ = figure_of(rows)
        plot_rows(rows, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes().startswith(PNG_MAGIC)
    for axes in figure.axes:
        if axes.get_ylabel() == "time (µs)" and axes.get_lines():
            low, high = axes.get_ylim()
            assert high / low <= 4 * BAND_LIMIT ** 2, (low, high)
