"""allgatherv, gatherv, scatterv and reduce_scatterv: one piece per rank, sized by --pattern; what
each rank must receive, real ranks on mpi and mpi-pickle (self-launched and under a real mpiexec)
with every piece checked, and the refusals where torch.distributed has no such call."""

import importlib.util
import json

import numpy as np
import pytest

from conftest import cli, load_json, mpirun
from collbench.benchmarks import patterns
from collbench.benchmarks.base import Roles
from collbench.benchmarks.check import expected, pattern
from collbench.benchmarks.ops import NO_OP
from collbench.benchmarks.registry import BENCHMARKS

QUICK = ["--iters", "10", "--warmup", "1", "--rounds", "1", "-q"]
V = ("allgatherv", "gatherv", "scatterv", "reduce_scatterv")
#: the collectives whose uneven side is what a rank receives
RECEIVING = ("scatterv", "reduce_scatterv")


def test_pieces_follow_what_the_pattern_has_each_rank_receive_and_add_up(tmp_path):
    assert patterns.pieces("uniform", 4, 1003) == (251, 251, 251, 250)
    assert patterns.pieces("spread:1", 5, 500) == (100,) * 5             # every rank receives alike
    hot = patterns.pieces("zipf:1.2:0", 8, 8000)
    # 8 / sum of k^-1.2
    assert sum(hot) == 8000 and max(hot) / 1000 == pytest.approx(3.43, abs=0.01)
    assert hot == patterns.pieces("zipf:1.2:0", 8, 8000) != patterns.pieces("zipf:1.2:1", 8, 8000)
    path = tmp_path / "m.txt"
    # columns 2, 2, 8 of rows taken as proportions
    path.write_text("1 1 2\n1 1 2\n0 0 4\n")
    name = patterns.parse(f"matrix:{path}").name
    assert patterns.pieces(name, 3, 1200) == (200, 200, 800)


@pytest.mark.parametrize("name", V)
@pytest.mark.parametrize("spread", ["uniform", "zipf:1.2:4"])
@pytest.mark.parametrize("n", [2, 5])
def test_the_expected_values_are_each_ranks_piece_where_it_lands(name, spread, n):
    """Every rank's send buffer holds its check values; the pieces, cut as the pattern sizes them
    and laid one after another, are what the check must expect (at the root for gatherv; each
    rank's own piece of the root's array for scatterv)."""
    coll, op, elements, root = BENCHMARKS[name], pattern(NO_OP, "float32"), 37 * n, n - 1
    roles = Roles(root=root, pattern=spread)
    sizes = patterns.pieces(spread, n, elements)
    starts = patterns.displacements(sizes)
    send_len, recv_len = coll.lengths(elements, n, roles)
    sends = [np.asarray(op.value(r, np.arange(max(send_len, elements)), n)) for r in range(n)]
    for rank in range(n):
        if name == "scatterv":
            assert recv_len == max(sizes) and send_len == elements
            got = sends[root][starts[rank]:starts[rank] + sizes[rank]]
        # the reduction of every rank's array, this rank's piece of it
        elif name == "reduce_scatterv":
            summed = pattern("sum", "float32")
            sends = [np.asarray(summed.value(r, np.arange(elements), n)) for r in range(n)]
            got = np.sum(np.stack(sends), axis=0)[starts[rank]:starts[rank] + sizes[rank]]
            want = expected(summed, n, coll.received(n, rank, roles, elements, recv_len), recv_len,
                            np.int64)
            np.testing.assert_array_equal(np.asarray(want)[:len(got)], got)
            continue
        elif name == "gatherv" and rank != root:
            assert coll.received(n, rank, roles, elements, recv_len) == ()
            continue
        else:
            assert (send_len, recv_len) == (max(sizes), elements)
            got = np.concatenate([sends[j][:sizes[j]] for j in range(n)])
        want = expected(op, n, coll.received(n, rank, roles, elements, recv_len), recv_len,
                        np.int64)
        np.testing.assert_array_equal(np.asarray(want)[:len(got)], got)
    assert (coll.imbalance(elements, n, roles)[name in RECEIVING]
            == pytest.approx(max(sizes) * n / elements))


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory):
    """Each v-collective on 3 self-launched ranks, mpi and mpi-pickle side by side, zipf."""
    folder = tmp_path_factory.mktemp("vcollectives")
    for name in V:
        root = ["--root", "1"] if BENCHMARKS[name].rooted else []
        proc = cli([name, "-n", "3", "--backend", "mpi,mpi-pickle", "--sizes", "12,3K,96K",
                    "--pattern", "zipf:1.2",
                    *root, "--thread-level", "multiple", "-o", f"{name}.json", *QUICK], folder,
                   timeout=300)
        assert proc.returncode == 0, proc.stderr
    return folder


