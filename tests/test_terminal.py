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

from conftest import tmp_of_its_own
from terminal_helpers import read_rest

pyte = pytest.importorskip("pyte")


def _on_terminal(args, cwd, columns=80, rows=40, timeout=180, *, command=None,
                 interrupt_at=None) -> tuple:
    """(exit code, the lines as a terminal shows them, the bytes written) of ``collbench ARGS``
    (or of ``command``, a shell line) on a pseudo-terminal of that size; ``interrupt_at``:
    bytes after which Ctrl-C is typed (as the terminal's own character, to the foreground)."""
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}"

    def controlling_terminal():           # Ctrl-C reaches the job as it does from a shell
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    argv = ["bash", "-c", command] if command else [sys.executable, "-m", "collbench", *args]
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=secondary, stdout=secondary,
                            stderr=secondary, preexec_fn=controlling_terminal)
    os.close(secondary)
    seen = b""
    if interrupt_at is not None:
        while interrupt_at not in seen and proc.poll() is None:
            seen += read_rest(primary, proc, 5, quiet_for=5)
            if len(seen) > 10_000_000:
                break
        os.write(primary, b"\x03")
    seen += read_rest(primary, proc, timeout)
    proc.wait(timeout=30)
    os.close(primary)
    # wide: a line the program made too long shows as such
    screen = pyte.Screen(columns * 3, 3000)
    stream = pyte.ByteStream(screen)
    stream.feed(seen.replace(b"\n", b"\r\n") if b"\r\n" not in seen else seen)
    lines = [line.rstrip() for line in screen.display]
    while lines and not lines[-1]:
        lines.pop()
    return proc.returncode, lines, seen


@pytest.mark.mpi
def test_a_run_on_an_80_column_terminal_never_draws_a_line_past_80(tmp_path):
    # the smallest and the widest figures, and one between: every table's columns at their widest
    code, lines, _ = _on_terminal(["all", "-n", "2", "--backend", "mpi,mpi-pickle", "--sizes",
                                   "8,512,64K", "--iters", "20", "--warmup", "1", "--rounds", "2"],
                                  tmp_path)
    assert code == 0, "\n".join(lines)
    too_long = [line for line in lines if len(line) > 80]
    assert not too_long, "\n".join(too_long)
    text = "\n".join(lines)
    assert text.count("mpi-pickle") >= 9 and "/mpi" in text              # side by side, ratio shown
    # allgather & co: each rank's part
    assert "per rank" in text
    assert "avg bus bandwidth" in text and "not shown at 80 columns" in text
    # the bar is gone at the end
    assert "sizes" not in text.split("wrote")[-1] or "left" not in text
    # the default files' names are long: each has a line of its own rather than one wrapped line
    assert (lines[-2].startswith("collbench: wrote results/collbench-")
            and lines[-2].endswith(".json"))
    assert (lines[-1].startswith("collbench: wrote results/collbench-")
            and lines[-1].endswith(".csv"))
    # said once, not per table
    for note in ("every result checked: ok", "not shown at 80 columns: count"):
        assert text.count(note) <= 1, text


@pytest.mark.mpi
def test_under_a_users_mpiexec_on_a_terminal_tables_fit_it_and_progress_shows(tmp_path):
    """The ranks write through mpiexec's pipes: the terminal is mpiexec's, and its width counts."""
    from collbench.launch.self_launch.mpiexec import find_mpiexec

    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    code, lines, seen = _on_terminal([], tmp_path,
                                     command=f"{mpiexec} -n 2 {sys.executable} -m collbench all "
                                             "-b mpi --sizes 8,512,64K --rounds 2 --max-time 0.2")
    text = "\n".join(lines)
    assert code == 0, text
    assert not [line for line in lines if len(line) > 80], text
    assert text.count("· 2 ranks ·") >= 9 and "not shown at 80 columns" in text
    assert b"sizes" in seen and b"left" in seen          # the progress bar was drawn (and is gone)
    assert "sizes" not in text.split("wrote")[-1]
    # stdout into a file, stderr on the terminal: the file gets every column, plain, as before
    code, lines, _ = _on_terminal([], tmp_path,
                                  command=f"{mpiexec} -n 2 {sys.executable} -m collbench allreduce "
                                          "-b mpi --sizes 8-1K --rounds 2 > out.txt")
    written = (tmp_path / "out.txt").read_text()
    assert code == 0 and "\x1b" not in written and "max µs" in written and "p95 µs" in written
    assert max(len(line) for line in written.splitlines()) > 80


def test_compare_at_80_columns_titles_each_setup(tmp_path):
    from results_helpers import run_of, sweep, write

    series = {(c, b, s): v for (_, _, s), v in sweep().items() for c in ("allreduce", "bcast")
              for b in ("mpi", "gloo")}
    base, new = write(run_of(series, seed=1), tmp_path / "a.json"), write(run_of(series, seed=2),
                                                                          tmp_path / "b.json")
    # the files by their names: a path past 80 columns cannot be wrapped (the tables can)
    code, lines, _ = _on_terminal(["compare", base.name, new.name], tmp_path)
    text = "\n".join(lines)
    assert code in (0, 1) and not [line for line in lines if len(line) > 80], text
    titles = [line for line in lines if line.endswith("· 2 ranks · latency")]
    assert sorted(titles) == ["allreduce · gloo · float32 sum · 2 ranks · latency",
                              "allreduce · mpi · float32 sum · 2 ranks · latency",
                              "bcast · gloo · float32 · 2 ranks · latency",
                              "bcast · mpi · float32 · 2 ranks · latency"]
    first = lines.index(titles[0])
    assert "size" in lines[first + 2] and "change" in lines[first + 2] and "collective" not in text
    assert text.count("max-T") == 1                     # the method, said once under the last table


