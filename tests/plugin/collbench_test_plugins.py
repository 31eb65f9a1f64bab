"""Backends for collbench's tests, installed as a plugin through the ``collbench.backends`` entry
points (see pyproject.toml), the way a third-party backend would be.

``plain-mpi`` is the ``mpi`` backend under another name; ``no-prod-mpi`` refuses ``--op prod``. The
``faulty-*`` backends wrap a real backend and misbehave as a broken library or host would, as the
environment asks:

FAULTY_CORRUPT=R           rank R sends its first three elements one too large: every rank that
                           receives them holds data that really arrived wrong
FAULTY_HANG=R:COLL:BYTES   rank R never returns from COLL's calls at BYTES (the sweep's size)
FAULTY_PAUSE=SECONDS       every rank sleeps this long before each size (a slow sweep)
FAULTY_CHILD=FOLDER:HOW    every rank starts ``sleep 1000`` as it sets up (HOW ``same`` or ``new``:
                           in a session of its own) and leaves it running, as a plugin's helper
                           would; FOLDER/RANK gets its pid and the signals it had blocked (SigBlk)
FAULTY_EXIT=R:BYTES:HOW    rank R leaves as it binds its call at BYTES: HOW is ``exit-N``
                           (``sys.exit(N)``, through Python's exit) or ``_exit-N`` (``os._exit(N)``,
                           at once), as a library that ends the process would; ``raise-0`` and
                           ``raise-1`` raise an error of several lines, as torch's CUDA and NCCL
                           errors are
FAULTY_SLOW=R:SECONDS      rank R sleeps this long at the end of each of its timed calls, as a rank
                           that unpacks or reduces slowly would: its own call ends late, the others'
                           do not
FAULTY_HOG=R:WHEN:BYTES    rank R allocates BYTES, touches every page and keeps them, as a leak or
                           a greedy neighbour in its memory cgroup would: WHEN is ``call`` (when
                           its first size is bound, inside the collective's position) or ``renew``
                           (between in-job rounds)
FAULTY_STOP=R              rank R stops itself (SIGSTOP) as its set-up ends, as a rank that a
                           debugger or a job-control signal stops between its start-up and its
                           first size would

``timed-library-mpi`` makes non-blocking calls whose progress is known (``TIMED_LIBRARY``);
``raising-supports`` raises from ``supports``, ``text-ranks`` asks for "2" ranks, ``odd-axes`` names
its buffers as ``ODD_AXES`` says.
``broken`` names a module that does not exist, ``not-a-backend`` a class that is not a Backend,
``raising-check`` one whose availability check raises, ``unfinished`` an abstract Backend, and
``mpi`` and ``all`` try to take reserved names.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from collbench.backends.base import Backend, Bound
from collbench.backends.gloo import GlooBackend
from collbench.backends.mpi import MpiBackend
from collbench.backends.mpi_pickle import MpiPickleBackend
from collbench.backends.nccl import NcclBackend


class PlainMpi(MpiBackend):
    name = "plain-mpi"


class NoProductMpi(MpiBackend):
    """The mpi backend without the product reduction, as a library lacking an op would be."""

    name = "no-prod-mpi"

    @classmethod
    def supports(cls, *, collective, dtype, op):
        if op == "prod":
            return "no-prod-mpi has no product reduction"
        return super().supports(collective=collective, dtype=dtype, op=op)


def _forever(*args, **kwargs):
    while True:
        time.sleep(3600)


def _then_sleep(call, seconds: float):
    def slow_call():
        result = call()
        time.sleep(seconds)
        return result
    return slow_call


_hogs: list = []


def _hog(rank: int, when: str) -> None:
    hog = os.environ.get("FAULTY_HOG")
    if hog:
        who, at, size = hog.split(":")
        if (int(who), at) == (rank, when) and not _hogs:
            _hogs.append(np.ones(int(size), dtype=np.uint8))      # ones: every page really touched


class Faulty:
    """Mixed in before a real backend; every fault is off unless its variable is set."""

    def setup(self, *, control) -> None:
        super().setup(control=control)
        child = os.environ.get("FAULTY_CHILD")
        if child:
            folder, how = child.rsplit(":", 1)
            helper = subprocess.Popen(["sleep", "1000"], start_new_session=how == "new")
            status = Path(f"/proc/{helper.pid}/status").read_text()
            blocked = next(line.split()[1] for line in status.splitlines()
                           if line.startswith("SigBlk:"))
            Path(folder, str(self.rank)).write_text(f"{helper.pid} {blocked}")
        stop = os.environ.get("FAULTY_STOP")
        if stop and int(stop) == self.rank:
            os.kill(os.getpid(), signal.SIGSTOP)

    def allocate(self, *, send_len, recv_len, dtype, in_place):
        self._itemsize = dtype.itemsize
        return super().allocate(send_len=send_len, recv_len=recv_len, dtype=dtype,
                                in_place=in_place)

    def fill(self, buffers, *, tables, rank, length):
        super().fill(buffers, tables=tables, rank=rank, length=length)
        corrupt = os.environ.get("FAULTY_CORRUPT")
        if corrupt and int(corrupt) == self.rank:
            buffers.send[:3] += 1

    def renew(self) -> None:
        _hog(self.rank, "renew")
        super().renew()

    def bind(self, buffers, *, collective, send_len, recv_len, op, roles) -> Bound:
        pause = float(os.environ.get("FAULTY_PAUSE", "0"))
        if pause:
            time.sleep(pause)
        _hog(self.rank, "call")
        leave = os.environ.get("FAULTY_EXIT")
        if leave:
            rank, size, how = leave.split(":")
            if (int(rank), int(size)) == (self.rank, max(send_len, recv_len) * self._itemsize):
                kind, code = how.rsplit("-", 1)
                if kind == "_exit":
                    os._exit(int(code))
                # a library's error of several lines: torch's CUDA errors
                if kind == "raise" and code == "0":
                    raise RuntimeError("CUDA error: operation not permitted when stream is "
                                       "capturing\nCUDA kernel errors might be asynchronously "
                                       "reported at some other API call\nCompile with "
                                       "`TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
                # torch's NCCL errors, which say the cause last
                if kind == "raise":
                    raise RuntimeError("NCCL error in: "
                                       "../torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled "
                                       "cuda error (run with NCCL_DEBUG=INFO for details), NCCL "
                                       "version 2.28.9\nncclUnhandledCudaError: Call to CUDA "
                                       "function failed.\nLast error:\n"
                                       "Cuda failure 'out of memory'")
                sys.exit(int(code))
        bound = super().bind(buffers, collective=collective, send_len=send_len, recv_len=recv_len,
                             op=op, roles=roles)
        hang = os.environ.get("FAULTY_HANG")
        if hang:
            rank, name, size = hang.split(":")
            if (int(rank), name, int(size)) == (self.rank, collective.name,
                                                max(send_len, recv_len) * self._itemsize):
                return Bound(run=_forever, run_blocking=_forever, checked=_forever)
        slow = os.environ.get("FAULTY_SLOW")
        if slow:
            rank, seconds = slow.split(":")
            if int(rank) == self.rank:
                return Bound(run=_then_sleep(bound.run, float(seconds)),
                             run_blocking=_then_sleep(bound.run_blocking, float(seconds)),
                             checked=bound.checked)
        return bound


class FaultyMpi(Faulty, MpiBackend):
    name = "faulty-mpi"


class FaultyMpiPickle(Faulty, MpiPickleBackend):
    name = "faulty-mpi-pickle"


class FaultyGloo(Faulty, GlooBackend):
    name = "faulty-gloo"


class FaultyNccl(Faulty, NcclBackend):
    name = "faulty-nccl"


class NotABackend:
    pass


class RaisingCheck(MpiBackend):
    """Its availability check itself fails."""

    name = "raising-check"

    @classmethod
    def unavailable_reason(cls):
        raise RuntimeError("cannot tell")


class Unfinished(Backend):
    """Declares itself a Backend but implements nothing."""

    name = "unfinished"


class UnusableOnOneRank(MpiBackend):
    """The mpi backend, unusable on the rank ``FAULTY_UNUSABLE_ON`` names (as a library missing
    on one node would be): that rank stops before MPI starts, while the others wait for it in
    MPI's start-up. The launching process, which has no rank, finds it usable."""

    name = "unusable-on-one-rank"

    @classmethod
    def unavailable_reason(cls):
        if (os.environ.get("PMI_RANK") is not None
                and os.environ.get("PMI_RANK") == os.environ.get("FAULTY_UNUSABLE_ON")):
            return f"its library is missing on this node (rank {os.environ['PMI_RANK']})"
        return super().unavailable_reason()


