"""The budget (--max-time, a round's share per size) for real: a window that would outlast it
shrinks once per run and stays so in every round, self-launched (each round a launch of its own,
the choice found again in the journal's rows) and under mpiexec (rounds inside one job); the
rows, the round records and the notes say so; files with the new columns read back, and files
whose figures contradict each other are refused. Over a slowed link between simulated hosts:
tests/test_multihost.py."""

import json

import pytest

from collbench.results.loader import load_result
from collbench.run.sweep import fitting_window
from conftest import cli, load_json, mpirun

pytestmark = pytest.mark.mpi

#: A 64 MiB message takes about 10 ms or more on any machine, beyond what a rank loses off a busy
#: core; a round's share of --max-time 0.1 over 2 rounds is 50 ms, half of it 25 ms: a window
#: of 64 such messages cannot stay whole, and one of 64 messages of 8 bytes (tens of µs each)
#: always can.
SLOW = ["bw", "--backend", "mpi", "--sizes", "8,64M", "--max-time", "0.1", "--rounds", "2",
        "--no-shuffle"]
BIG = 64 << 20


@pytest.mark.parametrize("window, first, each, most, expected", [
    (64, 0.001, 0.001, 0.1, 64),     # 64 ms: fits whole
    (64, 0.042, 0.042, 0.1, 2),      # 1 MiB at 200 Mbit/s: 2 fit in 100 ms
    (64, 1.0, 1.0, 0.1, 1),          # one message alone outlasts it: one still
    (48, 0.003, 0.003, 0.1, 32),     # not a power of two itself: the largest below that fits
    # a long round trip, small messages: the round trip is paid once
    (64, 0.005, 0.00001, 0.1, 64),
    (64, 0.05, 0.01, 0.1, 4),        # 50 ms for the first, 10 ms each next: 4 take 80 ms
    (1, 5.0, 5.0, 0.1, 1),
])
def test_a_window_shrinks_to_the_largest_power_of_two_that_fits(
        window, first, each, most, expected):
    assert fitting_window(window, first, each, most) == expected


def _shrunk_rows(doc: dict) -> list:
    big = [r for r in doc["rows"] if r["size_bytes"] == BIG]
    assert len(big) == 1
    return big


def _check_kept(doc: dict) -> None:
    (row,) = _shrunk_rows(doc)
    assert row["window"] == 64 and row["window_used"] < 64, row
    # the same each round
    assert [d.get("window") for d in row["round_details"]] == [row["window_used"]] * 2
    assert row["iterations"] == sum(d["iterations"] for d in row["round_details"])
    small = next(r for r in doc["rows"] if r["size_bytes"] == 8)
    assert small["window_used"] == 64 and all("window" not in d for d in small["round_details"])
    assert all(r["check"] == "ok" for r in doc["rows"])


