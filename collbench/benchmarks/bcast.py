"""bcast: the root's buffer reaches every rank (in place: one buffer per rank)."""

from collbench.benchmarks.base import IN_PLACE, Collective
from collbench.benchmarks.check import Part


class Bcast(Collective):
    name, position = "bcast", 1
    rooted = True
    in_place = True
    memory_factors = {"buffer": (0.70, 0.70), "object": (1.85, 1.85), "tensor": (0.70, 0.70)}

    def placements(self, family):
        # one buffer per rank, in every API: the root's input is where every rank's result goes
        return (IN_PLACE,)

    def received(self, n, rank, roles, elements, recv_len):
        return (Part(0, recv_len, roles.root),)

    def buffer_call(self, c):
        return c.issue("Bcast", c.send, c.root)

    def object_call(self, c):
        mine = c.send if c.rank == c.root else None
        return lambda: c.comm.bcast(mine, root=c.root)

    def tensor_call(self, c):
        return c.issue(c.dist.broadcast, c.send, src=c.global_rank(c.root),
                       group=c.group), c.poison_unless_root


BENCHMARK = Bcast()
