"""The device layer: where buffers live, apart from the library that moves them."""

import numpy as np
import pytest

from collbench.backends.devices import PAGE, HostDevice, TorchDevice
from collbench.benchmarks.datatypes import dtype_of


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64"])
def test_host_device_buffers_are_page_aligned_filled_poisoned_and_read_back(dtype):
    device = HostDevice()
    buffers = device.allocate(1000, 250, dtype_of(dtype), in_place=False)
    assert buffers.send.ctypes.data % PAGE == 0 and buffers.recv.ctypes.data % PAGE == 0
    assert buffers.send.dtype == np.dtype(dtype) and len(buffers.send) == 1000 and len(buffers.recv) == 250
    device.fill(buffers, 10, np.arange(5, dtype=dtype))
    assert list(buffers.send[10:15]) == [0, 1, 2, 3, 4] and buffers.send[9] == 0
    device.poison(buffers.recv[:100])
    got = device.to_host(buffers.recv)
    poisoned, rest = got[:100], got[100:]
    assert (np.isnan(poisoned).all() if dtype.startswith("float") else (poisoned == -1).all()) and (rest == 0).all()
    assert not device.asynchronous and device.free_memory() is None


def test_host_device_in_place_is_one_buffer():
    buffers = HostDevice().allocate(64, 64, dtype_of("float32"), in_place=True)
    assert buffers.send is buffers.recv


def test_torch_device_on_the_cpu():
    torch = pytest.importorskip("torch")
    device = TorchDevice(torch, torch.device("cpu"))
    buffers = device.allocate(100, 50, dtype_of("float16"), in_place=False)
    assert buffers.send.dtype == torch.float16 and buffers.recv.numel() == 50
    device.fill(buffers, 3, np.array([7, 8], dtype=np.float16))
    assert device.to_host(buffers.send)[2:6].tolist() == [0, 7, 8, 0]
    device.poison(buffers.recv[:10])
    assert np.isnan(device.to_host(buffers.recv)[:10]).all()
    assert not device.asynchronous and device.free_memory() is None
    device.synchronize()


def test_torch_device_holds_bfloat16_and_reads_it_back_exactly():
    torch = pytest.importorskip("torch")
    device = TorchDevice(torch, torch.device("cpu"))
    buffers = device.allocate(300, 300, dtype_of("bfloat16"), in_place=False)
    assert buffers.send.dtype == torch.bfloat16
    device.fill(buffers, 0, np.arange(257, dtype=np.float32))       # integers exact up to 256 in bfloat16
    back = device.to_host(buffers.send)
    assert back.dtype == np.float32 and back[:256].tolist() == list(range(256)) and back[256] == 256.0
