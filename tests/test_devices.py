"""The device layer: where buffers live, apart from the library that moves them."""

import numpy as np
import pytest

from collbench.backends.devices import PAGE, HostDevice, TorchDevice
from collbench.benchmarks.check import Tables, pattern
from collbench.benchmarks.dtypes import dtype_of


def _values(rank, length, dtype="float32", n=2):
    return np.asarray(pattern("none", dtype).value(rank, np.arange(length), n))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64"])
def test_host_device_buffers_are_page_aligned_filled_poisoned_and_read_back(dtype):
    device = HostDevice()
    buffers = device.allocate(1000, 250, dtype_of(dtype), in_place=False)
    assert buffers.send.ctypes.data % PAGE == 0 and buffers.recv.ctypes.data % PAGE == 0
    assert (buffers.send.dtype == np.dtype(dtype) and len(buffers.send) == 1000
            and len(buffers.recv) == 250)
    Tables(pattern("none", dtype), 2, dtype_of(dtype), device).fill(buffers.send[:900], 1)
    assert (buffers.send[:900] == _values(1, 900, dtype)).all() and (buffers.send[900:] == 0).all()
    device.poison(buffers.recv[:100])
    poisoned, rest = buffers.recv[:100], buffers.recv[100:]
    assert (np.isnan(poisoned).all()
            if dtype.startswith("float") else (poisoned == -1).all()) and (rest == 0).all()
    assert not device.asynchronous and device.free_memory() is None


def test_host_device_in_place_is_one_buffer():
    buffers = HostDevice().allocate(64, 64, dtype_of("float32"), in_place=True)
    assert buffers.send is buffers.recv


def test_torch_device_on_the_cpu():
    torch = pytest.importorskip("torch")
    device = TorchDevice(torch, torch.device("cpu"))
    buffers = device.allocate(100, 50, dtype_of("float16"), in_place=False)
    assert buffers.send.dtype == torch.float16 and buffers.recv.numel() == 50
    Tables(pattern("none", "float16"), 2, dtype_of("float16"), device).fill(buffers.send[:60], 0)
    assert buffers.send[:60].numpy().tolist() == _values(0, 60, "float16").tolist()
    assert (buffers.send[60:] == 0).all()
    device.poison(buffers.recv[:10])
    assert buffers.recv[:10].isnan().all() and not buffers.recv[10:].isnan().any()
    assert not device.asynchronous and device.free_memory() is None
    device.synchronize()


def test_torch_device_holds_bfloat16_and_reads_it_back_exactly():
    torch = pytest.importorskip("torch")
    device = TorchDevice(torch, torch.device("cpu"))
    buffers = device.allocate(300, 300, dtype_of("bfloat16"), in_place=False)
    assert buffers.send.dtype == torch.bfloat16
    # integers exact up to 256
    table = device.table(np.arange(257, dtype=np.float32), dtype_of("bfloat16"))
    assert table.dtype == torch.bfloat16 and table.float().tolist() == list(range(257))
