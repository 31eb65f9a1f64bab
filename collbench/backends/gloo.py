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
