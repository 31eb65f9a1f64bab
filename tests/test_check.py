"""The result check where the buffers live: one period of each pattern as a table, repeated into
the send buffer and compared with the receive buffer a bounded piece at a time, on numpy arrays
and on torch tensors (the CPU here; a GPU in tests/test_torch_backends.py when one is visible)."""

import numpy as np
import pytest

from collbench.backends.devices import HostDevice
from collbench.benchmarks.base import Roles
from collbench.benchmarks.check import (CHUNK, EXACT_LIMIT, REDUCED, SHORTEST_TABLE,
                                        TOLERANCE_CHUNK, WORK_BYTES, Part,
                                        Tables, _pieces, expected, pattern)
from collbench.benchmarks.dtypes import DTYPES
from collbench.benchmarks.ops import NO_OP, OPS, element_of, op_refusal
from collbench.benchmarks.registry import BENCHMARKS


def _devices():
    devices = {"numpy": HostDevice()}
    try:
        import torch

        from collbench.backends.devices import TorchDevice
        devices["torch"] = TorchDevice(torch, torch.device("cpu"))
    except ImportError:
        pass
    return devices


DEVICES = _devices()


def _cases():
    for name, coll in BENCHMARKS.items():
        if coll.moves_data:
            for op in (list(OPS) if coll.reduces else [NO_OP]):
                yield name, op


def _host(device_name, array):
    return array if device_name == "numpy" else (array.float()
                                                 if array.dtype.is_floating_point
                                                 else array).numpy()


def _arrived(device_name, values, element):
    """A receive buffer holding ``values``, as the backend's device holds it."""
    if device_name == "numpy":
        return values.astype(element.numpy)
    torch = DEVICES["torch"].torch
    return torch.from_numpy(values.copy()).to(getattr(torch, element.name))


def _bump(array, at):
    """One element made wrong, as a library that delivered it wrong would leave it."""
    if getattr(array.dtype, "names", None):
        array["value"][at] += 1
    else:
        array[at] += 1


@pytest.mark.parametrize("device_name", list(DEVICES))
@pytest.mark.parametrize("name,op", list(_cases()))
def test_every_benchmark_and_op_fills_and_checks_exactly_and_catches_one_wrong_element(
        device_name, name, op):
    device, coll = DEVICES[device_name], BENCHMARKS[name]
    for dtype in DTYPES:
        element = element_of(dtype, op)
        if op_refusal(op, dtype) or (device_name == "numpy" and element.numpy is None) or \
                (device_name == "torch" and element.host.names):
            continue
        check = pattern(op, dtype)
        for n in (1, 2, 3, 7):
            if coll.min_ranks > n:
                continue
            roles = Roles(root=n - 1, pairs=((n - 1, 0),) if n > 1 else ((0, 0),))
            elements = 9 * n * 41                       # pieces of several periods, heads and tails
            send_len, recv_len = coll.lengths(elements, n)
            tables = Tables(check, n, element, device)
            for rank in range(n):
                buffers = device.allocate(send_len + 3, recv_len, element, in_place=False)
                tables.fill(buffers.send[:send_len], rank)
                want = np.asarray(check.value(rank, np.arange(send_len), n)).astype(element.host)
                assert np.array_equal(_host(device_name, buffers.send[:send_len]),
                                      want), (dtype, n, rank)
                past = _host(device_name, buffers.send[send_len:])
                assert np.array_equal(past, np.zeros_like(past))       # nothing written past it
                parts = coll.received(n, rank, roles, elements, recv_len)
                arrived = expected(check, n, parts, recv_len, element.host)
                if arrived is None:
                    assert tables.count_wrong(None, parts, recv_len) == 0
                    continue
                got = _arrived(device_name, arrived, element)
                assert tables.count_wrong(got, parts, recv_len) == 0, (dtype, n, rank)
                _bump(got, recv_len // 2)
                assert tables.count_wrong(got, parts, recv_len) == 1, (dtype, n, rank)
                # a short result: all wrong
                assert tables.count_wrong(got[:-1], parts, recv_len) == recv_len
                device.poison(got)
                # nothing arrived
                assert tables.count_wrong(got, parts, recv_len) == recv_len


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int8", "uint8", "float32", "int64"])
def test_moved_data_tables_are_shared_by_phase_and_stay_within_the_dtype(dtype):
    """value(r, k) = value(r0, k + phase) for every rank: ranks whose step agrees share one table,
    past the period too (bfloat16's is 251, so 600 ranks take three steps)."""
    check, n = pattern(NO_OP, dtype), 600
    period = check.period(n)
    k = np.arange(3 * period + 11)
    bases, ranks = set(), [r for r in (0, 1, period - 1, period, period + 7, 2 * period + 3, n - 1)
                           if r < n]
    for r in ranks:
        base, phase = check.shift(r, n)
        bases.add(base)
        assert np.array_equal(check.value(r, k, n), check.value(base, (k + phase) % period, n)), r
        values = check.value(r, k, n)
        assert values.min() >= 1 and values.max() <= EXACT_LIMIT[dtype]
    assert len(bases) == len({r // period for r in ranks}) and (len(bases) > 1) == (period < n)


def test_pieces_cover_every_element_once_in_bounded_steps():
    for length, period, phase, chunk in [(10, 3, 2, 4), (100, 7, 0, 14), (5, 9, 4, 100),
                                         (0, 5, 0, 10),
                                         (1 << 16, 65521, 65520, 1 << 12), (1000, 4, 3, 8)]:
        covered = []
        for start, stop, rows, t0, t1 in _pieces(length, period, phase, chunk):
            covered += range(start, stop)
            assert stop - start == (t1 - t0 if rows is None else rows * period)
            assert rows is None or (t0, t1) == (0, period) and rows * period <= max(chunk, period)
        assert covered == list(range(length)), (length, period, phase)


def test_a_check_holds_a_bounded_amount_beside_the_buffers():
    """What the memory guard counts on a device: the tables and one step's temporaries, whatever
    the size (the earlier check copied every receive buffer to the host, 1 GiB at 1 GiB)."""
    tables = Tables(pattern(NO_OP, "float64"), 4096, DTYPES["float64"], HostDevice())
    for r in range(0, 4096, 97):
        tables._table(r)
    held = sum(t.nbytes for t in tables._made.values())
    assert held < 8 << 20 and CHUNK + 3 * 8 * TOLERANCE_CHUNK + held <= WORK_BYTES
    short = Tables(pattern("avg", "float32"), 4, DTYPES["float32"], HostDevice())
    assert len(short._table(REDUCED)[0]) >= SHORTEST_TABLE


def test_avg_compares_within_its_tolerance_where_the_buffers_are():
    """A premultiplied average within the tolerance passes; the sum instead of the average does
    not."""
    n, length = 3, 5000
    check, element = pattern("avg", "float16"), DTYPES["float16"]
    tables = Tables(check, n, element, HostDevice())
    parts = (Part(0, length, REDUCED),)
    want = expected(check, n, parts, length, np.float16)
    near = (want.astype(np.float64) * (1 + 0.9 * check.tolerance(n))).astype(np.float16)
    assert check.tolerance(n) > 0 and tables.count_wrong(near, parts, length) == 0
    assert tables.count_wrong((want * n).astype(np.float16), parts, length) == length
