"""The contract every benchmark module fulfils, collective or point-to-point, and what each
backend family hands it.

A benchmark declares what the harness needs to time it (who takes part, what one sample is,
what a call's time is divided by, its buffers, what each rank must find after the call, its
bus factor) and how each backend family issues it (``buffer_call``, ``object_call``,
``tensor_call``); the harness owns the rest: warm-up, the stop rule, rounds, the reduction
over ranks. So a new benchmark is one module and nothing else. A family a benchmark does not
implement is refused when the plan is built. Each attribute and method: docs/benchmarks.md;
what a size means: docs/methodology.md, "Sizes".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, ClassVar, Optional

from collbench.benchmarks.check import REDUCED, Part

COLLECTIVE = "collective"
POINT_TO_POINT = "point-to-point"
#: How a call is issued (``--api``): blocking; nonblocking (MPI's ``I…`` calls, torch's
#: ``async_op=True``), started and then waited for; persistent (MPI-4's ``…_init``), set up once
#: per size and then started and waited for each time.
APIS = ("blocking", "nonblocking", "persistent")
#: Where a collective's result goes (``--placement``): a receive buffer of its own, or where its
#: input was (``MPI.IN_PLACE``; torch's in-place forms), as nccl-tests prints both.
OUT_OF_PLACE, IN_PLACE = "out-of-place", "in-place"
PLACEMENTS = (OUT_OF_PLACE, IN_PLACE)


@dataclass(frozen=True)
class Roles:
    """Where the ranks stand in a call: the root of a rooted collective; the pairs of a
    point-to-point benchmark that measure at once (disjoint; the first rank of each starts its
    exchanges and is timed): one, ``--pair``, or a step of ``collbench pairs``; how many
    messages a windowed benchmark keeps in flight; the groups of a split."""

    root: int = 0
    pairs: tuple = ((0, 1),)
    window: int = 1
    #: the groups of a split that measure at once (``--split``: tuples of world ranks that
    #: partition the world); empty: every rank in one group. The root is each group's own.
    groups: tuple = ()
    #: the window each pair sends, in the order of ``pairs``, where a slow pair's was shrunk to
    #: keep to the budget (``collbench.run.sweep``); empty: every pair sends ``window``
    windows: tuple = ()
    #: how a v-collective spreads its bytes (``--pattern``: ``collbench.benchmarks.patterns``,
    #: its canonical name)
    pattern: str = "uniform"
    #: a patterned call's size in elements, which its pattern scales (set when the call is bound:
    #: where ranks send different totals, no buffer's length says it); 0 elsewhere
    elements: int = 0

    def window_at(self, group: Optional[int]) -> int:
        """The window pair number ``group`` sends (``window`` for a rank outside every pair)."""
        return self.windows[group] if self.windows and group is not None else self.window

    def as_sent(self, group: Optional[int]) -> "Roles":
        """These roles as pair number ``group`` sees them: its own window for ``window``."""
        return dataclasses.replace(self, window=self.window_at(group), windows=())

    def group_index(self, rank: int) -> int:
        """Which group of the split ``rank`` is in (0 without a split)."""
        for i, members in enumerate(self.groups):
            if rank in members:
                return i
        return 0

    def pair_of(self, rank: int) -> Optional[tuple]:
        """The pair ``rank`` belongs to, or None."""
        for pair in self.pairs:
            if rank in pair:
                return pair
        return None


@dataclass(frozen=True)
class Call:
    """What every family's call knows: this rank, the world size, the roles."""

    rank: int
    n: int
    roles: Roles

    @property
    def root(self) -> int:
        return self.roles.root

    @property
    def leads(self) -> bool:
        """This rank starts its pair's exchanges (the first of the pair)."""
        return self.rank == self.roles.pair_of(self.rank)[0]

    @property
    def peer(self) -> int:
        """The other rank of this rank's pair."""
        a, b = self.roles.pair_of(self.rank)
        return b if self.rank == a else a

    @property
    def window(self) -> int:
        """The messages this rank's pair keeps in flight (``Roles.window_at``)."""
        pair = self.roles.pair_of(self.rank)
        return self.roles.window_at(None if pair is None else self.roles.pairs.index(pair))

    @property
    def right(self) -> int:
        """The next rank around the ring (what sendrecv sends to)."""
        return (self.rank + 1) % self.n

    @property
    def left(self) -> int:
        """The previous rank around the ring (what sendrecv receives from)."""
        return (self.rank - 1) % self.n


