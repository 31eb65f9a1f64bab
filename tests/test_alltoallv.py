"""alltoallv and the patterns that spread its bytes (--pattern): the counts, what each rank must
receive, and real ranks on mpi, mpi-pickle and gloo, self-launched and under a real mpiexec,
with every received piece checked."""

import numpy as np
import pytest

from conftest import cli, load_json, mpirun
from collbench.benchmarks import patterns
from collbench.benchmarks.alltoallv import BENCHMARK as ALLTOALLV
from collbench.benchmarks.base import Roles
from collbench.benchmarks.check import expected, pattern
from collbench.benchmarks.ops import NO_OP

QUICK = ["--iters", "10", "--warmup", "1", "--rounds", "1", "-q"]


def test_spread_is_nccl_tests_distance_weighted_blend_and_keeps_every_total_equal():
    n, elements = 4, 6000
    for share in (0.0, 0.5, 1.0):
        matrix = patterns.counts(patterns.parse(f"spread:{share}").name, n, elements)
        for i in range(n):
            for j in range(n):
                d = (j - i) % n
                want = elements * ((1 - share) / n + share * d / (n * (n - 1) / 2))
                assert abs(matrix[i][j] - want) <= 1
        assert [sum(row) for row in matrix] == [elements] * n
        assert patterns.imbalance(matrix) == (1.0, 1.0)
    assert patterns.counts("spread:0", n, elements) == patterns.counts("uniform", n, elements)


def test_zipf_sends_equal_totals_to_hot_ranks_chosen_by_its_seed():
    n, elements = 8, 80_000
    hot = {}
    for seed in (0, 1, 2):
        name = patterns.parse(f"zipf:1.2:{seed}").name
        matrix = patterns.counts(name, n, elements)
        assert [sum(row) for row in matrix] == [elements] * n
        received = [sum(row[j] for row in matrix) for j in range(n)]
        sent_imb, received_imb = patterns.imbalance(matrix)
        assert sent_imb == 1.0 and received_imb == pytest.approx(max(received) / elements)
        # the hottest receives by 1 / sum(k^-1.2): over 2.5x the mean at 8 ranks
        assert received_imb == pytest.approx(n / sum(k ** -1.2 for k in range(1, n + 1)), rel=1e-3)
        hot[seed] = received.index(max(received))
    assert len(set(hot.values())) > 1, "the seed chooses which rank is hot"
    assert (patterns.parse("zipf:1.2").name == "zipf:1.2:0"
            and patterns.parse("zipf:0").name == "zipf:0:0")


@pytest.mark.parametrize("text", ["zipf", "spread:1.5", "spread:-0.1", "spread:nan", "zipf:inf",
                                  "zipf:1:-2",
                                  "zipf:1:x", "matrix", "uniform:2", ""])
def test_a_pattern_that_is_not_one_is_refused_saying_what_is_taken(text):
    with pytest.raises(ValueError, match="give uniform, spread:F"):
        patterns.parse(text)


@pytest.mark.parametrize("name", ["uniform", "spread:1", "zipf:2:5"])
def test_what_each_rank_must_receive_is_each_senders_piece_for_it(name):
    n, elements = 5, 1003
    roles = Roles(pattern=patterns.parse(name).name)
    matrix = patterns.counts(roles.pattern, n, elements)
    send_len, recv_len = ALLTOALLV.lengths(elements, n, roles)
    assert send_len == elements and recv_len == max(sum(row[j] for row in matrix) for j in range(n))
    for rank in range(n):
        parts = ALLTOALLV.received(n, rank, roles, elements, recv_len)
        at = 0
        for part in parts:
            j = part.source
            assert part.start == at and part.length == matrix[j][rank] > 0
            assert part.offset == sum(matrix[j][:rank])     # where j's piece for this rank starts
            at += part.length
        assert at == sum(row[rank] for row in matrix) <= recv_len


