"""pingpong: the latency between two ranks, as osu_latency defines it.

The first rank of the pair sends and then receives, the other receives and then sends back,
both blocking; the time reported is half the round trip, timed on the first rank. The reply
paces the pair, so no barrier comes between round trips.
"""

from functools import partial

from collbench.benchmarks.base import APIS, PointToPoint

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
    summary = ("Measure the latency between two ranks (osu_latency): half a round trip (blocking; "
               "--api nonblocking: Isend/Irecv, each waited for; persistent: Send_init/Recv_init).")
    timed_as = ("a round trip of blocking send and receive between the pair, timed on its first "
                "rank and halved; no barrier between round trips")

    def messages_per_call(self, roles):
        return 2

    apis = APIS
    api_note = ""

    def buffer_call(self, c):
        # nonblocking: Isend / Irecv, each waited for; persistent: Send_init / Recv_init, started
        send = c.whole("Send", c.send, c.peer, TAG)
        recv = c.whole("Recv", c.recv, c.peer, TAG)
        return round_trip(send, recv, c.leads)

    def object_call(self, c):
        if c.api == "nonblocking":
            room = bytearray(c.room(c.send))
            send = lambda: c.comm.isend(c.send, c.peer, TAG).wait()    # noqa: E731
            recv = lambda: c.comm.irecv(room, source=c.peer, tag=TAG).wait()    # noqa: E731
        else:
            send = partial(c.comm.send, c.send, c.peer, TAG)
            recv = partial(c.comm.recv, source=c.peer, tag=TAG)
        return round_trip(send, recv, c.leads)

    def tensor_call(self, c):
        if c.api == "nonblocking":
            send = lambda: c.dist.isend(c.send, c.peer, group=c.group).wait()    # noqa: E731
            recv = lambda: c.dist.irecv(c.recv, c.peer, group=c.group).wait()    # noqa: E731
        else:
            send = partial(c.dist.send, c.send, c.peer, group=c.group)
            recv = partial(c.dist.recv, c.recv, c.peer, group=c.group)
        return round_trip(send, recv, c.leads), c.poison


BENCHMARK = PingPong()