class SmallPickle(MpiPickleBackend):
    """mpi-pickle with a 4 KiB message limit, as a library without large counts has at 2 GiB:
    the skip path, without gigabytes."""

    name = "small-pickle"

    def max_message_bytes(self):
        return 4096


class TimedLibraryMpi(MpiBackend):
    """The mpi backend whose non-blocking calls behave as a library whose progress is known
    (``TIMED_LIBRARY=KIND:SECONDS``): each call takes SECONDS of waiting (a sleep, which leaves
    the core to the rank's compute) besides the real call, and that wait happens

    * ``background``: from the start, at no cost to the rank, as a library with a progress thread
      on a free core would: the wait only waits for what of SECONDS has not passed yet, and the
      compute hides it (overlap near 100%);
    * ``in-wait``: only inside the wait, as a library that progresses only there: nothing hides
      it (overlap near 0%).

    The real call is made either way, so that the result is checked."""

    name = "timed-library-mpi"

    def bind(self, buffers, *, collective, send_len, recv_len, op, roles) -> Bound:
        bound = super().bind(buffers, collective=collective, send_len=send_len, recv_len=recv_len,
                             op=op, roles=roles)
        if bound.start is None:
            return bound
        kind, seconds = os.environ["TIMED_LIBRARY"].split(":")
        seconds = float(seconds)
        real_start, real_complete = bound.start, bound.complete

        if kind == "background":
            def start():
                return time.monotonic() + seconds, real_start()

            def complete(handle):
                done, request = handle
                real_complete(request)
                # what the background has not done yet
                time.sleep(max(0.0, done - time.monotonic()))
        else:
            def start():
                return real_start()

            def complete(request):
                time.sleep(seconds)
                real_complete(request)
        whole = lambda: complete(start())      # noqa: E731
        return Bound(run=whole, run_blocking=whole, checked=bound.checked, start=start,
                     complete=complete, release=bound.release)


class RaisingSupports(MpiBackend):
    """Its answer to whether it runs a combination is an exception (a bug of the plugin's)."""

    name = "raising-supports"

    @classmethod
    def supports(cls, *, collective, dtype, op):
        raise KeyError(op)


class TextRanks(MpiBackend):
    """Asks for its self-launched ranks as a text, not a number."""

    name = "text-ranks"

    @classmethod
    def self_launch_ranks(cls):
        return "2"


class OddAxes(MpiBackend):
    """Says its buffers are what ``ODD_AXES`` holds (an ESC, 300 characters, a number): what it
    would write, collbench's own loader would refuse."""

    name = "odd-axes"

    def row_axes(self):
        odd = os.environ.get("ODD_AXES", "")
        return {**super().row_axes(), "buffers": int(odd[1:]) if odd.startswith("#") else odd}
