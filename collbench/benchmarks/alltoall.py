"""alltoall: each rank sends piece j of its array to rank j and receives one piece from each."""

from collbench.benchmarks.base import Collective, from_every_rank, ring_factor


class Alltoall(Collective):
    name, position = "alltoall", 6
    gathers_objects = True
    size_is_per_rank = False
    part_per_rank = "sends every other rank"
    memory_factors = {"buffer": (1.25, 1.25), "object": (2.35, 2.35), "tensor": (1.25, 1.25)}

    bus_factor = staticmethod(ring_factor)

    def received(self, n, rank, roles, elements, recv_len):
        chunk = elements // n
        return from_every_rank(n, chunk, rank * chunk)

    def buffer_call(self, c):
        return c.issue("Alltoall", c.source, c.recv)

    def object_call(self, c):
        blocks = c.chunks(c.recv_len // c.n)         # each rank sends and receives the whole array
        return lambda: c.comm.alltoall(blocks)

    def tensor_call(self, c):
        return c.issue(c.dist.all_to_all_single, c.recv, c.send, group=c.group), c.poison


BENCHMARK = Alltoall()