@pytest.mark.parametrize("name", V)
def test_every_piece_arrives_checked_and_the_rows_say_the_pattern(three_ranks, name):
    rows = load_json(three_ranks / f"{name}.json")["rows"]
    assert {r["backend"] for r in rows} == {"mpi", "mpi-pickle"} and len(rows) == 6
    for row in rows:
        assert row["check"] == "ok" and row["pattern"] == "zipf:1.2:0"
        sizes = patterns.pieces("zipf:1.2:0", 3, row["count"])
        skew = (row["imbalance_received"] if name in RECEIVING else row["imbalance_sent"])
        assert skew == pytest.approx(max(sizes) * 3 / row["count"]) and skew > 1.2
        # every rank (or the root) moves the whole array: the bandwidths count the size
        assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] / (row["time_us_p50"] * 1e-6)
                                                  / 1e9)


def _bytes_lines(folder, name: str) -> dict:
    """rank -> (sent, received) as ``report --per-rank`` lists them for ``name``'s file."""
    proc = cli(["report", "--per-rank", f"{name}.json"], folder, env={"COLUMNS": "120"})
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("bytes per rank at", 1)[1].split("\n\n", 1)[0]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
             if line.startswith("| ")]
    return {int(c[0].split("@")[0]): (c[1], c[2]) for c in cells if c[0] != "rank"}


@pytest.mark.parametrize("name", V)
def test_the_per_rank_view_says_each_ranks_bytes_as_the_pattern_spread_them(three_ranks, name):
    from collbench.analysis.per_rank import _amount

    row = max(load_json(three_ranks / f"{name}.json")["rows"], key=lambda r: r["size_bytes"])
    piece = [e * 4 for e in patterns.pieces("zipf:1.2:0", 3, row["count"])]
    whole = [row["size_bytes"] if not BENCHMARKS[name].rooted or rank == 1 else 0
             for rank in range(3)]
    want = list(zip(piece, whole)) if name not in RECEIVING else list(zip(whole, piece))
    assert _bytes_lines(three_ranks, name) == {r: (_amount(s), _amount(g))
                                               for r, (s, g) in enumerate(want)}
    assert len(set(piece)) == 3           # zipf: the hot rank's piece is the largest


