"""bw: the bandwidth from one rank to another, as osu_bw defines it.

The first rank of the pair starts a window of W non-blocking sends of one buffer, waits for
them, then waits for a one-element acknowledgement; the other posts W non-blocking receives,
waits, and acknowledges. The window's time, on the sender, over W is the time reported, so
that size / time is OSU's size × W / window time. The acknowledgement paces the pair.
"""

from functools import partial

from collbench.benchmarks.base import PointToPoint
from collbench.benchmarks.pingpong import TAG

ACK_TAG = TAG + 1


def window(start, count: int, wait_all, then):
    """``count`` non-blocking calls, wait for them all, then ``then()``; returns what the last
    request gave (the pickle API's received object) where it gives one."""
    def call():
        requests = [start() for _ in range(count)]
        got = wait_all(requests)
        then()
        return got[-1] if isinstance(got, list) and got else None
    return call


def pickle_room(like) -> bytearray:
    """A receive buffer for the pickle of an array like ``like`` (without one, mpi4py's irecv
    takes 32 KiB at most). The window's receives share it, as OSU's share one buffer: every
    message carries the same bytes."""
    return bytearray(like.nbytes + (1 << 12))


def mpi_wait_all(requests):
    return requests[0].Waitall(requests)


def pickle_wait_all(requests):
    return requests[0].waitall(requests)


def torch_wait_all(requests):
    for request in requests:
        request.wait()


class Bandwidth(PointToPoint):
    name, position = "bw", 21
    windowed = True
    summary = "Measure the bandwidth from one rank to another (osu_bw): windows of non-blocking sends."
    timed_as = ("--window non-blocking sends from the pair's first rank, then a one-element acknowledgement, "
                "timed on the sender; time per message = the window's time / window")

    def messages_per_call(self, roles):
        return roles.window

    def copies_in_flight(self, family, roles):
        return roles.window if family == "object" else 1

    def expected(self, pattern, n, rank, roles, elements, idx):
        a, b = roles.pair
        return pattern.value(a, idx, n) if rank == b else None       # the sender's ack is not checked

    def buffer_call(self, c):
        comm, peer = c.comm, c.peer
        if c.leads:
            return window(partial(comm.Isend, c.send, peer, TAG), c.window, mpi_wait_all,
                          partial(comm.Recv, c.recv[:1], peer, ACK_TAG))
        return window(partial(comm.Irecv, c.recv, peer, TAG), c.window, mpi_wait_all,
                      partial(comm.Send, c.send[:1], peer, ACK_TAG))

    def object_call(self, c):
        comm, peer = c.comm, c.peer
        if c.leads:
            return window(partial(comm.isend, c.send, peer, TAG), c.window, pickle_wait_all,
                          partial(comm.recv, source=peer, tag=ACK_TAG))
        return window(partial(comm.irecv, pickle_room(c.send), source=peer, tag=TAG), c.window, pickle_wait_all,
                      partial(comm.send, c.send[:1], peer, ACK_TAG))

    def tensor_call(self, c):
        dist, peer, group = c.dist, c.peer, c.group
        if c.leads:
            call = window(partial(dist.isend, c.send, peer, group=group), c.window, torch_wait_all,
                          partial(dist.recv, c.recv[:1], peer, group=group))
        else:
            call = window(partial(dist.irecv, c.recv, peer, group=group), c.window, torch_wait_all,
                          partial(dist.send, c.send[:1], peer, group=group))
        return call, c.poison


BENCHMARK = Bandwidth()