@dataclass(frozen=True)
class BufferCall(Call):
    """What an mpi4py buffer-API backend provides: its communicator, slices of its buffers
    (send and receive are the same object for in-place collectives), the MPI op, and the api
    (``--api``) its calls are issued with: ``issue`` turns one MPI call into it."""

    comm: Any
    send: Any
    recv: Any
    op: Any
    api: str = "blocking"
    #: the persistent requests ``issue`` made, which the backend frees with the binding
    requests: list = field(default_factory=list)
    #: ``--placement in-place``: the call takes its input from the receive buffer, MPI.IN_PLACE
    #: (``in_place_marker``) standing for the send buffer; ``work``: the receive buffer as long
    #: as an in-place input needs (reduce_scatter's whole array)
    in_place: bool = False
    in_place_marker: Any = None
    work: Any = None

    @property
    def source(self) -> Any:
        """The send buffer argument: MPI.IN_PLACE in place, else the send buffer."""
        return self.in_place_marker if self.in_place else self.send

    def source_at_root(self) -> Any:
        """A rooted call's send argument: MPI.IN_PLACE at the root in place, else the send
        buffer."""
        return self.source if self.rank == self.root else self.send

    def issue(self, name: str, *args) -> Callable[[], Any]:
        """The call ``comm.<name>(*args)`` in this api: blocking, it returns when done;
        nonblocking (``comm.I<name>``) and persistent (``comm.<name>_init``, made now and
        started by each call), it returns the request to wait on."""
        if self.api == "blocking":
            return partial(getattr(self.comm, name), *args)
        if self.api == "nonblocking":
            return partial(getattr(self.comm, "I" + name.lower()), *args)
        request = getattr(self.comm, name + "_init")(*args)
        self.requests.append(request)

        def start():
            request.Start()
            return request
        return start

    def whole(self, name: str, *args) -> Callable[[], None]:
        """``issue``'s call, waited for at once: a step of a point-to-point exchange."""
        call = self.issue(name, *args)
        if self.api == "blocking":
            return call
        return lambda: call().Wait()


def _array_piece(obj, start: int, stop: int):
    return obj[start:stop]


def _array_room(obj) -> int:
    return obj.nbytes + (1 << 12)


@dataclass(frozen=True)
class ObjectCall(Call):
    """What an mpi4py pickle-API backend provides: the object to send (a slice of the send
    buffer, or the same values as another payload: ``collbench.benchmarks.payloads``), how to
    reduce two such objects (``ufunc``: numpy's ufunc for arrays), how to take elements start to
    stop of one (``piece``), and the bytes a receive buffer needs for its pickle (``room``)."""

    comm: Any
    send: Any
    recv_len: int
    ufunc: Optional[Callable]
    piece: Callable[[Any, int, int], Any] = _array_piece
    room: Callable[[Any], int] = _array_room
    api: str = "blocking"
    #: the elements the send object holds (a bytes payload's length is in bytes)
    send_len: int = 0

    def chunks(self, length: int) -> list:
        """The send object cut into n pieces of ``length`` elements."""
        return [self.piece(self.send, j * length, (j + 1) * length) for j in range(self.n)]


