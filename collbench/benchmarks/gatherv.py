"""gatherv: every rank sends the root a piece of its own length, as ``--pattern`` sizes them
(``patterns.pieces``), and the root ends with the whole array. The size is the whole array, as
for gather; the root receives all of it, so the bandwidths count the size, and the row's
``imbalance_sent`` is the largest piece over the mean piece.

torch.distributed's gather takes pieces of one length only, on gloo and nccl alike.
"""

from collbench.benchmarks import patterns
from collbench.benchmarks.base import OUT_OF_PLACE, Collective, Roles, ring_factor
from collbench.benchmarks.check import Part

TORCH = "torch.distributed's gather takes pieces of one length only; gatherv runs on mpi and mpi-pickle"


def _length(x) -> int:
    return int(x.numel()) if hasattr(x, "numel") else len(x)


class Gatherv(Collective):
    name, position = "gatherv", 4
    gathers_objects = True
    size_is_per_rank = False
    rooted = True
    patterned = True
    part_per_rank = "contributes, by its piece,"
    summary = ("Measure gatherv across sizes: every rank sends the root a piece of its own length, sized by "
               "--pattern; the size is the root's whole array.")
    lacks = {"gloo": TORCH, "nccl": TORCH}
    in_all = False             # its own command only, for now: not yet in the sweeps and tests of all
    #: gather's factors per byte of buffer (benchmarks/memory_factors.py), not measured for gatherv itself
    memory_factors = {"buffer": (1.25, 1.15), "object": (2.30, 0.95)}

    bus_factor = staticmethod(ring_factor)

    def lengths(self, elements, n, roles=Roles()):
        """A rank's send buffer holds the largest piece; the receive buffer, the whole array."""
        return max(patterns.pieces(roles.pattern, n, elements)), elements

    def imbalance(self, elements, n, roles):
        if not elements:
            return 1.0, 1.0
        return max(patterns.pieces(roles.pattern, n, elements)) * n / elements, 1.0

    def placements(self, family):
        return (OUT_OF_PLACE,)

    def received(self, n, rank, roles, elements, recv_len):
        if rank != roles.root:
            return ()
        sizes = patterns.pieces(roles.pattern, n, elements)
        starts = patterns.displacements(sizes)
        return tuple(Part(starts[j], sizes[j], j, 0) for j in range(n) if sizes[j])

    def buffer_call(self, c):
        sizes = patterns.pieces(c.roles.pattern, c.n, _length(c.recv))
        into = [c.recv, (sizes, patterns.displacements(sizes))] if c.rank == c.root else None
        return c.issue("Gatherv", c.send[:sizes[c.rank]], into, c.root)

    def object_call(self, c):
        mine = c.piece(c.send, 0, patterns.pieces(c.roles.pattern, c.n, c.recv_len)[c.rank])
        return lambda: c.comm.gather(mine, root=c.root)


BENCHMARK = Gatherv()
