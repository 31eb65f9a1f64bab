"""Whether two runs can be compared at all: differences in run metadata and in what was measured.

These are warnings, not errors: a CI runner may well get a new hostname every time. What the
comparison cannot survive — no row in common — is an error raised by ``compare``.
"""

from __future__ import annotations

from collbench.environment import LIBRARY_PREFIXES
from collbench.measure.sizes import format_size
from collbench.results.records import ASSUMED_SETUP, RunResult

# (label, path into the metadata dict)
CHECKED_METADATA = (
    ("hostnames", ("hostnames",)),
    ("CPU model", ("cpu_model",)),
    ("MPI library", ("versions", "mpi_library")),
    ("mpi4py version", ("versions", "mpi4py")),
    ("torch version", ("versions", "torch")),
    ("world size", ("world_size",)),
    ("root rank", ("settings", "root")),
    ("result schema version", ("schema_version",)),
)


def _lookup(metadata: dict, path: tuple):
    value = metadata
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _show(value) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return " ".join(str(value).split())


def _csv_without_metadata(result: RunResult) -> bool:
    """A CSV written before CSVs carried the run's metadata: nothing here can be checked."""
    return result.metadata.get("format") == "csv" and \
        all(_lookup(result.metadata, path) is None for _, path in CHECKED_METADATA)


def binding(result: RunResult) -> str:
    """How the ranks were bound, from each round's record of their affinities (``cpu_sets``):
    "one core each", "free on N cores", "all on one core"...; "" where the file does not say."""
    said = []
    for record in result.metadata.get("rounds") or []:
        sets = record.get("cpu_sets") if isinstance(record, dict) else None
        try:
            masks = [int(text, 16) for text in sets or ()]
        except (TypeError, ValueError):
            continue
        if not masks:
            continue
        counts = [bin(m).count("1") for m in masks]
        if len(set(masks)) == 1:
            word = "all on one core" if counts[0] == 1 else f"free on {counts[0]} cores"
        elif all(c == 1 for c in counts) and len(set(masks)) == len(masks):
            word = "one core each"
        else:
            word = "bound to sets of cores"
        said.append(word)
    if not said:
        return "unbound (assumed)" if ASSUMED_SETUP in result.notes else ""
    return ", ".join(dict.fromkeys(said))


#: What the host buffers of a run written before collbench chose their pages were on.
PAGES_BEFORE = "numpy's: huge from 4 MiB of buffer (the run's largest size chose)"


def pages(result: RunResult) -> str:
    """The pages under the run's host buffers (--pages, ``collbench.backends.pages``); for a file
    written before they were chosen, numpy's; "" where the file has no run metadata."""
    settings = result.metadata.get("settings")
    if not isinstance(settings, dict) or all(row.buffers == "cuda" for row in result.rows):
        return ""
    said = settings.get("pages")
    if said is None:
        return (PAGES_BEFORE
                if result.metadata.get("format") != "csv" or "rounds" in settings else "")
    return str(said)


def metadata_warnings(baseline: RunResult, new: RunResult, baseline_name: str,
                      new_name: str) -> list:
    notes = [f"{name} is a CSV without run metadata: host and library were not checked"
             for name, result in ((baseline_name, baseline), (new_name, new))
             if _csv_without_metadata(result)]
    if notes:
        return notes
    bound = binding(baseline), binding(new)
    if all(bound) and bound[0] != bound[1]:
        notes.append(f"ranks were bound differently: {bound[0]} in {baseline_name}, {bound[1]} in "
                     f"{new_name}")
    paged = pages(baseline), pages(new)
    if all(paged) and paged[0] != paged[1]:
        notes.append(f"the buffers were on other pages: {paged[0]} in {baseline_name}, {paged[1]} "
                     f"in {new_name} (copies of large messages may differ 2x)")
    settings = library_settings_differ(baseline, new, baseline_name, new_name)
    if settings:
        notes.append(settings)
    for label, path in CHECKED_METADATA:
        a, b = _lookup(baseline.metadata, path), _lookup(new.metadata, path)
        if a is None or b is None:       # e.g. torch is only recorded by runs that used it
            continue
        if a != b:
            notes.append(f"{label} differs: {_show(a) if a is not None else '(not recorded)'} in "
                         f"{baseline_name}, {_show(b) if b is not None else '(not recorded)'} in "
                         f"{new_name}")
    return notes


