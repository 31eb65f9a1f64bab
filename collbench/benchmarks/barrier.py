"""barrier: no data; every rank waits for all. One row, no sizes."""

from collbench.benchmarks.base import Collective


class Barrier(Collective):
    name, position = "barrier", 8
    moves_data = False

    def buffer_call(self, c):
        return c.issue("Barrier")

    def object_call(self, c):
        return c.comm.barrier

    def tensor_call(self, c):
        return c.issue(c.dist.barrier, group=c.group), c.no_reset


BENCHMARK = Barrier()
