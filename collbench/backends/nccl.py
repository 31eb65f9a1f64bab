"""The ``nccl`` backend: torch.distributed with NCCL, one GPU per rank.

The GPU is LOCAL_RANK mod the number of visible devices; buffers, synchronisation, free
memory, the CUDA clock and graphs belong to its ``TorchDevice`` (``collbench.backends.devices``).
The communicator is created eagerly (``device_id=``) so that its set-up is not inside any
measured call. In latency mode every timed call, in throughput mode every timed loop, ends with
a CUDA synchronise, so the time is the GPU's, not the launch's; graph and device timings take
NCCL's own time from CUDA events (``collbench.measure.timings``).
"""

from __future__ import annotations

from typing import Optional

from collbench.backends import _torch
from collbench.backends.torchdist import TorchBackend
from collbench.launch.origin.launcher import detect


def visible_gpus() -> int:
    if _torch.torch_missing():
        return 0
    torch, _ = _torch.torch_modules()
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def gpu_summary() -> str:
    if _torch.torch_missing():
        return "torch not installed"
    torch, _ = _torch.torch_modules()
    if not torch.cuda.is_available():
        return "no CUDA device visible"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return f"{len(names)}: " + ", ".join(names)


class NcclBackend(TorchBackend):
    name = "nccl"
    pg_backend = "nccl"
    reduce_ops = {op: name for op, name in TorchBackend.reduce_ops.items()
                  if op not in ("band", "bor")}
    missing_ops = {**TorchBackend.missing_ops,
                   "band": "NCCL has no bitwise reductions (torch refuses ReduceOp.BAND with nccl)",
                   "bor": "NCCL has no bitwise reductions (torch refuses ReduceOp.BOR with nccl)"}
    ops = tuple(reduce_ops)
    timings = ("latency", "throughput", "graph", "device")

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        missing = _torch.torch_missing()
        if missing:
            return missing
        torch, dist = _torch.torch_modules()
        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            why = ("it is a CPU-only build; install a CUDA build of torch"
                   if torch.version.cuda is None
                   else "check CUDA_VISIBLE_DEVICES and the NVIDIA driver")
            return (f"nccl needs a CUDA GPU, and torch {torch.__version__} sees no CUDA device "
                    f"({why})")
        if not dist.is_nccl_available():
            return (f"torch {torch.__version__} was built without NCCL; install a CUDA build of "
                    "torch")
        return None

    @classmethod
    def environment(cls) -> dict:
        return {} if _torch.torch_missing() else {"GPUs": gpu_summary()}

    @classmethod
    def self_launch_ranks(cls) -> Optional[int]:
        """One rank per visible GPU: NCCL refuses two ranks on one GPU."""
        return max(1, visible_gpus())

    def _torch_device(self):
        index = detect().local_rank % self.torch.cuda.device_count()
        self.torch.cuda.set_device(index)
        return self.torch.device("cuda", index)

    def _new_group(self, ranks=None):
        gpu = self.device.device
        try:
            group = self.dist.new_group(ranks=ranks, backend="nccl", device_id=gpu)
        except TypeError:             # torch before 2.6 has no device_id here; the all_reduce below
            # creates the communicator as early
            group = self.dist.new_group(ranks=ranks, backend="nccl")
        if ranks is None or self.dist.get_rank() in ranks:
            token = self.torch.ones(1, device=gpu)
            self.dist.all_reduce(token, group=group)      # make sure the communicator exists now
            self.device.synchronize()
            if ranks is None:
                self._token = token                       # the barrier's, over every rank
        return group

    def barrier(self) -> None:
        self.dist.all_reduce(self._token, group=self.whole)
        self.device.synchronize()

    def versions(self) -> dict:
        out = super().versions()
        torch = self.torch
        out["gpu"] = torch.cuda.get_device_name(self.device.device)
        out["gpu_capability"] = "%d.%d" % torch.cuda.get_device_capability(self.device.device)
        return out
