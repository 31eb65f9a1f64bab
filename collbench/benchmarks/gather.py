"""gather: every rank contributes size / n; the root ends with the whole array."""

from collbench.benchmarks.base import Collective, from_every_rank, ring_factor


class Gather(Collective):
    name, position = "gather", 4
    gathers_objects = True
    size_is_per_rank = False
    send_div = True
    rooted = True
    part_per_rank = "contributes"
    memory_factors = {"buffer": (1.25, 1.15), "object": (2.30, 0.95), "tensor": (1.80, 1.20)}

    bus_factor = staticmethod(ring_factor)

    def in_place_input(self, n, rank, roles, send_len):
        return roles.root * send_len if rank == roles.root else None

    def received(self, n, rank, roles, elements, recv_len):
        return from_every_rank(n, elements // n) if rank == roles.root else ()

    def buffer_call(self, c):
        return c.issue("Gather", c.source_at_root(), c.recv, c.root)

    def object_call(self, c):
        return lambda: c.comm.gather(c.send, root=c.root)

    def tensor_call(self, c):
        pieces = list(c.recv.chunk(c.n)) if c.rank == c.root and c.recv.numel() else None
        return c.issue(c.dist.gather, c.send, gather_list=pieces, dst=c.global_rank(c.root),
                       group=c.group), c.poison


BENCHMARK = Gather()
