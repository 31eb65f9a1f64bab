"""reduce: the root ends with the reduction of every rank's buffer."""

from collbench.benchmarks.base import IN_PLACE, Collective, reduction


class Reduce(Collective):
    name, position = "reduce", 2
    reduces = True
    rooted = True
    memory_factors = {"buffer": (1.45, 1.95), "object": (2.65, 2.65), "tensor": (1.25, 1.25)}

    def placements(self, family):
        # torch's reduce has only the in-place form
        return (IN_PLACE,) if family == "tensor" else super().placements(family)

    def in_place_input(self, n, rank, roles, send_len):
        return 0 if rank == roles.root else None

    def received(self, n, rank, roles, elements, recv_len):
        return reduction(recv_len) if rank == roles.root else ()

    def buffer_call(self, c):
        return c.issue("Reduce", c.source_at_root(), c.recv, c.op, c.root)

    def object_call(self, c):
        return lambda: c.comm.reduce(c.send, op=c.ufunc, root=c.root)

    def tensor_call(self, c):
        return c.issue(c.dist.reduce, c.recv, dst=c.global_rank(c.root), op=c.op,
                       group=c.group), c.restore


BENCHMARK = Reduce()
