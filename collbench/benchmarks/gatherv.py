"""gatherv: every rank sends the root a piece of its own length, as ``--pattern`` sizes them
(``patterns.pieces``), and the root ends with the whole array. The size is the whole array, as
for gather; the root receives all of it, so the bandwidths count the size, and the row's
``imbalance_sent`` is the largest piece over the mean piece.

torch.distributed's gather takes pieces of one length only, on gloo and nccl alike.
"""

from collbench.benchmarks import patterns
from collbench.benchmarks.check import Part
from collbench.benchmarks.pieces import OnePiecePerRank, length

TORCH = ("torch.distributed's gather takes pieces of one length only; gatherv runs on mpi and "
         "mpi-pickle")


class Gatherv(OnePiecePerRank):
    name, position = "gatherv", 4
    gathers_objects = True
    rooted = True
    part_per_rank = "contributes, by its piece,"
    summary = ("Measure gatherv across sizes: every rank sends the root a piece of its own length, "
               "sized by --pattern; the size is the root's whole array.")
    lacks = {"gloo": TORCH, "nccl": TORCH}
    #: gather's factors per byte of buffer (benchmarks/memory_factors.py), not measured for gatherv
    #: itself
    memory_factors = {"buffer": (1.25, 1.15), "object": (2.30, 0.95)}

    def received(self, n, rank, roles, elements, recv_len):
        if rank != roles.root:
            return ()
        sizes = patterns.pieces(roles.pattern, n, elements)
        starts = patterns.displacements(sizes)
        return tuple(Part(starts[j], sizes[j], j, 0) for j in range(n) if sizes[j])

    def buffer_call(self, c):
        sizes = patterns.pieces(c.roles.pattern, c.n, length(c.recv))
        into = [c.recv, (sizes, patterns.displacements(sizes))] if c.rank == c.root else None
        return c.issue("Gatherv", c.send[:sizes[c.rank]], into, c.root)

    def object_call(self, c):
        mine = c.piece(c.send, 0, patterns.pieces(c.roles.pattern, c.n, c.recv_len)[c.rank])
        return lambda: c.comm.gather(mine, root=c.root)


BENCHMARK = Gatherv()