@pytest.mark.parametrize("name", ["spread:1", "zipf:1.2:4"])
@pytest.mark.parametrize("n", [2, 5])
def test_the_expected_values_are_what_each_sender_cut_for_this_rank(name, n):
    """Each rank's send buffer cut in rank order by its counts; a rank receives, in sender order,
    the piece each cut for it: the check's expectation must be exactly that."""
    op, elements = pattern(NO_OP, "float32"), 37 * n
    roles = Roles(pattern=name)
    matrix = patterns.counts(name, n, elements)
    sends = [np.asarray(op.value(r, np.arange(elements), n)) for r in range(n)]
    _, recv_len = ALLTOALLV.lengths(elements, n, roles)
    for rank in range(n):
        pieces = [sends[j][sum(matrix[j][:rank]):sum(matrix[j][:rank + 1])] for j in range(n)]
        got = np.concatenate(pieces)
        want = expected(op, n, ALLTOALLV.received(n, rank, roles, elements, recv_len), recv_len,
                        np.int64)
        np.testing.assert_array_equal(np.asarray(want)[:len(got)], got)


@pytest.fixture(scope="module")
def three_backends(tmp_path_factory):
    """alltoallv on 3 self-launched ranks, mpi, mpi-pickle and gloo side by side, zipf and spread
    side by side (a comma list of patterns)."""
    folder = tmp_path_factory.mktemp("alltoallv")
    proc = cli(["alltoallv", "-n", "3", "--backend", "mpi,mpi-pickle,gloo", "--sizes", "12,3K,96K",
                "--pattern", "zipf:1.2,spread:1", "--thread-level", "multiple", "-o", "both.json",
                *QUICK[:-1]], folder,
               timeout=300, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    (folder / "stdout.txt").write_text(proc.stdout)
    return folder


def test_a_comma_list_of_patterns_measures_each_in_one_run_and_table(three_backends):
    data = load_json(three_backends / "both.json")
    # rows in the order the patterns were given, and every round measured both, interleaved
    assert list(dict.fromkeys(r["pattern"] for r in data["rows"])) == ["zipf:1.2:0", "spread:1"]
    for record in data["metadata"]["rounds"]:
        assert (sorted(b["pattern"] for b in record["order"])
                == sorted(["zipf:1.2:0", "spread:1"] * 3))
    titles = [line for line in (three_backends / "stdout.txt").read_text().splitlines()
              if line.startswith("alltoallv ·")]
    # backends as rows
    assert [t.split(" · ")[-1] for t in titles] == ["pattern zipf:1.2:0", "pattern spread:1"]


@pytest.mark.parametrize("pattern", ["zipf:1.2:0", "spread:1"])
def test_every_backend_delivers_every_piece_and_the_rows_say_the_pattern(three_backends, pattern):
    name = pattern.split(":")[0]
    rows = [r for r in load_json(three_backends / "both.json")["rows"] if r["pattern"] == pattern]
    assert {r["backend"] for r in rows} == {"mpi", "mpi-pickle", "gloo"} and len(rows) == 9
    for row in rows:
        assert row["check"] == "ok" and row["pattern"] == pattern
        matrix = patterns.counts(pattern, 3, row["count"])
        assert ((row["imbalance_sent"], row["imbalance_received"])
                == pytest.approx(patterns.imbalance(matrix)))
        # the bandwidths count the busiest rank's bytes, over the slowest rank's time
        busiest = row["size_bytes"] * max(row["imbalance_sent"], row["imbalance_received"])
        assert row["algbw_gbps"] == pytest.approx(busiest / (row["time_us_p50"] * 1e-6) / 1e9)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 / 3)
    if name == "zipf":
        assert max(r["imbalance_received"] for r in rows) > 1.2


