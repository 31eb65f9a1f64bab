"""barrier: no data; every rank waits for all. One row, no sizes."""

from collbench.benchmarks.base import Collective


class Barrier(Collective):
    name, position = "barrier", 8
    moves_data = False
    # torch's NCCL barrier ends with a synchronise of the stream on the host: a CUDA graph cannot
    # capture it (the capture fails), and no hold on the stream can cover it
    not_on_device = ("torch's barrier waits on the host for the GPU, so it can neither be captured "
                     "in a CUDA graph nor timed on the GPU's clock")

    def buffer_call(self, c):
        return c.issue("Barrier")

    def object_call(self, c):
        return c.comm.barrier

    def tensor_call(self, c):
        return c.issue(c.dist.barrier, group=c.group), c.no_reset


BENCHMARK = Barrier()
