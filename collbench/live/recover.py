"""Result files rebuilt from a run's journal, when rank 0 could not write them itself.

A rank 0 killed outright (SIGKILL, the kernel's out-of-memory killer) leaves files that may lag
the journal by the last few sizes (``files`` rewrites them on a schedule). Whoever outlives it
rebuilds them: the self-launching process after the launch ends, or its stand-in if it died
(``collbench.launch.self_launch.janitor``), or, under a user's launcher, rank 0's guardian (``python
-m collbench.live.recover FOLDER``, a process of its own, so the guardian stays small). Rebuilding
twice gives the same files.
"""

from __future__ import annotations

import sys
from pathlib import Path

from collbench.results.collector import Collector
from collbench.results.paths import remove_partial
from collbench.live.files import (OutputFailed, ResultFiles, release_half_claimed,
                                  release_stale_lock)
from collbench.launch.journal import Journal, claimed, release_claims, restore


#: What a rebuild that cannot be done raises: the files it was to write, or the journal itself.
FAILURES = (OutputFailed, OSError, ValueError, KeyError, TypeError)


def stale_temporaries(paths) -> list:
    """Temporary files of interrupted writes of ``paths`` (``.NAME.*.tmp`` beside each)."""
    found = []
    for path in map(Path, paths):
        found += list(path.parent.glob(f".{path.name}.*.tmp"))
    return found


def rebuild(folder, *, remove: bool = False) -> list:
    """Rewrite the result files named in the journal in ``folder`` from what it holds; returns
    their paths ([] when the run never got as far as claiming them). OutputFailed if one cannot
    be written. The folder goes afterwards when the run made it for itself, or with ``remove``
    (its owner, the self-launching process, is gone)."""
    journal = Journal.open(folder)
    journal.owned = remove
    if remove:                            # the run's owner is gone: so is its hold on the files
        for path in claimed(journal) or []:
            release_stale_lock(path)
        if claimed(journal) is None:      # killed while it claimed them
            release_half_claimed((e["path"], int(e["pid"])) for e in journal.of_type("claiming"))
    runs = journal.of_type("run")
    if not runs:
        release_claims(journal)
        journal.remove()
        return []
    collector = Collector(runs[0]["metadata"])
    paths = restore(journal, collector)
    if not paths:
        journal.remove()
        return []
    for tmp in stale_temporaries(paths):
        tmp.unlink(missing_ok=True)
    ResultFiles(paths).save(collector.run_result())
    remove_partial()
    journal.owned = remove or bool(journal.of_type("outputs")[0].get("journal_owned"))
    journal.remove()
    return paths


def main(argv: list) -> int:
    """``FOLDER [--remove]``: exit 0 when the files are whole, 2 (and one line) when not."""
    try:
        rebuild(argv[0], remove="--remove" in argv[1:])
    except FAILURES as exc:
        print(f"collbench: could not rebuild the result files from the journal in {argv[0]}: {exc}",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