def _library_settings(result: RunResult):
    """The variables tuning the MPI library or its transports that a run recorded
    (``metadata.environment``), or None where it recorded none at all."""
    recorded = result.metadata.get("environment")
    if not isinstance(recorded, dict):
        return None
    return {str(k): str(v) for k, v in recorded.items() if str(k).startswith(LIBRARY_PREFIXES)}


def library_settings_differ(baseline: RunResult, new: RunResult, baseline_name: str,
                            new_name: str) -> str:
    """"MPI library settings differ: …" where the two runs recorded other values of the variables
    that tune the library (one MPIR_CVAR_ can move a row 2-3x); "" where they agree or a run
    recorded none."""
    a, b = _library_settings(baseline), _library_settings(new)
    if a is None or b is None or a == b:
        return ""
    said = []
    for name in sorted(set(a) | set(b)):
        if a.get(name) == b.get(name):
            continue
        if name not in b:
            said.append(f"{name}={_show(a[name])} in {baseline_name} only")
        elif name not in a:
            said.append(f"{name}={_show(b[name])} in {new_name} only")
        else:
            said.append(f"{name}={_show(a[name])} in {baseline_name}, {_show(b[name])} in "
                        f"{new_name}")
    shown = "; ".join(said[:3]) + (f"; and {len(said) - 3} more" if len(said) > 3 else "")
    return f"MPI library settings differ: {shown}"


def row_warnings(baseline: RunResult, new: RunResult, baseline_name: str, new_name: str,
                 matched: list) -> list:
    """Differences in what was measured, and failed result checks, among ``matched`` (base, new)
    row pairs."""
    notes = []
    for label in ("dtype", "op"):
        # ops only among reducing rows: the others have op "none" in every run
        a = sorted({getattr(r, label) for r in baseline.rows if label != "op" or r.op != "none"})
        b = sorted({getattr(r, label) for r in new.rows if label != "op" or r.op != "none"})
        if a and b and a != b:
            notes.append(f"{label} differs: {','.join(a)} in {baseline_name}, {','.join(b)} in "
                         f"{new_name}")
    missing = len(baseline.rows) - len(matched)
    if missing > 0:
        notes.append(f"{missing} row(s) of {baseline_name} are missing from {new_name}: a partial "
                     "or interrupted run? (missing rows fail the gate unless --allow-missing)")
    placement = sorted({(b.ranks_per_node, n.ranks_per_node) for b, n in matched
                        if b.ranks_per_node != n.ranks_per_node})
    if placement:
        pairs = ", ".join(f"{a} vs {b}" for a, b in placement)
        notes.append(f"ranks per node differ in matched rows ({pairs}): the ranks were placed "
                     "differently")
    windows = [(b, n) for b, n in matched if b.window_used != n.window_used]
    if windows:
        b, n = windows[0]
        notes.append(f"{len(windows)} matched row(s) sent another window (window_used), a slow "
                     f"pair's shrunk to keep to --max-time: {b.window_used} in {baseline_name}, "
                     f"{n.window_used} in {new_name} for "
                     f"{b.collective}{' pair ' + b.pair if b.pair else ''} at "
                     f"{format_size(b.size_bytes)}"
                     + (" and others" if len(windows) > 1 else ""))
    for name, side in ((baseline_name, 0), (new_name, 1)):
        wrong = sum(1 for pair in matched if not pair[side].check.startswith(("ok", "skipped")))
        if wrong:
            notes.append(f"{wrong} matched row(s) in {name} FAILED the result check")
    return notes


def comparability_warnings(baseline: RunResult, new: RunResult, baseline_name: str, new_name: str,
                           matched: list) -> list:
    return metadata_warnings(baseline, new, baseline_name, new_name) + \
        row_warnings(baseline, new, baseline_name, new_name, matched)
