"""collbench ab: two setups interleaved in one job, and compare on the pairs it leaves."""

import dataclasses
import json
import math

import numpy as np
import pytest

from collbench.analysis import compare_render
from collbench.analysis.compare import compare_runs
from collbench.results.loader import load_result
from collbench.run.interleaved import pair_orders, parse_assignments
from collbench.errors import UsageError
from conftest import cli
from results_helpers import metadata, run_of, sweep

SERIES = sweep(sizes=(8, 64, 512, 4096, 32768), backends=("mpi", "mpi-pickle"))


@pytest.mark.parametrize("args, says", [
    (["--", "compare", "a.json", "b.json"], "needs a measuring command"),
    (["--", "nonsense"], "needs a measuring command"),
    (["--", "allreduce", "-o", "x.json"], "-o in the measured command"),
    (["--", "allreduce", "--seed", "3"], "--seed in the measured command"),
    (["--b-env", "1X=2", "--", "allreduce"], "bad --b-env"),
    (["--b-env", "NOVALUE", "--", "allreduce"], "bad --b-env"),
    (["--a-label", "x", "--b-label", "x", "--", "allreduce"], "different names"),
    (["--a-label", "a/b", "--", "allreduce"], "bad side label"),
    (["--b-python", "/nonexistent/python", "--", "allreduce"], "--b-python /nonexistent/python"),
    (["--", "allreduce", "--sizes", "1X"], "size"),
    (["--", "pairs", "--pair", "0,1"], "--pair"),
    (["--", "pairs", "--window", "4"], "--window applies to --metric bw only"),
])
def test_bad_input_is_one_line_and_exit_2(args, says, run_dir):
    proc = cli(["ab", *args], run_dir)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in proc.stderr


def test_pairs_runs_as_any_measuring_command(run_dir):
    """ab -- pairs -n 2 failed with AttributeError in parse_sizes, and KeyError 'pair' with
    --sizes."""
    proc = cli(["ab", "-o", "pp", "--", "pairs", "-n", "2", "--sizes", "8", "--rounds", "2",
                "--iters", "20"], run_dir)
    assert proc.returncode in (0, 3), proc.stderr
    assert "Traceback" not in proc.stderr
    rows = [load_result(run_dir / f"pp-{side}.json").rows for side in "ab"]
    assert [r.pair for r in rows[0]] == [r.pair for r in rows[1]] == ["0-1"]


def test_bad_input_leaves_no_results_folder_behind(run_dir):
    proc = cli(["ab", "--", "allreduce", "--sizes", "1X"], run_dir)
    assert proc.returncode == 2 and not (run_dir / "results").exists()


def test_without_a_prefix_the_files_go_to_a_results_folder_made_as_a_plain_run_makes_it(run_dir):
    proc = cli(["ab", "-q", "--", "allreduce", "-n", "2", "--sizes", "8", "--iters", "10",
                "--warmup", "1",
                "--rounds", "1"], run_dir, timeout=180)
    assert proc.returncode in (0, 1, 3), proc.stderr
    made = sorted(p.name for p in (run_dir / "results").iterdir())
    assert (len(made) == 2 and made[0].startswith("ab-") and made[0].endswith("-a.json")
            and made[1].endswith("-b.json"))


def test_assignments_and_pair_orders():
    assert (parse_assignments(["A=1", "B_2=x=y", "C="], "--a-env")
            == {"A": "1", "B_2": "x=y", "C": ""})
    with pytest.raises(UsageError):
        parse_assignments(["=1"], "--a-env")
    orders = pair_orders(40, seed=7)
    # reproducible, both sides lead
    assert orders == pair_orders(40, seed=7) and set(orders) == {0, 1}


