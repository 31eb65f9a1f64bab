"""One exporter per file format behind one tiny interface, ``render(result) -> str``: the JSON
and CSV of ``results.formats`` and the markdown of the tables, found by a file's suffix or by
``--format``."""

from __future__ import annotations

from pathlib import Path

from collbench.errors import UsageError
from collbench.render.tables import build_tables, to_markdown
from collbench.results.formats import CsvExporter, JsonExporter
from collbench.results.link_map import Placement, placement
from collbench.results.paths import check_writable_path
from collbench.results.records import RunResult, root_rank


class MarkdownExporter:
    """The run's metadata as a list, then one table per (collective, setup), then the notes.
    On stdout the tables print as each collective completes (``render_tables``)."""

    suffix, format = ".md", "markdown"

    @staticmethod
    def render_tables(rows, root: int = 0, where: Placement = Placement()) -> str:
        return "\n".join(to_markdown(t) for t in build_tables(rows, root, where))

    @staticmethod
    def render(result: RunResult) -> str:
        meta = result.metadata
        head = ["# collbench results", "",
                f"- collbench {meta.get('collbench_version', '?')}, {meta.get('timestamp', '')}",
                f"- {meta.get('world_size', '?')} rank{'' if meta.get('world_size') == 1 else 's'} "
                f"on {', '.join(str(h) for h in meta.get('hostnames', []))}",
                f"- MPI: {meta.get('versions', {}).get('mpi_library', '-')}", "", ""]
        body = [to_markdown(t) for t in build_tables(result.rows, root_rank(meta), placement(meta))]
        notes = [f"- {n}" for n in result.notes]
        return "\n".join(head) + "\n".join(body) + ("\n" + "\n".join(notes) + "\n" if notes else "")


#: One registry for files (by suffix) and stdout (by ``--format``); ``table``, the terminal's
#: rich table, is the one format that is not a file.
EXPORTERS = {e.suffix: e for e in (JsonExporter, CsvExporter, MarkdownExporter)}
STDOUT_FORMATS = {"table": None, **{e.format: e for e in EXPORTERS.values()}}


def exporter_for(path: Path):
    try:
        return EXPORTERS[path.suffix.lower()]
    except KeyError:
        raise UsageError(f"cannot tell the format of {str(path)!r}: use a name ending in "
                         + ", ".join(EXPORTERS)) from None


def check_result_path(path, force: bool) -> None:
    """A result file: a format known by its suffix, and a path we may write."""
    exporter_for(Path(path))
    check_writable_path(path, force)
