"""bibw: the bandwidth both ways at once between two ranks, as osu_bibw defines it.

Each rank of the pair posts W non-blocking receives and W non-blocking sends of one buffer,
then waits for all of them; timed on the first rank, the window's time over W is the time
reported. Bus bandwidth counts both directions (bus factor 2): it is OSU's bidirectional
figure, size × W × 2 / window time; algorithm bandwidth is one direction's.
"""

from functools import partial

from collbench.benchmarks.bw import (Windowed, mpi_wait_all, pickle_room, pickle_wait_all,
                                     torch_batch)
from collbench.benchmarks.pingpong import TAG


def both_ways(receive, send, count: int, wait_all):
    """``count`` non-blocking receives and ``count`` non-blocking sends, then wait for all;
    returns the last object received where the API gives one back."""
    def call():
        incoming = [receive() for _ in range(count)]
        outgoing = [send() for _ in range(count)]
        got = wait_all(incoming)
        wait_all(outgoing)
        return got[-1] if isinstance(got, list) and got else None
    return call


class BiBandwidth(Windowed):
    name, position = "bibw", 22
    summary = "Measure the bandwidth both ways at once between two ranks (osu_bibw)."
    timed_as = ("both ranks of the pair post --window non-blocking receives and sends, then wait "
                "for all, timed on the first; time per message = the window's time / window")

    def bus_factor(self, n):
        return 2.0

    def buffer_call(self, c):
        return both_ways(partial(c.comm.Irecv, c.recv, c.peer, TAG),
                         partial(c.comm.Isend, c.send, c.peer, TAG), c.window, mpi_wait_all)

    def object_call(self, c):
        return both_ways(partial(c.comm.irecv, pickle_room(c), source=c.peer, tag=TAG),
                         partial(c.comm.isend, c.send, c.peer, TAG), c.window, pickle_wait_all)

    def tensor_call(self, c):
        ops = [(c.dist.irecv, c.recv)] * c.window + [(c.dist.isend, c.send)] * c.window
        return torch_batch(c, ops), c.poison


BENCHMARK = BiBandwidth()
