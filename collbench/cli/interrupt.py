"""The line a signal outside the run's own handling of signals gets (``errors.Interrupted``).

Only the standard library and collbench's small modules: it may run while Python is still
loading the rest of collbench.
"""

from __future__ import annotations

import os
import signal
import sys


def interrupted(signum: int) -> None:
    """A signal outside the run's own handling of signals (``Interrupted``): one line, said once
    for the job (by the self-launching process, or rank 0 under a user's launcher), and its exit
    code. Before any result file was claimed, nothing was saved."""
    from collbench import environment
    from collbench.launch.origin.launcher import detected_rank
    files = sys.modules.get("collbench.live.files")      # not loaded yet: nothing was claimed

    if not os.environ.get(environment.LAUNCHED) and detected_rank() == 0 and not _echo():
        saved = "" if files is not None and files.claimed_here else "; nothing was saved"
        sys.stderr.write(f"collbench: interrupted by {signal.Signals(signum).name}{saved}\n")
        sys.stderr.flush()
    sys.exit(128 + signum)


def _echo() -> bool:
    """Whether a guardian of this host's part of the job said why the job ends already: under
    ``srun --kill-on-bad-exit`` a rank that failed in start-up has its guardian's line, then
    srun ends rank 0 with SIGTERM, whose line would only echo it. (Not loaded yet: this process
    has no guardian's word to look for.)"""
    notes = sys.modules.get("collbench.launch.notes")
    return notes is not None and notes.spoken_here()
