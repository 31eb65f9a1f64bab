"""The reductions beyond sum/max/min/prod (land, lor, band, bor, maxloc, minloc, avg) and the
element types int8 and uint8: their check patterns against numpy, then real launches whose rows
must all check ok, and the one-line refusals of what a backend or a dtype cannot do."""

from functools import reduce

import numpy as np
import pytest

from collbench.backends.devices import HostDevice
from collbench.benchmarks.check import EXACT_LIMIT, pattern, sentinel
from collbench.backends._mpi import mpi_pair_type
from collbench.benchmarks.dtypes import DTYPES, PAIR_FIELDS
from collbench.benchmarks.ops import NO_OP, OPS, element_of, op_refusal
from collbench.benchmarks.registry import ORDER
from collbench.errors import UsageError
from conftest import cli, gloo_lacks, load_json

FAST = ["--iters", "3", "--warmup", "1", "--rounds", "1", "-q"]
NEW_OPS = ["land", "lor", "band", "bor", "maxloc", "minloc", "avg"]
VALUE, INDEX = PAIR_FIELDS


def _numpy_dtypes(op):
    return [name for name, d in DTYPES.items()
            if d.numpy is not None and op_refusal(op, name) is None]


def _sent(op, dtype, n, k):
    """Every rank's send values, in the buffer's numpy type (rank by row)."""
    element, p = element_of(dtype, op), pattern(op, dtype)
    return np.stack([np.asarray(p.value(r, k, n)).astype(element.host) for r in range(n)])


def _reference(op, sent):
    """The reduction over ranks (axis 0) the plain numpy way, independent of collbench's
    combiners."""
    if op in ("maxloc", "minloc"):
        values = sent[VALUE]
        # the first: the lowest rank
        rank = (np.argmax if op == "maxloc" else np.argmin)(values, axis=0)
        out = np.empty(sent.shape[1], sent.dtype)
        out[VALUE] = np.take_along_axis(values, rank[None], axis=0)[0]
        out[INDEX] = np.take_along_axis(sent[INDEX], rank[None], axis=0)[0]
        return out
    if op == "avg":
        return sent.astype(np.float64).mean(axis=0)
    ufunc = {"land": np.logical_and, "lor": np.logical_or, "band": np.bitwise_and,
             "bor": np.bitwise_or}[op]
    return ufunc.reduce(sent, axis=0)


@pytest.mark.parametrize("op", NEW_OPS)
def test_patterns_reduce_as_numpy_does_for_every_dtype_and_up_to_50_ranks(op):
    for dtype in _numpy_dtypes(op):
        element = element_of(dtype, op)
        for n in range(1, 51):
            k = np.arange(5 * (n + 1) + 7)            # whole periods of every pattern, and more
            sent = _sent(op, dtype, n, k)
            p = pattern(op, dtype)
            want = np.asarray(p.reduced(k, n)).astype(element.host)
            ref = _reference(op, sent)
            if op == "avg":
                assert (p.wrong(ref.astype(element.host), want, n) == 0
                        and np.array_equal(ref, want)), (dtype, n)
            else:
                assert np.array_equal(ref.astype(element.host), want), (op, dtype, n)
                # what mpi-pickle reduces with gives the same, in the same type, in any order
                combine = OPS[op].combine
                forward = reduce(combine, list(sent))
                backward = reduce(combine, list(sent[::-1]))
                assert forward.dtype == want.dtype and np.array_equal(forward, want), (op, dtype, n)
                assert np.array_equal(backward, want), (op, dtype, n)
            if n > 1:                                 # the result differs from element to element
                assert len(np.unique(want)) > 1, (op, dtype, n)
            # exact in the dtype, and never the sentinel the receive side is poisoned with
            if element.numpy.names:
                assert (sent[VALUE] >= 0).all() and (sent[VALUE] <= EXACT_LIMIT[dtype]).all()
            else:
                assert (sent >= 0).all() and (sent <= EXACT_LIMIT[dtype]).all()
                assert not np.isin(sent, [sentinel(element.numpy)]).any()


