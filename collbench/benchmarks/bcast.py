"""bcast: the root's buffer reaches every rank (in place: one buffer per rank)."""

from functools import partial

from collbench.benchmarks.base import Collective


class Bcast(Collective):
    name, position = "bcast", 1
    rooted = True
    in_place = True
    memory_factors = {"buffer": (0.70, 0.70), "object": (1.85, 1.85), "tensor": (0.70, 0.70)}

    def expected(self, pattern, n, rank, roles, elements, idx):
        return pattern.value(roles.root, idx, n)

    def buffer_call(self, c):
        return partial(c.comm.Bcast, c.send, c.root)

    def object_call(self, c):
        mine = c.send if c.rank == c.root else None
        return lambda: c.comm.bcast(mine, root=c.root)

    def tensor_call(self, c):
        return partial(c.dist.broadcast, c.send, src=c.global_rank(c.root), group=c.group), c.poison_unless_root


BENCHMARK = Bcast()
