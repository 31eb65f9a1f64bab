"""Writing a file safely: whole or not at all (a temporary file beside it, then a rename, so a
reader or a crash never sees half a file), and never over a device, a FIFO or a folder."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from collbench.errors import UsageError


def _file_mode() -> int:
    """What a plain open() would give (0666 less the umask); mkstemp's own 0600 is too strict."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_MODE = _file_mode()


_in_flight: set = set()      # temporary files being written now


def write_atomic(path: Path, data) -> None:
    """Write ``path`` (text or bytes) whole or not at all: a temporary file beside it, then a
    rename. An OSError names ``path`` (``filename``) whatever step failed."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
        _in_flight.add(tmp)
        os.fchmod(fd, _MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(exc, OSError):
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
        raise
    finally:
        _in_flight.discard(tmp)


def remove_partial() -> None:
    """Remove the temporary files of writes still under way: the process is ending (a signal
    thread calls this while the main thread may be inside ``write_atomic``)."""
    for tmp in list(_in_flight):
        try:
            os.unlink(tmp)
        except OSError:
            pass


#: what a path that is not a regular file is, as a line says it
NOT_FILES = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a pipe (FIFO)"),
             (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def refuse_special(path) -> None:
    """Refuse an output that exists and is not a regular file (a device such as /dev/null, a
    FIFO, a socket): a result is written to a temporary file and renamed over the output, which
    would put a file in the device's place (as root, /dev/null itself). --force does not change
    that."""
    try:
        mode = os.stat(path).st_mode
    except OSError:                     # not there (or a dangling link): a file will be made
        return
    if stat.S_ISDIR(mode):
        raise UsageError(f"output {str(path)!r} is a directory; give a file name")
    if not stat.S_ISREG(mode):
        kind = next((kind for test, kind in NOT_FILES if test(mode)), "not a regular file")
        raise UsageError(f"output {str(path)!r} is {kind}: collbench writes a result whole and "
                         "renames it into place, which would replace it; give a file name "
                         "(--no-save keeps no file)")


def check_writable_path(path, force: bool) -> Path:
    """Refuse, before anything is measured or drawn, a path we could not or must not write: a
    folder, a device or a FIFO (``refuse_special``), a file that exists (without ``force``), a
    folder missing or not writable."""
    path = Path(path)
    refuse_special(path)
    if path.exists() and not force:
        raise UsageError(f"output {str(path)!r} exists; use --force to overwrite it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"cannot write {str(path)!r}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write {str(path)!r}: folder {str(parent)!r} is not writable")
    return path