@pytest.mark.mpi
def test_ctrl_c_on_a_terminal_says_so_on_a_line_of_its_own_and_leaves_no_launcher_file(tmp_path):
    """MPICH's mpiexec keeps a file in /tmp while it runs (hydra_hwloc_xmlfile_*) that only its
    own ending removes. As root the job sees /tmp through an overlay of its own (a mount
    namespace), so that what it writes there lands in a folder of its own, where the files of
    jobs beside it, the suite's other workers' among them, cannot be taken for its own."""
    import glob
    import shutil
    import time

    args = ["all", "-n", "2", "-b", "mpi", "--sizes", "8-64M", "--rounds", "5"]
    layer, command = tmp_of_its_own(args, tmp_path)
    try:
        started = time.time()
        code, lines, seen = _on_terminal(args, tmp_path, command=command, interrupt_at=b"sizes")
        text = "\n".join(lines)
        assert code == 130, text
        said = [i for i, line in enumerate(lines) if "interrupted by SIGINT" in line]
        # not after the bar
        assert said and lines[said[0]].startswith("collbench: interrupted by SIGINT"), text
        assert not [line for line in lines if len(line) > 80], text      # wrapped between words
        assert all(not line.endswith(("fini", "finishe")) for line in lines)
        time.sleep(1.0)
        if layer:
            written = sorted(os.listdir(layer / "upper"))
            assert written, "the job wrote nothing in /tmp: the overlay was not its /tmp"
            assert not [n for n in written if n.startswith("hydra_hwloc_xmlfile_")], written
            return
    finally:
        if layer:
            shutil.rmtree(layer, ignore_errors=True)

    def written_since(path) -> bool:
        try:
            return os.stat(path).st_mtime >= started
        except OSError:                   # another job's, gone meanwhile
            return False

    others = subprocess.run(["pgrep", "-x", "mpiexec"], capture_output=True,
                            text=True).stdout.split()
    if others:                            # another job's mpiexec may own a file written meanwhile
        pytest.skip(f"other mpiexec processes run on this host ({len(others)}): the files cannot "
                    "be told apart")
    left = [p for p in glob.glob("/tmp/hydra_hwloc_xmlfile_*") if written_since(p)]
    assert not left, left


@pytest.mark.mpi
def test_ctrl_c_under_a_users_mpiexec_on_a_terminal_ends_the_bar_before_the_line(tmp_path):
    """Here rank 0 says the line itself, while its bar holds stderr (rich redirects it): the line
    went out unwrapped (150 characters), the bar was drawn again under it and the cursor stayed
    hidden."""
    from collbench.launch.self_launch.mpiexec import find_mpiexec
    from collbench.launch.self_launch.relay import Relay

    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    code, lines, seen = _on_terminal([], tmp_path, interrupt_at=b"sizes",
                                     command=f"{mpiexec} -n 2 {sys.executable} -m collbench all "
                                             "-b mpi --sizes 8-64M --rounds 5")
    text = "\n".join(lines)
    # 9: MPICH's mpiexec killed a rank on its way out, at times (test_sigint_under_mpiexec)
    assert code in (130, 9), text
    ours = [i for i, line in enumerate(lines) if line.startswith("collbench:")]
    assert len(ours) == 1 and lines[ours[0]].startswith("collbench: interrupted by SIGINT"), text
    # mpiexec's own lines come before it (after the ^C), and its banner may follow
    banner = tuple(noise.decode() for noise in Relay.NOISE)
    after = [line for line in lines[ours[0]:] if not line.startswith(banner)]
    assert not [line for line in after if len(line) > 80], text          # wrapped between words
    assert "sizes" not in "\n".join(after), text                          # the bar is gone
    assert seen.rfind(b"\x1b[?25h") > seen.rfind(b"\x1b[?25l")            # the cursor is back


def test_a_progress_label_too_long_keeps_the_size_being_measured():
    from collbench.live.progress import shorten

    label = "round 1/5 · allreduce on mpi-pickle at 8"
    assert shorten(label, 60) == label
    assert shorten(label, 30) == "1/5 · allreduce on mpi-p… at 8"
    assert all(shorten(label, room).endswith(" at 8") and len(shorten(label, room)) <= room
               for room in range(12, 40))
    assert len(shorten(label, 8)) <= 8


def test_the_bar_ends_each_round_even_where_a_size_gave_no_row():
    """A size skipped for memory or past the time budget adds no row; the round's end still
    brings the bar to it, so that the next round starts from its own beginning."""
    import io

    from rich.console import Console

    from collbench.live.progress import ProgressBar

    console = Console(file=io.StringIO(), force_terminal=True, width=80)
    bar = ProgressBar(console, total=8, done=0, steps=4, rounds_left=1, earlier_rounds=[])
    try:
        for _ in range(3):                 # one of the round's four sizes gave no row
            bar.advance()
        bar.round_done(1.0)
        assert bar.progress.tasks[0].completed == 4
        for _ in range(4):
            bar.advance()
        bar.round_done(1.0)
        assert bar.progress.tasks[0].completed == 8
    finally:
        bar.stop()
