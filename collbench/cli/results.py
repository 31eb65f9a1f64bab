"""Subcommands that work on result files (compare, report, plot).

Each command only wires pieces together: load files, call a pure module (compare, fit, plot),
hand the objects to a renderer. Heavy imports stay inside the commands.
"""

from __future__ import annotations

import sys

import click

from collbench.cli.streams import asked_for
from collbench.errors import printable

from collbench.cli import params
from collbench.stats.calibration import DEFAULT_ALPHA

def _console():
    from rich.console import Console

    console = Console(file=sys.stdout, highlight=False, soft_wrap=False)
    if not console.is_terminal:   # piped: never squeeze columns to a guessed 80-character terminal
        console = Console(file=sys.stdout, highlight=False, soft_wrap=False, width=400,
                          no_color=True)
    return console


def print_tables(tables) -> None:
    """TableModels on stdout: fitted to the terminal, or every column when piped."""
    from collbench.render.console import output_width, print_table

    console = _console()
    width = output_width(console.is_terminal, console.width)
    said: set = set()
    for table in tables:
        print_table(console, table, width, plain=not console.is_terminal, said=said)


def _compare_table(comparison) -> None:
    from collbench.analysis.compare_render import comparison_tables, first_line, undecided_line

    console = _console()
    lines = [line for line in (first_line(comparison), undecided_line(comparison)) if line]
    if console.is_terminal:              # wrapped between words, as the tables are fitted
        import textwrap
        lines = [textwrap.fill(line, width=console.width, break_on_hyphens=False) for line in lines]
    print("\n".join(lines))
    files = f"{comparison.baseline_name} → {comparison.new_name}"
    if console.is_terminal and len(files) > console.width:       # long paths: one a line
        files = f"baseline: {comparison.baseline_name}\nnew:      {comparison.new_name}"
    print(files + "\n")
    print_tables(comparison_tables(comparison))


def _compare_markdown(comparison) -> None:
    from collbench.analysis.compare_render import to_summary_markdown

    asked_for("-f markdown")
    sys.stdout.write(to_summary_markdown(comparison))


def _compare_json(comparison) -> None:
    from collbench.analysis.compare_render import to_json

    asked_for("-f json")
    sys.stdout.write(to_json(comparison))


def _report_table(heading: str, report, tables) -> None:
    print_tables(tables)
    for note in report.notes:
        print(f"collbench: {note}", file=sys.stderr)


def _report_markdown(heading: str, report, tables) -> None:
    from collbench.analysis.report import markdown_document

    asked_for("-f markdown")
    sys.stdout.write(markdown_document(heading, report, tables))


#: ``-f`` of compare and of report: each format's name and what writes it on stdout. (The
#: commands that measure have theirs in ``collbench.render.exporters.STDOUT_FORMATS``.)
COMPARE_FORMATS = {"table": _compare_table, "markdown": _compare_markdown, "json": _compare_json}
REPORT_FORMATS = {"table": _report_table, "markdown": _report_markdown}


def _warn(text: str) -> None:
    line = f"collbench: warning: {text}"
    if sys.stderr.isatty():          # wrapped between words, not by the terminal mid-word
        import shutil
        import textwrap

        line = textwrap.fill(line, width=shutil.get_terminal_size().columns, break_on_hyphens=False)
    print(line, file=sys.stderr)


ALLOW_MISSING_HELP = ("Let rows of the baseline that the new run lacks (missing) or could not "
                      "measure (unmeasured: no value, no round median) pass; they are still named. "
                      "Without it they fail the gate.")
FAIL_ON_INCONCLUSIVE_HELP = ("Fail (exit 1) when any row is inconclusive: a gate that must decide "
                             "every row rather than pass what it cannot see.")
MIN_DECIDED_HELP = ("The share of the compared rows that must be decided (same, slower or faster) "
                    "for the gate to pass; below it, exit 3 (undecided). 0% passes whatever it "
                    "could not see.")


@click.command("compare")
@click.argument("baseline")
@click.argument("new")
@click.option("--threshold", default="5%", show_default=True,
              help="Smallest change that counts: a percentage (5%) or a fraction (0.05).")
@click.option("--metric", type=click.Choice(("time_us_p50", "busbw_gbps")), default="time_us_p50",
              show_default=True,
              help="Median time (lower is better) or bus bandwidth (higher is better).")
