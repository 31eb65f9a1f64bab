"""``collbench export``: a result file in the format of a CI benchmark tracker
(github-action-benchmark, Bencher), on stdout or into a file."""

from __future__ import annotations

import sys

import click

from collbench.cli.streams import asked_for
from collbench.errors import printable

from collbench.render.ci_export import TARGETS, UNITS


@click.command("export")
@click.argument("file")
@click.option("--to", "target", type=click.Choice(tuple(TARGETS)), required=True,
              help="github-action-benchmark: its customSmallerIsBetter JSON (median µs); bencher: "
                   "Bencher Metric Format (latency in ns, bus-bandwidth in GB/s).")
@click.option("-o", "--output", metavar="FILE", help="File to write; - or none: stdout.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
def export_command(file, target, output, force) -> None:
    """Export result FILE (JSON or CSV) for a CI benchmark tracker, one benchmark per row.

    Each row becomes one benchmark named by what it measured, e.g. "allreduce mpi float32 sum 2
    ranks 1K latency" (stable from run to run), valued at its median time with the 95% CI. How to
    feed github-action-benchmark and Bencher: docs/ci-recipe.md.
    """
    from pathlib import Path

    from collbench.render.ci_export import export
    from collbench.results.paths import check_writable_path, write_atomic
    from collbench.results.loader import load_result

    if output == "-":
        output = None
    if output is not None:
        check_writable_path(output, force)
    done = export(load_result(file), target, source=file)
    if done.left_out:
        print(f"collbench: {done.left_out} row(s) of {file} have no median time; left out",
              file=sys.stderr)
    if output is None:
        asked_for("the export")
        sys.stdout.write(done.text)
        sys.stdout.flush()
        if target in UNITS:
            print(f"collbench: {done.benchmarks} benchmarks for {target}: {UNITS[target]}",
                  file=sys.stderr)
        return
    write_atomic(Path(output), done.text)
    units = f": {UNITS[target]}" if target in UNITS else ""
    print(f"collbench: wrote {done.benchmarks} benchmarks for {target} to "
          f"{printable(str(output))}{units}",
          file=sys.stderr)
