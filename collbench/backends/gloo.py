"""The ``gloo`` backend: torch.distributed with gloo, on CPU tensors."""

from __future__ import annotations

from typing import Optional

from collbench.backends import _torch
from collbench.backends.torchdist import TorchBackend


#: The torch release whose gloo first takes ReduceOp.AVG (before, the call fails as it runs).
AVG_SINCE = (2, 7)


class GlooBackend(TorchBackend):
    name = "gloo"
    pg_backend = "gloo"

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        return _torch.torch_missing()

    @classmethod
    def supports(cls, *, collective, dtype, op: str) -> Optional[str]:
        if collective.reduces and op == "avg":
            installed = _torch.installed_version()
            if installed is not None and installed < AVG_SINCE:
                return (f"gloo averages from torch {'.'.join(map(str, AVG_SINCE))} on "
                        f"(ReduceOp.AVG), and torch {'.'.join(map(str, installed))} is installed "
                        "here")
        return super().supports(collective=collective, dtype=dtype, op=op)

    @classmethod
    def environment(cls) -> dict:
        """The ``--init-method`` forms usable here: the default group, gloo under nccl too, meets
        so."""
        if _torch.torch_missing():
            return {}
        from collbench.launch.network.rendezvous import init_methods_here
        return {"init methods": init_methods_here()}