def test_a_real_job_interleaves_the_sides_and_compare_judges_the_pairs(run_dir):
    # --max-rounds 4: the four pairs asked for and no more, judged once, as compare judges them
    # after
    proc = cli(["ab", "--b-env", "COLLBENCH_AB_TEST=1", "--b-label", "other", "-o", "job", "--seed",
                "11",
                "--turns", "launch", "--max-rounds", "4", "--",
                "allreduce", "-n", "2", "--sizes", "8,1K", "--iters", "20", "--warmup", "1",
                "--rounds", "4"],
               run_dir, timeout=300)
    assert proc.returncode in (0, 1, 3), proc.stderr
    assert "pair 1/4" in proc.stderr and "wrote job-a.json and job-other.json" in proc.stderr
    a, b = (json.loads((run_dir / name).read_text()) for name in ("job-a.json", "job-other.json"))
    assert a["metadata"]["ab"]["job"] == b["metadata"]["ab"]["job"]
    assert (a["metadata"]["ab"]["side"], b["metadata"]["ab"]["side"]) == ("A", "B")
    assert (b["metadata"]["ab"]["differs"] == "COLLBENCH_AB_TEST=1"
            and a["metadata"]["ab"]["differs"] == "as given")
    turns_a = {r["round"]: r["ab_turn"] for r in a["metadata"]["rounds"]}
    turns_b = {r["round"]: r["ab_turn"] for r in b["metadata"]["rounds"]}
    assert sorted(turns_a) == sorted(turns_b) == [1, 2, 3, 4]
    assert all({turns_a[n], turns_b[n]} == {0, 1} for n in turns_a)            # one after the other
    # A went first where it drew 0
    assert [turns_a[n] for n in range(1, 5)] == pair_orders(4, seed=11)
    assert [r["order"] for r in a["metadata"]["rounds"]] == [r["order"] for r
                                                             in b["metadata"]["rounds"]]
    c = compare_runs(load_result(run_dir / "job-a.json"), load_result(run_dir / "job-other.json"))
    assert (c.drift_source.startswith("none")
            and {r.noise for r in c.rows if r.noise} <= {"paired", "both"})
    again = cli(["compare", "job-a.json", "job-other.json", "--format", "json"], run_dir)
    assert (again.returncode == proc.returncode
            and "took turns in one job" in json.loads(again.stdout)["drift_source"])


def _job(result, job: str, side: str):
    result.metadata["ab"] = {"job": job, "side": side}
    return result


def test_pairs_cancel_what_moved_the_machine_during_the_job():
    """Rounds that move by 20% together (one machine state per pair, shared by both sides): as
    one job, a 15% slowdown is seen on the pairs; the same files as separate runs cannot see it
    through the drift that a stored baseline must allow for."""
    def side(scale, job):
        # the same launch effects
        run = run_of(SERIES, seed=4, rounds=8, launch_sd=0.2, scale=scale)
        run.metadata.update(metadata(rounds=[{"round": r + 1, "load": {"busy": False}}
                                             for r in range(8)]))
        return _job(run, job, "A") if job else run

    paired = compare_runs(side(1.0, "j1"), side(1.15, "j1"), threshold=0.05)
    assert ({r.verdict for r in paired.rows} == {"slower"}
            and {r.noise for r in paired.rows} == {"paired"})
    assert all(r.ratio == pytest.approx(1.15, rel=0.03) for r in paired.rows)
    apart = compare_runs(side(1.0, None), side(1.15, None), threshold=0.05)
    assert not apart.regression
    for r in paired.rows:
        assert math.isfinite(r.change_low) and r.change_low > 0.05


def test_two_backends_are_matched_across():
    a = run_of({k: v for k, v in SERIES.items() if k[1] == "mpi"}, seed=1)
    b = run_of({("allreduce", "mpi-pickle", s): v * 3 for (_, be, s), v in SERIES.items()
                if be == "mpi"}, seed=2)
    c = compare_runs(a, b)
    assert c.regression and {r.verdict for r in c.rows} == {"slower"}
    assert any("matched across the two backends" in w for w in c.warnings)
    assert np.allclose([r.ratio for r in c.rows], 3.0, rtol=0.1)
    assert {r.field("backend") for r in c.rows} == {"mpi → mpi-pickle"}
    assert ("allreduce/mpi → mpi-pickle"
            in compare_render.noisy_line(dataclasses.replace(c, rows=tuple(
                dataclasses.replace(r, verdict="inconclusive", detectable=0.5) for r in c.rows))))


def test_force_overwrites_an_earlier_jobs_files_and_without_it_they_are_kept(run_dir):
    """A second ab with the same -o and --force measures again into the same files; without
    --force it is refused before anything starts, the earlier files untouched."""
    job = ["-o", "again", "--seed", "3", "--", "allreduce", "-n", "2", "--sizes", "8", "--iters",
           "5", "--warmup",
           "1", "--rounds", "1"]
    first = cli(["ab", "-q", "--force", *job], run_dir, timeout=180)
    assert first.returncode in (0, 1, 3), first.stderr
    ids = [json.loads((run_dir / f"again-{x}.json").read_text())["metadata"]["run_id"]
           for x in "ab"]
    second = cli(["ab", "-q", "--force", *job], run_dir, timeout=180)
    assert second.returncode in (0, 1, 3), second.stderr
    again = [json.loads((run_dir / f"again-{x}.json").read_text())["metadata"]["run_id"]
             for x in "ab"]
    assert not set(ids) & set(again)
    refused = cli(["ab", "-q", *job], run_dir)
    assert refused.returncode == 2 and "exists; use --force" in refused.stderr
    assert [json.loads((run_dir / f"again-{x}.json").read_text())["metadata"]["run_id"]
            for x in "ab"] == again


