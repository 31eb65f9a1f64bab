"""scatter: the root holds the whole array; rank r receives its r-th piece of size / n."""

from collbench.benchmarks.base import Collective, ring_factor
from collbench.benchmarks.check import Part


class Scatter(Collective):
    name, position = "scatter", 5
    size_is_per_rank = False
    recv_div = True
    rooted = True
    part_per_rank = "receives"
    memory_factors = {"buffer": (1.25, 1.25), "object": (2.35, 1.60), "tensor": (1.25, 1.25)}

    bus_factor = staticmethod(ring_factor)

    def in_place_input(self, n, rank, roles, send_len):
        return None             # the root's own piece stays in its send buffer

    def received_in_place(self, n, rank, roles, elements, recv_len):
        return () if rank == roles.root else self.received(n, rank, roles, elements, recv_len)

    def received(self, n, rank, roles, elements, recv_len):
        return (Part(0, recv_len, roles.root, rank * (elements // n)),)

    def buffer_call(self, c):
        return c.issue("Scatter", c.send,
                       c.in_place_marker if c.in_place and c.rank == c.root else c.recv, c.root)

    def object_call(self, c):
        pieces = c.chunks(c.recv_len) if c.rank == c.root else None
        return lambda: c.comm.scatter(pieces, root=c.root)

    def tensor_call(self, c):
        pieces = list(c.send.chunk(c.n)) if c.rank == c.root and c.send.numel() else None
        return c.issue(c.dist.scatter, c.recv, scatter_list=pieces, src=c.global_rank(c.root),
                       group=c.group), c.poison


BENCHMARK = Scatter()