def test_maxloc_takes_the_lowest_rank_of_a_tie_and_differs_from_a_highest_rank_rule():
    n, k = 6, np.arange(20)
    sent = _sent("maxloc", "float32", n, k)
    want = pattern("maxloc", "float32").reduced(k, n)
    holders = sent[VALUE] == want[VALUE]
    # ranks 2s and 2s + 1: every maximum is a tie
    assert (holders.sum(axis=0) == 2).all()
    assert (want[INDEX] % 2 == 0).all()
    highest = n - 1 - np.argmax(holders[::-1], axis=0)
    assert (highest != want[INDEX]).all()


def test_logical_and_bitwise_results_stay_in_their_dtype_and_in_int8_range():
    for op in ("land", "lor", "band", "bor"):
        for dtype in ("int8", "uint8", "int32", "int64"):
            sent = _sent(op, dtype, 7, np.arange(64))
            out = OPS[op].combine(sent[0], sent[1])
            assert out.dtype == np.dtype(dtype), (op, dtype)       # np.logical_and alone gives bool
            assert sent.max() <= 63


def test_avg_tolerance_is_zero_where_exact_and_still_catches_wrong_results():
    p = pattern("avg", "float32")
    for n in (1, 2, 4, 64, 1024):
        assert p.tolerance(n) == 0.0
    k = np.arange(30)
    for dtype in ("float16", "float32", "float64"):
        p, dt = pattern("avg", dtype), np.dtype(dtype)
        for n in range(1, 51):
            want = np.asarray(p.reduced(k, n)).astype(dt)
            # NCCL's premultiplied sum: each rank's value times fl(1/n), summed in the dtype
            share = (np.asarray(p.value(0, k, n)).astype(dt) * dt.type(1.0 / n)).astype(dt)
            total = share.copy()
            for _ in range(n - 1):
                total = (total + share).astype(dt)
            assert p.wrong(total, want, n) == 0, (dtype, n)
            # a sum, not an average
            assert p.wrong((want * n).astype(dt), want, n) == (len(k) if n > 1 else 0)
            assert p.wrong(np.roll(want, 1), want, n) == len(k)       # every element misplaced
            assert p.wrong(np.full_like(want, np.nan), want, n) == len(k)


def test_pairs_are_laid_out_as_c_structs_with_mpi_pair_types():
    expect = {"float32": (8, "FLOAT_INT"), "float64": (16, "DOUBLE_INT"), "int32": (8, "INT_INT"),
              "int64": (16, "LONG_INT"), "float16": (8, None), "int8": (8, None),
              "uint8": (8, None)}
    for dtype, (itemsize, mpi_type) in expect.items():
        element = element_of(dtype, "maxloc")
        assert element.itemsize == element.numpy.itemsize == itemsize
        assert mpi_pair_type(element.numpy) == mpi_type
        assert (element_of(dtype, NO_OP) is DTYPES[dtype]
                and element_of(dtype, "sum") is DTYPES[dtype])
    assert mpi_pair_type(np.dtype("float32")) is None


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_int8_and_uint8_poison_differs_from_every_pattern_value(dtype):
    device, d = HostDevice(), DTYPES[dtype]
    buffers = device.allocate(64, 64, d, in_place=False)
    device.poison(buffers.recv)
    assert (buffers.recv == (255 if dtype == "uint8" else -1)).all()
    for op in [NO_OP, "sum", "max", "min", "prod", "land", "lor", "band", "bor"]:
        for n in (1, 3, 200):
            p = pattern(op, dtype)
            values = np.asarray(p.value(n - 1, np.arange(300), n))
            reduced = np.asarray(p.reduced(np.arange(300), n)) if p.reduced else values
            for v in (values, reduced):
                assert v.min() >= 0 and v.max() <= EXACT_LIMIT[dtype] < 255, (op, n)