@dataclass(frozen=True)
class TensorCall(Call):
    """What a torch.distributed backend provides: the module, its group, tensor slices, the op,
    and the device the tensors live on (``collbench.backends.devices.TorchDevice``)."""

    dist: Any
    group: Any
    send: Any
    recv: Any
    op: Any
    device: Any
    api: str = "blocking"
    in_place: bool = False

    def issue(self, function: Callable, *args, **kwargs) -> Callable[[], Any]:
        """``function(*args, **kwargs)`` in this api: blocking; or nonblocking (``async_op=True``),
        returning torch's work to wait on. torch has no persistent collectives (the plan refuses
        them before any rank starts)."""
        if self.api == "nonblocking":
            kwargs["async_op"] = True
        return partial(function, *args, **kwargs)

    def global_rank(self, rank: int) -> int:
        """The number torch's calls take for ``rank`` of the group (``src``, ``dst``, a peer):
        its rank in the world, which differs from the group's within a split."""
        return self.dist.get_global_rank(self.group, rank)

    def first_available(self, *names: str) -> Callable:
        """The first of ``names`` this torch has (names changed across torch versions)."""
        for name in names:
            if hasattr(self.dist, name):
                return getattr(self.dist, name)
        raise AttributeError(names[0])

    def restore(self) -> None:
        """Refill the in-place work buffer (the receive side) from the untouched send side."""
        self.recv.copy_(self.send)

    def poison(self) -> None:
        """Overwrite the receive side, so that only what arrives passes the check."""
        self.device.poison(self.recv)

    def poison_unless_root(self) -> None:
        if self.rank != self.root:
            self.poison()

    def no_reset(self) -> None:
        pass


