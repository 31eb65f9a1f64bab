"""Tables at a terminal's width: what is kept, what is dropped and said, and that nothing wraps."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from collbench.render.console import fit, output_width, print_table
from collbench.render.tables import build_tables, to_markdown
from results_helpers import lognormal_samples, row_with_rounds

SIZES = (8, 1024, 65536, 4 << 20)


def _rows(collective="allreduce", backends=("mpi",), rounds=5, world_size=2):
    rows = []
    for b, backend in enumerate(backends):
        for i, size in enumerate(SIZES if collective != "barrier" else (0,)):
            samples = [lognormal_samples(5.0 + size / 1e3 * (b + 1), 30, seed=i * 10 + r + 100 * b)
                       for r in range(rounds)]
            rows.append(row_with_rounds(samples, collective=collective, backend=backend,
                                        size_bytes=size, world_size=world_size)[0])
    return rows


def _render(table, width, terminal=True) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width or 400, force_terminal=terminal, color_system=None,
                      highlight=False, soft_wrap=False)
    print_table(console, table, width, plain=not terminal)
    return out.getvalue()


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize("backends",
                         [("mpi",), ("mpi", "mpi-pickle"), ("mpi", "mpi-pickle", "gloo")])
@pytest.mark.parametrize("collective", ["allreduce", "allgather"])
def test_tables_fit_80_columns_and_name_what_they_leave_out(backends, collective):
    (table,) = build_tables(_rows(collective, backends))
    text = _render(table, 80)
    assert _widest(text) <= 80, text
    assert "p50" in text and "size" in text
    assert "not shown at 80 columns:" in text
    # the ratios against the first backend are what side by side is for
    if len(backends) > 1:
        assert text.count("/mpi") == len(backends) - 1 and "×" in text
    if collective == "allgather":    # sizes are the whole array: each rank's part is shown
        assert "per rank" in text and " 512 " in text


@pytest.mark.parametrize("backends", [("mpi",), ("mpi", "mpi-pickle", "gloo")])
def test_200_columns_keep_every_column_for_one_backend_and_more_for_three(backends):
    (table,) = build_tables(_rows("allreduce", backends))
    text = _render(table, 200)
    assert _widest(text) <= 200
    if len(backends) == 1:
        assert "not shown" not in text
        for header in ("count", "iters", "p50 µs", "95% CI µs", "run cv", "avg µs", "min µs",
                       "p95 µs",
                       "max µs", "algbw GB/s", "busbw GB/s", "check"):
            assert header in text, header
    else:
        # not dropped side by side
        assert "min µs" in text and "max µs" in text and "iters" in text


def test_piped_output_keeps_every_column_unless_columns_is_set(monkeypatch):
    (table,) = build_tables(_rows("allreduce", ("mpi", "mpi-pickle", "gloo")))
    monkeypatch.delenv("COLUMNS", raising=False)
    assert output_width(False, 80) is None
    text = _render(table, None, terminal=False)
    assert "not shown" not in text and _widest(text) > 200
    monkeypatch.setenv("COLUMNS", "100")
    assert output_width(False, 80) == 100 and output_width(True, 80) == 100
    monkeypatch.setenv("COLUMNS", "abc")
    assert output_width(True, 132) == 132 and output_width(False, 132) is None


def test_fitting_drops_least_important_first_and_never_the_essentials():
    (table,) = build_tables(_rows("allreduce", ("mpi",)))
    widths = {}

    def measure(t):
        return sum(max(len(h), *(len(r[i]) for r in t.cells)) + 3 for i, h in enumerate(t.headers))

    for width in (200, 100, 80, 60, 40, 10):
        fitted = fit(table, width, measure)
        widths[width] = fitted.headers
        for essential in ("size", "p50 µs"):
            assert essential in fitted.headers
    assert len(widths[200]) >= len(widths[100]) >= len(widths[80]) >= len(widths[40])
    assert "p95 µs" not in widths[80]          # a detail goes before the CI and the check
    assert "95% CI µs" in widths[80] and "check" in widths[80]


def test_summary_line_titles_and_markdown():
    rows = _rows("allreduce", ("mpi", "gloo"))
    (table,) = build_tables(rows)
    assert any(n.startswith("avg bus bandwidth: mpi ") and "gloo" in n for n in table.notes)
    expected = sum(r.busbw_gbps for r in rows if r.backend == "mpi") / len(SIZES)
    assert f"mpi {expected:.3f}" in table.notes[0]
    md = to_markdown(table)
    assert "| mpi p50 µs |" in md and "\n" not in md.splitlines()[2]       # headers on one line
    (one,) = build_tables(_rows("allreduce", ("mpi",), world_size=1))
    assert "1 rank ·" in one.title
    (barrier,) = build_tables(_rows("barrier", ("mpi",)))
    # no dtype for a call that moves none
    assert barrier.title.startswith("barrier · 2 ranks")
    assert "size" not in barrier.headers and "check" not in barrier.headers


def test_a_prose_column_wraps_at_the_width_and_cells_are_text_not_markup():
    """``collbench env``'s table: no header line, its values wrap within 80 columns and keep
    their [brackets]; piped, each value stays on one line."""
    from collbench.render.tables import TableModel

    reason = "unusable: " + " ".join(["a long reason"] * 12) + ' (pip install "collbench[plot]")'
    table = TableModel("collbench env", ("", ""), (("backend nccl", reason), ("cpus", "2")),
                       wrapped=(1,))
    text = _render(table, 80)
    assert _widest(text) <= 80 and "collbench[plot]" in text and "not shown" not in text
    assert "━" not in text and len([line for line in text.splitlines()
                                    if "long reason" in line]) > 1
    piped = _render(table, None, terminal=False)
    assert any(reason in line for line in piped.splitlines())


def test_markdown_without_its_heading():
    (table,) = build_tables(_rows("allreduce", ("mpi",)))
    assert to_markdown(table).split("\n", 2)[2] == to_markdown(table, heading=False)


@pytest.mark.mpi
def test_the_printed_tables_show_what_the_file_keeps_in_the_plans_order(tmp_path):
    """With rounds, each row's CI is moderated by the spread of every row's rounds: the tables
    wait for the final round's end, so they show the figures the file keeps; and they come in
    the plan's order, whatever order the shuffled rounds measured the collectives in."""
    import json
    import subprocess
    import sys

    from collbench.benchmarks.registry import ORDER
    from collbench.render.tables import format_us

    proc = subprocess.run([sys.executable, "-m", "collbench", "all", "-n", "2", "--rounds", "2",
                           "--iters", "20",
                           "--warmup", "1", "--sizes", "8-64", "-o", "r.json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    titles = [line.split(" · ")[0] for line in proc.stdout.splitlines() if " · 2 ranks · " in line]
    assert titles == list(ORDER)
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    allreduce = [r for r in rows if r["collective"] == "allreduce"]
    table = proc.stdout.split("allreduce · ")[1].split("bcast · ")[0]
    for r in allreduce:
        ci = f"{format_us(r['time_us_ci_low'])}–{format_us(r['time_us_ci_high'])}"
        assert ci in table, (ci, table)


def test_titles_name_a_root_other_than_0_for_rooted_collectives_only():
    assert (build_tables(_rows("bcast"), root=1)[0].title
            == "bcast · float32 · root 1 · 2 ranks · latency · mpi · thread single")
    assert (build_tables(_rows("bcast"), root=0)[0].title
            == "bcast · float32 · 2 ranks · latency · mpi · thread single")
    assert "root" not in build_tables(_rows("allreduce"), root=1)[0].title


def test_a_table_with_nothing_to_drop_says_nothing_of_it_and_folds_long_values_whole():
    from collbench.render.tables import TableModel

    path = "/a/very/long/folder/name/without/any/spaces/python3"
    table = TableModel("collbench env", ("", ""), (("python", f"3.11 ({path})"), ("cpus", "2")),
                       wrapped=(1,))
    text = _render(table, 40)
    assert "not shown" not in text and _widest(text) <= 40
    assert path in "".join(line.strip() for line in text.splitlines())     # folded, not cut with …
    assert "…" not in text


def test_an_ascii_stream_gets_the_table_fitted_on_its_stand_ins():
    """Under PYTHONIOENCODING=ascii the stream writes µ as u, ± as +/-, … as ...: the table is
    fitted on that text, not on the characters it replaces, and still fits the width."""
    import importlib

    # registers the stand-ins, as collbench's main does
    importlib.import_module("collbench.cli.streams")

    class AsciiOut(io.StringIO):
        encoding = "ascii"

    (table,) = build_tables(_rows("allreduce", ("mpi", "mpi-pickle", "gloo")))
    out = AsciiOut()
    console = Console(file=out, width=80, force_terminal=True, color_system=None, highlight=False,
                      soft_wrap=False)
    print_table(console, table, 80, plain=False)
    text = out.getvalue()
    assert text.isascii() and "p50 us" in text and _widest(text) <= 80, text


def test_two_pairs_of_one_benchmark_are_two_tables_named_by_their_pair_and_window():
    from collbench.render.tables import build_tables
    from results_helpers import row_from_samples

    rows = [row_from_samples([5.0, 5.1, 5.2], collective="bw", pair=pair, window=16,
                             size_bytes=size)
            for pair in ((0, 1), (2, 0)) for size in (8, 1024)]
    titles = [t.title for t in build_tables(rows)]
    assert titles == ["bw · float32 · 2 ranks · latency · pair 0-1 · window 16 · mpi · thread "
                      "single",
                      "bw · float32 · 2 ranks · latency · pair 2-0 · window 16 · mpi · thread "
                      "single"]


def test_a_bar_in_a_cell_is_escaped_in_markdown_not_a_column():
    from collbench.render.tables import TableModel, to_markdown
    text = to_markdown(TableModel("t", ("backend", "p50 µs"), (("my|mpi", "3.0"),), (), (0, 0)))
    assert "| my\\|mpi | 3.0 |" in text
    assert all(line.replace("\\|", "").count("|") == 3 for line in text.splitlines()
               if line.startswith("|"))


def test_a_ci_that_reaches_up_to_a_state_is_shown_lopsided_and_said():
    """A row whose rounds ran 1.5x slower in 2 of 5, set aside: its CI reaches up to them
    (noise.state_level), the side-by-side CI column shows its two sides, and a note says why."""
    import dataclasses

    from collbench.results.aggregate import moderate_rows

    rows = _rows("allreduce", ("mpi", "gloo"))
    slowed = []
    for r in rows:
        medians = list(r.time_us_round_p50s)
        if r.backend == "gloo" and r.size_bytes == 1024:
            medians[1] *= 1.5
            medians[3] *= 1.5
        slowed.append(dataclasses.replace(r, time_us_round_p50s=tuple(medians)))
    rows = moderate_rows(slowed)
    [state] = [r for r in rows if r.backend == "gloo" and r.size_bytes == 1024]
    assert state.rounds_set_aside == 2 and state.time_us_ci_high > 1.4 * state.time_us_p50
    (table,) = build_tables(rows)
    text = _render(table, 200)
    assert "…+" in text and text.count("…+") == 1
    assert "reaches up to where a fifth or more of the row's rounds ran" in " ".join(text.split())
    (even,) = build_tables(moderate_rows(_rows("allreduce", ("mpi", "gloo"))))
    assert "…+" not in _render(even, 200) and "reaches up to" not in _render(even, 200)


def test_an_interval_a_hundred_times_its_p50_is_said_in_words(tmp_path):
    """A run on the busy runner printed allreduce 32 B at 3.96 µs with a 95% CI of 3.59-1299.6 µs;
    the table now says what that means for a reader."""
    import gzip
    from pathlib import Path

    from conftest import cli

    packed = Path(__file__).parent / "data" / "busy-runner" / "base-2.json.gz"
    (tmp_path / "base-2.json").write_bytes(gzip.decompress(packed.read_bytes()))
    proc = cli(["report", "base-2.json"], tmp_path, env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stdout.splitlines() if "not a figure to quote" in line]
    assert any(line.startswith("32: the 95% CI spans 100× its p50 or more (their rounds ran "
                               "3.80–3794.1 µs)")
               for line in said), said
    assert any(line.startswith("barrier: ") for line in said)