def _second_turn_started(prefix: str) -> bool:
    """A process of the second side of a pair of the ab job writing ``prefix``-*.json runs (its
    environment says turn 1)."""
    import os
    from pathlib import Path

    from collbench import environment

    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if (prefix.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
                    and f"{environment.AB_TURN}=1".encode()
                    in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")):
                return True
        except OSError:
            continue
    return False


@pytest.mark.mpi
def test_a_signal_in_the_second_side_of_a_pair_says_what_each_file_keeps(run_dir):
    """SIGINT while side b measured pair 1, after side a had finished it: "interrupted by SIGINT;
    nothing was saved" and "no pair was completed", while the other side's file held its round.
    Then each side said "interrupted" besides ab's own line (an adversarial pass, 3 of 4 jobs):
    now ab alone says it, in one line with what each file keeps."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if k not in ("PMI_RANK", "PMI_SIZE", "RANK",
                                                            "WORLD_SIZE")}
    prefix = f"sig{os.getpid()}"
    proc = subprocess.Popen([sys.executable, "-m", "collbench", "ab", "-o", prefix, "--turns",
                             "launch", "--",
                             "allreduce", "-n", "2",
                             "--sizes", "8-64K", "--rounds", "2"], cwd=run_dir, env=env,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    first = []
    while not first and time.monotonic() < deadline and proc.poll() is None:
        # the first side's launch has ended: its round is whole
        if _second_turn_started(prefix):
            first = [side for side in "ab" if (run_dir / f"{prefix}-{side}.json").exists()]
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    said = [line for line in err.splitlines()
            if line.startswith("collbench") and "pair 1/" not in line][1:]
    second = "b" if first == ["a"] else "a"
    cut = f"; {prefix}-{second}.json keeps what pair 1 measured"     # had it measured any size
    assert said == ["collbench ab: interrupted by SIGINT in pair 1 of 2; no pair was completed; "
                    f"{prefix}-{first[0]}.json keeps {first[0]}'s round 1"
                    + (cut if (run_dir / f"{prefix}-{second}.json").exists() else "")], err


@pytest.mark.mpi
def test_a_signal_to_ab_in_its_second_pair_is_one_line_for_both_sides(run_dir):
    """SIGTERM to the ab process while both sides measured pair 2, size by size: each side's
    rank 0 said "interrupted by SIGTERM; …-a.json keeps round 1 and what round 2 measured", then
    ab said "stopped in pair 2 of 4 (a)", three lines (an adversarial pass, 3 of 4). Now ab
    alone says it, and both files keep pair 1."""
    import os
    import signal
    import subprocess
    import sys
    import threading

    env = {k: v for k, v in os.environ.items() if k not in ("PMI_RANK", "PMI_SIZE", "RANK",
                                                            "WORLD_SIZE")}
    prefix = f"term{os.getpid()}"
    proc = subprocess.Popen([sys.executable, "-m", "collbench", "ab", "-o", prefix, "--",
                             "allreduce", "-n", "2", "--sizes", "8-64K", "--iters", "200",
                             "--rounds", "3"], cwd=run_dir, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    lines: list = []
    second = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if "pair 2/3" in line:
                second.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert second.wait(60), lines
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    reader.join(10)
    said = [line for line in lines if " pair" not in line.split(":")[1][:6]][1:]
    assert proc.returncode == 143 and len(said) == 1, lines
    files = f"{prefix}-a.json and {prefix}-b.json"
    assert said[0] in (f"collbench ab: interrupted by SIGTERM in pair 2 of 3; {files} keep the "
                       f"pairs before it{tail}" for tail in ("", " and what pair 2 measured")), said
    for side in "ab":       # every size of pair 1
        rows = json.loads((run_dir / f"{prefix}-{side}.json").read_text())["rows"]
        assert len(rows) == 14 and all(row["rounds"] >= 1 for row in rows), rows


# Pairs added where rows are undecided (ab --max-rounds).

def test_the_looks_double_from_the_rounds_asked_for_to_the_most_allowed():
    from collbench.run.interleaved import looks

    assert looks(10, 40) == [10, 20, 40]
    assert looks(10, 25) == [10, 20, 25]
    assert looks(10, 10) == [10]
    assert looks(1, 4) == [1, 2, 4]


def _look(verdicts: dict, needed=None, cause="rounds", strict=False, unjudged=0):
    """A comparison as _more_pairs reads it: rows with a verdict, and what the undecided need."""
    from types import SimpleNamespace

    rows = [SimpleNamespace(verdict=v, rounds_needed=needed, cause=cause)
            for v, k in verdicts.items() for _ in range(k)]
    left = [r for r in rows if r.verdict == "inconclusive"]
    return SimpleNamespace(undecided=left, regression="slower" in verdicts, alpha=0.05 / 3,
                           unjudged=[0] * unjudged,
                           allow_missing=False, decided=len(rows) - len(left), compared=rows,
                           min_decided=0.8, fail_on_inconclusive=strict)


@pytest.mark.parametrize("look, done, adds, says", [
    (_look({"same": 7, "inconclusive": 3}, needed=18), 10, 10, "3 undecided: 10 more pairs"),
    (_look({"same": 7, "inconclusive": 3}, needed=30), 20, 20, "3 undecided: 20 more pairs"),
    (_look({"same": 7, "inconclusive": 3}, needed=60), 10, 0,
     "the 3 undecided need more than 40 pairs"),
    (_look({"same": 7, "inconclusive": 3}, needed=None), 10, 0, "need more than 40 pairs"),
    (_look({"same": 7, "inconclusive": 3}, needed=None, cause="pairs"), 10, 10, "10 more pairs"),
    (_look({"same": 10}), 10, 0, "every row is decided"),
    (_look({"same": 8, "inconclusive": 2}, needed=18), 10, 0, "enough are (--min-decided 80%)"),
    (_look({"same": 9, "inconclusive": 1}, needed=18, strict=True), 10, 10,
     "1 undecided: 10 more pairs"),
    (_look({"slower": 1, "inconclusive": 9}, needed=12), 10, 10, "9 undecided: 10 more pairs"),
    (_look({"slower": 8, "inconclusive": 2}, needed=12), 10, 0, "enough are"),
    (_look({"same": 5, "inconclusive": 5}, needed=12, unjudged=1), 10, 0,
     "rows the new side lacks"),
    # the last look: nothing is judged
    (_look({"same": 7, "inconclusive": 3}, needed=18), 40, 0, None),
])
def test_pairs_are_added_only_where_an_undecided_row_can_still_be_decided(
        look, done, adds, says, capsys):
    from collbench.cli.ab import _more_pairs

    assert _more_pairs(done, [10, 20, 40], lambda: look, quiet=False) == adds
    err = capsys.readouterr().err
    assert (says in err) if says else err == ""


def test_added_pairs_go_into_the_same_files_with_each_rounds_budget_kept(run_dir):
    """Real launches: a job of one pair told to add one more holds two rounds a side, says two
    pairs and two rounds, and each round kept the budget of the one pair first planned."""
    from collbench.run.interleaved import Side, run_interleaved

    paths = (run_dir / "more-a.json", run_dir / "more-b.json")
    looked = []

    def more(done: int) -> int:
        looked.append((done, [load_result(p).rows[0].rounds for p in paths]))
        return 1 if done == 1 else 0

    code = run_interleaved((Side("a"), Side("b")),
                           ["allreduce", "-n", "2", "--sizes", "8", "--max-time", "0.2"],
                           paths, n=2, use_mpi=(True, True), rounds=1, seed=3, quiet=True,
                           verbose=False, more=more)
    assert code == 0
    # asked after each look, with the files whole by then
    assert looked == [(1, [1, 1]), (2, [2, 2])]
    for path in paths:
        doc = json.loads(path.read_text())
        assert doc["metadata"]["ab"]["pairs"] == 2 and doc["metadata"]["settings"]["rounds"] == 2
        assert doc["metadata"]["settings"]["max_time_per_round"] == pytest.approx(0.2)
        assert [r["round"] for r in doc["metadata"]["rounds"]] == [1, 2]
        assert doc["rows"][0]["rounds"] == 2


def test_a_job_says_each_look_and_its_files_hold_what_it_said(run_dir):
    proc = cli(["ab", "-o", "looks", "--seed", "5", "--max-rounds", "4", "--", "allreduce", "-n",
                "2", "--sizes",
                "8,64", "--iters", "20", "--warmup", "1", "--rounds", "2"], run_dir, timeout=300)
    assert proc.returncode in (0, 1, 3), proc.stderr
    assert "2 pairs of allreduce on 2 ranks, up to 4 where rows are undecided" in proc.stderr
    said = [line for line in proc.stderr.splitlines() if "after 2 pairs" in line]
    assert len(said) == 1 and "(look 1 of 2)" in said[0] and "alpha 0.025" in said[0]
    pairs = 4 if said[0].endswith("2 more pairs") else 2
    assert [load_result(run_dir / f"looks-{x}.json").rows[0].rounds for x in "ab"] == [pairs, pairs]
    assert "97.5% CI" in proc.stdout              # each look's CIs at 1 - 0.05 / 2


def test_max_rounds_below_the_rounds_is_refused(run_dir):
    proc = cli(["ab", "--max-rounds", "2", "--", "allreduce", "--rounds", "3"], run_dir)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "collbench: error: --max-rounds 2 is below the command's --rounds 3: give at least 3")
    assert not (run_dir / "results").exists()