class Benchmark:
    """One benchmark. Subclasses (``Collective``, ``PointToPoint``) set the class attributes and
    implement what applies."""

    name: ClassVar[str]
    position: ClassVar[int]           # where it comes in ``all``, in the command list and in tables
    kind: ClassVar[str] = COLLECTIVE  # collective or point-to-point: ``all`` runs the collectives
    size_is_per_rank: ClassVar[bool] = True   # False: the size is the whole n-rank array
    send_div: ClassVar[bool] = False  # each rank sends size / n
    recv_div: ClassVar[bool] = False  # each rank receives size / n
    reduces: ClassVar[bool] = False   # takes --op
    rooted: ClassVar[bool] = False    # takes --root
    paired: ClassVar[bool] = False    # takes --pair: the two ranks of the pair alone take part
    windowed: ClassVar[bool] = False  # takes --window: a sample is a window of W messages
    #: a sample paces the ranks itself (a reply, an acknowledgement): no barrier before it
    self_paced: ClassVar[bool] = False
    #: a pair's figure has a direction, from its first rank to its second (bw; not a round trip)
    directed: ClassVar[bool] = False
    in_place: ClassVar[bool] = False  # one buffer serves as send and receive
    #: its pickle-API call returns a list of n objects, one from each rank (gather, allgather,
    #: alltoall), rather than one object
    gathers_objects: ClassVar[bool] = False
    moves_data: ClassVar[bool] = True  # False for barrier: one row, no sizes
    #: why its calls cannot be timed on a GPU's own clock (``--timing graph, device``), or "": they
    #: can where the backend queues them on a stream
    not_on_device: ClassVar[str] = ""
    #: the apis (``--api``, APIS) its calls can be issued with
    apis: ClassVar[tuple] = APIS
    min_ranks: ClassVar[int] = 1
    #: where the size is the whole array, what each rank does with its size / n (command help)
    part_per_rank: ClassVar[str] = "has"
    #: the command's help, first paragraph; empty: "Measure NAME across sizes (and backends)."
    summary: ClassVar[str] = ""
    #: how one sample is timed, for the command's help (``collbench COMMAND --help``)
    timed_as: ClassVar[str] = "one call, after a barrier over every rank; the slowest rank's time"
    #: peak memory beyond the base per byte of send + receive buffers, (root, others), for each
    #: family, measured by benchmarks/memory_factors.py; a family or benchmark without figures
    #: gets the largest measured (``collbench.measure.memory.factor``)
    memory_factors: ClassVar[dict] = {}

    def bus_factor(self, n: int) -> float:
        """Bus bandwidth = algorithm bandwidth × this (nccl-tests' convention)."""
        return 1.0

    def lengths(self, elements: int, n: int, roles: Roles = Roles()) -> tuple[int, int]:
        """(send, receive) lengths in elements for a size of ``elements`` on n ranks (``roles``:
        where a pattern spreads the bytes, the busiest rank's)."""
        send = elements // n if self.send_div else elements
        recv = elements // n if self.recv_div else elements
        return send, recv

    #: its pieces have lengths of their own, which ``--pattern`` (``Roles.pattern``) spreads
    patterned: ClassVar[bool] = False
    #: backends (by name) whose library lacks this call, and why: refused in one line
    lacks: ClassVar[dict] = {}
    #: measured by ``collbench all`` (a collective); False: by its own command only
    in_all: ClassVar[bool] = True

    def imbalance(self, elements: int, n: int, roles: Roles) -> tuple[float, float]:
        """(sent, received): the busiest rank's bytes over the size's, where a pattern spreads
        them."""
        return 1.0, 1.0

    def rank_elements(self, elements: int, n: int, roles: Roles) -> Optional[list]:
        """Each rank's (sent, received) elements where a pattern spreads them (``report
        --per-rank``); None where every rank's are the size's."""
        return None

    def granule(self, n: int) -> int:
        """Element counts must be a multiple of this for the data to split evenly over n ranks."""
        return 1 if self.size_is_per_rank else n

    def takes_part(self, rank: int, roles: Roles) -> bool:
        """Whether ``rank`` communicates at all (the others wait while the pairs measure)."""
        return not self.paired or roles.pair_of(rank) is not None

    def timed_on(self, rank: int, roles: Roles) -> bool:
        """Whether ``rank``'s clock makes its group's samples (the maximum over such ranks):
        every rank taking part, or the rank that starts a pair's exchanges."""
        return (rank == (roles.pair_of(rank) or (None,))[0]
                if self.paired else self.takes_part(rank, roles))

    def group_count(self, roles: Roles) -> int:
        """How many measurements one call makes: one per pair measuring at once, or per group of
        a split, else one."""
        return len(roles.pairs) if self.paired else max(1, len(roles.groups))

    def group_of(self, rank: int, roles: Roles) -> Optional[int]:
        """Which of those measurements ``rank`` takes part in (None: it waits)."""
        if not self.paired:
            return roles.group_index(rank)
        pair = roles.pair_of(rank)
        return None if pair is None else roles.pairs.index(pair)

    def copies_in_flight(self, family: str, roles: Roles) -> int:
        """How many copies of its buffers a rank of ``family`` holds at once (the memory guard's
        multiplier): 1, but W where the pickle API pickles each message of a window apart."""
        return 1

    @property
    def same_work(self) -> bool:
        """Every rank does the same work in a call, so that their times compare (the per-rank
        view's outliers): not a root's tree, not the two sides of a pair."""
        return not self.rooted and not self.paired

    def messages_per_call(self, roles: Roles) -> int:
        """What one call's time is divided by to give the time reported: one message's."""
        return 1

    def row_axes(self, roles: Roles, group: int = 0) -> dict:
        """The row columns that say where measurement ``group`` ran
        (``collbench.results.records``)."""
        return {"pair": "%d-%d" % roles.pairs[group] if self.paired else "",
                "window": roles.window if self.windowed else 1,
                "pairs_at_once": len(roles.pairs) if self.paired else 1}

    def received(self, n: int, rank: int, roles: Roles, elements: int, recv_len: int) -> tuple:
        """What ``rank`` must find in the ``recv_len`` elements of its receive buffer after a call
        of ``elements`` in all: parts (``check.Part``), each a run of one rank's values or of the
        reduction; empty where it receives nothing."""
        return ()

    def buffer_call(self, c: BufferCall) -> Optional[Callable[[], Any]]:
        return None

    def object_call(self, c: ObjectCall) -> Optional[Callable[[], Any]]:
        return None

    def tensor_call(self, c: TensorCall) -> Optional[tuple[Callable[[], Any], Callable[[], None]]]:
        return None

    def placements(self, family: Optional[str]) -> tuple:
        """The placements (PLACEMENTS) its calls take in ``family``, the usual first: both in MPI's
        buffer API, out of place elsewhere unless a subclass says more; none where there are no
        buffers to place (barrier, point-to-point)."""
        if not self.moves_data or self.kind != COLLECTIVE:
            return ()
        return PLACEMENTS if family == "buffer" else (OUT_OF_PLACE,)

    def placement(self, family: Optional[str], asked: str) -> str:
        """The placement a call asked to be ``asked`` takes in ``family``: that one where it has it,
        else its only one ("" for none)."""
        forms = self.placements(family)
        return "" if not forms else (asked if asked in forms else forms[0])

    def in_place_input(self, n: int, rank: int, roles: Roles, send_len: int) -> Optional[int]:
        """In place, where in the receive buffer this rank's input (its send buffer's first
        ``send_len`` elements) must lie before a call; None where the send buffer still serves (a
        root's scatter, a non-root's reduce and gather)."""
        return 0

    def received_in_place(self, n, rank, roles, elements, recv_len) -> tuple:
        """``received`` for an in-place call: by default the same."""
        return self.received(n, rank, roles, elements, recv_len)

    def api_refusal(self, api: str, family: str) -> Optional[str]:
        """Why this benchmark cannot be issued with ``api`` by ``family``, or None."""
        if api not in self.apis:
            return f"{self.name} is measured with the {' or '.join(self.apis)} api only" + (
                f" ({self.api_note})" if self.api_note else "")
        if api != "blocking" and family == "object" and (self.kind == COLLECTIVE
                                                         or api == "persistent"):
            return (f"mpi4py's pickle API has no {api} "
                    f"{'collectives' if self.kind == COLLECTIVE else 'calls'}; use mpi")
        if api == "persistent" and family == "tensor":
            return "torch.distributed has no persistent calls; use mpi"
        return None

    #: why a benchmark takes fewer apis than every one
    api_note: ClassVar[str] = ""

    def issued_by(self, family: str) -> bool:
        """Whether this benchmark implements ``family`` (buffer, object or tensor)."""
        method = f"{family}_call"
        return getattr(type(self), method) is not getattr(Benchmark, method)

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name}>"