def test_under_mpiexec_four_ranks_with_hot_experts_check_and_show_the_busiest(tmp_path):
    proc = mpirun(4, ["alltoallv", "--sizes", "16,64K", "--pattern", "zipf:1.2:3", "-o", "v.json",
                      "--thread-level", "multiple",
                      "--iters", "10", "--warmup", "1"], tmp_path, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    rows = load_json(tmp_path / "v.json")["rows"]
    assert ([r["check"] for r in rows] == ["ok", "ok"]
            and {r["pattern"] for r in rows} == {"zipf:1.2:3"})
    assert "pattern zipf:1.2:3" in proc.stdout and "busiest" in proc.stdout
    assert all(len(line) <= 80 for line in proc.stdout.splitlines() if line.startswith(("|", "+")))


@pytest.mark.parametrize("api", ["nonblocking", "persistent"])
def test_alltoallv_is_issued_in_each_api_mpi_has(tmp_path, api):
    proc = cli(["alltoallv", "-n", "2", "--sizes", "8,4K", "--pattern", "spread:0.5", "--api", api,
                "-o", "a.json",
                *QUICK], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [(r["api"], r["check"])
            for r in load_json(tmp_path / "a.json")["rows"]] == [(api, "ok")] * 2


@pytest.mark.parametrize("args,said", [
    (["alltoallv", "--pattern", "zipf:x"], "pattern 'zipf:x': give uniform"),
    (["alltoallv", "--pattern", "uniform,,zipf:1"], "an empty name in the list"),
    (["alltoallv", "--pattern", ",".join(f"spread:{i / 20:g}" for i in range(17))],
     "at most 16 in one run"),
    (["alltoallv", "--pattern", "uniform,zipf:1,wide"], "pattern 'wide': give uniform"),
    (["allreduce", "--pattern", "zipf:1"],
     "allreduce takes no --pattern: its pieces all have one length"),
])
def test_a_pattern_that_cannot_be_measured_is_one_line_and_exit_2(tmp_path, args, said):
    proc = cli([*args, "-n", "2", "--no-save"], tmp_path)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# --pattern matrix:FILE

def _matrix(tmp_path, text: str, name: str = "m.txt") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_matrix_spreads_each_rank_by_its_row_and_is_named_by_its_content(tmp_path):
    first = patterns.parse("matrix:" + _matrix(tmp_path, "1 2 0\n0 1 1  # comment\n\n1,1,4\n"))
    again = patterns.parse("matrix:" + _matrix(tmp_path, "1 2 0\n0 1 1\n1 1 4", "other.csv"))
    assert first.name == again.name and first.name.startswith("matrix:") and len(first.name) == 19
    # the name alone finds it again (ranks, rows)
    assert patterns.parse(first.name) == first
    # entry (i, j): what rank i sends rank j, scaled so that the average rank sends the size (3 x
    # 600 in all: rows of 3, 2 and 6 elevenths), each row's total cut in its own proportions
    matrix = patterns.counts(first.name, 3, 600)
    assert matrix == ((164, 327, 0), (0, 164, 163), (164, 163, 655))
    assert patterns.imbalance(matrix) == pytest.approx((982 / 600, 818 / 600))
    # the busiest sender and receiver
    assert ALLTOALLV.lengths(600, 3, Roles(pattern=first.name)) == (982, 818)
    assert patterns.parse("matrix:" + _matrix(tmp_path, "1 2 0\n0 1 1\n1 1 5",
                                              "third")).name != first.name


def test_a_matrix_for_another_world_size_is_refused_on_the_ranks(tmp_path):
    from collbench.run.runner import roles_problem
    from types import SimpleNamespace

    name = patterns.parse("matrix:" + _matrix(tmp_path, "1 1\n1 1\n", "two.txt")).name
    plan = SimpleNamespace(collectives=("alltoallv",), roles=Roles(),
                           patterns=(patterns.UNIFORM, name), pairing=None)
    assert roles_problem(plan, 3).endswith("two.txt is a 2 x 2 matrix: it spreads 2 ranks, not 3")
    assert roles_problem(plan, 2) is None


@pytest.mark.parametrize("text,said", [
    ("", "no numbers in it"),
    ("# only a comment\n\n", "no numbers in it"),
    ("1 2\n3\n", "2 rows of 1/2 entries: a traffic matrix is n rows of n"),
    ("1 2 3\n4 5 6\n", "2 rows of 3 entries"),
    ("1 -2\n1 1\n", "line 1: every entry must be a finite number, 0 or more"),
    ("1 1\n1 1e999\n", "line 2: every entry must be a finite number"),
    ("1 nan\n1 1\n", "line 1 holds something other than plain numbers"),
    ("1 inf\n1 1\n", "line 1 holds something other than plain numbers"),
    ("1 0x10\n1 1\n", "line 1 holds something other than plain numbers"),
    ("1 1_0\n1 1\n", "line 1 holds something other than plain numbers"),
    ("1 \u0662\n1 1\n", "not text of numbers (ASCII)"),
    ("0 0\n0 0\n", "every entry is 0: nothing would move"),
    ("1 1.2.3\n1 1\n", "line 1 holds something other than plain numbers"),
    (" ".join(["1"] * 1025) + "\n", "more than 1024 ranks"),
])
def test_a_bad_matrix_is_one_line_saying_what_is_wrong(tmp_path, text, said):
    from collbench.errors import UsageError

    with pytest.raises(UsageError, match="^--pattern matrix:") as caught:
        patterns.parse(f"matrix:{_matrix(tmp_path, text)}")
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_matrix_file_that_is_not_a_file_or_too_big_is_refused_without_blocking(tmp_path):
    import os

    from collbench.errors import UsageError

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)                          # no writer: a blocking open would wait forever
    big = tmp_path / "big"
    with open(big, "wb") as handle:
        handle.truncate(patterns.MAX_MATRIX_BYTES + 1)     # sparse: no disk
    for path, said in ((fifo, "not a regular file"), ("/dev/zero", "not a regular file"),
                       (tmp_path, "cannot read it: Is a directory"),
                       (tmp_path / "none", "cannot read it: No such file or directory"),
                       (big, "over 64 MiB")):
        with pytest.raises(UsageError, match=said):
            patterns.parse(f"matrix:{path}")


def test_a_matrix_run_checks_every_piece_and_a_world_it_does_not_fit_is_one_line(tmp_path):
    # rank 2 receives most, sends nothing
    hot = _matrix(tmp_path, "1 1 6\n1 1 6\n0 0 0\n", "hot.txt")
    proc = cli(["alltoallv", "-n", "3", "--sizes", "12,3K", "--pattern", f"matrix:{hot}",
                "--thread-level", "multiple",
                "-o", "m.json", *QUICK], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    name = patterns.parse(f"matrix:{hot}").name
    rows = load_json(tmp_path / "m.json")["rows"]
    assert [(r["check"], r["pattern"]) for r in rows] == [("ok", name)] * 2
    sent, received = patterns.imbalance(patterns.counts(name, 3, 768))
    assert ((rows[1]["imbalance_sent"], rows[1]["imbalance_received"])
            == pytest.approx((sent, received)))
    assert sent == pytest.approx(1.5) and received == pytest.approx(2.25)
    proc = cli(["alltoallv", "-n", "2", "--sizes", "12", "--pattern", f"matrix:{hot}", "--no-save",
                *QUICK], tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().endswith("hot.txt is a 3 x 3 matrix: it "
                                                                 "spreads 3 ranks, not 2")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_files_matrix_is_taken_back_only_when_it_is_the_one_its_name_says(tmp_path, monkeypatch):
    path = tmp_path / "m.txt"
    path.write_text("0 1 2\n3 0 1\n5 5 0\n")
    digest = patterns.parse(f"matrix:{path}").digest
    (kept,) = patterns.kept(f"matrix:{digest}").values()
    assert kept == [[0.0, 1.0, 2.0], [3.0, 0.0, 1.0], [5.0, 5.0, 0.0]]
    patterns._MATRICES.pop(digest)
    hostile = [[[0, 1, 2], [3, 0, 1], [5, 5, 1]],           # not the matrix its digest names
               [[0, 1, 2], [3, 0, 1], [5, 5, 10 ** 400]],   # past a float
               [[0, 1, 2], [3, 0, 1], [5, 5, -1]], [[0, 1], [3, 0]], "0 1 2",
               [[True, 1, 2], [3, 0, 1], [5, 5, 0]], [[0, 0, 0]] * 3]
    for rows in hostile:
        patterns.take_back({digest: rows})
        assert not patterns.known(f"matrix:{digest}"), rows
    monkeypatch.chdir(tmp_path)
    # never read as a file of that name
    (tmp_path / digest).write_text("0 1 2\n3 0 1\n5 5 0\n")
    assert not patterns.known(f"matrix:{digest}")
    patterns.take_back({digest: kept})
    assert patterns.known(f"matrix:{digest}")
    assert patterns.shares(f"matrix:{digest}", 3)[2][0] == pytest.approx(5 / 17)
