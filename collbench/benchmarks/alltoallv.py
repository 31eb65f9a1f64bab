"""alltoallv: each rank sends each rank a piece of its own length, as ``--pattern`` spreads them
(``collbench.benchmarks.patterns``): a mixture-of-experts layer's token exchange.

The size is what a rank sends in all, as for alltoall (``uniform`` is alltoall's traffic through
the v-form), or with a matrix what the average rank sends; the send buffer holds what the
busiest sender gives, the receive buffer what the busiest receiver takes. Bandwidth is the busiest
rank's bytes, sent or received, over the slowest rank's time, as nccl-tests' alltoallv_perf
counts it: a row's ``imbalance_sent`` and ``imbalance_received`` say how far that rank's bytes
lie above the size.
"""

from collbench.benchmarks import patterns
from collbench.benchmarks.base import OUT_OF_PLACE, Collective, Roles, ring_factor
from collbench.benchmarks.check import Part


def _mine(c) -> tuple:
    """(sends, send displacements, receives, receive displacements) of this rank, in elements."""
    matrix = patterns.counts(c.roles.pattern, c.n, _elements(c))
    sends, receives = patterns.sent(matrix, c.rank), patterns.received(matrix, c.rank)
    return sends, patterns.displacements(sends), receives, patterns.displacements(receives)


def _elements(c) -> int:
    """The call's size in elements, which the pattern scales: what the average rank sends."""
    if c.roles.elements:
        return c.roles.elements
    # roles bound without it (a plugin's own binding): every rank sends the same
    send = c.send
    if getattr(c, "send_len", 0):
        return c.send_len
    return int(send.numel()) if hasattr(send, "numel") else len(send)


class Alltoallv(Collective):
    name, position = "alltoallv", 6
    gathers_objects = True
    size_is_per_rank = False
    patterned = True
    #: a pattern gives the ranks different bytes: the per-rank view does not judge them alike
    same_work = False
    part_per_rank = "sends each rank, on average,"
    summary = ("Measure alltoallv across sizes: each rank sends each rank a piece of its own "
               "length, spread as --pattern says (uniform, spread:F, zipf:S, matrix:FILE); the "
               "size is what a rank sends in all.")
    memory_factors = {"buffer": (1.25, 1.25), "object": (2.35, 2.35), "tensor": (1.25, 1.25)}

    bus_factor = staticmethod(ring_factor)

    def lengths(self, elements, n, roles=Roles()):
        """The send buffer holds the busiest sender's pieces (``elements`` but for a matrix), the
        receive buffer the busiest receiver's."""
        matrix = patterns.counts(roles.pattern, n, elements)
        return max(map(sum, matrix)), max(sum(patterns.received(matrix, rank)) for rank in range(n))

    def imbalance(self, elements, n, roles):
        return patterns.imbalance(patterns.counts(roles.pattern, n, elements))

    def rank_elements(self, elements, n, roles):
        """(sent, received) elements of each rank's call: its row of the matrix, its column."""
        matrix = patterns.counts(roles.pattern, n, elements)
        return [(sum(matrix[r]), sum(patterns.received(matrix, r))) for r in range(n)]

    def placements(self, family):
        return (OUT_OF_PLACE,)

    def received(self, n, rank, roles, elements, recv_len):
        matrix = patterns.counts(roles.pattern, n, elements)
        receives = patterns.received(matrix, rank)
        starts = patterns.displacements(receives)
        # what rank j sends this rank starts where its pieces for the ranks before this one end
        return tuple(Part(starts[j], receives[j], j, sum(matrix[j][:rank])) for j in range(n)
                     if receives[j])

    def buffer_call(self, c):
        sends, sdispls, receives, rdispls = _mine(c)
        return c.issue("Alltoallv", [c.send, (sends, sdispls)], [c.recv, (receives, rdispls)])

    def object_call(self, c):
        sends, sdispls, _, _ = _mine(c)
        pieces = [c.piece(c.send, at, at + length) for at, length in zip(sdispls, sends)]
        return lambda: c.comm.alltoall(pieces)

    def tensor_call(self, c):
        sends, _, receives, _ = _mine(c)
        out = c.recv[:sum(receives)]            # torch wants the pieces to fill the tensors
        source = c.send[:sum(sends)]
        return c.issue(c.dist.all_to_all_single, out, source, list(receives), list(sends),
                       group=c.group), c.poison


BENCHMARK = Alltoallv()
