"""Standard streams that cannot turn a run's outcome into a crash.

collbench's exit code means something (a regression, a wrong result, a timeout), so what
happens to its output must never change it:

* a **closed** stdin, stdout or stderr (``>&-``): the descriptor is reopened on /dev/null, so
  that the first file collbench opens does not become fd 1 and receive its prints;
* an encoding that cannot hold a character (``PYTHONIOENCODING=ascii``, a C locale): the text
  falls back to ASCII (µ as u, → as ->) instead of raising;
* a **broken pipe** (``collbench compare … | head -1``): what is left to print is dropped,
  quietly, and the command goes on to its own exit code. A pipe that closed is not a verdict.
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import sys

from collbench.results.render import STREAM_ERRORS

_ASCII = {"µ": "u", "±": "+/-", "→": "->", "←": "<-", "×": "x", "·": "-", "‡": "!", "†": "+", "–": "-",
          "—": "-", "≥": ">=", "≤": "<=", "½": "1/2", "α": "alpha", "β": "beta", "…": "...", "≈": "~",
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

    def __init__(self, stream) -> None:
        self._stream = stream
        self.broken = False

    def _guard(self, action):
        if self.broken:
            return None
        try:
            return action()
        except (BrokenPipeError, ConnectionResetError):
            self._give_up()
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.EBADF):
                raise
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

    def write(self, text: str) -> int:
        self._guard(lambda: self._stream.write(text))
        return len(text)

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


def _reopen_closed() -> None:
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, mode)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def _text_stream(current, fd: int):
    if current is None:          # Python leaves it None when the descriptor was closed at start
        current = open(fd, "w", encoding="utf-8", errors=ERRORS, closefd=False, buffering=1)
    else:
        try:
            current.reconfigure(errors=ERRORS)
        except (AttributeError, ValueError, io.UnsupportedOperation):
            pass
    return SafeStream(current)


def make_safe() -> None:
    """Set up stdin, stdout and stderr as described above; call once, first thing."""
    if isinstance(sys.stdout, SafeStream):
        return
    _reopen_closed()
    sys.stdout = _text_stream(sys.stdout, 1)
    sys.stderr = _text_stream(sys.stderr, 2)
