"""reduce_scatterv: the array is reduced over the ranks and each rank keeps a piece of its own
length, as ``--pattern`` sizes them (``patterns.pieces``): MPI's ``Reduce_scatter`` with counts,
beside reduce_scatter's ``Reduce_scatter_block`` of equal pieces. The size is the whole array;
every rank reduces all of it, so the bandwidths count the size, and the row's
``imbalance_received`` is the largest piece over the mean piece.

gloo's reduce_scatter takes pieces of one length only; nccl's takes uneven ones.
"""

from functools import reduce as fold

from collbench.benchmarks import patterns
from collbench.benchmarks.check import REDUCED, Part
from collbench.benchmarks.pieces import OnePiecePerRank, length, view


class ReduceScatterv(OnePiecePerRank):
    name, position = "reduce_scatterv", 7
    reduces = True
    pieces_sent = False
    part_per_rank = "ends with its piece of"
    summary = ("Measure reduce_scatterv across sizes: the array is reduced over the ranks and each "
               "keeps a piece of its own length, sized by --pattern; the size is the whole array.")
    lacks = {"gloo": "gloo's reduce_scatter takes pieces of one length only; reduce_scatterv runs "
                     "on mpi, mpi-pickle and nccl"}
    #: reduce_scatter's factors per byte of buffer (benchmarks/memory_factors.py), not measured for
    #: reduce_scatterv
    memory_factors = {"buffer": (1.50, 1.50), "object": (3.15, 3.15), "tensor": (1.85, 1.85)}

    def received(self, n, rank, roles, elements, recv_len):
        sizes = patterns.pieces(roles.pattern, n, elements)
        return (Part(0, sizes[rank], REDUCED, patterns.displacements(sizes)[rank]),
                ) if sizes[rank] else ()

    def buffer_call(self, c):
        sizes = patterns.pieces(c.roles.pattern, c.n, length(c.send))
        return c.issue("Reduce_scatter", c.send, view(c.recv, sizes[c.rank]), list(sizes), c.op)

    def object_call(self, c):
        # the pickle API has no reduce_scatter: an alltoall of the pieces, reduced locally
        sizes = patterns.pieces(c.roles.pattern, c.n, c.send_len)
        pieces = [c.piece(c.send, at, at + k)
                  for at, k in zip(patterns.displacements(sizes), sizes)]
        return lambda: fold(c.ufunc, c.comm.alltoall(pieces))

    def tensor_call(self, c):
        sizes = patterns.pieces(c.roles.pattern, c.n, c.send.numel())
        inputs = list(c.send.split(list(sizes)))
        return c.issue(c.dist.reduce_scatter, c.recv[:sizes[c.rank]], inputs, op=c.op,
                       group=c.group), c.poison


BENCHMARK = ReduceScatterv()
