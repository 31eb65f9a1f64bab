"""allgather: every rank contributes size / n and ends with the whole array."""

from collbench.benchmarks.base import PLACEMENTS, Collective, from_every_rank, ring_factor


class Allgather(Collective):
    name, position = "allgather", 3
    gathers_objects = True
    size_is_per_rank = False
    send_div = True
    part_per_rank = "contributes"
    memory_factors = {"buffer": (1.25, 1.25), "object": (2.30, 2.30), "tensor": (1.80, 1.80)}

    bus_factor = staticmethod(ring_factor)

    def placements(self, family):
        return PLACEMENTS if family == "tensor" else super().placements(family)

    def in_place_input(self, n, rank, roles, send_len):
        return rank * send_len

    def received(self, n, rank, roles, elements, recv_len):
        return from_every_rank(n, elements // n)

    def buffer_call(self, c):
        return c.issue("Allgather", c.source, c.recv)

    def object_call(self, c):
        return lambda: c.comm.allgather(c.send)

    def tensor_call(self, c):
        gather = c.first_available("all_gather_single", "all_gather_into_tensor")
        if c.in_place:          # the input is this rank's piece of the output
            mine = c.recv[c.rank * c.send.numel():(c.rank + 1) * c.send.numel()]

            def reset():
                c.poison()
                mine.copy_(c.send)
            return c.issue(gather, c.recv, mine, group=c.group), reset
        return c.issue(gather, c.recv, c.send, group=c.group), c.poison


BENCHMARK = Allgather()
