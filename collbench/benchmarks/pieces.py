"""What the collectives of one piece per rank share (allgatherv, gatherv, scatterv,
reduce_scatterv): ``--pattern`` sizes the pieces (``patterns.pieces``), the size is the whole
array, and one side of each rank's call, what it sends or what it receives, is its own piece."""

from collbench.benchmarks import patterns
from collbench.benchmarks.base import OUT_OF_PLACE, Collective, Roles, ring_factor


def length(buf) -> int:
    """The elements of a buffer argument: a view, a tensor, or [view, MPI type] for maxloc's
    pairs."""
    buf = buf[0] if isinstance(buf, list) else buf
    return int(buf.numel()) if hasattr(buf, "numel") else len(buf)


def view(buf, elements: int):
    """The first ``elements`` of a buffer argument (a view, a tensor, or [view, MPI type])."""
    return [buf[0][:elements], buf[1]] if isinstance(buf, list) else buf[:elements]


class OnePiecePerRank(Collective):
    """A v-collective of one piece per rank. ``pieces_sent``: True where a rank's own piece is
    what it sends (allgatherv, gatherv), False where it is what it receives (scatterv,
    reduce_scatterv); that side's buffer holds the largest piece, the other the whole array."""

    size_is_per_rank = False
    patterned = True
    pieces_sent = True

    bus_factor = staticmethod(ring_factor)

    def lengths(self, elements, n, roles=Roles()):
        largest = max(patterns.pieces(roles.pattern, n, elements))
        return (largest, elements) if self.pieces_sent else (elements, largest)

    def imbalance(self, elements, n, roles):
        """The largest piece over the mean piece, on the pieces' side."""
        if not elements:
            return 1.0, 1.0
        skew = max(patterns.pieces(roles.pattern, n, elements)) * n / elements
        return (skew, 1.0) if self.pieces_sent else (1.0, skew)

    def rank_elements(self, elements, n, roles):
        """(sent, received) elements of each rank's call: its own piece on the pieces' side, the
        whole array on the other (the root's only, where there is one)."""
        piece = patterns.pieces(roles.pattern, n, elements)
        whole = [elements if not self.rooted or r == roles.root else 0 for r in range(n)]
        return [(piece[r], whole[r]) if self.pieces_sent else (whole[r], piece[r])
                for r in range(n)]

    def placements(self, family):
        return (OUT_OF_PLACE,)