def test_a_self_launched_run_shrinks_a_slow_window_once_and_keeps_it_in_every_round(run_dir):
    proc = cli([*SLOW, "-n", "2", "-o", "b.json", "-o", "b.csv"], run_dir, timeout=300,
               env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    doc = load_json(run_dir / "b.json")
    assert doc["metadata"]["settings"]["round_kind"] == "launch"
    _check_kept(doc)
    (row,) = _shrunk_rows(doc)
    assert f"window 64 shrunk to {row['window_used']} for 64M" in proc.stdout, proc.stdout
    assert all(len(line) <= 80 for line in proc.stdout.splitlines())
    csv = load_result(run_dir / "b.csv")          # the CSV keeps the row's columns
    (big,) = [r for r in csv.rows if r.size_bytes == BIG]
    assert big.window_used == row["window_used"] and big.rounds_short == row["rounds_short"]


def test_rounds_inside_one_job_keep_the_window_the_first_chose(run_dir):
    proc = mpirun(2, [*SLOW, "-o", "b.json", "-q"], run_dir, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = load_json(run_dir / "b.json")
    assert doc["metadata"]["settings"]["round_kind"] == "in-job"
    _check_kept(doc)


def test_fixed_iters_send_the_whole_window(run_dir):
    """--iters asks for a count, not a budget: nothing shrinks."""
    proc = cli(["bw", "-n", "2", "--backend", "mpi", "--sizes", "64M", "--iters", "2", "--warmup",
                "0",
                "--rounds", "1", "-o", "b.json", "-q"], run_dir, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (row,) = load_json(run_dir / "b.json")["rows"]
    assert row["window_used"] == 64 and row["rounds_short"] == 0 and row["iterations"] == 2


def test_a_slow_size_below_min_iters_says_so_in_its_row_and_notes(run_dir):
    proc = cli(["allreduce", "-n", "2", "--backend", "mpi", "--sizes", "8,64M", "--max-time",
                "0.02", "--rounds", "1",
                "--no-shuffle", "-o", "a.json"], run_dir, timeout=300, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    rows = {r["size_bytes"]: r for r in load_json(run_dir / "a.json")["rows"]}
    big = rows[64 << 20]
    assert (big["rounds_short"] == 1 and 1 <= big["iterations"] < 10
            and big["round_details"][0]["short"] is True)
    note = " ".join(proc.stdout.split()).split("fewer than --min-iters samples in a round for ")[1]
    assert "64M" in note.split(":")[0], proc.stdout


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> str:
    """One real run's file, which the tests below each read and alter a copy of."""
    folder = tmp_path_factory.mktemp("written")
    proc = cli([*SLOW, "-n", "2", "--rounds", "1", "-o", "w.json", "-q"], folder, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return (folder / "w.json").read_text()


def _written(run_dir, text: str) -> dict:
    (run_dir / "w.json").write_text(text)
    return load_json(run_dir / "w.json")


@pytest.mark.parametrize("column, value, said", [
    ("window_used", 65, "window_used (65) is more than window (64)"),
    ("window_used", 0, "bad value 0 in column window_used: less than 1"),
    ("rounds_short", 2, "rounds_short (2) is more than rounds (1)"),
])
def test_a_file_whose_window_or_short_rounds_contradict_the_row_is_refused(
        run_dir, written, column, value, said):
    doc = _written(run_dir, written)
    doc["rows"][0][column] = value
    (run_dir / "bad.json").write_text(json.dumps(doc))
    proc = cli(["report", "bad.json"], run_dir)
    assert (proc.returncode == 2 and proc.stderr.count("\n") == 1
            and said in proc.stderr), proc.stderr


def test_a_file_of_schema_6_reads_with_the_whole_window_and_no_short_round(run_dir, written):
    doc = _written(run_dir, written)
    doc["schema_version"] = 6
    for row in doc["rows"]:
        del row["window_used"], row["rounds_short"]
        for d in row["round_details"]:
            d.pop("window", None)
            d.pop("short", None)
    (run_dir / "old.json").write_text(json.dumps(doc))
    result = load_result(run_dir / "old.json")
    assert ({r.window_used for r in result.rows} == {64}
            and {r.rounds_short for r in result.rows} == {0})


def test_compare_says_when_matched_rows_sent_other_windows(run_dir, written):
    doc = _written(run_dir, written)
    (big,) = _shrunk_rows(doc)
    used = big["window_used"]
    big["window_used"] = 64
    for d in big["round_details"]:
        d.pop("window", None)
    (run_dir / "whole.json").write_text(json.dumps(doc))
    proc = cli(["compare", "whole.json", "w.json"], run_dir, env={"COLUMNS": "200"})
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode in (0, 1, 3), proc.stderr
    assert ("1 matched row(s) sent another window (window_used), a slow pair's shrunk to keep to "
            f"--max-time: 64 in whole.json, {used} in w.json for bw pair 0-1 at 64M") in said, said


@pytest.mark.parametrize("window, said", [(128, "sent windows of 128"), (3, "window_used says")])
def test_a_file_whose_rounds_sent_other_windows_than_its_row_says_is_refused(run_dir, written,
                                                                             window, said):
    doc = _written(run_dir, written)
    (big,) = _shrunk_rows(doc)
    big["round_details"][0]["window"] = window
    (run_dir / "bad.json").write_text(json.dumps(doc))
    proc = cli(["report", "bad.json"], run_dir)
    assert (proc.returncode == 2 and proc.stderr.count("\n") == 1
            and said in proc.stderr), proc.stderr


def test_merging_runs_that_sent_other_windows_says_so(run_dir, written):
    doc = _written(run_dir, written)
    (big,) = _shrunk_rows(doc)
    used = big["window_used"]
    doc["metadata"]["run_id"] = "other"
    big["window_used"] = 64
    for d in big["round_details"]:
        d.pop("window", None)
    (run_dir / "whole.json").write_text(json.dumps(doc))
    proc = cli(["merge", "w.json", "whole.json", "-o", "m.json"], run_dir)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stderr.split())
    assert (f"1 row(s) sent other windows in some of the runs (bw pair 0-1 at 67108864 B: "
            f"{used}, 64)" in said), said
    merged = load_result(run_dir / "m.json")         # what merge writes, its loader reads
    (row,) = [r for r in merged.rows if r.size_bytes == BIG]
    assert row.rounds == 2 and row.window_used == used
