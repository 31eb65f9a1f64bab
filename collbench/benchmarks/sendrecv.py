"""sendrecv: every rank sends to the next and receives from the previous at once, around the
ring, as nccl-tests' sendrecv. One call after a barrier is a sample, the slowest rank's time;
the size is each rank's message, and bus bandwidth equals algorithm bandwidth.
"""

from functools import partial

from collbench.benchmarks.base import PointToPoint
from collbench.benchmarks.check import Part
from collbench.benchmarks.pingpong import TAG


class SendRecv(PointToPoint):
    name, position = "sendrecv", 23
    api_note = "MPI's Sendrecv is one call with no persistent form"
    paired = False          # every rank, with its neighbours
    self_paced = False
    summary = ("Measure sendrecv: every rank sends to rank+1 and receives from rank-1 at once "
               "(nccl-tests).")
    timed_as = ("one exchange with both neighbours, after a barrier over every rank; the slowest "
                "rank's time")

    def received(self, n, rank, roles, elements, recv_len):
        return (Part(0, recv_len, (rank - 1) % n),)

    def buffer_call(self, c):
        return partial(c.comm.Sendrecv, c.send, c.right, TAG, c.recv, c.left, TAG)

    def object_call(self, c):
        return partial(c.comm.sendrecv, c.send, dest=c.right, sendtag=TAG, source=c.left,
                       recvtag=TAG)

    def tensor_call(self, c):
        ops = [c.dist.P2POp(c.dist.isend, c.send, c.global_rank(c.right), c.group),
               c.dist.P2POp(c.dist.irecv, c.recv, c.global_rank(c.left), c.group)]

        def call():            # one batch: NCCL runs it as one group
            for work in c.dist.batch_isend_irecv(ops):
                work.wait()
        return call, c.poison


BENCHMARK = SendRecv()
