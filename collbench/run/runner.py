"""One rank's run: set up backends, then measure the rounds this process owns (every round
in-job, or the one round of a self-launched launch), handing rows to rank 0's output.
The walk over sizes is ``sweep.Sweep``; the measurement itself ``harness.measure``.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Optional

from collbench.backends import pages
from collbench.backends.base import BackendOptions, Setup
from collbench.benchmarks import patterns
from collbench.benchmarks.base import Roles
from collbench.benchmarks.registry import get_benchmark
from collbench.measure import caches, harness
from collbench.measure.timings import on_device
from collbench.run import cpuload, rounds, turns
from collbench.launch.network import rendezvous
from collbench.launch import notes, processes
from collbench.launch.liveness import signals, supervise
from collbench import environment
from collbench.backends import backend_class, make_control, threads
from collbench.results.collector import Collector
from collbench.launch.journal import Journal
from collbench.errors import (BackendDeclined, HostUsageError, SharedUsageError, UsageError,
                              check_interrupted,
                             printable)
from collbench.results.records import axes_problem
from collbench.launch.origin.launcher import Launcher
from collbench.launch.origin.pmi import mpi_start_problem, shared_memory_problem, world_mismatch
from collbench.launch.liveness.watchdog import Watchdog
from collbench.run.metadata import collect, hostname, ranks_per_node
from collbench.live.files import OutputFailed, check_output_settings
from collbench.live.output import NullOutput, Output, OutputSettings
from collbench.run.groups import Split
from collbench.run.pairing import Pairing
from collbench.run.sweep import PHASES, Sweep

#: Start-up (imports, MPI initialisation, torch rendezvous) may take longer than a short
#: --timeout meant for one size; it gets at least this many seconds.
STARTUP_TIMEOUT = 120.0
#: Seconds every rank has to join the job (MPI's start-up and collbench's channel, before any
#: backend): a rank that never starts, or a command that is not collbench in an MPMD launch, is
#: named this soon rather than after the whole start-up limit (a few seconds are usual, tens
#: on a loaded host). A shorter --timeout shortens it, to no less than JOIN_FLOOR: joining
#: includes Python's imports and MPI's start-up of every rank, which took up to 10 s beside
#: two busy loops, and a --timeout of 3 s meant for one size must not fail them.
JOIN_TIMEOUT = 45.0
JOIN_FLOOR = 15.0


def _own_steps(watchdog, timeout: float, where: str) -> None:
    """collbench's own steps outside the sizes (agreeing on the plan and the buffers, a round's
    end) take as long as joining may, not the whole start-up limit that MPI's or torch's own
    start-up may need; a rank of the host stopped there for --timeout ends them sooner."""
    supervise.set_position(where)
    watchdog.arm(join_limit(timeout), where, stopped_limit(timeout))


def join_limit(timeout: float) -> float:
    """The seconds every rank has to join the job under ``--timeout`` (0: no limit)."""
    return min(JOIN_TIMEOUT, max(timeout, JOIN_FLOOR)) if timeout else 0.0


def stopped_limit(timeout: float) -> float:
    """The seconds a rank may stay stopped (SIGSTOP, a debugger) in start-up or collbench's own
    steps under ``--timeout`` before the job ends naming it: --timeout itself, as for a size,
    within the join limit. The floor of the join limit is for ranks that load slowly on a busy
    host; a stopped one does not load at all."""
    return min(JOIN_TIMEOUT, timeout) if timeout else 0.0


@dataclass(frozen=True)
class Plan:
    collectives: tuple
    backends: tuple
    sizes: tuple
    dtype: str = "float32"       # --dtype and --op: comma lists, as given (canonical names)
    op: str = "sum"
    #: the (dtype, op) pairs measured: every dtype with every op (``ops.kinds_of`` per collective)
    kinds: tuple = (("float32", "sum"),)
    roles: Roles = Roles()        # the root, the pair, the window
    pairing: Optional[Pairing] = None     # collbench pairs: which pairs, how many at once
    timing_modes: tuple = ("latency",)            # timing names (``measure.timings``), in their
                                                  # order
    untimed: frozenset = frozenset()      # (backend setup's key, timing) pairs that setup cannot
                                          # time
    timing_settings: harness.TimingSettings = harness.TimingSettings()
    check: bool = True
    output: OutputSettings = OutputSettings()
    argv: tuple = ()
    notes: tuple = ()
    verbose: bool = False
    timeout: float = 300.0          # seconds one size may take before the job is aborted; 0 = never
    rounds: int = rounds.DEFAULT_ROUNDS
    seed: Optional[int] = None      # None: chosen at random and recorded
    shuffle: bool = True
    #: (collective, backend setup's key, dtype, op) left out when planned
    unsupported: frozenset = frozenset()
    #: the backends as measured, with their --buffers, --payload, --init-method (``plan._setups``);
    #: empty: each of ``backends`` with the usual options
    setups: tuple = ()
    split: Optional[Split] = None          # --split, --split-mask: groups measuring at once
    #: --thread-level: the MPI thread levels measured, each launch at one (empty: no MPI backend)
    thread_levels: tuple = ()
    bind: str = "none"            # --bind: how collbench's own launch binds its ranks
    pages: str = "small"          # --pages: the pages under host buffers (collbench.backends.pages)
    #: --pattern: how the v-collectives spread their bytes, each measured side by side (canonical
    #: names; ``roles.pattern`` is the first)
    patterns: tuple = (patterns.UNIFORM,)


def setups_of(plan: Plan) -> tuple:
    """The backends the plan measures, each with its options and the key that names it."""
    return plan.setups or tuple(Setup(name, BackendOptions(), name) for name in plan.backends)


#: what gloo (and torch's stores) say when a peer's connection went: the peer's end, not this
#: rank's failure, most likely
_PEER_LOST = re.compile(r"Connection (reset|closed) by peer|Broken pipe|Connection refused",
                        re.IGNORECASE)


def run(plan: Plan, launcher: Launcher) -> int:
    """Run the plan on this rank; returns the process exit code."""
    check_interrupted()              # a signal whose Interrupted something swallowed: not lost
    signals.handle_signals(launcher.rank)
    try:
        return _run(plan, launcher)
    except OutputFailed as exc:       # rank 0 alone, mid-run: the others wait in a collective
        print(f"collbench: {exc}; the run is stopped", file=sys.stderr)
        supervise.forget_journal()
        supervise.abort_job(exc.exit_code)
    except UsageError:
        raise          # every rank meets the same bad input and exits 2 on its own
    except SystemExit as exc:
        # collbench's run never exits this way: a backend's library or plugin called sys.exit in
        # the middle of it. Leaving quietly would keep the others waiting in their collective
        # (and this rank in MPI's finalisation): end the whole job, naming this rank.
        print(f"collbench: rank {launcher.rank} failed at "
              f"{supervise.current_position() or 'start-up'}: a backend ended the process "
              f"(sys.exit({exc.code!r}))", file=sys.stderr)
        supervise.abort_job(1)
    except Exception as exc:
        if signals.stopping(peer_lost=_PEER_LOST.search(str(exc)) is not None):
            # a peer gone because the job is being stopped: the signal says it
            time.sleep(60)
        # A failure on some ranks only (a rendezvous that cannot start, a library error):
        # the others would wait for this one forever, so end the whole job. Every rank may meet
        # the same (GLOO_SOCKET_IFNAME naming no interface): the job says the first (a host's
        # first, under a user's launcher). One in the start-up or in a backend's set-up is the
        # environment's (exit 2); later, a library's (1).
        where = supervise.current_position() or "start-up"
        notes.say_first(f"collbench: rank {launcher.rank} failed at {where}: {type(exc).__name__}: "
                        f"{_said(exc)}")
        if plan.verbose:
            import traceback
            traceback.print_exc()
        supervise.abort_job(2 if where.startswith(("start-up", "set-up")) else 1)


#: Lines of a library's error that are advice or a stack, not its cause (torch's CUDA errors end
#: with the first two, its C++ errors carry the others).
_ADVICE = ("CUDA_LAUNCH_BLOCKING", "TORCH_USE_CUDA_DSA", "might be asynchronously reported",
           "Exception raised from",
           "frame #")


def _said(exc: BaseException) -> str:
    """A library's error in one line: its first line, and its last where that says something
    more (torch's NCCL errors put the cause last: "… unhandled cuda error …" then "Cuda failure
    'out of memory'"), advice and stacks left out."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    told = [line for line in lines[1:] if not any(word in line for word in _ADVICE)]
    return printable(lines[0] if not told or told[-1] == lines[0] else f"{lines[0]} … {told[-1]}")


def _run(plan: Plan, launcher: Launcher) -> int:
    # Start-up (MPI initialisation, torch rendezvous) is under the same --timeout as each size.
    watchdog = Watchdog()
    supervise.set_position("start-up (MPI or torch initialisation)")
    startup_limit = max(plan.timeout, STARTUP_TIMEOUT) if plan.timeout else 0
    watchdog.arm(startup_limit, "start-up")
    supervise.watch_startup(join_limit(plan.timeout), stopped_limit(plan.timeout))
    problem = shared_memory_problem(launcher) or processes.open_files_problem(launcher.world_size)
    if problem:                      # every rank of this host finds the same; other hosts may not
        raise HostUsageError(problem)
    problem = mpi_start_problem(launcher)
    if problem:                      # every rank of the launch finds the same
        raise SharedUsageError(problem)
    every_setup = [s.key for s in setups_of(plan)]
    plan, level = at_launch_level(plan)
    # the setups the other levels' launches measure, listed in the settings with this launch's
    elsewhere = [key for key in every_setup if key not in {s.key for s in setups_of(plan)}]
    pages.use(plan.pages)
    if level:
        threads.ask_for(level)
    # one init method
    control = make_control(launcher.shares_mpi_world, plan.backends, setups_of(plan)[0].options)
    signals.take_back()               # from the MPI library, which may have set its own
    provided = getattr(control, "thread_level", "") if level else ""
    if provided and provided != level:
        plan = dataclasses.replace(plan, notes=plan.notes + ("MPI was asked for thread level "
                                                             f"{level} and gave {provided}",))
    # below MULTIPLE only the main thread calls MPI: a helper thread's abort ends its process
    supervise.set_job_abort(threads.abort_from_any_thread(control.abort, provided or "multiple"))
    if launcher.world_size_variable and launcher.world_size != control.size:
        raise world_mismatch(launcher, control.size)
    supervise.set_position("start-up (joining the other ranks, after MPI or torch initialisation)")
    rendezvous.join(control)          # collbench's own channel: a lost rank or host ends the job
    _own_steps(watchdog, plan.timeout, "start-up (the ranks agreeing on the plan)")
    prints = control.gather(plan_fingerprint(plan))      # every rank's, on rank 0
    problem = control.bcast(plan_disagreement(prints) if control.rank == 0 else None)
    if problem:                       # ranks started with different commands (an MPMD launch)
        raise SharedUsageError(problem)
    problem = roles_problem(plan, control.size)
    if problem:
        raise SharedUsageError(problem)
    schedule = rounds.schedule_from(plan.rounds, plan.seed, plan.shuffle,
                                    levels=len(plan.thread_levels) or 1)
    if schedule.kind == rounds.KIND_IN_JOB:        # rank 0's seed for everyone
        schedule = dataclasses.replace(schedule,
                                       seed=control.bcast(schedule.seed
                                                          if control.rank == 0 else None))
    resuming = schedule.first > 1
    # Rank 0 alone can judge its paths, and every rank must stop on them; self-launched, the
    # launching process judged and claimed them before the first launch.
    judged = resuming or launcher.self_launched
    problem = control.bcast(_output_problem(plan.output)
                            if control.rank == 0 and not judged else None)
    if problem:
        raise SharedUsageError(problem)
    backends: dict = {}
    try:
        bind = plan.bind if launcher.by_collbench else "launcher"
        launch = {"thread_level": level, "thread_level_provided": provided,
                  "bind": bind} if level else {"bind": bind}
        code = _measure(plan, launcher, control, backends, watchdog, startup_limit, schedule,
                        launch, elsewhere)
    finally:
        for backend in backends.values():
            backend.close()
    for backend in backends.values():      # every rank is here: the run ended well
        backend.closed(control)
    return code


#: what every rank must agree on before anything is measured: the plan's fields that decide the
#: collectives called, their buffers, their order and how long they run
_AGREED = ("collectives", "backends", "sizes", "dtype", "op", "roles", "pairing", "timing_modes",
           "untimed",
           "timing_settings", "check", "rounds", "seed", "shuffle", "timeout", "setups", "split",
           "thread_levels",
           "patterns")


def plan_fingerprint(plan: Plan) -> dict:
    """The plan as every rank must share it, in words (``plan_disagreement`` compares them)."""
    def said(value) -> str:
        if isinstance(value, (set, frozenset)):      # in an order every process agrees on
            return ",".join(sorted(map(said, value)))
        if isinstance(value, (tuple, list)):
            return ",".join(map(said, value))
        if isinstance(value, Setup):      # as its rows are labelled, with how its torch ranks meet
            method = value.options.init_method
            return value.key + ("" if method == BackendOptions.init_method else f" at {method}")
        return str(value)

    return {name: said(getattr(plan, name)) for name in _AGREED}


def plan_disagreement(prints: list) -> Optional[str]:
    """The first rank whose plan differs from rank 0's, and how (each differing field, its
    value on both, cut short), or None when every rank agrees. Under ``mpiexec … : …`` each
    part may be given another command: MPI would then pair different calls and hang, truncate
    messages or report false check failures."""
    first = prints[0]
    for rank, other in enumerate(prints[1:], start=1):
        fields = [name for name in _AGREED if other.get(name) != first.get(name)]
        if fields:
            differ = "; ".join(f"{name.replace('_', ' ')} {_short(other.get(name))} (rank 0: "
                               f"{_short(first.get(name))})"
                               for name in fields[:3])
            more = [r for r, p in enumerate(prints) if r > rank and p != first]
            others = (f" (and rank{'s' if len(more) > 1 else ''} {', '.join(map(str, more[:5]))})"
                      if more else "")
            return (f"rank {rank}{others} was started with another command than rank 0: {differ}; "
                    "every rank must run the same collbench command")
    return None


def _short(text, limit: int = 60) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def roles_problem(plan: Plan, n: int) -> Optional[str]:
    """Why the plan's root or pair cannot be on a world of n ranks, or None."""
    benches = [get_benchmark(name) for name in plan.collectives]
    if plan.roles.root >= n:
        return f"--root {plan.roles.root} is outside the world of {n} ranks (0..{n - 1})"
    short = [b.name for b in benches if b.min_ranks > n]
    if short:
        return (f"{', '.join(short)} needs at least {max(b.min_ranks for b in benches)} ranks; "
                f"{n} started")
    spread = ([patterns.problem(p, n) for p in plan.patterns]
              if any(bench.patterned for bench in benches) else [])
    if any(spread):
        return next(problem for problem in spread if problem)
    a, b = plan.roles.pairs[0]
    if plan.pairing is None and any(bench.paired for bench in benches) and max(a, b) >= n:
        return f"--pair {a},{b} is outside the world of {n} ranks (0..{n - 1})"
    return None


def _output_problem(settings) -> Optional[str]:
    try:
        check_output_settings(settings)
    except UsageError as exc:
        return str(exc)
    return None


def _extended(metadata: dict, schedule: rounds.Schedule) -> dict:
    """The metadata the run's first launch recorded, with the rounds this launch was told the
    run has: more, where an A/B job added pairs (``ab --max-rounds``)."""
    if isinstance(metadata.get("settings"), dict):
        metadata["settings"]["rounds"] = max(schedule.total_rounds,
                                             metadata["settings"].get("rounds") or 0)
    side = notes.ab_side()
    if side is not None and isinstance(metadata.get("ab"), dict):
        metadata["ab"]["pairs"] = side.get("pairs", metadata["ab"].get("pairs"))
    return metadata


def _metadata(plan: Plan, launcher: Launcher, keys: list, schedule: rounds.Schedule,
              backends: dict) -> dict:
    """The run's metadata; ``keys``: every setup the run measures, at this launch's level and the
    others'."""
    hosts = list(launcher.hosts)
    versions = {}
    for backend in backends.values():
        versions.update(backend.versions())
    timing = {k: v for k, v in dataclasses.asdict(plan.timing_settings).items() if k != "mode"}
    settings = {**timing, "timings": list(plan.timing_modes), "check": plan.check,
                "timer": harness.TIMER_NAME, "timer_resolution_s": harness.timer_resolution(),
                "root": plan.roles.root, "pair": list(plan.roles.pairs[0]),
                "window": plan.roles.window,
                **({"pairs": dataclasses.asdict(plan.pairing)} if plan.pairing else {}),
                "backends": keys, "timeout_s": plan.timeout,      # the setups measured, by key
                "rounds": schedule.total_rounds, "round_kind": schedule.kind, "seed": schedule.seed,
                "thread_levels": list(plan.thread_levels), "bind": plan.bind, "pages": plan.pages,
                "shuffle": schedule.shuffle,
                "max_time_per_round": plan.timing_settings.max_time * schedule.budget_share()}
    metadata = collect(hostnames=hosts, launcher=launcher.name, argv=list(plan.argv),
                       settings=settings, versions=versions)
    cold = {key: _cache_of(backend) for key, backend in backends.items()
            if getattr(backend.options, "cache", caches.HOT) == caches.COLD}     # of any collective
    # what --cache cold spanned, per setup (rank 0's)
    if cold:
        metadata["settings"]["caches"] = cold
    matrices = {digest: rows for p in plan.patterns for digest, rows in patterns.kept(p).items()}
    # report --per-rank says each rank's bytes from it
    if matrices:
        metadata["matrices"] = matrices
    metadata["run_id"] = uuid.uuid4().hex[:12]      # names this run's rounds when files are merged
    side = notes.ab_side()
    if side is not None:
        metadata["ab"] = side
    return metadata


def _cache_of(backend) -> dict:
    """The cache a backend's buffers sit behind, as a cold run records it."""
    size, source = caches.of_device(backend.device)
    return {"bytes": size, "from": source, "span": caches.SPAN, "most_sets": caches.MOST_SETS}


def _open_output(plan: Plan, collector: Collector, sweep: Sweep, schedule: rounds.Schedule,
                 journal):
    label = (f"round {schedule.first}/{schedule.total_rounds} · "
             if schedule.total_rounds > 1 else "")
    out = Output(plan.output, collector, total_steps=sweep.steps * schedule.total_rounds,
                 done_steps=sweep.steps * (schedule.first - 1),
                 prints_final=schedule.measures_last_round,
                 round_label=label, journal=journal, round_steps=sweep.steps)
    out.table_order = tuple(plan.collectives)
    return out


def at_launch_level(plan: Plan) -> tuple:
    """(the plan as this launch measures it, the MPI thread level it initialises MPI at): the
    level of a self-launched launch (``COLLBENCH_THREAD_LEVEL``), else the plan's one level;
    with several, the MPI setups of that level, and the others at the first level's launches
    only. ("" where no backend uses MPI.)"""
    if not plan.thread_levels:
        return plan, ""
    level = os.environ.get(environment.THREAD_LEVEL, "")
    level = level if level in plan.thread_levels else plan.thread_levels[0]
    if len(plan.thread_levels) == 1:
        return plan, level

    def here(setup: Setup) -> bool:
        if "thread_level" in backend_class(setup.name).takes_options:
            return setup.options.thread_level == level
        return level == plan.thread_levels[0]

    kept = tuple(s for s in setups_of(plan) if here(s))
    return dataclasses.replace(plan, setups=kept,
                               backends=tuple(dict.fromkeys(s.name for s in kept))), level


def _measure(plan: Plan, launcher: Launcher, control, backends: dict, watchdog,
             startup_limit: float, schedule: rounds.Schedule, launch: dict, elsewhere: list) -> int:
    launcher = launcher.with_hosts(control.bcast(control.gather(hostname())))
    plan = _set_up(_split(plan, launcher), control, backends, watchdog, startup_limit)
    _own_steps(watchdog, plan.timeout, "start-up (sizing the buffers, before the first size)")
    most_per_node = ranks_per_node(launcher.hosts)
    is_rank0 = control.rank == 0
    journal = Journal.open(schedule.state) if is_rank0 and schedule.state is not None else None
    collector = None
    if is_rank0:
        earlier = journal.of_type("run") if journal is not None else []
        collector = Collector(_extended(earlier[0]["metadata"], schedule) if earlier else
                              _metadata(plan, launcher, [*backends, *elsewhere], schedule,
                                        backends))
    sweep = Sweep(plan, control, backends, most_per_node, watchdog, list(launcher.hosts))
    if not sweep.steps:
        raise SharedUsageError("nothing to measure: " + ("; ".join(sweep.notes[-2:]) or "no sizes"))
    out, problem = NullOutput(), None
    # rank 0 first rebuilds the files of an earlier run that left its journal, which may take
    # as long as start-up, and the others wait for it
    supervise.set_position("start-up (opening the files)")
    watchdog.arm(startup_limit, "start-up (opening the files)")
    if is_rank0:
        try:
            out = _open_output(plan, collector, sweep, schedule, journal)
        except UsageError as exc:        # an output file that appeared since the check
            problem = str(exc)
        else:             # from here an early end, even in the next collective, names the files
            later = schedule.first if schedule.kind == rounds.KIND_LAUNCH else 1
            supervise.set_result_files(out.paths, out.journal.folder,
                                       notes.kept_after_rounds(later, measured=False))
            supervise.before_exit(out.save_now)      # an early end: the files are made whole
            notes.before_saying(out.end_progress)    # and its line is not the bar's to draw
    problem = control.bcast(problem)
    if problem:
        raise SharedUsageError(problem)
    _own_steps(watchdog, plan.timeout, "start-up (before the first size)")
    cpu_sets = control.gather(sorted(cpuload.affinity()))
    crowded = _crowded(list(launcher.hosts), cpu_sets,
                       launch.get("thread_level_provided", "")) if is_rank0 else []
    kernels = control.gather(pages.kernel_setting())
    launch = {**launch, "pages": plan.pages, "transparent_hugepages": kernels}
    crowded += _without_huge_pages(plan.pages, list(launcher.hosts), kernels) if is_rank0 else []
    for note in list(plan.notes) + list(dict.fromkeys(sweep.notes)) + crowded:
        out.note(note)
    settings = dataclasses.replace(plan.timing_settings,
                                   max_time=plan.timing_settings.max_time * schedule.budget_share())
    completed = False
    try:
        for number in schedule.own_rounds:
            _round(control, backends, sweep, out, schedule, number, settings, list(launcher.hosts),
                   first=number == schedule.first, setup_limit=startup_limit, launch=launch)
        watchdog.disarm()
        supervise.set_position(notes.SHUTDOWN)
        completed = True
        if is_rank0 and schedule.measures_last_round:
            _warn_resolution(out, collector)
    finally:
        if completed:
            out.finish()
        else:        # an error or a stop ends this rank: the files take what was measured, quietly
            out.abandon()
    if sweep.failures and is_rank0:
        for failure in sweep.failures:
            print(f"collbench: CHECK FAILED: {failure}", file=sys.stderr)
    return 1 if sweep.failures else 0


def _split(plan: Plan, launcher: Launcher) -> Plan:
    """The plan with its groups (``--split``) made from the job's hosts; the plan as it was
    without one. SharedUsageError where the split or its roots do not fit."""
    if plan.split is None:
        return plan
    problem = plan.split.problem(list(launcher.hosts))
    if problem:
        raise SharedUsageError(problem)
    plan = dataclasses.replace(plan,
                               roles=dataclasses.replace(plan.roles,
                                                         groups=plan.split.groups(list(launcher.hosts))))
    problem = roles_problem(plan, len(plan.roles.groups[0]))     # the root is each group's
    if problem:
        raise SharedUsageError(problem.replace("world", "group") + f" ({plan.split.option_text})")
    return plan


def _set_up(plan: Plan, control, backends: dict, watchdog, startup_limit: float) -> Plan:
    """Set every backend of the plan up (into ``backends``, by key); the plan without those that
    declined, with a note for each. SharedUsageError when every one declined."""
    declined, kept = [], []
    for setup in setups_of(plan):
        where = f"set-up of backend {setup.key}"
        supervise.set_position(where)
        watchdog.arm(startup_limit, where)
        backend = backend_class(setup.name)()
        backend.options = setup.options
        try:
            backend.setup(control=control)
            if plan.roles.groups:
                backend.split(plan.roles.groups)
            problem = axes_problem(backend.row_axes())   # what it writes, its own loader must read
            if problem:
                raise BackendDeclined(f"its row_axes() gave {printable(problem)}")
        except BackendDeclined as exc:       # every rank finds the same: the run goes on without it
            declined.append(f"skipping backend {setup.key}: {exc}")
            continue
        backends[setup.key] = backend
        kept.append(setup)
    if not backends:
        raise SharedUsageError("nothing to measure: " + "; ".join(declined))
    return dataclasses.replace(plan, backends=tuple(dict.fromkeys(s.name for s in kept)),
                               setups=tuple(kept), notes=plan.notes + tuple(declined))


def _round(control, backends: dict, sweep: Sweep, out, schedule: rounds.Schedule, number: int,
           settings: harness.TimingSettings, hosts: list, first: bool, setup_limit: float,
           launch: dict) -> None:
    """Measure round ``number``: fresh communicators (after the first round of this process),
    the round's order from rank 0, and the CPU the host spent on others meanwhile."""
    wall = time.monotonic()
    sweep.spent.clear()
    if not first:
        where = f"new communicators for round {number}"
        supervise.set_position(where)
        sweep.watchdog.arm(setup_limit, where)
        with sweep.phase("setup"):
            for backend in backends.values():
                backend.renew()
    is_rank0 = control.rank == 0
    order = control.bcast(rounds.order(sweep.blocks(), schedule.seed, number, schedule.shuffle)
                          if is_rank0 else None)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    meter = cpuload.CpuMeter()
    control.barrier()
    meter.start()
    if sweep.turns is None:
        sweep.turns = turns.from_environment(control.rank, meter)
    else:
        sweep.turns.meter = meter
    sweep.run(out, number, order, settings, schedule.total_rounds)
    # a rank that a signal ends in its last size stops here, before the others finish the round
    _own_steps(sweep.watchdog, sweep.plan.timeout, f"the end of round {number} (its CPU load)")
    reports = control.gather(meter.stop())
    huge = control.gather(sweep.huge_pages_kib)
    if is_rank0:
        sizes = {key: [p.size_bytes for p in points] for key, points in sweep.points.items()}
        patterned = {b.pattern: {"pattern": b.pattern} for b in order if b.pattern}
        # which dtype and op each block measured, where the run measures several
        kinded = len(sweep.plan.kinds) > 1
        turn = rounds.ab_turn()
        # at once with the other side, size by size: the turns this side took and its wait for them
        taken = {"ab_turns": {"taken": sweep.turns.taken,
                              "waited_s": round(sweep.turns.waited_s, 3)}} \
            if sweep.turns is not None else {}
        out.round_done({"round": number, "run_id": out.run_id, "kind": schedule.kind,
                        "started": started, "rank0_pid": os.getpid(),
                        "seconds": round(time.monotonic() - wall, 3),
                        "spent_s": {name: round(sweep.spent[name], 3) for name in PHASES},
                        "rank_hosts": hosts,
                        "load": cpuload.round_load(reports, hosts), **launch,
                        "cpu_sets": [report.get("cpu_set") for report in reports],
                        "huge_pages_kib": huge,
                        **({"ab_turn": turn} if turn is not None else {}), **taken,
                        "order": [{"collective": b.collective, "backend": b.backend,
                                   "sizes": [sizes[b.collective, b.backend, b.pattern, b.kind][i]
                                             for i in b.points],
                                   **({"dtype": b.kind[0], "op": b.kind[1]} if kinded else {}),
                                   **patterned.get(b.pattern, {}), **_pairs_of(sweep, b)}
                                  for b in order]})


def _pairs_of(sweep: Sweep, block: rounds.Block) -> dict:
    """A paired benchmark's block in a round's record: its pairs."""
    if not get_benchmark(block.collective).paired:
        return {}
    return {"pairs": ["%d-%d" % pair for pair in sweep.layouts[block.layout].pairs]}


def _crowded(hosts: list, cpu_sets: list, level: str) -> list:
    """A note when one host runs more ranks than the CPUs they may use between them (the union
    of their affinities): they take turns on the cores, and the times include that waiting; at
    MPI_THREAD_SINGLE a rank waiting on MPICH spins without yielding its core, so the rank it
    waits for may get the core only at the next scheduler slice (8 ms per 8 B call seen; 2.7 and
    5.1 ms at funneled and serialized, 44 µs at multiple, both ranks on one core)."""
    per_host: dict = {}
    for host, cores in zip(hosts, cpu_sets):
        entry = per_host.setdefault(host, [0, set()])
        entry[0] += 1
        entry[1].update(cores or ())
    worst = max(per_host.values(), key=lambda e: e[0] / max(1, len(e[1])))
    ranks, cpus = worst[0], len(worst[1]) or (os.cpu_count() or 1)
    if ranks <= cpus:
        return []
    spin = (f" at thread level {level}, a waiting rank spins on its core: a call may take a "
            "scheduler slice (ms); --thread-level multiple yields"
            if level in ("single", "funneled", "serialized") else "")
    return [f"{ranks} ranks share {cpus} CPU{'s' if cpus > 1 else ''} on a host: they take turns "
            "on the cores, so the times include waiting for one "
            f"(oversubscribed){';' + spin if spin else ''}"]


def _without_huge_pages(asked: str, hosts: list, kernels: list) -> list:
    """A note where huge pages were asked for (--pages huge) and a host's kernel gives none."""
    if asked != "huge":
        return []
    lacking = sorted({host for host, setting in zip(hosts, kernels) if setting in ("never", "")})
    if not lacking:
        return []
    said = {setting or "none to read" for setting in kernels}
    return [f"--pages huge: the kernel of {', '.join(lacking)} gives no transparent huge pages "
            f"(transparent_hugepage: {', '.join(sorted(said))}); the buffers there are on small "
            "pages"]


#: What CUDA's documentation gives as the resolution of the time between two events.
EVENT_RESOLUTION_US = 0.5


def _warn_resolution(out, collector: Collector) -> None:
    """A note of the medians under ten times what their clock resolves: the host's timer for the
    host's timings; CUDA events' half microsecond over the calls a sample holds for a GPU's."""
    limit = 10 * collector.metadata["settings"]["timer_resolution_s"] * 1e6
    rows = collector.run_result().rows
    low = [r for r in rows if not on_device(r.timing) and r.time_us_p50 < limit]
    if low:
        out.note(f"{len(low)} median(s) are under 10x the timer resolution ({limit:.3f} µs); treat "
                 "them with care")
    coarse = [r for r in rows
              if on_device(r.timing) and r.time_us_p50 < 10 * EVENT_RESOLUTION_US / min(
        (d.calls_per_sample for d in collector.rounds_of(r)), default=1)]
    if coarse:
        out.note(f"{len(coarse)} median(s) timed on the GPU are under 10x what CUDA events resolve "
                 f"({EVENT_RESOLUTION_US} µs a sample, over the calls a graph replays); treat them "
                 "with care")
