"""allreduce: every rank ends with the reduction of every rank's buffer."""

from collbench.benchmarks.base import IN_PLACE, Collective, reduction


class Allreduce(Collective):
    name, position = "allreduce", 0
    reduces = True
    memory_factors = {"buffer": (1.45, 1.45), "object": (2.65, 2.65), "tensor": (1.25, 1.25)}

    def bus_factor(self, n):
        return 2 * (n - 1) / n

    def placements(self, family):
        # torch's all_reduce has only the in-place form (it reduces into its one tensor)
        return (IN_PLACE,) if family == "tensor" else super().placements(family)

    def received(self, n, rank, roles, elements, recv_len):
        return reduction(recv_len)

    def buffer_call(self, c):
        return c.issue("Allreduce", c.source, c.recv, c.op)

    def object_call(self, c):
        return lambda: c.comm.allreduce(c.send, op=c.ufunc)

    def tensor_call(self, c):
        return c.issue(c.dist.all_reduce, c.recv, op=c.op, group=c.group), c.restore


BENCHMARK = Allreduce()
