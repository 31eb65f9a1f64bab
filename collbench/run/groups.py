"""Splitting the ranks into groups that measure at once (``--split``, ``--split-mask``).

Users at scale measure within a host, across hosts and in concurrent groups, as nccl-tests,
IMB and PARAM let them. A split gives every rank a group (``intra``, ``inter``, ``N`` or
``mask:M``); each backend makes a communicator per group, every group runs the same calls at
the same time, and each group's times make rows of their own. Groups are numbered by their
first ranks and must be of equal size, two ranks at least, so that a row's figures compare
across groups. The splits: docs/usage.md, "Groups measuring at once (--split)".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Split:
    """How the ranks split: ``mode`` intra, inter, a number of groups ("4"), or mask:M."""

    mode: str

    @classmethod
    def of(cls, split: Optional[str], mask: Optional[int]) -> Optional["Split"]:
        """From the options (``--split``, ``--split-mask``); None when neither is given."""
        if split is not None and mask is not None:
            from collbench.errors import UsageError
            raise UsageError("--split and --split-mask both say how to split the ranks; give one")
        if mask is not None:
            return cls(f"mask:{mask:#x}")
        return cls(split) if split is not None else None

    def colours(self, hosts: list) -> list:
        """Each rank's group key, in rank order (``hosts``: each rank's host)."""
        n = len(hosts)
        if self.mode == "intra":
            return list(hosts)
        if self.mode == "inter":
            seen: dict = {}
            out = []
            for host in hosts:
                out.append(seen.get(host, 0))
                seen[host] = seen.get(host, 0) + 1
            return out
        if self.mode.startswith("mask:"):
            mask = int(self.mode[5:], 16)
            return [rank & mask for rank in range(n)]
        groups = int(self.mode)
        per = max(1, n // groups)
        return [rank // per for rank in range(n)]

    def groups(self, hosts: list) -> tuple:
        """The groups as tuples of ranks, numbered by their first rank."""
        members: dict = {}
        for rank, colour in enumerate(self.colours(hosts)):
            members.setdefault(colour, []).append(rank)
        return tuple(tuple(ranks) for ranks in members.values())

    def problem(self, hosts: list) -> Optional[str]:
        """Why this split makes no sense on these ranks, or None."""
        n = len(hosts)
        distinct = list(dict.fromkeys(hosts))
        if self.mode == "inter" and len(distinct) < 2:
            return (f"--split inter puts a rank of each host in a group, but all {n} ranks are on "
                    f"one host ({distinct[0]}); use --split intra or --split N")
        if self.mode.isdigit() and n % int(self.mode):
            return f"--split {self.mode} cannot make {self.mode} equal groups of {n} ranks"
        groups = self.groups(hosts)
        sizes = sorted({len(g) for g in groups})
        if sizes[0] < 2:
            lone = next(g for g in groups if len(g) < 2)
            return (f"{self.option_text} leaves rank {lone[0]} in a group of its own, which has "
                    "nobody to communicate with; every group needs at least 2 ranks")
        if len(sizes) > 1:
            counts = (", ".join(f"{len(g)}" for g in groups[:8])
                      + (", ..." if len(groups) > 8 else ""))
            why = (" (hosts run different numbers of ranks)"
                   if self.mode in ("intra", "inter") else "")
            return (f"{self.option_text} makes groups of unequal sizes ({counts}){why}; groups "
                    "must be equal to be compared")
        return None

    @property
    def option_text(self) -> str:
        """The option as the user gave it: "--split 2", "--split-mask 0x1"."""
        return (f"--split-mask {self.mode[len('mask:'):]}"
                if self.mode.startswith("mask:") else f"--split {self.mode}")

    def group_hosts(self, group: tuple, hosts: list) -> str:
        """The hosts of a group's ranks, each once, in rank order."""
        return ",".join(dict.fromkeys(hosts[r] for r in group))