@click.option("--alpha", type=params.ALPHA, default=0.05,
              show_default=True, help="Family-wise significance level (max-T over the rows).")
@click.option("-f", "--format", "fmt", type=click.Choice(tuple(COMPARE_FORMATS)), default="table",
              show_default=True, help="table, markdown (fits a CI job summary) or json.")
@click.option("--allow-missing", is_flag=True, help=ALLOW_MISSING_HELP)
@click.option("--fail-on-inconclusive", is_flag=True, help=FAIL_ON_INCONCLUSIVE_HELP)
@click.option("--min-decided", type=params.SHARE, default="80%", show_default=True,
              help=MIN_DECIDED_HELP)
@click.option("--across-levels", is_flag=True,
              help="Match rows whose MPI thread levels differ (refused by default: the level alone "
                   "moves the times).")
def compare_command(baseline, new, threshold, metric, alpha, fmt, allow_missing,
                    fail_on_inconclusive, min_decided, across_levels) -> None:
    """Compare NEW with BASELINE row by row on their rounds; exit 1 on a regression.

    A row is slower only when the change of its per-round medians is beyond the threshold and
    significant with every row adjusted together. A gate that decided too few rows (under
    --min-decided) says UNDECIDED and exits 3, with the reasons counted: it never passes what
    it could not see. A row of BASELINE that NEW lacks or could not measure fails, unless
    --allow-missing. The first line says what the comparison can detect. BASELINE or NEW may
    be - (standard input).

    \b
    Exit status: 0 no regression, 1 regression, rows not measured or (with
    --fail-on-inconclusive) rows not decided, 2 unreadable or incomparable input,
    3 undecided (fewer rows decided than --min-decided).
    Statistics, verdicts and the multiple-comparison control: docs/compare.md.
    """
    from collbench.analysis.compare import compare_runs, parse_threshold
    from collbench.results.loader import load_result

    threshold_value = parse_threshold(threshold)
    comparison = compare_runs(load_result(baseline), load_result(new), metric=metric,
                              threshold=threshold_value, alpha=alpha, baseline_name=baseline,
                              new_name=new,
                              allow_missing=allow_missing,
                              fail_on_inconclusive=fail_on_inconclusive,
                              across_levels=across_levels, min_decided=min_decided)
    for warning in comparison.warnings:
        _warn(warning)
    COMPARE_FORMATS[fmt](comparison)
    sys.stdout.flush()
    if comparison.status:
        sys.exit(comparison.status)


LABEL_HELP = ("The label of each file's run in tables and legends, in the order of FILES (repeat "
              "it, one per file); files given labels are runs of their own even when they share no "
              "row.")


@click.command("report")
@click.argument("files", nargs=-1, required=True)
@click.option("-f", "--format", "fmt", type=click.Choice(tuple(REPORT_FORMATS)), default="table",
              show_default=True, help="Terminal tables or markdown.")
@click.option("--threshold", default="5%", show_default=True,
              help="The compare threshold to judge each row's noise against: 5% or 0.05.")
@click.option("--label", "labels", multiple=True, metavar="TEXT", help=LABEL_HELP)
@click.option("--diff", is_flag=True,
              help="Instead of the tables: per row, the change of each later file's median time "
                   "against the first file's, and whether their 95% CIs are apart (descriptive; "
                   "compare decides).")
@click.option("--per-rank", is_flag=True,
              help="Instead of the tables: per size, the slowest rank and its host, its time "
                   "against the median rank and the outlier ranks; then per host, how its ranks "
                   "compare, so a bad node stands out (JSON files only; the rules: "
                   "docs/results-format.md).")
