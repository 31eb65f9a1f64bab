"""reduce_scatter: the array is reduced over ranks and rank r keeps its r-th piece of size / n."""

from functools import reduce as fold

from collbench.benchmarks.base import Collective, reduction, ring_factor


class ReduceScatter(Collective):
    name, position = "reduce_scatter", 7
    size_is_per_rank = False
    recv_div = True
    reduces = True
    part_per_rank = "ends with"
    memory_factors = {"buffer": (1.50, 1.50), "object": (3.15, 3.15), "tensor": (1.85, 1.85)}

    bus_factor = staticmethod(ring_factor)

    def received(self, n, rank, roles, elements, recv_len):
        return reduction(recv_len, rank * (elements // n))

    def buffer_call(self, c):
        return c.issue("Reduce_scatter_block", c.source, c.work if c.in_place else c.recv, c.op)

    def object_call(self, c):
        # the pickle API has no reduce_scatter: an alltoall of the pieces, reduced locally
        pieces = c.chunks(c.recv_len)
        return lambda: fold(c.ufunc, c.comm.alltoall(pieces))

    def tensor_call(self, c):
        scatter = c.first_available("reduce_scatter_single", "reduce_scatter_tensor")
        return c.issue(scatter, c.recv, c.send, op=c.op, group=c.group), c.poison


BENCHMARK = ReduceScatter()
