"""pingpong: the latency between two ranks, as osu_latency defines it.

The first rank of the pair sends and then receives, the other receives and then sends back,
both blocking; the time reported is half the round trip, timed on the first rank. The reply
paces the pair, so no barrier comes between round trips.
"""

from functools import partial

from collbench.benchmarks.base import PointToPoint

TAG = 17


def round_trip(send, recv, leads: bool):
    """The first rank sends, then receives; the other receives, then sends. Either returns what
    it received (the pickle API's result)."""
    if leads:
        def call():
            send()
            return recv()
    else:
        def call():
            got = recv()
            send()
            return got
    return call


class PingPong(PointToPoint):
    name, position = "pingpong", 20
    summary = "Measure the latency between two ranks (osu_latency): half a blocking round trip."
    timed_as = ("a round trip of blocking send and receive between the pair, timed on its first rank and "
                "halved; no barrier between round trips")

    def messages_per_call(self, roles):
        return 2

    def buffer_call(self, c):
        send = partial(c.comm.Send, c.send, c.peer, TAG)
        recv = partial(c.comm.Recv, c.recv, c.peer, TAG)
        return round_trip(send, recv, c.leads)

    def object_call(self, c):
        send = partial(c.comm.send, c.send, c.peer, TAG)
        recv = partial(c.comm.recv, source=c.peer, tag=TAG)
        return round_trip(send, recv, c.leads)

    def tensor_call(self, c):
        send = partial(c.dist.send, c.send, c.peer, group=c.group)
        recv = partial(c.dist.recv, c.recv, c.peer, group=c.group)
        return round_trip(send, recv, c.leads), c.poison


BENCHMARK = PingPong()
