"""Standard streams that cannot turn a run's outcome into a crash.

collbench's exit code means something (a regression, a wrong result, a timeout), so what
happens to its output must never change it: a closed stream, an encoding that cannot hold a
character and a broken pipe are taken quietly. But a write to stdout that failed (a full disk,
an I/O error) lost what the user asked for: the command says so in one line and exits 2 where
it would have exited 0. On a terminal, collbench's own lines on stderr are wrapped between
words at its width. Each case, and why: docs/failures.md, "Output".
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import shutil
import sys
import textwrap
from typing import Callable, Optional

from collbench import environment
from collbench.render.console import STREAM_ERRORS

_ASCII = {"µ": "u", "±": "+/-", "→": "->", "←": "<-", "×": "x", "·": "-", "‡": "!", "†": "+",
          "–": "-",
          "—": "-", "≥": ">=", "≤": "<=", "½": "1/2", "α": "alpha", "β": "beta", "…": "...",
          "≈": "~",
          "−": "-", "²": "^2", "√": "sqrt", "Δ": "d", "‘": "'", "’": "'", "“": '"', "”": '"'}
ERRORS = STREAM_ERRORS        # render fits tables on what this handler writes


def _ascii_fallback(exc: UnicodeError):
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start:exc.end]
    return "".join(_ASCII.get(ch, "?") for ch in text), exc.end


codecs.register_error(ERRORS, _ascii_fallback)


class SafeStream(io.TextIOBase):
    """A text stream over another that swallows a broken pipe (and then drops everything
    after it) and never raises on an unencodable character."""

    def __init__(self, stream, wrap_width: Optional[Callable[[], Optional[int]]] = None) -> None:
        self._stream = stream
        self.broken = False
        self.failure: Optional[str] = None  # why a write failed (not a reader gone): a full disk
        self.asked: list = []               # the documents the user asked for on it (-f json …)
        self._wrap_width = wrap_width       # the width collbench's lines wrap at; None: as they are

    def _guard(self, action):
        if self.broken:
            return None
        try:
            return action()
        except (BrokenPipeError, ConnectionResetError):
            self._give_up()
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.EBADF):
                self.failure = exc.strerror or str(exc)
            self._give_up()
        except ValueError:          # the stream was closed under us
            self.broken = True
        return None

    def _give_up(self) -> None:
        """Nobody reads any more: point the descriptor at /dev/null, so that nothing (not even
        the interpreter's last flush) meets the broken pipe again."""
        self.broken = True
        try:
            fd = self._stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass

    def failed(self, why: str) -> None:
        """A write to the same descriptor by other means (a relay of bytes) failed: ``why``."""
        self.failure = self.failure or why

    def asked_for(self, what: str) -> None:
        """What is written next is ``what``, a document the user asked for (``outcome`` names
        it)."""
        if what not in self.asked:
            self.asked.append(what)

    def write(self, text: str) -> int:
        shown = self._wrapped(text) if self._wrap_width and "collbench:" in text else text
        self._guard(lambda: self._stream.write(shown))
        return len(text)

    def _wrapped(self, text: str) -> str:
        width = self._wrap_width()
        if not width:
            return text
        lines = []
        for line in text.split("\n"):
            lead = len(line) - len(line.lstrip("\r"))
            if line[lead:].startswith("collbench:") and len(line) - lead > width:
                line = line[:lead] + "\n".join(textwrap.wrap(line[lead:], width,
                                                             break_on_hyphens=False))
            lines.append(line)
        return "\n".join(lines)

    def flush(self) -> None:
        self._guard(self._stream.flush)

    def isatty(self) -> bool:
        return bool(self._guard(self._stream.isatty))

    def fileno(self) -> int:
        return self._stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:
        return self._stream.encoding

    @property
    def errors(self) -> str:
        return ERRORS

    @property
    def buffer(self):
        """Bytes go to the same descriptor; writers of bytes guard themselves."""
        return self._stream.buffer


#: the descriptors that were closed when collbench started (reopened on /dev/null)
_closed_at_start: set = set()


def asked_for(what: str) -> None:
    """Standard output is about to get ``what`` (a document the user asked for with -f)."""
    mark = getattr(sys.stdout, "asked_for", None)
    if mark is not None:
        mark(what)


def outcome(code: int) -> int:
    """The exit code once standard output is flushed: what could not be written there that the
    user asked for is one line on stderr, and exit 2 in place of 0 or of 3 (a gate undecided:
    its answer is in the lost output too); a regression's 1 stands."""
    out = sys.stdout
    if not isinstance(out, SafeStream):
        return code
    out.flush()
    what = " and ".join(out.asked) or "the output"
    if out.failure:
        problem = (f"could not write {what} to standard output ({out.failure}); what reached it "
                   "is incomplete")
    elif 1 in _closed_at_start and out.asked:
        problem = f"standard output is closed: {what} went nowhere"
    else:
        return code
    print(f"collbench: error: {problem}", file=sys.stderr)
    return 2 if code in (0, 3) else code


def _reopen_closed() -> None:
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            _closed_at_start.add(fd)
            null = os.open(os.devnull, mode)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def _stderr_columns() -> int:
    """``COLUMNS`` (which a launching collbench sets for its ranks), else stderr's terminal."""
    try:
        return os.get_terminal_size(2).columns if environment.COLUMNS not in os.environ else \
            shutil.get_terminal_size().columns
    except OSError:
        return shutil.get_terminal_size().columns


def _messages_width() -> Callable[[], Optional[int]]:
    """The width collbench's lines on stderr wrap at: the user's terminal's, when they reach
    one (looked up once; the width itself follows the terminal's size); None otherwise."""
    seen: list = []

    def width() -> Optional[int]:
        if not seen:
            try:
                from collbench.launch.origin.terminal import user_terminals

                seen.append(user_terminals())
            # no room left to load the module (ulimit -v) while a line about that is said
            except (OSError, ValueError, MemoryError, ImportError):
                seen.append(None)
        if seen[0] is None or not seen[0].stderr:
            return None
        return seen[0].columns or _stderr_columns()

    return width


def _text_stream(current, fd: int, wrap_width=None):
    if current is None:          # Python leaves it None when the descriptor was closed at start
        current = open(fd, "w", encoding="utf-8", errors=ERRORS, closefd=False, buffering=1)
    else:
        try:
            current.reconfigure(errors=ERRORS)
        except (AttributeError, ValueError, io.UnsupportedOperation):
            pass
    return SafeStream(current, wrap_width)


def make_safe() -> None:
    """Set up stdin, stdout and stderr as described above; call once, first thing."""
    if isinstance(sys.stdout, SafeStream):
        return
    _reopen_closed()
    sys.stdout = _text_stream(sys.stdout, 1)
    sys.stderr = _text_stream(sys.stderr, 2, _messages_width())
