"""One rank's walk over one round: blocks of (benchmark, backend, layout) in the round's order,
the sizes of each block in theirs (``block.Block``: each size checked once and then measured by
``harness.measure``). A layout is where the ranks stand (``Roles``): the plan's, or one step of
``collbench pairs``. Rank 0 hands each measurement to the output as one round of one row per
group (a pair of the step; else the one group of every rank).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from dataclasses import dataclass

from collbench.measure import caches, harness
from collbench.measure import memory
from collbench.launch.liveness.watchdog import Watchdog
from collbench.errors import SharedUsageError
from collbench.benchmarks.base import Benchmark, Roles
from collbench.benchmarks.registry import get_benchmark
from collbench.benchmarks import check
from collbench.benchmarks.ops import element_of, kinds_of
from collbench.measure.sizes import format_size
from collbench.measure.timings import on_device
from collbench.run.block import Block


@dataclass(frozen=True)
class SizePoint:
    """One size as measured: the requested size rounded down to whole elements that split over n."""

    elements: int        # elements in size_bytes
    size_bytes: int
    per_rank_bytes: int
    send_len: int
    recv_len: int
    itemsize: int = 1    # the bytes of one element (a value–index pair's for maxloc, minloc)


def size_points(coll: Benchmark, sizes, itemsize: int, n: int,
                roles: Roles = Roles()) -> tuple[list, list]:
    """Round each size down to whole elements that split evenly over n ranks."""
    if not coll.moves_data:
        return [SizePoint(0, 0, 0, 0, 0, itemsize)], []
    points, small, seen = [], [], set()
    granule = coll.granule(n)
    for size in sizes:
        elements = (size // itemsize) // granule * granule
        if elements == 0:
            small.append(size)
            continue
        if elements in seen:
            continue
        seen.add(elements)
        # a benchmark's own lengths(elements, n), written before patterns, keeps working
        send, recv = (coll.lengths(elements, n, roles)
                      if coll.patterned else coll.lengths(elements, n))
        per_rank = elements * itemsize if coll.size_is_per_rank else elements * itemsize // n
        points.append(SizePoint(elements, elements * itemsize, per_rank, send, recv, itemsize))
    if not small:
        return points, []
    named = f"size {format_size(small[0])}" if len(small) == 1 else \
        f"{len(small)} sizes from {format_size(min(small))} to {format_size(max(small))}"
    why = (f"smaller than one {itemsize}-byte element" if granule == 1 else
           f"too small to split over {n} ranks in {itemsize}-byte elements")
    return points, [f"{coll.name}: {named} {'is' if len(small) == 1 else 'are'} {why}; skipped"]


#: A window of a pair takes at most this share of a size's budget (``Sweep._as_sent``): the
#: check's call, warm-up and samples then keep to the budget with room for a sample or two.
WINDOW_SHARE = 0.5
#: Timed exchanges of one message, and of a window of PROBE_WINDOW (or fewer, as asked), that
#: decide a pair's window (the fastest of PROBES counts): the difference over PROBE_WINDOW - 1
#: messages is what each next one costs, a rank's few milliseconds off the core divided by three.
PROBES = 2
PROBE_WINDOW = 4


def fitting_window(window: int, first_s: float, each_s: float, most_s: float) -> int:
    """``window``, if a window of that many messages takes ``most_s`` at most, its first message
    ``first_s`` (with the acknowledgement's round trip) and each other ``each_s``; else the
    largest power of two below it that does, one at least."""
    def took(n: int) -> float:
        return first_s + (n - 1) * each_s

    if took(window) <= most_s:
        return window
    fits = 1
    while fits * 2 < window and took(fits * 2) <= most_s:
        fits *= 2
    return fits


def _probe(bind, roles: Roles, several: int) -> tuple:
    """This rank's time for its pair's exchange of one message and of a window of ``several``,
    the fastest of PROBES each (a rank descheduled once does not decide), after one exchange that
    may open the connection: a window costs the first, and for each next message the difference
    over the ``several`` - 1 between. ``bind(roles)``: the call at the size."""
    took = []
    for messages in (1, several):
        probe = bind(dataclasses.replace(roles, window=messages, windows=()))
        if messages == 1:
            probe.run_blocking()
        fastest = math.inf
        for _ in range(PROBES):
            t0 = time.perf_counter()
            probe.run_blocking()
            fastest = min(fastest, time.perf_counter() - t0)
        probe.release()
        took.append(fastest)
    return tuple(took)


#: What a round's wall time goes to, as its record says (``Sweep.spent``): the timed calls with
#: their warm-up and stop rule, writing the check pattern and checking results, and set-up
#: (communicators, buffers, the memory guard's questions). The rest is output and the barriers
#: between blocks; a self-launched run's launches lie outside its rounds.
PHASES = ("timed", "check", "setup")


class _Phase:
    """Adds the time spent inside a ``with`` to ``spent[name]``."""

    __slots__ = ("spent", "name", "start")

    def __init__(self, spent: Counter, name: str) -> None:
        self.spent, self.name = spent, name

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc) -> None:
        self.spent[self.name] += time.perf_counter() - self.start


class Sweep:
    """The sizes each (collective, backend) measures, the layouts, and one round's walk over them.
    ``hosts``: every rank's host, in rank order."""

    def __init__(self, plan, control, backends: dict, ranks_per_node: int, watchdog: Watchdog,
                 hosts: list) -> None:
        self.plan, self.control, self.backends, self.ranks_per_node = (plan, control, backends,
                                                                       ranks_per_node)
        self.watchdog = watchdog
        self.layouts = [plan.roles]
        if plan.pairing is not None:
            problem = plan.pairing.problem(hosts)
            if problem:
                raise SharedUsageError(problem)
            self.layouts = plan.pairing.layouts(hosts, plan.roles)
        self.hosts = hosts
        groups = plan.roles.groups
        #: this rank's place in its group (the world, without a split), where fills and checks
        #: are made; every group has the same size
        self.group_size = len(groups[0]) if groups else control.size
        self.group_rank = (groups[plan.roles.group_index(control.rank)].index(control.rank)
                           if groups else control.rank)
        self.failures: list = []
        #: seconds of this round's wall time by what they went to (``PHASES``), on this rank
        self.spent: Counter = Counter()
        self.out = None
        self.total_rounds = 1
        #: one side of an ab pair taken size by size: this rank's turns (``run.turns``), else None
        self.turns = None
        #: the most of this rank's memory seen on huge pages this round, its buffers filled (KiB)
        self.huge_pages_kib = None
        # every rank's view of its host
        self.probes = control.bcast(control.gather(memory.probe()))
        self.base_bytes = [p.held for p in self.probes]                      # each rank's base
        self.points: dict = {}
        self.notes: list = []
        self._caches: dict = {}           # the cache's bytes, by device (cache_bytes)
        for cname in plan.collectives:
            coll = get_benchmark(cname)
            for backend_name, backend in backends.items():
                for spread in self.patterns_of(coll):
                    for kind in kinds_of(coll, plan.kinds):
                        self.points[cname, backend_name, spread, kind] = self._points(
                            coll, backend_name, backend, spread, kind)

    def patterns_of(self, coll: Benchmark) -> tuple:
        """The patterns ``coll`` measures (``--pattern``'s list), or ("",) where its pieces all
        have one length."""
        return self.plan.patterns if coll.patterned else ("",)

    def roles_of(self, layout: int, spread: str) -> Roles:
        """The roles of a block: the sweep's layout, spread by the block's pattern."""
        roles = self.layouts[layout]
        return dataclasses.replace(roles, pattern=spread) if spread else roles

    def _points(self, coll: Benchmark, backend_name: str, backend, spread: str,
                kind: tuple) -> list:
        """The sizes this (collective, backend, pattern, (dtype, op)) will measure; notes say
        why others are skipped."""
        if (coll.name, backend_name, *kind) in self.plan.unsupported:   # the plan's notes say why
            return []
        itemsize = element_of(*kind).itemsize
        points, notes = size_points(coll, self.plan.sizes, itemsize, self.group_size,
                                    self.roles_of(0, spread))
        self.notes += [note for note in notes if note not in self.notes]
        limit = backend.max_message_bytes()
        if limit is not None:
            over = [p for p in points if max(p.send_len, p.recv_len) * itemsize > limit]
            self.notes += [f"{coll.name} on {backend_name} at {format_size(p.size_bytes)}: a "
                           f"message beyond {backend_name}'s {format_size(limit)} limit; skipped"
                           for p in over]
            points = [p for p in points if p not in over]
        device_free = backend.device_memory_bytes()
        # one device per rank: the fullest device decides for all
        if device_free is not None:
            gathered = self.control.gather(device_free)
            room = self.control.bcast(memory.headroom(min(gathered)) if gathered else None)
            # the buffers, and what the check holds there beside them (check.WORK_BYTES)
            def need(p) -> int:
                return ((p.send_len + p.recv_len) * itemsize + check.WORK_BYTES
                        + self._pool(coll, backend, p))
            over = [p for p in points if need(p) > room]
            self.notes += [f"{coll.name} on {backend_name} at {format_size(p.size_bytes)}: needs "
                           f"about {need(p) / memory.GiB:.2f} GiB on each device, more than the "
                           f"{room / memory.GiB:.2f} GiB free on the fullest; skipped, as it would "
                           "run out of device memory" for p in over]
            return [p for p in points if p not in over]
        fits = []
        for p in points:
            short = memory.shortfall(self._need(coll, backend, p, [self.roles_of(i, spread) for i in
                                                                    range(len(self.layouts))]),
                                     self.probes, self.base_bytes)
            if short is None:
                fits.append(p)
            else:
                where = f"{coll.name} on {backend_name} at {format_size(p.size_bytes)}"
                self.notes.append(memory.skip_note(where, short))
        return fits

    def _nominal(self, coll: Benchmark, backend, point: SizePoint, roles: Roles) -> int:
        """The bytes of a rank's buffers at ``point``, with the copies of a message its family
        keeps in flight (the pickle API's window)."""
        itemsize = point.itemsize
        return int((point.send_len + point.recv_len) * itemsize
                   * coll.copies_in_flight(backend.family, roles) * backend.memory_scale(itemsize))

    def _pool(self, coll: Benchmark, backend, point: SizePoint) -> int:
        """The bytes of a cold block's pool beyond its first set of buffers (0 for a hot one):
        plain buffers, which the library's copies of a message (``memory.rank_need``) do not
        scale."""
        stride = self.set_stride(coll, point, False)
        extra = (self.pool_sets(backend, stride)
                 if caches.is_cold(coll, backend) else self.grouped(coll, backend)) - 1
        return int(stride * extra * backend.memory_scale(point.itemsize))

    @staticmethod
    def grouped(coll: Benchmark, backend) -> int:
        """How many calls of ``coll`` ``backend``'s setup issues as one group (``--coalesce``; 1
        for a collective that moves no data and for point-to-point, measured one at a time)."""
        if coll.kind != "collective" or not coll.moves_data:
            return 1
        return getattr(backend.options, "coalesce", 1)

    def set_stride(self, coll: Benchmark, point: SizePoint, in_place: bool) -> int:
        """The bytes of one set of a rank's buffers at ``point``, each buffer page-aligned."""
        itemsize = point.itemsize
        if in_place:
            return caches.padded(max(point.send_len, point.recv_len) * itemsize)
        return caches.padded(point.send_len * itemsize) + caches.padded(point.recv_len * itemsize)

    def pool_sets(self, backend, stride: int) -> int:
        """The sets of a cold pool of ``stride`` bytes a set on ``backend``'s device."""
        return caches.sets(stride, self.cache_bytes(backend))

    def cache_bytes(self, backend) -> int:
        """The cache ``backend``'s buffers sit behind, asked once per device."""
        device = backend.device
        key = (type(device).__name__, getattr(device, "name", ""))
        if key not in self._caches:
            self._caches[key] = caches.of_device(device)[0]
        return self._caches[key]

    def _need(self, coll: Benchmark, backend, point: SizePoint, layouts: list):
        """What a rank takes at ``point`` beyond its base (``memory.rank_need``), by rank, where
        it takes part in one of ``layouts``."""
        nominal = self._nominal(coll, backend, point, layouts[0])
        pool = self._pool(coll, backend, point)
        first = layouts[0]
        roots = ({members[first.root] for members in first.groups}
                 if first.groups else {first.root}) \
            if coll.rooted else set()
        return lambda r: (memory.rank_need(coll.name, backend.family, nominal, r in roots) + pool
                          if any(coll.takes_part(r, roles) for roles in layouts) else 0)

    def _still_fits(self, coll: Benchmark, backend_name: str, backend, point: SizePoint,
                    roles: Roles, round_number: int, allocated: int = 0) -> bool:
        """Just before a large size on host memory: every rank says what its host has now and rank
        0 decides for all (outside any timed region); a size that no longer fits is skipped with
        a note. ``allocated``: the bytes of the block's buffers, held already. Small sizes and
        device buffers are not asked about again."""
        nominal = self._nominal(coll, backend, point, roles) + self._pool(coll, backend, point)
        if backend.device_memory_bytes() is not None or not memory.is_large(
                coll.name, backend.family, nominal, self.ranks_per_node, self.probes):
            return True
        probes = self.control.gather(memory.probe())
        note = None
        if self.control.rank == 0:
            short = memory.shortfall(self._need(coll, backend, point, [roles]), probes,
                                     self.base_bytes, allocated)
            if short is not None:
                where = f"{coll.name} on {backend_name} at {format_size(point.size_bytes)}"
                note = memory.skip_note(where, short, now=True)
                note += f" (round {round_number})" if self.total_rounds > 1 else ""
        note = self.control.bcast(note)
        if note:
            self.out.note(note)
        return note is None

    def _as_sent(self, coll: Benchmark, roles: Roles, settings: harness.TimingSettings, bind,
                 identity) -> Roles:
        """``roles`` as the pairs send them at a size: where one window of a pair would take more
        than WINDOW_SHARE of the budget (the round's share of --max-time), in adaptive mode, that
        pair's window shrinks to the largest power of two that fits (one message at least), and
        its rows say so. Decided once per run, so that its rounds measure the same thing: the
        first round to measure a size probes every pair (``_probe``), later ones keep what it
        chose, as rank 0 finds in the rows (``identity(g)``: pair g's row). ``bind(roles)``: the
        call at this size."""
        if not coll.windowed or settings.iters or roles.window == 1:
            return roles
        control = self.control
        chosen = None
        if control.rank == 0:
            earlier = [self.out.measured(identity(g)) for g in range(len(roles.pairs))]
            if all(earlier):
                chosen = tuple(rounds[0].window or roles.window for rounds in earlier)
        chosen = control.bcast(chosen)
        if chosen is None:
            several = min(PROBE_WINDOW, roles.window)
            times = control.gather(_probe(bind, roles, several))
            if control.rank == 0:
                chosen = []
                for a, b in roles.pairs:       # each pair on its slower rank
                    one, more = (max(times[a][i], times[b][i]) for i in (0, 1))
                    chosen.append(fitting_window(roles.window, one,
                                                 max(more - one, 0.0) / (several - 1),
                                                 settings.max_time * WINDOW_SHARE))
                chosen = tuple(chosen)
            chosen = control.bcast(chosen)
        return (roles if all(w == roles.window for w in chosen)
                else dataclasses.replace(roles, windows=chosen))

    def phase(self, name: str) -> _Phase:
        """``with sweep.phase("check"):`` counts the block's time as that phase's (``PHASES``)."""
        return _Phase(self.spent, name)

    @property
    def steps(self) -> int:
        """Measurements in one round."""
        return sum(len(points) * len(self.timings_of(b, get_benchmark(c)))
                   for (c, b, _, _), points in self.points.items()) \
            * len(self.layouts)

    def timings_of(self, backend: str, coll: Benchmark) -> list:
        """The timings the plan measures of ``coll`` on ``backend`` (a setup's key): those it can
        time (a barrier: not on the GPU's clock)."""
        return [t for t in self.plan.timing_modes if (backend, t) not in self.plan.untimed
                and not (coll.not_on_device and on_device(t))]

    def blocks(self) -> list:
        """(collective, backend, layout, number of sizes, pattern, (dtype, op)) in plan order:
        what ``rounds.order`` shuffles."""
        return [(c, b, layout, len(self.points[c, b, p, k]), p, k) for c in self.plan.collectives
                for b in self.backends for p in self.patterns_of(get_benchmark(c))
                for k in kinds_of(get_benchmark(c), self.plan.kinds)
                for layout in range(len(self.layouts)) if self.points[c, b, p, k]]

    def run(self, out, round_number: int, order: list, settings: harness.TimingSettings,
            total_rounds: int) -> None:
        """Round ``round_number`` of ``total_rounds``: every block in ``order``; in the final round
        the output prints each collective's table when it is complete."""
        final = round_number == total_rounds
        self.out, self.total_rounds = out, total_rounds
        self.huge_pages_kib = None
        current = None
        for block in order:
            if current is not None and block.collective != current:
                out.collective_done(current, final)
            current = block.collective
            points = self.points[block.collective, block.backend, block.pattern, block.kind]
            Block(self, get_benchmark(block.collective), block.backend,
                  self.backends[block.backend],
                  self.roles_of(block.layout, block.pattern), round_number,
                  settings, block.kind).run(points, block.points)
            self.control.barrier()
        if current is not None:
            out.collective_done(current, final)

    def _group_axes(self, roles: Roles, g: int) -> dict:
        """The row columns that say which group of a split measured (``collbench.run.groups``)."""
        split = self.plan.split
        if split is None or not roles.groups:
            return {"split": "", "group": 0, "group_size": self.group_size, "group_hosts": ""}
        return {"split": split.mode, "group": g, "group_size": self.group_size,
                "group_hosts": split.group_hosts(roles.groups[g], self.hosts)}

    def _sort_key(self, coll: Benchmark, backend: str, point: SizePoint, roles: Roles, group: int,
                  timing: str, kind: tuple) -> tuple:
        plan = self.plan
        spread = (plan.patterns.index(roles.pattern)
                  if coll.patterned and roles.pattern in plan.patterns else 0)
        kinds = kinds_of(coll, plan.kinds)
        return (plan.collectives.index(coll.name), list(self.backends).index(backend), spread,
                kinds.index(kind) if kind in kinds else 0, point.size_bytes,
                tuple(roles.pairs[group]) if coll.paired else (group,),
                plan.timing_modes.index(timing))

