"""--timing as a list: latency, throughput, graph and device, side by side. The device timings
need a GPU: here, their refusal on backends that cannot time on one, and the loop's structure
with a stand-in for the GPU's clock (the real one runs in tests/test_torch_backends.py where a
CUDA device is visible)."""

import contextlib
import warnings

import numpy as np
import pytest

from collbench.backends.base import Bound, Control
from collbench.benchmarks.base import Roles
from collbench.benchmarks.registry import get_benchmark
from collbench.errors import UsageError
from collbench.measure import harness
from collbench.measure.timings import base as timing_base, device as device_timing
from collbench.measure.timings.graph import TIMING as GRAPH
from collbench.measure.timings import timing_modes
from conftest import cli, load_json


def test_timing_lists_keep_one_order_and_both_is_latency_and_throughput():
    assert timing_modes(("both",)) == ("latency", "throughput")
    assert timing_modes(("device", "latency", "graph", "latency")) == ("latency", "graph", "device")
    with pytest.raises(UsageError, match="unknown timing 'cold'"):
        timing_modes(("cold",))


@pytest.mark.parametrize("args,named", [
    (["--timing", "graph"], "mpi cannot"),
    (["--timing", "latency,device", "--backend", "gloo,mpi"], "gloo, mpi cannot"),
    (["--timing", "graph", "--backend", "mpi-pickle"], "mpi-pickle cannot"),
])
def test_device_timings_on_backends_without_a_gpu_stream_are_one_line_exit_2(run_dir, args, named):
    proc = cli(["allreduce", "-n", "2", "--sizes", "1K", "--no-save", *args], run_dir)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert named in proc.stderr and "use nccl" in proc.stderr and "Traceback" not in proc.stderr


def test_a_timing_list_measures_each_side_by_side_and_rows_record_it(run_dir):
    proc = cli(["allreduce", "-n", "2", "--backend", "mpi", "--sizes", "8,1K", "--timing",
                "throughput,latency",
                "--iters", "5", "--rounds", "1", "-q", "-o", "t.json"], run_dir)
    assert proc.returncode == 0, proc.stderr
    data = load_json(run_dir / "t.json")
    assert [(r["size_bytes"], r["timing"]) for r in data["rows"]] == [
        (8, "latency"), (8, "throughput"), (1024, "latency"), (1024, "throughput")]
    assert data["metadata"]["settings"]["timings"] == ["latency", "throughput"]
    assert all(r["check"] == "ok" for r in data["rows"])


class OneRank(Control):
    """The control channel of a job of one rank: what a rank alone would get from MPI."""

    rank, size = 0, 1

    def barrier(self):
        pass

    def bcast(self, obj, root=0):
        return obj

    def gather(self, obj, root=0):
        return [obj]

    def reduce_max(self, values, root=0):
        return np.asarray(values, dtype=np.float64)


class StandInClock:
    """A device clock whose samples last ``seconds`` and whose first ``early`` holds end before
    their call is queued, as a hold too short for the dispatch would."""

    def __init__(self, seconds, early=0):
        self.per_sample, self.early = seconds, early
        self.begun = self.holds = 0
        self.hold_s, self.lengthened, self.closed, self.held_now = 0.0, [], False, True

    def begin(self):
        self.begun += 1

    def end(self):
        return self.held_now

    def seconds(self):
        return self.per_sample

    def hold_for(self, seconds, longest):
        self.hold_s, self.longest = seconds, longest

    def hold(self):
        self.holds += 1
        self.held_now = self.holds > self.early

    def lengthen(self):
        self.lengthened.append(self.hold_s)
        self.hold_s = min(2 * self.hold_s, self.longest)

    def close(self):
        self.closed = True


class StandInDevice:
    def __init__(self, clock, empty=False):
        self._clock, self.captured, self.replays, self.empty = clock, [], 0, empty

    def clock(self):
        return self._clock

    def capture(self, run, calls):
        self.captured.append(calls)

        def replay():
            self.replays += 1
            for _ in range(calls):
                run()
        return replay, self.empty


