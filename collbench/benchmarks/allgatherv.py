"""allgatherv: every rank contributes a piece of its own length, as ``--pattern`` sizes them
(``patterns.pieces``: uniform and spread equal, zipf and a matrix larger for the hot ranks), and
every rank ends with the whole array. The size is the whole array, as for allgather; every rank
receives all of it, so the bandwidths count the size, and the row's ``imbalance_sent`` is the
largest piece over the mean piece.

gloo's all_gather takes pieces of one length only (torch checks); nccl's takes uneven ones.
"""

from collbench.benchmarks import patterns
from collbench.benchmarks.check import Part
from collbench.benchmarks.pieces import OnePiecePerRank, length


def _pieces(c, elements: int) -> tuple:
    """(every rank's piece, where each starts) in elements."""
    sizes = patterns.pieces(c.roles.pattern, c.n, elements)
    return sizes, patterns.displacements(sizes)


class Allgatherv(OnePiecePerRank):
    name, position = "allgatherv", 3
    gathers_objects = True
    same_work = False          # the ranks contribute pieces of different lengths
    part_per_rank = "contributes, by its piece,"
    summary = ("Measure allgatherv across sizes: every rank contributes a piece of its own length, "
               "sized by --pattern, and ends with the whole array (the size).")
    lacks = {"gloo": "gloo's all_gather takes pieces of one length only (torch checks); allgatherv "
                     "runs on mpi, mpi-pickle and nccl"}
    #: allgather's factors per byte of buffer (benchmarks/memory_factors.py), not measured for
    #: allgatherv itself
    memory_factors = {"buffer": (1.25, 1.25), "object": (2.30, 2.30), "tensor": (1.80, 1.80)}

    def received(self, n, rank, roles, elements, recv_len):
        sizes = patterns.pieces(roles.pattern, n, elements)
        starts = patterns.displacements(sizes)
        return tuple(Part(starts[j], sizes[j], j, 0) for j in range(n) if sizes[j])

    def buffer_call(self, c):
        sizes, starts = _pieces(c, length(c.recv))
        return c.issue("Allgatherv", c.send[:sizes[c.rank]], [c.recv, (sizes, starts)])

    def object_call(self, c):
        sizes, _ = _pieces(c, c.recv_len)
        mine = c.piece(c.send, 0, sizes[c.rank])
        return lambda: c.comm.allgather(mine)

    def tensor_call(self, c):
        sizes, _ = _pieces(c, c.recv.numel())
        outs = list(c.recv.split(list(sizes)))
        return c.issue(c.dist.all_gather, outs, c.send[:sizes[c.rank]], group=c.group), c.poison


BENCHMARK = Allgatherv()
