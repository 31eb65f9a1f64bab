"""One block of a round: a (benchmark, backend, layout) over its sizes in the round's order.
``Block.run`` reads as its steps: allocate the buffers at the largest size that fits now; then
per size, take the turn of an ab pair, bind the call, check it once, time it at each timing, and
emit each measurement as one round of one row per group (rank 0); release the buffers. A cold
block (``--cache cold``) also allocates, per size, the pool of buffer sets its calls rotate over
(``collbench.measure.caches``)."""

from __future__ import annotations

import dataclasses
import math

from collbench.backends import pages
from collbench.benchmarks.base import IN_PLACE, Benchmark, Roles
from collbench.benchmarks.check import Tables, pattern
from collbench.benchmarks.ops import element_of
from collbench.launch.liveness import supervise
from collbench.measure import caches, harness
from collbench.measure.sizes import format_size
from collbench.measure.timings.device import MAX_HOLD_S
from collbench.results.aggregate import round_data
from collbench.results.records import RowIdentity


class Block:
    """What a block's steps share: the sweep (plan, control, output, phases, watchdog, turns),
    the collective and backend, the roles, the round, the timing settings, and this rank's place
    in the group it measures in."""

    def __init__(self, sweep, coll: Benchmark, backend_name: str, backend, roles: Roles,
                 round_number: int, settings: harness.TimingSettings, kind: tuple) -> None:
        self.sweep, self.coll, self.backend_name, self.backend = sweep, coll, backend_name, backend
        self.roles, self.round_number, self.settings = roles, round_number, settings
        self.plan, self.control = sweep.plan, sweep.control
        self.n, self.mine = sweep.group_size, sweep.group_rank
        #: the block's dtype and op (``none`` where the collective reduces nothing)
        self.kind = kind
        self.dtype, self.op_name = kind
        self.element = element_of(*kind)
        self.tables = Tables(pattern(self.op_name, self.dtype), self.n, self.element,
                             backend.device)
        self.placement = coll.placement(backend.family, backend.options.placement)
        self.received = (coll.received_in_place
                         if self.placement == IN_PLACE and not coll.in_place else coll.received)
        self.timings = sweep.timings_of(backend_name, coll)
        self.buffers = None               # a rank outside the pair holds none
        self.allocated = 0
        #: --cache cold: each timed call on the next of a pool of buffer sets (a barrier has none)
        self.cold = caches.is_cold(coll, backend)
        #: --coalesce K: calls issued K at a time as one group, each on a set of buffers of its own
        self.grouped = sweep.grouped(coll, backend)

    def run(self, points: list, indices: tuple) -> None:
        """Every size of ``indices`` (ascending ``points``, measured in that order)."""
        kept = self.allocate(points)
        for index in indices:
            if index < kept and self.fits(points[index], last=index == kept - 1):
                self.size(points[index])
        self.release()

    def _watch(self, where: str) -> None:
        supervise.set_position(where)
        self.sweep.watchdog.arm(self.plan.timeout, where)

    def allocate(self, points: list) -> int:
        """The buffers at the largest size that still fits now, filled with this rank's check
        values; how many of ``points`` are within it."""
        sweep, coll, backend = self.sweep, self.coll, self.backend
        self._watch(f"allocation for {coll.name} on {self.backend_name}")
        kept = len(points)
        with sweep.phase("setup"):
            while kept and not sweep._still_fits(coll, self.backend_name, backend, points[kept - 1],
                                                 self.roles, self.round_number):
                kept -= 1
        if not kept:
            return 0
        top = points[kept - 1]
        if coll.takes_part(self.control.rank, self.roles):
            self.buffers = self._filled(top)
            with sweep.phase("setup"):           # what the pages' advice got, written
                seen = [kib for kib in (sweep.huge_pages_kib, pages.huge_now()) if kib is not None]
                sweep.huge_pages_kib = max(seen, default=None)
        self.allocated = (top.send_len + top.recv_len) * self.element.itemsize
        return kept

    def _filled(self, point):
        """Buffers at ``point``, filled with this rank's check values."""
        with self.sweep.phase("setup"):           # in place, the receive buffer holds the input too
            buffers = self.backend.allocate(
                send_len=point.send_len, dtype=self.element, in_place=self.coll.in_place,
                recv_len=max(point.send_len, point.recv_len)
                if self.placement == IN_PLACE else point.recv_len)
        with self.sweep.phase("check"):
            self.backend.fill(buffers, tables=self.tables, rank=self.mine, length=point.send_len)
        return buffers

    def fits(self, point, last: bool) -> bool:
        """Whether ``point`` still fits the hosts' memory now (the largest kept was asked
        already)."""
        with self.sweep.phase("setup"):
            return last or self.sweep._still_fits(self.coll, self.backend_name, self.backend, point,
                                                  self.roles, self.round_number, self.allocated)

    def release(self) -> None:
        if self.buffers is not None:      # before the next block allocates its own
            with self.sweep.phase("setup"):
                self.backend.release(self.buffers)
            self.buffers = None

    def identity(self, point, g: int, timing: str) -> RowIdentity:
        """The row of group ``g`` at ``point`` and ``timing``."""
        coll, control, sweep = self.coll, self.control, self.sweep
        return RowIdentity(collective=coll.name, backend=self.backend.name, dtype=self.dtype,
                           op=self.op_name,
                           world_size=control.size, ranks_per_node=sweep.ranks_per_node,
                           size_bytes=point.size_bytes,
                           per_rank_bytes=point.per_rank_bytes, count=point.elements, timing=timing,
                           bus_factor=coll.bus_factor(self.n), **coll.row_axes(self.roles, g),
                           **sweep._group_axes(self.roles, g), **self.backend.row_axes(),
                           placement=self.placement,
                           **self._traffic(point), cache=caches.COLD if self.cold else caches.HOT,
                           cache_span=self.pool_span(point) if self.cold else 0.0,
                           coalesce=self.grouped)

    def pool_span(self, point) -> float:
        """How many times the cache a cold pool spans at ``point``: its sets, each page-aligned."""
        stride = self.sweep.set_stride(self.coll, point, self.placement == IN_PLACE)
        return round(stride * self.sweep.pool_sets(self.backend, stride)
                     / self.sweep.cache_bytes(self.backend), 3)

    def pooled(self, point, sent: Roles, first) -> tuple:
        """(the call timed at ``point``: ``first`` and a cold pool's other sets in turn, or a group
        of ``grouped`` calls, one per set; the other sets' buffers, given back once the size is
        timed)."""
        stride = self.sweep.set_stride(self.coll, point, self.placement == IN_PLACE)
        count = self.sweep.pool_sets(self.backend, stride) if self.cold else self.grouped
        pool = [self._filled(point) for _ in range(count - 1)]
        with self.sweep.phase("setup"):
            bounds = [first] + [self.bind(point, sent, buffers) for buffers in pool]
        return (caches.rotating(bounds) if self.cold else self.backend.coalesced(bounds)), pool

    def _traffic(self, point) -> dict:
        """A v-collective's pattern, and how far its busiest ranks lie above the size."""
        if not self.coll.patterned:
            return {"pattern": "", "imbalance_sent": 1.0, "imbalance_received": 1.0}
        sent, received = self.coll.imbalance(point.elements, self.n, self.roles)
        return {"pattern": self.roles.pattern, "imbalance_sent": sent,
                "imbalance_received": received}

    def bind(self, point, sent: Roles, buffers=None):
        """The call at ``point`` as the pairs send it, on the block's buffers (or ``buffers``, a
        cold pool's set); nothing on a rank outside the pair."""
        if not self.coll.takes_part(self.control.rank, sent):
            return harness.IDLE
        if self.coll.patterned:
            sent = dataclasses.replace(sent, elements=point.elements)
        return self.backend.bind(self.buffers if buffers is None else buffers, collective=self.coll,
                                 send_len=point.send_len,
                                 recv_len=point.recv_len, op=self.op_name, roles=sent)

    def size(self, point) -> None:
        """One size: its turn, its call bound, checked once, timed at each timing, emitted."""
        sweep = self.sweep
        if sweep.turns is not None:         # the other side measures meanwhile: no deadline
            sweep.watchdog.disarm()
            sweep.turns.take()
        where = f"{self.coll.name} on {self.backend_name}"
        if point.size_bytes:
            where += f" at {format_size(point.size_bytes)}"
        self._watch(where)
        sweep.out.step(where)
        # a block with no timing left only checks: nothing to budget
        with sweep.phase("setup"):
            sent = (sweep._as_sent(self.coll, self.roles, self.settings,
                                   lambda r: self.bind(point, r),
                                   lambda g: self.identity(point, g, self.timings[0]))
                    if self.timings else self.roles)
        bound, pool = self.bind(point, sent), []
        if bound is not harness.IDLE and (self.cold or self.grouped > 1):
            bound, pool = self.pooled(point, sent, bound)
        checked = self.plan.check and self.coll.moves_data      # a barrier carries nothing to check
        wrong = (self.check(bound, point, sent, where)
                 if checked else [0] * self.coll.group_count(self.roles))
        for i, timing in enumerate(self.timings):
            # the check's call stands for the first call of the first timing
            with sweep.phase("timed"):
                m = harness.measure(bound, bench=self.coll, roles=sent,
                                    barrier=self.backend.barrier,
                                    sync=self.backend.synchronize, control=self.control,
                                    settings=dataclasses.replace(self.settings, mode=timing),
                                    device=self.backend.device, called=checked and i == 0)
            m = harness.per_call(m, self.grouped)       # a group's sample is its calls'
            if self.control.rank == 0:
                self.emit(m, point, sent, timing, where, wrong, checked)
        bound.release()               # a persistent request: before the next size binds its own
        if pool:
            with sweep.phase("setup"):
                for buffers in pool:
                    self.backend.release(buffers)

    def check(self, bound, point, sent: Roles, where: str) -> list:
        """One call whose result every rank checks; the wrong elements per group (every rank's)."""
        coll, control = self.coll, self.control
        with self.sweep.phase("check"):
            want = self.received(self.n, self.mine, sent, point.elements, point.recv_len)
            arrived = bound.checked_all() if bound.checked_all is not None else [bound.checked()]
            wrong_here = sum(self.tables.count_wrong(got, want, point.recv_len) for got in arrived)
            by_rank = control.bcast(control.gather(wrong_here))
        wrong = [0] * coll.group_count(self.roles)
        for r in range(control.size):
            g = coll.group_of(r, self.roles)
            if g is not None:
                wrong[g] += by_rank[r]
        if sum(wrong):
            self.sweep.failures.append(f"{where}: {sum(wrong)} wrong elements"
                                       + (f" (round {self.round_number})"
                                          if self.sweep.total_rounds > 1 else ""))
        return wrong

    def emit(self, m: harness.Measurement, point, sent: Roles, timing: str, where: str, wrong: list,
             checked: bool) -> None:
        """Rank 0: a measurement's notes, and one round of one row per group that has samples."""
        out, coll = self.sweep.out, self.coll
        if m.idle_gpu:
            out.note(f"{coll.name} on {self.backend_name}, {self.placement}, graph timing: the "
                     "captured calls put no work on the GPU (as NCCL's in-place collectives on one "
                     "rank do), so its time is an empty graph's replay")
        if not all(len(x) for x in m.samples_us):
            out.note(f"{where}, {timing} timing: not timed"
                     f"{' for some pairs' if len(m.samples_us) > 1 else ''}, as no hold on the "
                     f"stream, up to {MAX_HOLD_S * 1e3:.0f} ms, covered the call: it waits on the "
                     "host, or takes longer to queue")
        elif m.unheld:
            out.note(f"{where}, device timing: {m.unheld} sample(s) not counted, as the hold on "
                     "the stream ended before their call was queued; the hold was lengthened")
        means = [x if x is not None and not math.isnan(x) else math.nan
                 for x in (m.rank_means_us or [])]
        groups = [coll.group_of(r, self.roles) for r in range(self.control.size)]
        for g, samples in enumerate(m.samples_us):
            if not len(samples):            # device timing that no hold covered: no row
                continue
            check = "skipped" if not checked else ("ok" if wrong[g] == 0 else f"wrong:{wrong[g]}")
            own = [x if groups[r] == g else math.nan for r, x in enumerate(means)]
            window = sent.window_at(g)
            out.add(self.identity(point, g, timing),
                    self.sweep._sort_key(self.coll, self.backend_name, point, self.roles, g,
                                         timing, self.kind),
                    round_data(self.round_number, samples, own,
                               precision_reached=m.precision_reached[g],
                               check=check, calls_per_sample=m.calls_per_sample,
                               overall_us=m.overall_us[g] if m.overall_us else (),
                               compute_us=m.compute_us[g] if m.compute_us else (),
                               window=window if window != self.roles.window else 0, short=m.short))
            supervise.size_finished()