def _bound(counter):
    def run():
        counter.append(1)
    return Bound(run=run, run_blocking=run, checked=lambda: None)


SETTINGS = harness.TimingSettings(iters=12, warmup=2)


def test_graph_timing_captures_k_calls_once_and_divides_each_replay_by_k():
    calls, clock = [], StandInClock(seconds=2e-3)
    device = StandInDevice(clock)
    m = harness.measure(_bound(calls), bench=get_benchmark("allreduce"), roles=Roles(),
                        barrier=lambda: None,
                        sync=lambda: None, control=OneRank(), settings=harness.TimingSettings(
                            mode="graph", iters=12, warmup=2), device=device)
    k = m.calls_per_sample
    assert device.captured == [k] and 1 <= k <= GRAPH.max_calls
    assert device.replays == 12 and len(m.samples_us[0]) == 12
    assert np.allclose(m.samples_us[0], 2e-3 / k * 1e6)      # one replay's events over k calls


def test_device_timing_drops_samples_a_hold_did_not_cover_and_lengthens_the_hold():
    calls, clock = [], StandInClock(seconds=5e-6, early=3)
    m = harness.measure(_bound(calls), bench=get_benchmark("allreduce"), roles=Roles(),
                        barrier=lambda: None,
                        sync=lambda: None, control=OneRank(), settings=harness.TimingSettings(
                            mode="device", iters=12, warmup=2), device=StandInDevice(clock))
    assert m.unheld == 3 and len(m.samples_us[0]) == 12         # the three are measured again
    assert np.allclose(m.samples_us[0], 5.0)
    assert clock.lengthened and clock.hold_s > clock.lengthened[0]
    assert device_timing.MIN_HOLD_S <= clock.lengthened[0] <= device_timing.MAX_HOLD_S
    assert clock.closed and clock.holds == 15


def test_device_timing_with_the_stop_rule_counts_only_covered_samples():
    calls, clock = [], StandInClock(seconds=5e-6, early=4)
    m = harness.measure(_bound(calls), bench=get_benchmark("allreduce"), roles=Roles(),
                        barrier=lambda: None,
                        sync=lambda: None, control=OneRank(), settings=harness.TimingSettings(
                            mode="device", warmup=2, min_iters=10, max_time=0.2),
                        device=StandInDevice(clock))
    assert m.unheld == 4 and len(m.samples_us[0]) >= 10 and np.isfinite(m.samples_us[0]).all()
    assert np.isfinite(m.rank_means_us[0])


