"""Each measuring command has exactly its options: --help lists them, one that does not apply is
refused with the reason (one line, exit 2), and ``all`` takes every one a collective uses."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from collbench.benchmarks.registry import NAMES, ORDER

COMMON = {"--backend", "--np", "--iters", "--warmup", "--min-iters", "--max-time", "--precision",
          "--rounds",
          "--seed", "--shuffle", "--timing", "--output", "--results-dir", "--no-save", "--force",
          "--quiet",
          "--format", "--timeout", "--verbose", "--help", "--init-method", "--api",
          "--thread-level", "--bind"}
DATA = {"--sizes", "--dtype", "--check", "--buffers", "--payload", "--placement", "--pages",
        "--cache"}
SPLIT = {"--split", "--split-mask"}
#: the collectives that move data: their calls can go in groups
GROUPED = DATA | {"--coalesce"}
EXPECTED = {
    "allreduce": COMMON | SPLIT | GROUPED | {"--op"},
    "reduce": COMMON | SPLIT | GROUPED | {"--op", "--root"},
    "reduce_scatter": COMMON | SPLIT | GROUPED | {"--op"},
    "bcast": COMMON | SPLIT | GROUPED | {"--root"},
    "gather": COMMON | SPLIT | GROUPED | {"--root"},
    "scatter": COMMON | SPLIT | GROUPED | {"--root"},
    "allgather": COMMON | SPLIT | GROUPED,
    "alltoall": COMMON | SPLIT | GROUPED,
    "alltoallv": COMMON | SPLIT | GROUPED | {"--pattern"},
    "allgatherv": COMMON | SPLIT | GROUPED | {"--pattern"},
    "gatherv": COMMON | SPLIT | GROUPED | {"--pattern", "--root"},
    "scatterv": COMMON | SPLIT | GROUPED | {"--pattern", "--root"},
    "reduce_scatterv": COMMON | SPLIT | GROUPED | {"--pattern", "--op"},
    "barrier": COMMON | SPLIT,
    "pingpong": COMMON | DATA - {"--placement"} | {"--pair"},
    "bw": COMMON | DATA - {"--placement"} | {"--pair", "--window"},
    "bibw": COMMON | DATA - {"--placement"} | {"--pair", "--window"},
    "sendrecv": COMMON | SPLIT | DATA - {"--placement"},
    "all": COMMON | SPLIT | GROUPED | {"--op", "--root", "--pattern"},
}


def collbench(*args, cwd):
    return subprocess.run([sys.executable, "-m", "collbench", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60)


def _long_options(help_text: str) -> set:
    return {m.group(1) for m in re.finditer(r"^\s+(?:-\w, )?(--[\w-]+)", help_text, re.M)}


def test_every_benchmark_has_an_expected_option_set():
    assert set(EXPECTED) == set(NAMES) | {"all"}


@pytest.mark.parametrize("command", sorted(EXPECTED))
def test_help_lists_exactly_the_options_that_apply(command, tmp_path):
    proc = collbench(command, "--help", cwd=tmp_path)
    assert proc.returncode == 0
    assert _long_options(proc.stdout) == EXPECTED[command]
    assert "%%" not in proc.stdout and "-o, --output FILE" in proc.stdout


@pytest.mark.parametrize("command", ["allgather", "allgatherv", "gather", "gatherv", "scatter",
                                     "scatterv", "alltoall",
                                     "alltoallv", "reduce_scatter", "reduce_scatterv"])
def test_help_says_the_size_is_the_whole_array(command, tmp_path):
    text = " ".join(collbench(command, "--help", cwd=tmp_path).stdout.split())
    assert "whole array over all n ranks" in text and "per-rank column" in text


REFUSED = [
    (["barrier", "--op", "max"], "barrier takes no --op: it reduces nothing"),
    (["barrier", "-s", "1K-1M"], "barrier takes no --sizes: it moves no data"),
    (["barrier", "--dtype", "int64"], "barrier takes no --dtype: it moves no data"),
    (["barrier", "--root", "1"], "barrier takes no --root: it has no root rank"),
    (["barrier", "--no-check"], "barrier takes no --no-check: it moves no data"),
    (["allreduce", "--root", "1"], "allreduce takes no --root: it has no root rank"),
    (["allgather", "--op", "max"], "allgather takes no --op: it reduces nothing"),
    (["alltoall", "--root", "1"], "alltoall takes no --root: it has no root rank"),
    (["bcast", "--op", "max"], "bcast takes no --op: it reduces nothing"),
    (["gather", "--op=min"], "gather takes no --op: it reduces nothing"),
    (["scatter", "--op", "sum"], "scatter takes no --op: it reduces nothing"),
    (["reduce_scatter", "--root", "0"], "reduce_scatter takes no --root: it has no root rank"),
    (["pingpong", "--root", "1"], "pingpong takes no --root: it has no root rank"),
    (["pingpong", "--op", "max"], "pingpong takes no --op: it reduces nothing"),
    (["pingpong", "--window", "8"], "pingpong takes no --window: it has no window of messages"),
    (["sendrecv", "--pair", "0,1"], "sendrecv takes no --pair: every rank takes part"),
    (["allreduce", "--pair", "0,1"], "allreduce takes no --pair: every rank takes part"),
    (["all", "--window", "8"], "all takes no --window: it has no window of messages"),
    (["pingpong", "--pair", "1,1"],
     "Invalid value for '--pair': '1,1' names rank 1 twice; a pair is two different ranks"),
    (["bw", "--pair", "0;1"], "Invalid value for '--pair': '0;1' is not two ranks A,B (e.g. 0,1)"),
    (["bw", "--pair", "-1,2"],
     "Invalid value for '--pair': '-1,2' is not two ranks A,B (e.g. 0,1)"),
    (["bw", "--window", "0"], "Invalid value for '--window': 0 is not in the range 1<=x<=4096."),
    (["pingpong", "--pair", "0,5"], "--pair 0,5 is outside the world of 2 ranks (0..1)"),
]


@pytest.mark.parametrize("args,message", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_an_option_that_does_not_apply_is_refused_with_the_reason(args, message, tmp_path):
    proc = collbench(*args, "-n", "2", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"collbench: error: {message}"]
    assert proc.stdout == "" and not list(tmp_path.iterdir())        # nothing ran, nothing written


@pytest.mark.parametrize("args", [["barrier", "--op", "max", "--help"],
                                  ["gather", "--root", "1", "--op", "min", "-h"],
                                  ["bcast", "--help", "--op", "sum"],
                                  ["barrier", "-h", "--sizes", "1K"]])
def test_help_wins_over_an_option_that_does_not_apply(args, tmp_path):
    proc = collbench(*args, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith(f"Usage: collbench {args[0]} [OPTIONS]")


def test_help_after_the_end_of_options_is_not_help(tmp_path):
    proc = collbench("barrier", "--op", "max", "--", "--help", cwd=tmp_path)
    assert proc.returncode == 2 and "barrier takes no --op" in proc.stderr


def test_a_point_to_point_benchmark_needs_two_ranks(tmp_path):
    proc = collbench("pingpong", "-n", "1", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert (proc.stderr.strip().splitlines()
            == ["collbench: error: pingpong needs at least 2 ranks; 1 started"])


def test_an_unknown_option_is_still_clicks_one_line(tmp_path):
    proc = collbench("allreduce", "--bogus", cwd=tmp_path)
    assert (proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
            and "--bogus" in proc.stderr)


@pytest.mark.mpi
def test_all_applies_op_and_root_where_they_mean_something(tmp_path):
    proc = collbench("all", "-n", "2", "--sizes", "1K", "--op", "max", "--root", "1", "--dtype",
                     "int64",
                     "--iters", "3", "--warmup", "0", "--rounds", "1", "--no-shuffle", "-o",
                     "r.json", "-q",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import json

    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    ops = {r["collective"]: r["op"] for r in rows}
    assert ops["allreduce"] == ops["reduce"] == ops["reduce_scatter"] == "max"
    assert ops["bcast"] == ops["gather"] == ops["barrier"] == "none"
    # root 1 checked too
    assert {r["check"] for r in rows if r["collective"] != "barrier"} == {"ok"}


@pytest.mark.mpi
def test_barrier_runs_without_the_options_it_does_not_take(tmp_path):
    proc = collbench("barrier", "-n", "2", "--iters", "5", "--rounds", "1", "-o", "b.json",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "barrier · 2 ranks · latency · mpi" in proc.stdout and "float32" not in proc.stdout


def test_bare_collbench_prints_its_help_and_the_commands_in_full(tmp_path):
    proc = collbench(cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("Usage: collbench")
    text = " ".join(proc.stdout.split())
    assert "..." not in text.split("Commands:")[1]             # no description cut mid-sentence
    assert "exit 1 on a regression" in text
    commands = re.findall(r"^  (\w+)\s", proc.stdout.split("Commands:")[1], re.M)
    assert (commands[:len(NAMES)] == list(NAMES)
            and commands[len(NAMES):len(NAMES) + 3] == ["pairs", "all", "env"])
    assert list(ORDER) == [c for c in NAMES if c not in ("pingpong", "bw", "bibw", "sendrecv")]


def test_more_ranks_than_the_host_has_memory_for_are_refused_before_any_starts(tmp_path):
    proc = collbench("allreduce", "-n", "100000", "--sizes", "8", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("collbench: error: -n 100000: 100000 ranks on this host would need "
                           "about ")
    assert "fit here" in line and not list(tmp_path.iterdir())


@pytest.mark.parametrize("kind, text",
                         [("whole", "٢"), ("whole", "５"), ("whole", "1_0"), ("number", "٠.٥"),
                                        ("number", "1_0.5"), ("share", "٥٠%"), ("share", "0.5_0")])
def test_numbers_are_spelled_one_way_everywhere(kind, text):
    """-n ٢, --rounds ٢, --max-time ٠.٥ and 1_0 ran, while --sizes and CSV cells refused them."""
    import click

    from collbench.cli import params

    kinds = {"whole": params.Whole(min=1), "number": params.MAX_TIME, "share": params.SHARE}
    with pytest.raises(click.BadParameter) as info:
        kinds[kind].convert(text, None, None)
    assert "digits 0-9" in str(info.value)
    assert kinds[kind].convert({"whole": "12", "number": "0.5", "share": "50%"}[kind], None,
                               None) > 0
