"""The ``gloo`` backend: torch.distributed with gloo, on CPU tensors."""

from __future__ import annotations

from typing import Optional

from collbench.backends import _torch
from collbench.backends.torchdist import TorchBackend


class GlooBackend(TorchBackend):
    name = "gloo"
    pg_backend = "gloo"

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        return _torch.torch_missing()

    @classmethod
    def environment(cls) -> dict:
        """The ``--init-method`` forms usable here: the default group, gloo under nccl too, meets so."""
        if _torch.torch_missing():
            return {}
        from collbench.launch.rendezvous import init_methods_here
        return {"init methods": init_methods_here()}