def test_each_op_refuses_the_dtypes_it_does_not_take_by_name():
    assert (op_refusal("land", "float32")
            == "land takes integer dtypes only: int32, int64, int8, uint8")
    assert (op_refusal("avg", "int64")
            == "avg takes float dtypes only: float32, float64, float16, bfloat16")
    assert op_refusal("maxloc", "int8") is None and op_refusal(NO_OP, "float32") is None


# ---- real launches --------------------------------------------------------------------------

def _rows_all_ok(run_dir, args, barrier: bool = False):
    """The rows of a run whose every check passed (a barrier's, which moves nothing, skipped)."""
    proc = cli([*args, *FAST, "-o", "r.json"], run_dir, timeout=180)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(run_dir / "r.json")["rows"]
    bad = [r for r in rows if r["check"] != ("skipped" if barrier and r["collective"] == "barrier"
                                             else "ok")]
    assert rows and not bad, bad
    return rows


@pytest.mark.parametrize("collective,ops,dtypes,backends", [
    # gloo has no logical and or or: each of its pairs is skipped with a note
    ("allreduce", "band,lor,land,bor", "int8,int64", "mpi,mpi-pickle,gloo"),
    ("reduce_scatter", "bor,band", "uint8", "mpi,mpi-pickle,gloo"),
    ("reduce", "land,lor", "uint8", "mpi,mpi-pickle"),
])
def test_logical_and_bitwise_ops_check_ok_on_real_ranks(run_dir, collective, ops, dtypes,
                                                        backends):
    root = ["--root", "2"] if collective == "reduce" else []
    rows = _rows_all_ok(run_dir, [collective, "--op", ops, "--dtype", dtypes, "-n", "3",
                                  "--thread-level", "multiple", "--sizes", "8-4K",
                                  "--backend", backends, *root])
    assert {r["backend"] for r in rows} == set(backends.split(","))
    lacked = {"land", "lor"}         # on gloo
    assert {(r["backend"], r["op"], r["dtype"], r["world_size"]) for r in rows} == {
        (b, o, d, 3) for b in backends.split(",") for o in ops.split(",")
        for d in dtypes.split(",") if not (b == "gloo" and o in lacked)}


@pytest.mark.parametrize("collective,op,dtype,backends,extra", [
    ("allreduce", "maxloc", "float32", "mpi,mpi-pickle", []),
    ("reduce", "minloc", "float64", "mpi,mpi-pickle", ["--root", "1"]),
    ("reduce_scatter", "maxloc", "int32", "mpi,mpi-pickle", []),
    ("reduce_scatter", "minloc", "int64", "mpi,mpi-pickle", []),
    # no MPI pair type: pickle only
    ("reduce_scatter", "maxloc", "int8", "mpi-pickle", ["--payload", "list"]),
    ("allreduce", "minloc", "float16", "mpi-pickle", ["--payload", "bytes"]),
])
def test_maxloc_and_minloc_pairs_check_ok_on_real_ranks(run_dir, collective, op, dtype, backends,
                                                        extra):
    rows = _rows_all_ok(run_dir, [collective, "--op", op, "--dtype", dtype, "-n", "3",
                                  "--thread-level", "multiple", "--sizes", "8-4K",
                                  "--backend", backends, *extra])
    assert {r["backend"] for r in rows} == set(backends.split(","))
    pair = element_of(dtype, op).itemsize
    for r in rows:             # a row counts pairs, and its size is pairs × the pair's C size
        assert r["size_bytes"] == r["count"] * pair and r["op"] == op and r["dtype"] == dtype


@pytest.mark.parametrize("n,dtypes", [(3, "float32,bfloat16,float16"), (2, "float64")])
def test_avg_checks_ok_on_gloo(run_dir, n, dtypes):
    """avg on every reduction gloo has, three ranks (the mean is inexact) and two (exact)."""
    pytest.importorskip("torch")
    rows = _rows_all_ok(run_dir, ["all", "--op", "avg", "--dtype", dtypes, "-n", str(n),
                                  "--sizes", "8,4K", "--backend", "gloo"], barrier=True)
    reductions = {r["collective"] for r in rows if r["op"] == "avg"}
    assert {"allreduce", "reduce", "reduce_scatter"} <= reductions
    assert {(r["collective"], r["dtype"]) for r in rows if r["op"] == "avg"} == {
        (c, d) for c in reductions for d in dtypes.split(",")}
    assert {r["op"] for r in rows} == {"avg", "none"}


