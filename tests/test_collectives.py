"""Collective specs checked against a plain numpy simulation of each collective."""

import numpy as np
import pytest

from collbench.collectives import COLLECTIVES, ORDER, get_collective
from collbench.datatypes import OPS, dtype_of
from collbench.errors import UsageError


def _sends(op, n, length):
    k = np.arange(length)
    return [np.asarray(op.value(r, k, n)) for r in range(n)]


def simulate(name, op, n, elements, root):
    """What each rank receives, computed the obvious way from every rank's send buffer."""
    coll = COLLECTIVES[name]
    send_len, recv_len = coll.lengths(elements, n)
    sends = _sends(op, n, send_len)
    reduced = op.ufunc.reduce(np.stack(sends), axis=0) if sends and send_len else None
    c = elements // n
    out = {
        "allreduce": lambda r: reduced,
        "reduce": lambda r: reduced if r == root else None,
        "bcast": lambda r: sends[root],
        "allgather": lambda r: np.concatenate(sends),
        "gather": lambda r: np.concatenate(sends) if r == root else None,
        "scatter": lambda r: sends[root][r * c:(r + 1) * c],
        "alltoall": lambda r: np.concatenate([sends[j][r * c:(r + 1) * c] for j in range(n)]),
        "reduce_scatter": lambda r: reduced[r * c:(r + 1) * c],
        "barrier": lambda r: None,
    }[name]
    return [out(r) for r in range(n)], recv_len


@pytest.mark.parametrize("name", ORDER)
@pytest.mark.parametrize("op_name", list(OPS))
@pytest.mark.parametrize("n", [2, 3, 8])
def test_expected_matches_simulation(name, op_name, n):
    coll = COLLECTIVES[name]
    op = OPS[op_name]
    elements = 0 if not coll.moves_data else 24 * n
    root = n - 1 if coll.rooted else 0
    received, recv_len = simulate(name, op, n, elements, root)
    for rank in range(n):
        want = coll.expected(op, n, rank, root, elements, np.arange(recv_len))
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


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("op_name", list(OPS))
@pytest.mark.parametrize("n", [2, 3, 16, 55])
def test_check_pattern_is_exact_in_every_dtype(dtype, op_name, n):
    op, dt = OPS[op_name], dtype_of(dtype)
    k = np.arange(1000)
    per_rank = [np.asarray(op.value(r, k, n)).astype(dt) for r in range(n)]
    got = op.ufunc.reduce(np.stack(per_rank), axis=0)
    np.testing.assert_array_equal(got, np.asarray(op.reduced(k, n)).astype(dt))


def test_unknown_collective():
    with pytest.raises(UsageError, match="unknown collective 'allreduc'"):
        get_collective("allreduc")