class FakeClock:
    """The harness's timer, advanced only by calls (``seconds`` each): what the budget decides is
    then exact, whatever the machine's load."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _slow_bound(clock, seconds, calls):
    def run():
        calls.append(1)
        clock.now += seconds
    return Bound(run=run, run_blocking=run, checked=lambda: None)


def test_the_budget_bounds_warm_up_and_samples_of_a_slow_call_and_says_it_fell_short(monkeypatch):
    """A call of 50 ms with a 0.2 s budget (a round's share of the default --max-time): the first
    warm-up call says that no more fit a third of the budget; then three samples fit what is
    left, where --min-iters asks for 10, and a fourth would end past the budget. Before, the
    size took 1 + 5 + 10 calls (0.8 s, four times the budget)."""
    clock, calls = FakeClock(), []
    monkeypatch.setattr(timing_base, "timer", clock)
    m = harness.measure(_slow_bound(clock, 0.05, calls), bench=get_benchmark("allreduce"),
                        roles=Roles(), barrier=lambda: None, sync=lambda: None, control=OneRank(),
                        settings=harness.TimingSettings(warmup=5, min_iters=10, max_time=0.2))
    assert len(calls) == 1 + 1 + 3, len(calls)       # first call, warm-up, samples
    assert len(m.samples_us[0]) == 3 and m.short
    assert clock.now - 0.05 <= 0.2 + 1e-9             # past the first call: within the budget


def test_a_fast_call_gets_its_whole_warm_up_and_min_iters_and_is_not_short(monkeypatch):
    clock, calls = FakeClock(), []
    monkeypatch.setattr(timing_base, "timer", clock)
    m = harness.measure(_slow_bound(clock, 1e-6, calls), bench=get_benchmark("allreduce"),
                        roles=Roles(), barrier=lambda: None, sync=lambda: None, control=OneRank(),
                        settings=harness.TimingSettings(warmup=5, min_iters=10, max_time=0.2))
    # all alike: the CI is reached at once
    assert len(calls) == 1 + 5 + 10 and len(m.samples_us[0]) == 10
    assert not m.short and m.precision_reached == (True,)


def test_fixed_iters_are_not_budgeted(monkeypatch):
    """--iters N asks for N samples whatever they cost, after --warmup calls."""
    clock, calls = FakeClock(), []
    monkeypatch.setattr(timing_base, "timer", clock)
    m = harness.measure(_slow_bound(clock, 0.05, calls), bench=get_benchmark("allreduce"),
                        roles=Roles(), barrier=lambda: None, sync=lambda: None, control=OneRank(),
                        settings=harness.TimingSettings(iters=12, warmup=5, max_time=0.2))
    assert len(calls) == 1 + 5 + 12 and len(m.samples_us[0]) == 12 and not m.short


def test_a_slow_first_warm_up_call_is_timed_again_before_the_warm_up_is_cut(monkeypatch):
    """The first warm-up call after the check's can be slow (a first touch of the receive
    buffer): 30 ms, where a third of the budget holds two such; a second one, fast, decides,
    and the warm-up is whole."""
    durations = iter([0.03] + [1e-4] * 100)
    clock, calls = FakeClock(), []
    monkeypatch.setattr(timing_base, "timer", clock)

    def run():
        calls.append(1)
        clock.now += next(durations)

    m = harness.measure(Bound(run=run, run_blocking=run, checked=lambda: None),
                        bench=get_benchmark("allreduce"),
                        roles=Roles(), barrier=lambda: None, sync=lambda: None, control=OneRank(),
                        settings=harness.TimingSettings(warmup=5, min_iters=10, max_time=0.2),
                        called=True)
    assert len(calls) == 5 + 10 and not m.short          # the check's call stood for the first


@pytest.mark.parametrize("seconds", [0.004, 0.01, 0.03, 0.05, 0.07, 0.3])
def test_warm_up_and_samples_together_keep_to_the_budget(monkeypatch, seconds):
    """Past the first call (set-up), warm-up and samples end within the budget, or, where one
    call alone outlasts it, take one warm-up call and one sample."""
    clock, calls = FakeClock(), []
    monkeypatch.setattr(timing_base, "timer", clock)
    m = harness.measure(_slow_bound(clock, seconds, calls), bench=get_benchmark("allreduce"),
                        roles=Roles(), barrier=lambda: None, sync=lambda: None, control=OneRank(),
                        settings=harness.TimingSettings(warmup=5, min_iters=10, max_time=0.2))
    assert clock.now - seconds <= max(0.2, 2 * seconds) + 1e-9, (len(calls), len(m.samples_us[0]))
    assert len(m.samples_us[0]) >= 1 and m.short == (len(m.samples_us[0]) < 10)


def test_a_graph_holds_more_calls_where_the_host_is_slow_to_issue_them(monkeypatch):
    """The graph's calls: as many as make a replay of ~5 ms by the host's time per call, up to
    MAX_GRAPH_CALLS. A graph of ~20 small calls (the throughput timing's 1 ms) left the replay's
    own launch in each call's time: 1.48 µs against nccl-tests -G's 1.03 µs at 1 KiB on an H100."""
    for host_s, graph_k, throughput_k in ((40e-6, GRAPH.max_calls, (24, 25)), (2e-3, 2, (1,)),
                                          (0.01, 1, (1,))):
        ks = []
        for mode in ("graph", "throughput"):
            clock, calls = FakeClock(), []
            monkeypatch.setattr(timing_base, "timer", clock)
            device = StandInDevice(StandInClock(seconds=1e-6))
            m = harness.measure(_slow_bound(clock, host_s, calls), bench=get_benchmark("allgather"),
                                roles=Roles(),
                                barrier=lambda: None, sync=lambda: None, control=OneRank(),
                                settings=harness.TimingSettings(mode=mode, iters=3, warmup=2),
                                device=device)
            ks.append(m.calls_per_sample)
        # 25 by the figures, 24 by a float's
        assert ks[0] == graph_k and ks[1] in throughput_k, (host_s, ks)


def test_a_device_whose_capture_returns_the_replay_alone_still_times_graphs():
    """A plugin's device written before capture's second answer (whether the capture was empty)
    returns the replay alone: it keeps working."""
    calls, clock = [], StandInClock(seconds=2e-3)

    class OlderDevice(StandInDevice):
        def capture(self, run, calls):
            return super().capture(run, calls)[0]

    m = harness.measure(_bound(calls), bench=get_benchmark("allreduce"), roles=Roles(),
                        barrier=lambda: None,
                        sync=lambda: None, control=OneRank(), settings=harness.TimingSettings(
                            mode="graph", iters=3, warmup=1), device=OlderDevice(clock))
    assert len(m.samples_us[0]) == 3 and not m.idle_gpu


def test_a_capture_that_recorded_no_gpu_work_is_said_in_the_measurement():
    """NCCL queues nothing for an in-place collective on one rank: torch warns of an empty graph,
    which collbench says in a note instead (the sweep), the samples kept."""
    calls, clock = [], StandInClock(seconds=1e-6)
    device = StandInDevice(clock, empty=True)
    m = harness.measure(_bound(calls), bench=get_benchmark("bcast"), roles=Roles(),
                        barrier=lambda: None,
                        sync=lambda: None, control=OneRank(), settings=harness.TimingSettings(
                            mode="graph", iters=4, warmup=1), device=device)
    assert m.idle_gpu and len(m.samples_us[0]) == 4
    plain = harness.measure(_bound(calls), bench=get_benchmark("bcast"), roles=Roles(),
                            barrier=lambda: None,
                            sync=lambda: None, control=OneRank(), settings=harness.TimingSettings(
                                mode="graph", iters=4, warmup=1), device=StandInDevice(clock))
    assert not plain.idle_gpu


@pytest.mark.parametrize("iters", [12, None])
def test_device_timing_of_a_call_no_hold_covers_ends_without_samples(iters):
    """A call that waits on the host (torch's barrier synchronises its stream) ends every hold
    before it is queued: the hold doubles to its longest, then the size ends with no sample,
    where it looped for ever (--iters) or until --timeout."""
    clock = StandInClock(seconds=5e-6, early=10 ** 9)
    m = harness.measure(_bound([]), bench=get_benchmark("allreduce"), roles=Roles(),
                        barrier=lambda: None,
                        sync=lambda: None, control=OneRank(), settings=harness.TimingSettings(
                            mode="device", iters=iters, warmup=2, min_iters=10, max_time=0.2),
                        device=StandInDevice(clock))
    assert len(m.samples_us[0]) == 0 and m.unheld >= device_timing.HOLD_TRIES
    assert clock.hold_s == device_timing.MAX_HOLD_S and clock.closed


def test_a_barrier_takes_the_host_timings_only_where_a_setup_times_on_the_gpu():
    from collbench.backends.base import BackendOptions, Setup
    from collbench.run.plan import _off_device

    nccl = [Setup("nccl", BackendOptions(), "nccl")]
    notes = _off_device(("latency", "graph", "device"), ("allreduce", "barrier"), nccl, frozenset())
    assert notes == ["barrier: --timing graph, device not taken: torch's barrier waits on the host "
                     "for the GPU, so it can neither be captured in a CUDA graph nor timed on the "
                     "GPU's clock"]
    assert _off_device(("latency", "graph"), ("allreduce",), nccl, frozenset()) == []
    assert _off_device(("latency", "graph"), ("barrier",), nccl,
                       frozenset({("nccl", "graph")})) == []
    assert _off_device(("latency", "graph"), ("barrier",), nccl, frozenset()) == [
        "barrier: --timing graph not taken: torch's barrier waits on the host for the GPU, so it "
        "can neither be captured in a CUDA graph nor timed on the GPU's clock"]
    with pytest.raises(UsageError, match=r"^barrier with --timing graph: torch's barrier .* use "
                                         r"--timing latency or throughput$"):
        _off_device(("graph",), ("barrier",), nccl, frozenset())


def test_the_overhead_is_taken_from_the_faster_of_graph_and_device():
    """At 1 GiB an H100's NCCL copy replayed from a graph took 889 µs, one eager call on the
    device's clock 714 µs, and throughput 751 µs: the overhead was -138 µs (-18%) against the
    graph; against the library's faster time it is 37 µs."""
    from results_helpers import row_with_rounds

    from collbench.render.tables import timing_tables

    figures = {"latency": (42.6, 745.8), "throughput": (30.6, 751.2), "graph": (1.48, 889.2),
               "device": (3.26, 714.4)}
    rows = [row_with_rounds([[t] * 8] * 3, collective="allgather", backend="nccl", world_size=1,
                            size_bytes=size, timing=timing)[0]
            for timing, times in figures.items() for size, t in zip((1024, 1 << 30), times)]
    [table] = timing_tables(rows)
    lines = {cells[0]: dict(zip(table.headers, cells)) for cells in table.cells}
    # less graph, the faster
    assert (lines["1K"]["overhead µs"], lines["1K"]["of eager"]) == ("29.12", "95%")
    # less device, the faster
    assert (lines["1G"]["overhead µs"], lines["1G"]["of eager"]) == ("36.80", "5%")
    assert any("the faster of graph and device" in note for note in table.notes)


class _FakeCuda:
    """As much of torch.cuda as TorchDevice.capture uses, its graph context warning as torch
    does."""

    def __init__(self, warns):
        self.warns, self.capturing = warns, False
        outer = self

        class Stream:
            def __init__(self, device=None):
                pass

            def wait_stream(self, other):
                pass

        class Graph:
            def replay(self):
                pass

        class Capturing:
            def __init__(self, graph):
                outer.capturing = True

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                outer.capturing = False
                for message, category in outer.warns:
                    warnings.warn(message, category)
                return False

        self.Stream, self.CUDAGraph, self.graph = Stream, Graph, Capturing

    def current_stream(self, device=None):
        return self.Stream()

    @contextlib.contextmanager
    def stream(self, stream):
        yield

    def synchronize(self, device=None):
        pass


@pytest.mark.parametrize("warns,empty", [
    ([("The CUDA Graph is empty. This usually means that the graph was attempted to be captured on "
       "wrong device or stream.", UserWarning)], True),
    ([("something else the library said", RuntimeWarning)], False),
    ([], False),
])
def test_torch_devices_capture_tells_an_empty_graph_and_passes_other_warnings_on(warns, empty):
    """torch warns of an empty capture ("captured on wrong device or stream"), which for NCCL's
    in-place collectives at one rank is no mistake: capture says so instead, and lets any other
    warning through."""
    from types import SimpleNamespace

    from collbench.backends.devices import TorchDevice

    cuda = _FakeCuda(warns)
    device = TorchDevice(SimpleNamespace(cuda=cuda), SimpleNamespace(type="cuda"))
    calls = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        replay, was_empty = device.capture(lambda: calls.append(cuda.capturing), 4)
    assert was_empty is empty and calls == [False] * 3 + [True] * 4 and callable(replay)
    assert [str(w.message) for w in seen] == ([] if empty else [m for m, _ in warns])