def test_int8_and_uint8_on_every_collective_and_backend(run_dir):
    pytest.importorskip("torch")
    proc = cli(["all", "--op", "sum,max", "--dtype", "int8,uint8", "-n", "2", "--sizes", "8,1K",
                "--backend", "mpi,mpi-pickle,gloo", *FAST, "-o", "r.json"], run_dir, timeout=180)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(run_dir / "r.json")["rows"]
    assert {r["backend"] for r in rows} == {"mpi", "mpi-pickle", "gloo"}
    assert {r["collective"] for r in rows} == set(ORDER)
    assert {r["collective"] for r in rows if r["backend"] == "gloo"} == set(ORDER) - gloo_lacks()
    # every dtype on every collective that moves data, every op on every reduction
    assert {r["dtype"] for r in rows if r["collective"] == "bcast"} == {"int8", "uint8"}
    assert {(r["dtype"], r["op"]) for r in rows if r["collective"] == "allreduce"} == {
        (d, o) for d in ("int8", "uint8") for o in ("sum", "max")}
    bad = [r for r in rows if r["check"] != ("skipped" if r["collective"] == "barrier" else "ok")]
    assert not bad, bad


@pytest.mark.parametrize("args,reason", [
    (["--op", "land", "--dtype", "float32"],
     "land takes integer dtypes only: int32, int64, int8, uint8"),
    (["--op", "band", "--dtype", "bfloat16", "--backend", "gloo"],
     "band takes integer dtypes only"),
    (["--op", "maxloc", "--backend", "gloo"], "torch.distributed has no value-index reductions"),
    (["--op", "maxloc", "--dtype", "uint8", "--backend", "mpi"],
     "MPI's value-index pair types hold float32, "
                                                                 "float64, int32, int64 only"),
    (["--op", "avg", "--backend", "mpi-pickle"], "MPI has no avg reduction"),
    (["--op", "avg", "--dtype", "int32", "--backend", "gloo"], "avg takes float dtypes only"),
    (["--op", "lor", "--dtype", "int8", "--backend", "gloo"],
     "torch.distributed has no logical or"),
])
def test_what_cannot_run_is_refused_in_one_line(run_dir, args, reason):
    proc = cli(["allreduce", "-n", "2", "--sizes", "8", *args], run_dir)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0], proc.stderr
    assert not proc.stdout


