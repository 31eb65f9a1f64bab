"""What a user sees on an 80-column terminal: a real run on a pseudo-terminal of that size,
its output played on a terminal emulator (pyte) wide enough to show any line that would wrap."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from terminal_helpers import read_rest

pyte = pytest.importorskip("pyte")


def _on_terminal(args, cwd, columns=80, rows=40, timeout=180) -> tuple:
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen([sys.executable, "-m", "collbench", *args], cwd=cwd, env=env, stdin=secondary,
                            stdout=secondary, stderr=secondary, start_new_session=True)
    os.close(secondary)
    seen = read_rest(primary, proc, timeout)
    proc.wait(timeout=30)
    os.close(primary)
    screen = pyte.Screen(columns * 3, 3000)       # wide: a line the program made too long shows as such
    stream = pyte.ByteStream(screen)
    stream.feed(seen.replace(b"\n", b"\r\n") if b"\r\n" not in seen else seen)
    lines = [line.rstrip() for line in screen.display]
    while lines and not lines[-1]:
        lines.pop()
    return proc.returncode, lines


@pytest.mark.mpi
def test_a_run_on_an_80_column_terminal_never_draws_a_line_past_80(tmp_path):
    code, lines = _on_terminal(["all", "-n", "2", "--backend", "mpi,mpi-pickle", "--sizes", "8-64K", "--iters", "20",
                                "--warmup", "1", "--rounds", "2"], tmp_path)
    assert code == 0, "\n".join(lines)
    too_long = [line for line in lines if len(line) > 80]
    assert not too_long, "\n".join(too_long)
    text = "\n".join(lines)
    assert text.count("mpi-pickle") >= 9 and "/mpi" in text              # side by side, ratio shown
    assert "per rank" in text                                              # allgather & co: each rank's part
    assert "avg bus bandwidth" in text and "not shown at 80 columns" in text
    assert "sizes" not in text.split("wrote")[-1] or "left" not in text     # the bar is gone at the end
    # the default files' names are long: each has a line of its own rather than one wrapped line
    assert lines[-2].startswith("collbench: wrote results/collbench-") and lines[-2].endswith(".json")
    assert lines[-1].startswith("collbench: wrote results/collbench-") and lines[-1].endswith(".csv")