class Collective(Benchmark):
    """A collective: every rank takes part in every call."""


class PointToPoint(Benchmark):
    """Point-to-point: messages between two ranks (``--pair``), or between every rank and its
    neighbour (``paired = False``). The size is one message's."""

    kind = POINT_TO_POINT
    paired = True
    self_paced = True
    min_ranks = 2
    apis = ("blocking",)

    def received(self, n, rank, roles, elements, recv_len):
        """By default each rank of the pair receives what the other sent."""
        pair = roles.pair_of(rank)
        if pair is None:
            return ()
        a, b = pair
        return (Part(0, recv_len, b if rank == a else a),)


def from_every_rank(n: int, chunk: int, offset: int = 0) -> tuple:
    """Parts of ``chunk`` elements, one from each rank in rank order, each its values from index
    ``offset`` on (what allgather and gather receive; alltoall, from each its piece)."""
    return tuple(Part(r * chunk, chunk, r, offset) for r in range(n))


def reduction(recv_len: int, offset: int = 0) -> tuple:
    """The whole receive buffer holds the reduction over every rank, from index ``offset`` on."""
    return (Part(0, recv_len, REDUCED, offset),)


def ring_factor(n: int) -> float:
    """(n - 1) / n: what each rank moves of the whole array in a ring algorithm."""
    return (n - 1) / n
