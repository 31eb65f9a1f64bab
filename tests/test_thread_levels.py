"""The MPI thread level and the ranks' binding: chosen, recorded, shown, and matched on.

Real ranks: one self-launched run at every level with --bind core, runs under a real mpiexec
(bound by it, and left free), the refusals, and comparisons across levels.
"""

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from conftest import cli, load_json, mpirun
from collbench.launch.self_launch.mpiexec import find_mpiexec

LEVELS = ("single", "funneled", "serialized", "multiple")
QUICK = ["--iters", "10", "--warmup", "1", "-q"]


def _masks(record) -> list:
    return [int(text, 16) for text in record["cpu_sets"]]


@pytest.fixture(scope="module")
def every_level(tmp_path_factory):
    """A self-launched run of allreduce at the four levels side by side, bound a core a rank."""
    folder = tmp_path_factory.mktemp("levels")
    proc = cli(["allreduce", "-n", "2", "--sizes", "8,64K", "--rounds", "2", "--thread-level",
                ",".join(LEVELS),
                "--bind", "core", "-o", "levels.json", "-f", "markdown", *QUICK], folder,
               timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc, load_json(folder / "levels.json")


def test_each_level_is_a_launch_of_its_own_and_its_rows_say_it(every_level):
    _, doc = every_level
    rows = doc["rows"]
    assert sorted((r["thread_level"], r["size_bytes"]) for r in rows) == sorted(
        (level, size) for level in LEVELS for size in (8, 65536))
    assert all(r["rounds"] == 2 and r["check"] == "ok" for r in rows)
    records = doc["metadata"]["rounds"]
    assert len(records) == 8 and sorted(r["round"] for r in records) == list(range(1, 9))
    assert sorted(r["thread_level"] for r in records) == sorted(LEVELS * 2)
    # MPICH gives every level it is asked for
    assert all(r["thread_level_provided"] == r["thread_level"] for r in records)
    assert doc["metadata"]["settings"]["thread_levels"] == list(LEVELS)
    # the settings list the setups of every level, not only the first launch's
    assert sorted(doc["metadata"]["settings"]["backends"]) == sorted(
        "mpi" if level == "single" else f"mpi (thread {level})" for level in LEVELS)
    # a row's rounds are the launches at its level
    for row in rows:
        at_level = {r["round"] for r in records if r["thread_level"] == row["thread_level"]}
        assert {d["round"] for d in row["round_details"]} == at_level


def test_bind_core_puts_each_rank_on_a_core_of_its_own_and_the_rounds_record_it(every_level):
    _, doc = every_level
    for record in doc["metadata"]["rounds"]:
        masks = _masks(record)
        assert record["bind"] == "core" and len(masks) == 2
        assert all(bin(m).count("1") == 1 for m in masks) and masks[0] != masks[1]


def test_the_levels_are_side_by_side_in_one_table_named_by_level(every_level):
    proc, _ = every_level
    tables = [line for line in proc.stdout.splitlines() if line.startswith("## ")]
    assert tables == ["## allreduce · float32 sum · 2 ranks · latency"], proc.stdout
    header = next(line for line in proc.stdout.splitlines() if line.startswith("| size"))
    for level in ("funneled", "serialized", "multiple"):
        assert f"mpi (thread {level}) p50 µs" in header
    assert "| mpi p50 µs |" in header         # the usual level (single) goes unsaid in the label


@pytest.fixture(scope="module")
def under_mpiexec(tmp_path_factory):
    """allreduce under a user's mpiexec, once bound by it (-bind-to core) at funneled, once left
    as it is at the default level."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    folder = tmp_path_factory.mktemp("mpiexec")
    bound = subprocess.run([mpiexec, "-n", "2", "-bind-to", "core", sys.executable, "-m",
                            "collbench", "allreduce",
                            "--sizes", "8", "--rounds", "2", "--thread-level", "funneled", "-o",
                            "bound.json", *QUICK],
                           cwd=folder, capture_output=True, text=True, timeout=180)
    assert bound.returncode == 0, bound.stderr
    free = mpirun(2, ["allreduce", "--sizes", "8", "--rounds", "2", "-o", "free.json", "--iters",
                      "10", "--warmup",
                      "1"], folder)
    assert free.returncode == 0, free.stderr
    return folder, free


def test_under_mpiexec_the_level_is_asked_for_and_the_launchers_binding_recorded(under_mpiexec):
    folder, _ = under_mpiexec
    doc = load_json(folder / "bound.json")
    assert {r["thread_level"] for r in doc["rows"]} == {"funneled"}
    for record in doc["metadata"]["rounds"]:
        assert record["thread_level"] == record["thread_level_provided"] == "funneled"
        assert record["bind"] == "launcher"
        masks = _masks(record)
        assert all(bin(m).count("1") == 1 for m in masks) and masks[0] != masks[1]


def test_by_default_mpi_starts_at_single_and_the_title_says_so(under_mpiexec):
    folder, free = under_mpiexec
    doc = load_json(folder / "free.json")
    assert {r["thread_level"] for r in doc["rows"]} == {"single"}
    records = doc["metadata"]["rounds"]
    assert all(r["thread_level_provided"] == "single" for r in records)
    cores = len(os.sched_getaffinity(0))
    assert all(m == _masks(records[0])[0] and bin(m).count("1") == cores for r in records
               for m in _masks(r))
    assert "allreduce · float32 sum · 2 ranks · latency · mpi · thread single" in free.stdout


def test_mpi4py_own_variable_chooses_the_level_where_the_option_is_not_given(tmp_path):
    proc = cli(["allreduce", "-n", "2", "--sizes", "8", "--rounds", "1", "-o", "v.json", *QUICK],
               tmp_path, env={"MPI4PY_RC_THREAD_LEVEL": "serialized"})
    assert proc.returncode == 0, proc.stderr
    assert {r["thread_level"] for r in load_json(tmp_path / "v.json")["rows"]} == {"serialized"}


@pytest.mark.parametrize("args, said", [
    (["--backend", "gloo", "--thread-level", "single"],
     "--thread-level is for the MPI backends (mpi, mpi-pickle); "
                                                        "gloo has no MPI thread level"),
    (["--backend", "nccl", "--thread-level", "multiple"], "nccl has no MPI thread level"),
    (["--backend", "gloo,nccl", "--thread-level", "single,multiple"],
     "gloo, nccl have no MPI thread level"),
    (["--thread-level", "triple"],
     "unknown thread level 'triple'; choose from: single, funneled, serialized, multiple"),
    (["--thread-level", " , "], "--thread-level is empty"),
])
def test_a_level_a_backend_cannot_take_is_refused_in_one_line(tmp_path, args, said):
    proc = cli(["allreduce", "-n", "2", "--sizes", "8", *args], tmp_path)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_bad_mpi4py_variable_is_bad_input(tmp_path):
    proc = cli(["allreduce", "-n", "2", "--sizes", "8"], tmp_path,
               env={"MPI4PY_RC_THREAD_LEVEL": "lots"})
    assert (proc.returncode == 2
            and "MPI4PY_RC_THREAD_LEVEL='lots' is not a thread level" in proc.stderr)


@pytest.mark.parametrize("args, said", [
    (["--thread-level", "single,multiple"],
     "MPI starts at one level per launch and mpiexec launched these ranks once"),
    (["--bind", "core"],
     "--bind is for collbench's own launch; mpiexec placed these ranks: bind with it"),
])
def test_under_a_users_launcher_several_levels_and_binding_are_refused(tmp_path, args, said):
    proc = mpirun(2, ["allreduce", "--sizes", "8", "--no-save", *args], tmp_path)
    assert (proc.returncode == 2 and said in proc.stderr
            and "Traceback" not in proc.stderr), proc.stderr


def test_ab_takes_a_level_a_side(tmp_path):
    proc = cli(["ab", "--", "allreduce", "-n", "2", "--sizes", "8", "--thread-level",
                "single,multiple"], tmp_path)
    assert (proc.returncode == 2
            and "ab measures one setup a side; give each side its level" in proc.stderr)


@pytest.mark.parametrize("level", ["single", "funneled", "serialized", "multiple"])
def test_oversubscribed_below_multiple_says_that_a_waiting_rank_spins(tmp_path, level):
    """Both ranks on one core: MPICH's waiting rank spins below MULTIPLE (2.7-8 ms an 8-byte
    call seen), and yields at it."""
    if shutil.which("taskset") is None:
        pytest.skip("no taskset")
    env = {**os.environ}
    proc = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "collbench", "allreduce",
                           "-n", "2", "--sizes",
                           "8", "--rounds", "1", "--iters", "3", "--warmup", "0", "--no-save",
                           "--thread-level", level],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "2 ranks share 1 CPU on a host" in proc.stderr
    assert (f"at thread level {level}, a waiting rank spins on its core"
            in proc.stderr) == (level != "multiple")


@pytest.mark.parametrize("ranks", [2, 3])
def test_bind_core_binds_within_the_cpus_collbench_was_given(tmp_path, ranks):
    """The launcher binds over the whole machine unless told which CPUs it may use: under
    ``taskset -c 1``, no rank may land on CPU 0."""
    if shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        pytest.skip("needs taskset and two CPUs")
    proc = subprocess.run(["taskset", "-c", "1", sys.executable, "-m", "collbench", "allreduce",
                           "-n", str(ranks),
                           "--sizes", "8", "--rounds", "1", "--bind", "core", "--thread-level",
                           "multiple",
                           "-o", "t.json", *QUICK], cwd=tmp_path, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr
    (record,) = load_json(tmp_path / "t.json")["metadata"]["rounds"]
    assert _masks(record) == [0b10] * ranks


# -- compare: rows match on their level
# --------------------------------------------------------------


def _run(level: str, scale: float = 1.0):
    from results_helpers import metadata, row_with_rounds, lognormal_samples
    from collbench.results.records import RunResult

    result = RunResult(metadata=metadata(rounds=[{"round": r + 1, "load": {"busy": False}}
                                                 for r in range(5)]))
    for i, size in enumerate((8, 1024, 65536)):
        samples = [lognormal_samples((2.0 + size / 2e3) * scale, 30, seed=i * 10 + r)
                   for r in range(5)]
        row, data = row_with_rounds(samples, size_bytes=size, thread_level=level)
        result.add(row, data)
    return result


def test_compare_refuses_a_verdict_across_levels_unless_asked():
    from collbench.analysis.compare import compare_runs
    from collbench.errors import UsageError

    with pytest.raises(UsageError,
                       match="ran MPI at thread level single and new at multiple: the level alone"):
        compare_runs(_run("single"), _run("multiple", 3.0), baseline_name="base", new_name="new")
    comparison = compare_runs(_run("single"), _run("multiple", 3.0), baseline_name="base",
                              new_name="new",
                              across_levels=True)
    assert comparison.regression and {r.verdict for r in comparison.rows} == {"slower"}
    assert comparison.warnings[0] == ("base ran MPI at thread level single and new at multiple: "
                                      "rows are matched across the levels")
    # one level each side, the same: no word
    same = compare_runs(_run("multiple"), _run("multiple", 3.0))
    assert same.regression and not any("thread level" in w for w in same.warnings)


def test_a_file_of_several_levels_compares_each_with_its_own_level(every_level, tmp_path):
    _, doc = every_level
    path = tmp_path / "levels.json"
    path.write_text(json.dumps(doc))
    proc = cli(["compare", str(path), str(path), "--threshold", "1000%", "--min-decided", "0%"],
               tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "thread level" not in proc.stderr


def test_an_old_file_is_read_as_multiple_and_unbound_and_says_it_was_assumed(under_mpiexec):
    from pathlib import Path
    from collbench.analysis.comparability import binding
    from collbench.results.loader import load_result
    from collbench.results.records import ASSUMED_SETUP

    old = Path(__file__).parent / "data" / "gate" / "pinned.json"
    result = load_result(old)
    assert {r.thread_level for r in result.rows} == {"multiple"} and ASSUMED_SETUP in result.notes
    assert binding(result) == "unbound (assumed)"
    folder, _ = under_mpiexec
    report = cli(["report", str(old)], folder)
    assert (report.returncode == 0
            and "read as thread level multiple" in report.stdout + report.stderr)
    refused = cli(["compare", str(old), str(folder / "free.json"), "--allow-missing"], folder)
    assert refused.returncode == 2, refused.stderr
    assert (f"{old} ran MPI at thread level multiple and {folder / 'free.json'} at single "
            f"(assumed for {old}: written before levels were recorded)" in refused.stderr)
    asked = cli(["compare", str(old), str(folder / "free.json"), "--allow-missing",
                 "--across-levels"], folder)
    assert asked.returncode in (0, 1, 3) and "rows are matched across the levels" in asked.stderr
    assert "ranks were bound differently: unbound (assumed) in" in asked.stderr


# -- helper threads
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
def test_a_helper_thread_calls_mpi_abort_only_at_multiple(level):
    from collbench.backends.threads import abort_from_any_thread

    called = []
    abort = abort_from_any_thread(called.append, level)
    helper = threading.Thread(target=abort, args=(3,))
    helper.start()
    helper.join()
    assert called == ([3] if level == "multiple" else [])
    abort(4)                                   # the main thread may, at every level
    assert called[-1] == 4


def test_the_usual_level_is_the_default_one():
    from collbench.backends.base import BackendOptions
    from collbench.backends.threads import DEFAULT
    from collbench.results.records import USUAL_THREAD_LEVEL

    assert DEFAULT == USUAL_THREAD_LEVEL == BackendOptions().thread_level


class _Request:
    """An MPI request that completes at the ``done``-th Test."""

    def __init__(self, done: int) -> None:
        self.tests, self.done = 0, done

    def Test(self) -> bool:
        self.tests += 1
        return self.tests >= self.done


def test_a_rank_waiting_in_collbenchs_own_steps_sleeps_between_polls():
    """MPICH's blocking calls spin at every level below multiple: a rank that waited in one for
    a rank still loading took a core, on a crowded host the core of the rank it waited for. In
    collbench's own steps a rank polls for a short while, then sleeps, each pause longer, up to
    a bound: a long wait costs little CPU and ends within a pause of the last arrival."""
    from collbench.backends import _mpi

    now = [0.0]
    pauses = []

    def sleep(seconds):
        pauses.append(seconds)
        now[0] += seconds

    def clock():
        now[0] += 1e-6                  # each poll takes a microsecond
        return now[0]

    quick = _Request(done=5)            # everyone there at once: no sleep
    _mpi.wait_sleeping(quick, clock, sleep)
    assert quick.tests == 5 and pauses == []
    late = _Request(done=10_000)        # a rank arriving seconds later
    _mpi.wait_sleeping(late, clock, sleep)
    assert late.tests == 10_000 and pauses
    assert pauses[0] == _mpi.FIRST_PAUSE_S and max(pauses) == _mpi.LONGEST_PAUSE_S
    assert all(b == min(2 * a, _mpi.LONGEST_PAUSE_S) for a, b in zip(pauses, pauses[1:]))
    spun = late.tests - len(pauses)     # the polls made before the first sleep
    assert spun * 1e-6 <= 2 * _mpi.SPIN_S