def report_command(files, fmt, threshold, labels, diff, per_rank) -> None:
    """Re-render the tables of result FILES (JSON or CSV) with a latency–bandwidth fit.

    Files of different setups merge into one set of tables. Files that measure the same setup
    (a before/after pair) are runs side by side: a column group per run, labelled by file name
    (or --label), and each run's median time against the first run's.

    For each collective and backend (and run), t(n) = α + n/β is fitted to the median times:
    α (µs), β (GB/s), the half-peak size n½ = α·β and the fit's RMS relative error. A last
    table says, per row, the smallest change a comparison of its rounds would detect, and
    whether rows are too noisy to gate on at --threshold.
    """
    from collbench.analysis.compare import parse_threshold
    from collbench.analysis.report import build_report, per_rank_view, report_tables
    from collbench.errors import UsageError

    if diff and per_rank:
        raise UsageError("--diff and --per-rank are two views: choose one")
    threshold_value = parse_threshold(threshold)
    # an ESC shows, not acts
    report = build_report(files, tuple(printable(label) for label in labels))
    if diff:
        from collbench.analysis.overlay import diff_tables

        heading, tables = ("collbench report: change against the first file",
                           diff_tables(report.runs))
    elif per_rank:
        heading, tables = "collbench report: per rank", per_rank_view(report)
    else:
        heading, tables = "collbench report", report_tables(report, threshold_value, DEFAULT_ALPHA)
    REPORT_FORMATS[fmt](heading, report, tables)


@click.command("plot")
@click.argument("files", nargs=-1, required=True)
@click.option("-o", "--output", metavar="FILE",
              help="Image to write: .png, .svg or .pdf.  [default: results/plot-DATE-TIME.png]")
@click.option("--force", is_flag=True, help="Overwrite an existing image.")
@click.option("--label", "labels", multiple=True, metavar="TEXT", help=LABEL_HELP)
def plot_command(files, output, force, labels) -> None:
    """Plot latency and bus bandwidth against size (log–log) from result FILES into an image.

    A section per collective (and setup) with a latency and a bus-bandwidth panel, a colour
    per backend, the 95% CI as a band. Files that measure the same setup (a before/after pair)
    are runs: a line style each, labelled by file name (or --label). Rows of many pairs
    (collbench pairs) give heat maps. Needs matplotlib: pip install "collbench[plot]".
    """
    from collbench.analysis.overlay import load_runs
    from collbench.analysis.plot import check_plot_path, plot_rows, require_matplotlib
    from collbench.results.link_map import placement

    if output is not None:
        check_plot_path(output, force)
    require_matplotlib()
    runs = load_runs(files, tuple(printable(label) for label in labels))
    if output is None:            # beside a run's default files, in a folder made as a run makes it
        output = default_plot_path()
    for note in list(runs.notes) + plot_rows(runs.rows(), output, force=force,
                                             run_labels=runs.row_run_labels(),
                                             where=placement(runs.loaded[0][1].metadata)):
        print(f"collbench: {note}", file=sys.stderr)
    print(f"collbench: wrote {printable(str(output))}", file=sys.stderr)


@click.command("merge")
@click.argument("files", nargs=-1, required=True)
@click.option("-o", "--output", required=True, metavar="FILE",
              help="The merged result to write (.json).")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
def merge_command(files, output, force) -> None:
    """Merge runs of one sweep (JSON FILES) into one file: their rounds side by side.

    A baseline merged from runs made at different times tells compare how far whole runs
    drift on the machine, and gives each row more rounds. Rounds are renumbered; each keeps
    the run it came from.
    """
    from pathlib import Path

    from collbench.analysis.merge import merge_runs
    from collbench.errors import UsageError
    from collbench.results.formats import JsonExporter
    from collbench.results.paths import check_writable_path, write_atomic
    from collbench.results.loader import load_result

    if Path(output).suffix.lower() != ".json":
        raise UsageError(f"merge writes JSON (the rounds need it): {output!r} "
                         "does not end in .json")
    check_writable_path(output, force)
    merged, warnings = merge_runs([(str(f), load_result(f)) for f in files])
    for warning in warnings:
        _warn(warning)
    write_atomic(Path(output), JsonExporter.render(merged))
    runs = len(merged.metadata["merged_from"])
    print(f"collbench: merged {runs} runs, {merged.metadata['settings']['rounds']} rounds, "
          f"{len(merged.rows)} rows into {printable(str(output))}", file=sys.stderr)


def register(group) -> None:
    """Add the result-file subcommands to the ``collbench`` group."""
    for command in (compare_command, report_command, plot_command, merge_command):
        group.add_command(command)


def default_plot_path() -> str:
    """results/plot-DATE-TIME.png, its folder made if need be (one line and exit 2 if it cannot)."""
    import datetime
    from pathlib import Path

    from collbench.errors import UsageError

    folder = Path("results")
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot make the folder 'results' for the image: {exc.strerror or exc}; "
                         f"name one with -o") from None
    return str(folder / f"plot-{datetime.datetime.now():%Y%m%d-%H%M%S}.png")
