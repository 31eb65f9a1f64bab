"""Benchmark specs checked against a plain numpy simulation of what each one moves."""

import numpy as np
import pytest

from collbench.benchmarks.base import Roles
from collbench.benchmarks.registry import BENCHMARKS, COLLECTIVES, NAMES, ORDER, get_benchmark
from collbench.benchmarks.check import EXACT_LIMIT, Tables, _sum_op, expected, pattern, sum_stride
from collbench.benchmarks.dtypes import dtype_of
from collbench.benchmarks.ops import NO_OP, OPS

#: the reductions every dtype takes, numpy's ufuncs; tests/test_ops.py checks the others
ARITHMETIC = ["sum", "max", "min", "prod"]
from collbench.errors import UsageError


def _sends(op, n, length):
    k = np.arange(length)
    return [np.asarray(op.value(r, k, n)) for r in range(n)]


def simulate(name, op, n, elements, root, pair=(0, 1)):
    """What each rank receives, computed the obvious way from every rank's send buffer."""
    coll = BENCHMARKS[name]
    a, b = pair
    send_len, recv_len = coll.lengths(elements, n)
    sends = _sends(op, n, send_len)
    ufunc = OPS[op.name].combine if op.name in OPS else None
    reduced = ufunc.reduce(np.stack(sends), axis=0) if ufunc and sends and send_len else None
    c = elements // n
    out = {
        "allreduce": lambda r: reduced,
        "reduce": lambda r: reduced if r == root else None,
        "bcast": lambda r: sends[root],
        "allgather": lambda r: np.concatenate(sends),
        "gather": lambda r: np.concatenate(sends) if r == root else None,
        "scatter": lambda r: sends[root][r * c:(r + 1) * c],
        "alltoall": lambda r: np.concatenate([sends[j][r * c:(r + 1) * c] for j in range(n)]),
        # uniform
        "alltoallv": lambda r: np.concatenate([sends[j][r * c:(r + 1) * c] for j in range(n)]),
        # uniform: pieces of size / n
        "allgatherv": lambda r: np.concatenate(sends),
        "gatherv": lambda r: np.concatenate(sends) if r == root else None,
        "scatterv": lambda r: sends[root][r * c:(r + 1) * c],
        "reduce_scatter": lambda r: reduced[r * c:(r + 1) * c],
        # uniform: pieces of size / n
        "reduce_scatterv": lambda r: reduced[r * c:(r + 1) * c],
        "barrier": lambda r: None,
        "pingpong": lambda r: sends[b] if r == a else sends[a] if r == b else None,
        # the sender's acknowledgement is not checked
        "bw": lambda r: sends[a] if r == b else None,
        "bibw": lambda r: sends[b] if r == a else sends[a] if r == b else None,
        "sendrecv": lambda r: sends[(r - 1) % n],
    }[name]
    return [out(r) for r in range(n)], recv_len


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("op_name", ARITHMETIC + ["sum, stride 3"])
@pytest.mark.parametrize("n", [2, 3, 8])
def test_expected_matches_simulation(name, op_name, n):
    coll = BENCHMARKS[name]
    if not coll.reduces:
        op = pattern(NO_OP, "float32")
    else:   # a limit of 9 makes the sum's stride ceil(n / 3) > 1 at 8 ranks: only some ranks
            # contribute
        op = _sum_op(9) if op_name == "sum, stride 3" else pattern(op_name, "float32")
    elements = 0 if not coll.moves_data else 24 * n
    root = n - 1 if coll.rooted else 0
    pair = (n - 1, 0)                 # the second rank of the pair need not follow the first
    received, recv_len = simulate(name, op, n, elements, root, pair)
    for rank in range(n):
        parts = coll.received(n, rank, Roles(root=root, pairs=(pair,)), elements, recv_len)
        want = expected(op, n, parts, recv_len, np.int64)
        if received[rank] is None:
            assert want is None
        else:
            np.testing.assert_array_equal(np.asarray(want), received[rank])


@pytest.mark.parametrize("name,factors", [
    ("allreduce", {2: 1.0, 3: 4 / 3, 8: 1.75}),
    ("bcast", {2: 1.0, 3: 1.0, 8: 1.0}),
    ("reduce", {2: 1.0, 3: 1.0, 8: 1.0}),
    ("allgather", {2: 0.5, 3: 2 / 3, 8: 0.875}),
    ("gather", {2: 0.5, 3: 2 / 3, 8: 0.875}),
    ("scatter", {2: 0.5, 3: 2 / 3, 8: 0.875}),
    ("alltoall", {2: 0.5, 3: 2 / 3, 8: 0.875}),
    ("reduce_scatter", {2: 0.5, 3: 2 / 3, 8: 0.875}),
])
def test_bus_factors(name, factors):
    for n, factor in factors.items():
        assert COLLECTIVES[name].bus_factor(n) == pytest.approx(factor)


