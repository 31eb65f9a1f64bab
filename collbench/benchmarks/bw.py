"""bw: the bandwidth from one rank to another, as osu_bw defines it.

The first rank of the pair starts a window of W non-blocking sends of one buffer, waits for
them, then waits for a one-element acknowledgement; the other posts W non-blocking receives,
waits, and acknowledges. The window's time, on the sender, over W is the time reported, so
that size / time is OSU's size × W / window time. The acknowledgement paces the pair.
"""

from functools import partial

from collbench.benchmarks.base import PointToPoint
from collbench.benchmarks.check import Part
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


def pickle_room(c) -> bytearray:
    """A receive buffer for the pickle of the object call ``c``'s message (without one, mpi4py's
    irecv takes 32 KiB at most). The window's receives share it, as OSU's share one buffer:
    every message carries the same bytes."""
    return bytearray(c.room(c.send))


def mpi_wait_all(requests):
    return requests[0].Waitall(requests)


def pickle_wait_all(requests):
    return requests[0].waitall(requests)


def torch_batch(c, ops):
    """torch's point-to-point operations ``ops`` ([(dist.isend or dist.irecv, tensor)]) to the
    pair's peer, started as one batch and waited for: NCCL runs a peer's sends and receives
    as one group only when they are batched (separate ones both ways hang), and a window's
    sends then are in flight at once, as in OSU."""
    p2p = [c.dist.P2POp(op, tensor, c.peer, c.group) for op, tensor in ops]

    def call():
        for work in c.dist.batch_isend_irecv(p2p):
            work.wait()
    return call


class Windowed(PointToPoint):
    """A benchmark whose sample is a window of W messages: the time reported is the window's / W,
    and the pickle API holds W pickled copies at once."""

    windowed = True
    api_note = "its window is of non-blocking sends and receives already"

    def messages_per_call(self, roles):
        return roles.window

    def copies_in_flight(self, family, roles):
        return roles.window if family == "object" else 1


class Bandwidth(Windowed):
    name, position = "bw", 21
    directed = True
    summary = ("Measure the bandwidth from one rank to another (osu_bw): windows of non-blocking "
               "sends.")
    timed_as = ("--window non-blocking sends from the pair's first rank, then a one-element "
                "acknowledgement, timed on the sender; time per message = the window's time / "
                "window")

    def received(self, n, rank, roles, elements, recv_len):
        a, b = roles.pair_of(rank) or (None, None)
        return (Part(0, recv_len, a),) if rank == b else ()       # the sender's ack is not checked

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
        return window(partial(comm.irecv, pickle_room(c), source=peer, tag=TAG), c.window,
                      pickle_wait_all, partial(comm.send, c.piece(c.send, 0, 1), peer, ACK_TAG))

    def tensor_call(self, c):
        dist, peer, group = c.dist, c.peer, c.group
        if c.leads:
            sends = torch_batch(c, [(dist.isend, c.send)] * c.window)
            ack = partial(dist.recv, c.recv[:1], peer, group=group)
        else:
            sends = torch_batch(c, [(dist.irecv, c.recv)] * c.window)
            ack = partial(dist.send, c.send[:1], peer, group=group)

        def call():
            sends()
            ack()
        return call, c.poison


BENCHMARK = Bandwidth()