def test_under_all_an_op_a_backend_lacks_is_skipped_with_a_note(run_dir):
    pytest.importorskip("torch")
    proc = cli(["allreduce", "--op", "land", "--dtype", "int32", "-n", "2", "--sizes", "8",
                "--backend", "all",
                "--iters", "3", "--rounds", "1", "-o", "r.json"], run_dir, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert ("on gloo: torch.distributed has no logical and (ReduceOp.BAND is bitwise); skipped"
            in proc.stderr)
    rows = load_json(run_dir / "r.json")["rows"]
    assert {r["backend"] for r in rows} == {"mpi", "mpi-pickle"}
    assert all(r["check"] == "ok" for r in rows)


def test_maxloc_on_gpu_buffers_is_refused_by_the_mpi_backend_before_any_rank_starts():
    """The plan asks a backend's options of each combination: pairs have no GPU layout. (Without
    a GPU the plan skips --buffers cuda first, so the backend is asked here, as the plan asks.)"""
    from collbench.backends.base import BackendOptions
    from collbench.backends.mpi import MpiBackend
    from collbench.benchmarks.registry import get_benchmark
    from collbench.benchmarks.dtypes import dtype_of

    allreduce, f32 = get_benchmark("allreduce"), dtype_of("float32")
    cuda, host = BackendOptions(buffers="cuda"), BackendOptions(buffers="mpi")
    assert "host memory only" in MpiBackend.options_problem(cuda, collective=allreduce, dtype=f32,
                                                            op="maxloc")
    assert MpiBackend.options_problem(host, collective=allreduce, dtype=f32, op="maxloc") is None
    assert MpiBackend.options_problem(cuda, collective=allreduce, dtype=f32, op="sum") is None
    assert MpiBackend.options_problem(cuda, collective=get_benchmark("bcast"), dtype=f32,
                                      op="none") is None


def test_a_backend_that_does_not_declare_the_new_ops_is_not_handed_them():
    """A plugin written before land, avg or maxloc existed takes the four ops it knew."""
    from collbench.backends.base import Backend
    from collbench.benchmarks.registry import get_benchmark
    from collbench.benchmarks.dtypes import dtype_of

    class Older(Backend):
        name = "older"

    allreduce, i32 = get_benchmark("allreduce"), dtype_of("int32")
    for op in ("sum", "max", "min", "prod"):
        assert Older.supports(collective=allreduce, dtype=i32, op=op) is None
    for op in ("land", "bor", "maxloc", "avg"):
        assert Older.supports(collective=allreduce, dtype=i32, op=op) == (
            f"older issues the reductions sum, max, min, prod, not {op}")
    assert Older.supports(collective=get_benchmark("bcast"), dtype=i32, op="none") is None


def test_the_pairs_of_a_dtype_and_op_list_that_cannot_run_are_said_once_by_what_they_share():
    """Every dtype with every op: what cannot run is left out per collective, backend and pair,
    and said briefly: an op's dtypes once for every backend, a backend's refusal by the dtypes
    or ops it refuses."""
    from collbench.run import plan

    setups, _ = plan._setups(["mpi", "gloo"], {})
    left, notes = plan._unsupported(["allreduce", "bcast", "barrier"], setups,
                                    {"dtype": "float32,int8,bfloat16", "op": "sum,band,lor",
                                     "backend": "mpi,gloo"})
    mismatched = {(d, o) for d in ("float32", "bfloat16") for o in ("band", "lor")}
    assert left == ({("allreduce", b, d, o) for b in ("mpi", "gloo") for d, o in mismatched}
                    | {("allreduce", "gloo", "int8", "lor"),
                       ("allreduce", "mpi", "bfloat16", "sum"),
                       ("bcast", "mpi", "bfloat16", "none")})
    assert notes == [
        "--op band with float32, bfloat16: band takes integer dtypes only: int32, int64, int8, "
        "uint8; skipped",
        "--op lor with float32, bfloat16: lor takes integer dtypes only: int32, int64, int8, "
        "uint8; skipped",
        "allreduce with lor on gloo: torch.distributed has no logical or (ReduceOp.BOR is "
        "bitwise); skipped",
        "every collective that moves data with bfloat16 on mpi: mpi4py sends numpy arrays and "
        "numpy has no bfloat16; use gloo or nccl; skipped"]
    # nothing left to run is refused before any rank starts, with every reason
    with pytest.raises(UsageError, match="nothing to measure: --op lor with float32: lor takes "
                                         "integer dtypes only.*; allreduce on gloo: torch"):
        plan._unsupported(["allreduce"], setups[1:], {"dtype": "float32,int8", "op": "lor",
                                                      "backend": "gloo"})


def test_dtype_and_op_lists_take_all_and_keep_the_order_given_each_once():
    from collbench.run import plan

    kinds = plan._kinds({"dtype": "int8,all", "op": "max, sum,max"})
    assert [d for d, _ in kinds[::2]] == ["int8"] + [d for d in DTYPES if d != "int8"]
    assert {o for _, o in kinds} == {"max", "sum"} and kinds[:2] == (("int8", "max"),
                                                                       ("int8", "sum"))
    assert len(plan._kinds({"dtype": "float32", "op": "all"})) == len(OPS)
    for bad, said in (("float32,,int8", "an empty name"), ("float32,bogus", "unknown dtype")):
        with pytest.raises(UsageError, match=said):
            plan._kinds({"dtype": bad, "op": "sum"})
