"""scatterv: the root holds the whole array and sends each rank a piece of its own length, as
``--pattern`` sizes them (``patterns.pieces``). The size is the whole array, as for scatter;
the root sends all of it, so the bandwidths count the size, and the row's
``imbalance_received`` is the largest piece over the mean piece.

torch.distributed's scatter takes pieces of one length only, on gloo and nccl alike.
"""

from collbench.benchmarks import patterns
from collbench.benchmarks.base import OUT_OF_PLACE, Collective, Roles, ring_factor
from collbench.benchmarks.check import Part

TORCH = "torch.distributed's scatter takes pieces of one length only; scatterv runs on mpi and mpi-pickle"


def _length(x) -> int:
    return int(x.numel()) if hasattr(x, "numel") else len(x)


class Scatterv(Collective):
    name, position = "scatterv", 5
    size_is_per_rank = False
    rooted = True
    patterned = True
    part_per_rank = "receives, by its piece,"
    summary = ("Measure scatterv across sizes: the root sends every rank a piece of its own length, sized by "
               "--pattern; the size is the root's whole array.")
    lacks = {"gloo": TORCH, "nccl": TORCH}
    in_all = False             # its own command only, for now: not yet in the sweeps and tests of all
    #: scatter's factors per byte of buffer (benchmarks/memory_factors.py), not measured for scatterv itself
    memory_factors = {"buffer": (1.25, 1.25), "object": (2.35, 1.60)}

    bus_factor = staticmethod(ring_factor)

    def lengths(self, elements, n, roles=Roles()):
        """The send buffer holds the whole array; a rank's receive buffer, the largest piece."""
        return elements, max(patterns.pieces(roles.pattern, n, elements))

    def imbalance(self, elements, n, roles):
        if not elements:
            return 1.0, 1.0
        return 1.0, max(patterns.pieces(roles.pattern, n, elements)) * n / elements

    def placements(self, family):
        return (OUT_OF_PLACE,)

    def received(self, n, rank, roles, elements, recv_len):
        sizes = patterns.pieces(roles.pattern, n, elements)
        starts = patterns.displacements(sizes)
        return (Part(0, sizes[rank], roles.root, starts[rank]),) if sizes[rank] else ()

    def buffer_call(self, c):
        sizes = patterns.pieces(c.roles.pattern, c.n, _length(c.send))
        source = [c.send, (sizes, patterns.displacements(sizes))] if c.rank == c.root else None
        return c.issue("Scatterv", source, c.recv[:sizes[c.rank]], c.root)

    def object_call(self, c):
        sizes = patterns.pieces(c.roles.pattern, c.n, c.send_len)
        starts = patterns.displacements(sizes)
        pieces = [c.piece(c.send, at, at + k) for at, k in zip(starts, sizes)] if c.rank == c.root else None
        return lambda: c.comm.scatter(pieces, root=c.root)


BENCHMARK = Scatterv()
