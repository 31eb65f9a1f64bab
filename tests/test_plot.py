"""collbench plot writes real images; without matplotlib it says how to get it."""

import subprocess
import sys

import pytest

from collbench.errors import UsageError
from collbench.analysis.plot import INSTALL_HINT, plot_rows, series
from results_helpers import row_from_samples, run_of, sweep, write

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def rows_two_backends():
    run = run_of(sweep(backends=("mpi", "mpi-pickle")))
    run.add(row_from_samples([5.0] * 8, collective="barrier", size_bytes=0), [5.0] * 8)
    return run.rows


def test_plot_writes_a_png_that_reads_back(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    out = tmp_path / "plot.png"
    notes = plot_rows(rows_two_backends(), out)
    assert out.read_bytes()[:8] == PNG_MAGIC
    pixels = image.imread(out)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 200
    assert pixels.std() > 0                                   # something was drawn
    assert notes == ["1 row(s) without a size (barrier) are not on the log–log plot"]


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


def test_series_labels_name_what_varies():
    lines, shared = series(rows_two_backends())
    assert list(lines) == ["mpi", "mpi-pickle"]
    assert shared == ["allreduce", "float32", "sum", "2 ranks", "latency"]
    mixed = rows_two_backends() + [row_from_samples([9.0] * 8, collective="bcast", size_bytes=64)]
    assert "bcast · mpi" in series(mixed)[0]


def test_missing_matplotlib_is_one_line_with_the_install_hint(tmp_path):
    path = write(run_of(sweep()), tmp_path / "run.json")
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from collbench.cli.app import main\n"
            f"main(['plot', {str(path)!r}, '-o', {str(tmp_path / 'x.png')!r}])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"collbench: error: {INSTALL_HINT}"
    assert not (tmp_path / "x.png").exists()


def _two_runs(tmp_path, backends=("mpi",)):
    """before/run.json and after/run.json: the same setup measured twice, the second 3x slower."""
    for folder in ("before", "after"):
        (tmp_path / folder).mkdir(exist_ok=True)
    return [write(run_of(sweep(backends=backends), seed=1), tmp_path / "before" / "run.json"),
            write(run_of(sweep(backends=backends), seed=2, scale=3.0), tmp_path / "after" / "run.json")]


def test_runs_of_one_setup_are_separate_series_read_back_from_files(tmp_path):
    from collbench.analysis.overlay import load_runs
    runs = load_runs(_two_runs(tmp_path))
    assert runs.separate and runs.labels == ("before/run.json", "after/run.json")
    lines, shared = series(runs.rows(), runs.row_run_labels())
    assert list(lines) == ["before/run.json", "after/run.json"]
    assert shared == ["allreduce", "mpi", "float32", "sum", "2 ranks", "latency"]
    assert [len(rows) for rows in lines.values()] == [5, 5]
    two = load_runs(_two_runs(tmp_path, backends=("mpi", "mpi-pickle")), ["old", "new"])
    assert list(series(two.rows(), two.row_run_labels())[0]) == ["mpi · old", "mpi-pickle · old", "mpi · new",
                                                         "mpi-pickle · new"]


def test_files_of_different_setups_still_merge(tmp_path):
    from collbench.analysis.overlay import load_runs
    mpi = write(run_of(sweep(backends=("mpi",))), tmp_path / "mpi.json")
    pickle = write(run_of(sweep(backends=("mpi-pickle",))), tmp_path / "pickle.json")
    runs = load_runs([mpi, pickle])
    assert not runs.separate and set(runs.row_run_labels()) == {""}
    assert list(series(runs.rows(), runs.row_run_labels())[0]) == ["mpi", "mpi-pickle"]
    labelled = load_runs([mpi, pickle], ["a", "b"])          # --label makes runs of them anyway
    assert list(series(labelled.rows(), labelled.row_run_labels())[0]) == ["mpi · a", "mpi-pickle · b"]


def test_plot_of_two_runs_draws_both(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    from collbench.analysis.overlay import load_runs
    runs = load_runs(_two_runs(tmp_path))
    out = tmp_path / "runs.png"
    assert plot_rows(runs.rows(), out, run_labels=runs.row_run_labels()) == []
    pixels = image.imread(out)[:, :, :3]
    for colour in ((0x1f, 0x77, 0xb4), (0xff, 0x7f, 0x0e)):      # C0 and C1: one setup, a colour per run
        near = (abs(pixels - [c / 255 for c in colour]).max(axis=2) < 0.02).sum()
        assert near > 200, colour


def test_file_labels_tell_clashing_names_apart():
    from collbench.analysis.overlay import file_labels
    assert file_labels(["a.json", "b/c.json"]) == ("a.json", "c.json")
    assert file_labels(["before/run.json", "after/run.json", "x.json"]) == ("before/run.json", "after/run.json",
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
    titles = [t.title for t in run_tables(load_runs([tmp_path / "r1" / "b.json", tmp_path / "r0" / "b.json"]))]
    assert len(titles) == 2 and "root 1" in titles[0] and "root" not in titles[1]