def test_buffer_lengths_follow_nccl_tests_size_semantics():
    n, elements = 4, 1024
    assert COLLECTIVES["allreduce"].lengths(elements, n) == (1024, 1024)
    assert COLLECTIVES["bcast"].lengths(elements, n) == (1024, 1024)
    assert COLLECTIVES["allgather"].lengths(elements, n) == (256, 1024)
    assert COLLECTIVES["gather"].lengths(elements, n) == (256, 1024)
    assert COLLECTIVES["scatter"].lengths(elements, n) == (1024, 256)
    assert COLLECTIVES["alltoall"].lengths(elements, n) == (1024, 1024)
    assert COLLECTIVES["reduce_scatter"].lengths(elements, n) == (1024, 256)


def _reduce_in_order(values, ufunc, dt, order):
    """Reduce ``values`` (ranks × elements) in the dtype, rounding after every step as a library
    does.

    ``sequential``: rank 0, 1, … n-1; ``ring``: element k starts at rank k mod n and goes round, as
    a ring reduce-scatter does per chunk; ``tree``: pairs, then pairs of pairs (recursive halving).
    """
    n, width = values.shape
    values = values.astype(dt)
    if order == "tree":
        while len(values) > 1:
            head, tail = values[: len(values) // 2 * 2], values[len(values) // 2 * 2:]
            values = np.concatenate([ufunc(head[0::2], head[1::2]).astype(dt), tail])
        return values[0]
    start = np.arange(width) % n if order == "ring" else np.zeros(width, dtype=int)
    acc = values[start, np.arange(width)]
    for step in range(1, n):
        acc = ufunc(acc, values[(start + step) % n, np.arange(width)]).astype(dt)
    return acc


ORDERS = ("sequential", "ring", "tree")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("op_name", ARITHMETIC)
@pytest.mark.parametrize("n", [2, 3, 55, 64, 512, 4096])
def test_check_pattern_is_exact_in_every_dtype_order_and_scale(dtype, op_name, n):
    op, dt = pattern(op_name, dtype), dtype_of(dtype).numpy
    # every residue of the sum's stride, which is at most 7 here
    k = np.arange(96)
    values = np.stack([np.asarray(op.value(r, k, n)) for r in range(n)])
    want = np.asarray(op.reduced(k, n))
    assert want.max() <= EXACT_LIMIT[dtype]
    ufunc = OPS[op_name].combine
    # closed form, in exact integers
    np.testing.assert_array_equal(want, ufunc.reduce(values, axis=0))
    for order in ORDERS:
        np.testing.assert_array_equal(_reduce_in_order(values, ufunc, dt, order), want.astype(dt),
                                      err_msg=order)


def test_sum_pattern_keeps_every_rank_while_it_can_and_every_element_nonzero():
    assert (sum_stride(682, EXACT_LIMIT["float16"]) == 1
            and sum_stride(683, EXACT_LIMIT["float16"]) == 2)
    assert (sum_stride(4096, EXACT_LIMIT["float16"]) == 7
            and sum_stride(4096, EXACT_LIMIT["float32"]) == 1)
    op, k = pattern("sum", "float16"), np.arange(96)
    for n in (2, 682, 683, 4096):
        assert np.asarray(op.reduced(k, n)).min() > 0
    # one rank's contribution lost or doubled changes every element it contributes to
    values = np.stack([np.asarray(op.value(r, k, 4096)) for r in range(4096)])
    assert np.all((values[5] == 0) | (values.sum(axis=0) - values[5] != op.reduced(k, 4096)))


def test_the_simulation_catches_a_pattern_that_is_not_exact():
    """Every rank adding (rank + 1) + k % 7, the earlier pattern, rounds in float16 at 64 ranks
    and beyond."""
    k, n = np.arange(96), 64
    values = np.stack([(r + 1) + k % 7 for r in range(n)])
    exact = values.sum(axis=0)
    assert any(np.any(_reduce_in_order(values, np.add, np.float16, order)
                      != exact.astype(np.float16))
               for order in ORDERS)


def test_unknown_benchmark():
    with pytest.raises(UsageError, match="unknown benchmark .allreduc.; choose one of: allreduce, "
                                         ".*, pingpong, bw, bibw, sendrecv"):
        get_benchmark("allreduc")


def test_a_family_a_collective_does_not_implement_is_unsupported_by_its_backends():
    from collbench.backends.gloo import GlooBackend
    from collbench.backends.mpi import MpiBackend
    from collbench.benchmarks.base import Collective

    class BufferOnly(Collective):
        name, position = "buffer-only", 99

        def buffer_call(self, c):
            return c.comm.Barrier

    coll = BufferOnly()
    assert (coll.issued_by("buffer") and not coll.issued_by("tensor")
            and not coll.issued_by("object"))
    assert MpiBackend.supports(collective=coll, dtype=dtype_of("float32"), op="none") is None
    assert GlooBackend.supports(collective=coll, dtype=dtype_of("float32"), op="none") == \
        "buffer-only has no tensor call"
    assert all(c.issued_by(f) for c in COLLECTIVES.values() for f in ("buffer", "object"))
    # torch's gather and scatter take pieces of one length: gatherv and scatterv say so on both
    assert [c.name for c in COLLECTIVES.values()
            if not c.issued_by("tensor")] == ["gatherv", "scatterv"]
    assert all({"gloo", "nccl"} <= set(COLLECTIVES[name].lacks) for name in ("gatherv", "scatterv"))
    assert GlooBackend.supports(collective=COLLECTIVES["allgatherv"], dtype=dtype_of("float32"),
                                op="none") == \
        COLLECTIVES["allgatherv"].lacks["gloo"]


def test_every_benchmark_module_is_found_in_its_place():
    assert ORDER == ("allreduce", "bcast", "reduce", "allgather", "allgatherv", "gather", "gatherv",
                     "scatter",
                     "scatterv", "alltoall", "alltoallv", "reduce_scatter", "reduce_scatterv",
                     "barrier")
    assert NAMES == ("allreduce", "bcast", "reduce", "allgather", "allgatherv", "gather", "gatherv",
                     "scatter",
                     "scatterv", "alltoall", "alltoallv", "reduce_scatter", "reduce_scatterv",
                     "barrier", "pingpong",
                     "bw", "bibw", "sendrecv")
    assert [name for name in NAMES if name not in ORDER] == ["pingpong", "bw", "bibw", "sendrecv"]


@pytest.mark.parametrize("name,part_of,timed_on,per_call,bus", [
    ("allreduce", {0, 1, 2, 3}, {0, 1, 2, 3}, 1, 1.5),
    ("pingpong", {3, 1}, {3}, 2, 1.0),           # half a round trip, on the rank that starts it
    ("bw", {3, 1}, {3}, 16, 1.0),                # a window's time / window, on the sender
    ("bibw", {3, 1}, {3}, 16, 2.0),              # both directions count
    ("sendrecv", {0, 1, 2, 3}, {0, 1, 2, 3}, 1, 1.0),
])
def test_who_takes_part_whose_clock_counts_and_what_a_sample_is(name, part_of, timed_on, per_call,
                                                                bus):
    bench, roles = BENCHMARKS[name], Roles(pairs=((3, 1),), window=16)
    assert {r for r in range(4) if bench.takes_part(r, roles)} == part_of
    assert {r for r in range(4) if bench.timed_on(r, roles)} == timed_on
    assert bench.messages_per_call(roles) == per_call
    assert bench.bus_factor(4) == bus
    assert bench.row_axes(roles) == {"pair": "3-1" if bench.paired else "",
                                     "window": 16 if bench.windowed else 1, "pairs_at_once": 1}
    # a pair paces itself; a ring or a collective has a barrier
    assert bench.self_paced == bench.paired


@pytest.mark.parametrize("name", ["pingpong", "bw", "allreduce"])
def test_a_step_of_pairs_is_one_group_per_pair_each_timed_on_its_first_rank(name):
    bench, roles = BENCHMARKS[name], Roles(pairs=((0, 3), (4, 1)), window=8)
    if not bench.paired:         # a collective: one group of every rank, whatever the pairs say
        assert bench.group_count(roles) == 1 and {bench.group_of(r, roles) for r in range(6)} == {0}
        return
    assert bench.group_count(roles) == 2
    assert [bench.group_of(r, roles) for r in range(6)] == [0, 1, None, 0, 1, None]
    assert {r for r in range(6) if bench.timed_on(r, roles)} == {0, 4}
    assert [bench.row_axes(roles, g)["pair"] for g in (0, 1)] == ["0-3", "4-1"]
    assert bench.row_axes(roles, 1)["pairs_at_once"] == 2


@pytest.mark.parametrize("op_name", ARITHMETIC)
@pytest.mark.parametrize("n", [2, 64, 512, 4096])
def test_check_pattern_is_exact_in_bfloat16_in_every_order(op_name, n):
    """bfloat16 keeps 8 significant bits: integers are exact up to 256. Simulated with torch,
    rounding to bfloat16 after every step."""
    torch = pytest.importorskip("torch")
    op = pattern(op_name, "bfloat16")
    k = np.arange(96)
    values = np.stack([np.asarray(op.value(r, k, n)) for r in range(n)])
    want = np.asarray(op.reduced(k, n))
    assert want.max() <= EXACT_LIMIT["bfloat16"] and values.max() <= EXACT_LIMIT["bfloat16"]
    step = {"sum": torch.add, "max": torch.maximum, "min": torch.minimum,
            "prod": torch.mul}[op_name]
    t = torch.tensor(values, dtype=torch.bfloat16)
    orders = {"sequential": list(range(n)), "reversed": list(range(n - 1, -1, -1))}
    for name, order in orders.items():
        acc = t[order[0]].clone()
        for r in order[1:]:
            acc = step(acc, t[r])                    # each step rounds to bfloat16
        assert acc.float().numpy().tolist() == want.astype(np.float32).tolist(), name
    while len(t) > 1:                                # tree: pairs, then pairs of pairs
        head, tail = t[: len(t) // 2 * 2], t[len(t) // 2 * 2:]
        t = torch.cat([step(head[0::2], head[1::2]), tail])
    assert t[0].float().numpy().tolist() == want.astype(np.float32).tolist(), "tree"


def _device_for(dtype):
    """The device a backend would fill for ``dtype``: numpy buffers, or CPU tensors for bfloat16."""
    from collbench.backends.devices import HostDevice, TorchDevice

    if dtype.numpy is not None:
        return HostDevice()
    torch = pytest.importorskip("torch")
    return TorchDevice(torch, torch.device("cpu"))


@pytest.mark.parametrize("dtype_name",
                         ["float16", "bfloat16", "float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("n", [2, 250, 256, 2042, 4096])
def test_moved_data_survives_the_fill_in_every_dtype_at_any_scale(dtype_name, n):
    """What bcast, gather, allgather, scatter and alltoall move is filled into the dtype's buffer,
    read back, and compared with the expected values as the check does. bfloat16 holds integers
    up to 256 exactly: the earlier pattern ((rank + 1) + k % 7) was rounded on filling from rank
    250 on, and a correct gather counted as wrong."""
    dtype, op = dtype_of(dtype_name), pattern(NO_OP, dtype_name)
    device, per_rank = _device_for(dtype), 16
    coll = COLLECTIVES["gather"]
    tables = Tables(op, n, dtype, device)
    arrived = []
    for r in range(n):                         # each rank fills its buffer as the sweep does
        buffers = device.allocate(per_rank, per_rank, dtype, in_place=False)
        tables.fill(buffers.send[:per_rank], r)
        arrived.append(buffers.send[:per_rank])
    # the root's receive buffer
    got = np.concatenate(arrived) if dtype.numpy is not None else device.torch.cat(arrived)
    parts = coll.received(n, 0, Roles(), per_rank * n, per_rank * n)
    assert tables.count_wrong(got, parts, per_rank * n) == 0
    host = got if dtype.numpy is not None else got.float().numpy()
    assert np.array_equal(host, expected(op, n, parts, per_rank * n, dtype.host))
    values = np.stack([np.asarray(op.value(r, np.arange(per_rank), n)) for r in range(n)])
    assert values.min() >= 1 and values.max() <= EXACT_LIMIT[dtype_name]
    span = op.period(n)
    # every rank's data differs from every other's at every element
    if n <= span:
        assert all(len(set(column)) == n for column in values.T.tolist())
    else:                                      # ranks that agree mod span still differ in most
                                               # elements
        assert len({row.tobytes() for row in values}) == n
        alias = np.arange(span, n)
        assert (values[alias] != values[alias % span]).mean(axis=1).min() > 0.5


def test_the_fill_check_catches_the_earlier_moved_pattern_in_bfloat16():
    torch = pytest.importorskip("torch")
    k = np.arange(16)
    earlier = (250 + 1) + k % 7                 # rank 250, as it was
    filled = torch.tensor(earlier, dtype=torch.bfloat16).float().numpy()
    assert np.count_nonzero(filled != earlier.astype(np.float32)) > 0
