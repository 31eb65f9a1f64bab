"""scatterv: the root holds the whole array and sends each rank a piece of its own length, as
``--pattern`` sizes them (``patterns.pieces``). The size is the whole array, as for scatter;
the root sends all of it, so the bandwidths count the size, and the row's
``imbalance_received`` is the largest piece over the mean piece.

torch.distributed's scatter takes pieces of one length only, on gloo and nccl alike.
"""

from collbench.benchmarks import patterns
from collbench.benchmarks.check import Part
from collbench.benchmarks.pieces import OnePiecePerRank, length

TORCH = ("torch.distributed's scatter takes pieces of one length only; scatterv runs on mpi and "
         "mpi-pickle")


class Scatterv(OnePiecePerRank):
    name, position = "scatterv", 5
    rooted = True
    pieces_sent = False
    part_per_rank = "receives, by its piece,"
    summary = ("Measure scatterv across sizes: the root sends every rank a piece of its own "
               "length, sized by --pattern; the size is the root's whole array.")
    lacks = {"gloo": TORCH, "nccl": TORCH}
    #: scatter's factors per byte of buffer (benchmarks/memory_factors.py), not measured for
    #: scatterv itself
    memory_factors = {"buffer": (1.25, 1.25), "object": (2.35, 1.60)}

    def received(self, n, rank, roles, elements, recv_len):
        sizes = patterns.pieces(roles.pattern, n, elements)
        starts = patterns.displacements(sizes)
        return (Part(0, sizes[rank], roles.root, starts[rank]),) if sizes[rank] else ()

    def buffer_call(self, c):
        sizes = patterns.pieces(c.roles.pattern, c.n, length(c.send))
        source = [c.send, (sizes, patterns.displacements(sizes))] if c.rank == c.root else None
        return c.issue("Scatterv", source, c.recv[:sizes[c.rank]], c.root)

    def object_call(self, c):
        sizes = patterns.pieces(c.roles.pattern, c.n, c.send_len)
        starts = patterns.displacements(sizes)
        pieces = [c.piece(c.send, at, at + k)
                  for at, k in zip(starts, sizes)] if c.rank == c.root else None
        return lambda: c.comm.scatter(pieces, root=c.root)


BENCHMARK = Scatterv()