def test_under_mpiexec_four_ranks_of_a_matrix_check_and_fit_80_columns(tmp_path):
    path = tmp_path / "four.txt"
    path.write_text("1 1 1 5\n1 1 1 5\n1 1 1 5\n1 2 3 2\n")
    for name in V:
        proc = mpirun(4, [name, "--sizes", "16,64K", "--pattern", f"matrix:{path}", "-o",
                          f"{name}.json", "--thread-level", "multiple",
                          "--iters", "10", "--warmup", "1"], tmp_path, env={"COLUMNS": "80"})
        assert proc.returncode == 0, proc.stderr
        rows = load_json(tmp_path / f"{name}.json")["rows"]
        assert [r["check"] for r in rows] == ["ok", "ok"]
        assert "busiest" in proc.stdout and "largest piece over the mean piece" in proc.stdout
        assert all(len(line) <= 80 for line in proc.stdout.splitlines()
                   if line.startswith(("|", "+")))
    # the file keeps the matrix: the per-rank view says each rank's bytes without the matrix file
    path.unlink()
    doc = load_json(tmp_path / "gatherv.json")
    (digest,) = doc["metadata"]["matrices"]
    (tmp_path / digest).write_text("9 9\n9 9\n")       # a file named as the digest is never read
    lines = _bytes_lines(tmp_path, "gatherv")
    # by column: 4, 5, 6, 17 of 32
    assert [lines[r][0] for r in range(4)] == ["8K", "10K", "12K", "34K"]
    assert [lines[r][1] for r in range(4)] == ["64K", "0", "0", "0"]
    if importlib.util.find_spec("matplotlib"):            # and plot draws it beside the times
        proc = cli(["plot", "gatherv.json", "-o", "g.png"], tmp_path)
        assert proc.returncode == 0 and (tmp_path / "g.png").stat().st_size > 0, proc.stderr
        from collbench.analysis.overlay import load_runs
        from collbench.analysis.plot import figure_of

        figure, _ = figure_of(load_runs([str(tmp_path / "gatherv.json")], ()).rows())
        (traffic,) = [axes for axes in figure.axes
                      if axes.get_title() == f"pattern matrix:{digest}"]
        # rank 3 to 0: 1 of 32
        assert traffic.images[0].get_array()[3][0] == pytest.approx(100 / 32)
    doc["metadata"]["matrices"][digest][0][0] = 2               # a matrix that is not the one named
    (tmp_path / "gatherv.json").write_text(json.dumps(doc))
    proc = cli(["report", "--per-rank", "gatherv.json"], tmp_path)
    assert (proc.returncode == 0
            and "not listed: its matrix is not in the file" in proc.stdout), proc.stdout


def test_each_is_issued_in_each_api_mpi_has(tmp_path):
    """Non-blocking and persistent, side by side in one run of each v-collective."""
    apis = ["nonblocking", "persistent"]
    for name in V:
        proc = cli([name, "-n", "2", "--sizes", "8,4K", "--pattern", "zipf:1", "--api",
                    ",".join(apis), "-o", f"{name}.json", *QUICK], tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert sorted((r["api"], r["check"]) for r in load_json(tmp_path / f"{name}.json")["rows"]
                      ) == [(api, "ok") for api in apis for _ in range(2)]


@pytest.mark.parametrize("name,said", [
    ("allgatherv", "gloo's all_gather takes pieces of one length only"),
    ("gatherv", "torch.distributed's gather takes pieces of one length only"),
    ("scatterv", "torch.distributed's scatter takes pieces of one length only"),
    ("reduce_scatterv", "gloo's reduce_scatter takes pieces of one length only"),
])
def test_a_library_without_the_call_is_one_line_and_exit_2(tmp_path, name, said):
    proc = cli([name, "-n", "2", "--backend", "gloo", "--no-save"], tmp_path)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("op", ["max", "maxloc"])
def test_reduce_scatterv_checks_every_op_kind_on_both_apis_of_mpi4py(tmp_path, op):
    """maxloc's value-index pairs too: a pickle rank's piece, shorter than the largest, is padded
    with the pair's sentinel (it once failed on the tuple)."""
    proc = cli(["reduce_scatterv", "-n", "3", "--backend", "mpi,mpi-pickle", "--sizes", "3K",
                "--pattern", "zipf:1.2",
                "--op", op, "--thread-level", "multiple", "-o", "r.json", *QUICK], tmp_path,
               timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert [(r["backend"], r["check"])
            for r in load_json(tmp_path / "r.json")["rows"]] == [("mpi", "ok"),
                                                                 ("mpi-pickle", "ok")]
