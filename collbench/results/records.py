"""The result record: one frozen row per (benchmark, backend, dtype, op, world size, size, timing,
pair, window, pairs at once, buffers, payload, group of a split, api, placement), and what each
round of the sweep measured for it.

Rows are what exporters and renderers see. Times are in microseconds, bandwidths in GB/s with
GB = 1e9 bytes, computed from ``time_us_p50``. With several rounds a row's figures combine
them (``collbench.results.aggregate``); each round's own median, CI and samples stay in
``RoundData``.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from typing import Optional

SCHEMA = "collbench.result"
SCHEMA_VERSION = 10


def column(doc: str, *, identity: bool = False, matched: bool = False, older=MISSING,
           since: int = 1, default=MISSING, wide: bool = False, said=None):
    """One column of a result row, declared once: what it means (``doc``, also the JSON
    Schema's description); ``identity``: it says which row this is (not what was measured);
    ``matched``: ``compare`` matches rows of two files on it; ``older``: the value a file
    written before the column existed has (files without it still load), or a function of the
    row's earlier columns giving it, ``since`` the schema version that added it; ``wide``: a
    figure derived from a spread, which a wild round can make astronomically large but finite;
    ``said``: how a title names a setup column beside the collective, backend, dtype, op, ranks
    and timing, a function of the row's columns returning "" where its value goes unsaid (the
    usual one), as ``setup_words`` gathers them."""
    return field(default=default, metadata={"doc": doc, "identity": identity, "matched": matched,
                                            "older": older, "since": since, "wide": wide,
                                            "said": said})


#: The built-in backends that call MPI, and the thread level their rows in a file written before
#: levels were recorded ran at (mpi4py's default, which collbench then always took).
MPI_BACKENDS = ("mpi", "mpi-pickle")
MPI_LEVEL_BEFORE = "multiple"
#: The thread level runs ask for unless told (``collbench.backends.threads.DEFAULT``; tests keep
#: the two the same): a label names a row's level only where it is another.
USUAL_THREAD_LEVEL = "single"
#: What a result file written before levels and binding were recorded is read as, said once.
ASSUMED_SETUP = ("written before collbench recorded MPI thread levels and binding: its MPI rows "
                 f"are read as thread level {MPI_LEVEL_BEFORE} (mpi4py's default) and its ranks as "
                 "unbound (assumed)")


def usual_buffers(backend: str) -> str:
    """What a backend's buffers are unless told otherwise: numpy arrays for the MPI backends (and
    plugins), CPU tensors for gloo, GPU memory for nccl."""
    return {"gloo": "torch", "nccl": "cuda"}.get(backend, "numpy")


#: The benchmarks whose calls place no buffers (no send and receive of one call to put apart).
_UNPLACED = frozenset({"barrier", "pingpong", "bw", "bibw", "sendrecv"})


def usual_placement(backend: str, collective: Optional[str] = None) -> str:
    """Where a collective's result goes unless told otherwise (``--placement``), as the built-in
    benchmarks' ``placements`` say (tests keep the two the same): in place for bcast (one buffer)
    and for torch's allreduce and reduce (their only form), out of place for the others; "" where
    there are no buffers to place."""
    if collective in _UNPLACED:
        return ""
    if collective == "bcast" or (backend in ("gloo", "nccl")
                                 and collective in ("allreduce", "reduce")):
        return "in-place"
    return "out-of-place"


@dataclass(frozen=True)
class Row:
    """One row of a result: the single source of the columns of JSON and CSV files, of what the
    loader accepts, of the fields that identify a row and of those ``compare`` matches on."""

    collective: str = column("the benchmark: a collective (allreduce, bcast, ...) or "
                             "point-to-point (pingpong, bw, bibw, sendrecv)",
                             identity=True, matched=True)
    backend: str = column("mpi, mpi-pickle, gloo, nccl", identity=True, matched=True)
    dtype: str = column("element type, e.g. float32", identity=True, matched=True)
    op: str = column("reduction op; none for collectives that do not reduce", identity=True,
                     matched=True)
    world_size: int = column("ranks taking part", identity=True, matched=True)
    ranks_per_node: int = column("most ranks sharing one host", identity=True)
    size_bytes: int = column("message size as nccl-tests defines it (docs/methodology.md, Sizes)",
                             identity=True, matched=True)
    per_rank_bytes: int = column("each rank's share: size_bytes for allreduce/bcast/reduce, else "
                                 "size_bytes / n",
                                 identity=True)
    count: int = column("elements in size_bytes", identity=True)
    timing: str = column("how a sample was timed: latency, throughput, graph or device "
                         "(docs/methodology.md)",
                         identity=True, matched=True)
    pair: str = column("the two ranks of a point-to-point benchmark between a pair, as A-B (A "
                       "starts each exchange and is timed); empty where every rank takes part",
                       identity=True, matched=True,
                       older="", since=4, said=lambda r: f"pair {r['pair']}" if r["pair"] else "")
    window: int = column("messages in flight per sample (bw, bibw: --window); 1 for the others",
                         identity=True, matched=True, older=1, since=4,
                         said=lambda r: f"window {r['window']}" if r["window"] != 1 else "")
    pairs_at_once: int = column("pairs measuring at the same time (collbench pairs: a step of its "
                                "schedule, 1 with --serial); 1 for the others", identity=True,
                                matched=True, older=1, since=4,
                                said=lambda r: f"{r['pairs_at_once']} pairs at once"
                                if r["pairs_at_once"] != 1 else "")
    buffers: str = column("what the buffers measured on are: numpy (numpy arrays), mpi "
                          "(MPI.Alloc_mem), cuda (GPU memory), torch (gloo's CPU tensors); "
                          "--buffers chooses for the mpi backend",
                          identity=True, matched=True, older=lambda r: usual_buffers(r["backend"]),
                          since=5, said=lambda r: "" if r["buffers"] == usual_buffers(r["backend"])
                          else f"{r['buffers']} buffers")
    payload: str = column("mpi-pickle: the Python object each message is (--payload): array, "
                          "bytes, list, dict; empty for the other backends", identity=True,
                          matched=True,
                          older=lambda r: "array" if r["backend"] == "mpi-pickle" else "", since=5,
                          said=lambda r: f"{r['payload']} payload"
                          if r["payload"] not in ("", "array") else "")
    split: str = column("how the ranks were split into groups measuring at once (--split): "
                        "intra (a group per host), inter (a rank per host), N (N equal groups), "
                        "mask:M (ranks whose numbers agree outside M); empty: the whole world is "
                        "one group", identity=True, matched=True, older="",
                        since=5,
                        said=lambda r: f"split {r['split']}, groups of {r['group_size']}"
                        if r["split"] else "")
    group: int = column("which group of the split the row measured, numbered from 0 in the "
                        "order of their first ranks; 0 without --split", identity=True,
                        matched=True, older=0, since=5)
    group_size: int = column("ranks in the row's group (world_size without --split)", identity=True,
                             matched=True, older=lambda r: r["world_size"], since=5)
    group_hosts: str = column("the hosts of the group's ranks, comma-separated, each once, in rank "
                              "order; empty without --split", identity=True, older="", since=5)
    init_method: str = column("how the torch backends' ranks met (--init-method): env://, tcp:// "
                              "or file:// (the scheme only); empty for the MPI backends",
                              identity=True, older="",
                              since=5)
    api: str = column("how each call was issued (--api): blocking; nonblocking (MPI's I... calls, "
                      "torch's async_op), started and then waited for; persistent (MPI-4's "
                      "..._init, started each time)", identity=True,
                      matched=True, older="blocking", since=6,
                      said=lambda r: "" if r["api"] == "blocking" else r["api"])
    placement: str = column("where the result went (--placement): out-of-place (a receive buffer "
                            "of its own), in-place (where the input was: MPI.IN_PLACE, torch's "
                            "in-place forms); empty where there are no buffers to place "
                            "(barrier, point-to-point)", identity=True, matched=True,
                            older=lambda r: usual_placement(r["backend"], r["collective"]), since=6,
                            said=lambda r: ""
                            if r["placement"] in ("", usual_placement(r.get("backend", ""),
                                                                                        r.get("collective")))
                            else r["placement"])
    iterations: int = column("timed samples taken, all rounds together")
    time_us_p50: float = column("one round: median of the samples; several: geometric mean of the "
                                "round medians, rounds set aside as interference left out (µs; per "
                                "message: half a round trip for pingpong, a window's time / window "
                                "for bw and bibw)")
    time_us_ci_low: float = column("95% CI of time_us_p50: one round, from its samples (order "
                                   "statistics); several, from the spread of the round medians "
                                   "(Student t on their logs)", wide=True)
    time_us_ci_high: float = column("upper end of the 95% CI of time_us_p50", wide=True)
    time_us_mean: float = column("mean over the samples of every round (µs)")
    time_us_min: float = column("fastest sample of every round (µs)")
    time_us_p95: float = column("95th percentile of the samples of every round (µs)")
    time_us_p99: float = column("99th percentile of the samples of every round (µs)")
    time_us_max: float = column("slowest sample of every round (µs)")
    time_us_rank_avg: float = column("average of the per-rank mean times of the ranks taking part, "
                                     "as OSU's collectives report (µs)")
    algbw_gbps: float = column("size_bytes / time_us_p50 (GB/s, GB = 1e9 bytes)")
    busbw_gbps: float = column("algbw_gbps times the benchmark's bus factor (nccl-tests' "
                               "convention; bibw: 2, both directions)")
    check: str = column("ok, wrong:N or skipped")
    precision_reached: bool = column("every round's CI reached --precision before its share of "
                                     "--max-time ran out")
    rounds: int = column("rounds that measured this row", older=1, since=2, default=1)
    run_to_run_cv: float = column("standard deviation / mean of the round medians (2+ rounds)",
                                  older=math.nan, since=2, default=math.nan, wide=True)
    rounds_disagree: bool = column("round medians spread beyond what the file's noise model "
                                   "expects of a row of its time (F test, 1%)", older=False,
                                   since=2, default=False)
    time_us_round_p50s: tuple = column("each round's median, in round order (µs)", older=None,
                                       since=2, default=())
    rounds_set_aside: int = column("rounds whose median lay far above the fastest round's "
                                   "(interference), left out of time_us_p50 and its CI", older=0,
                                   since=3, default=0)
    overall_us: float = column("--api nonblocking, persistent (latency timing): median time from a "
                               "call's start to its completion with compute between them (OSU's "
                               "overall), median over rounds (µs); empty for the others",
                               older=math.nan, since=6, default=math.nan)
    compute_us: float = column("the compute's own time inside overall_us, calibrated to last at "
                               "least the call alone (time_us_p50); median over rounds (µs)",
                               older=math.nan, since=6, default=math.nan)
    overlap_pct: float = column("how much of the call the compute hid, as OSU defines it: 100 * "
                                "max(0, 1 - (overall_us - compute_us) / time_us_p50)",
                                older=math.nan, since=6, default=math.nan)
    window_used: int = column("messages in flight per sample as sent: window, or fewer (a power of "
                              "two) where one window of a slow pair would have outlasted half its "
                              "share of --max-time (bw, bibw; decided once per run)",
                              older=lambda r: r["window"], since=7, default=1)
    rounds_short: int = column("rounds whose share of --max-time ran out before --min-iters "
                               "samples (a slow call or pair): their medians rest on fewer "
                               "samples, as iterations says", older=0, since=7,
                               default=0)
    thread_level: str = column("the MPI thread level the ranks asked MPI_Init_thread for "
                               "(--thread-level): single, funneled, serialized or multiple (what "
                               "the library gave is in each round's record, "
                               "thread_level_provided); empty for backends that do not use MPI",
                               identity=True, matched=True, since=8, default="",
                               older=lambda r: MPI_LEVEL_BEFORE
                               if r["backend"] in MPI_BACKENDS else "",
                               said=lambda r: f"thread {r['thread_level']}"
                               if r["thread_level"] not in ("", USUAL_THREAD_LEVEL) else "")
    pattern: str = column("how a v-collective spread its bytes over the ranks (--pattern): "
                          "uniform, spread:F, zipf:S:SEED (docs/methodology.md, Patterns); empty "
                          "for the others", identity=True,
                          matched=True, since=9, default="", older="",
                          said=lambda r: f"pattern {r['pattern']}" if r["pattern"] else "")
    imbalance_sent: float = column("the busiest sender's bytes over what a rank sends on average "
                                   "(alltoallv: size_bytes; allgatherv, gatherv: the largest piece "
                                   "over the mean piece): 1 where every rank sends the same",
                                   identity=True, since=9, default=1.0, older=1.0)
    imbalance_received: float = column("the busiest receiver's bytes over what a rank receives on "
                                       "average (scatterv: the largest piece over the mean); "
                                       "alltoallv's bandwidths count the busier of the two ranks' "
                                       "bytes, as nccl-tests' alltoallv does",
                                       identity=True, since=9, default=1.0, older=1.0)
    cache: str = column("hot: every call on one set of buffers; cold: each call on the next of a "
                        "pool of buffer sets spanning twice the cache they sit behind (--cache "
                        "cold; docs/methodology.md, Cache-cold buffers)", identity=True,
                        matched=True, since=10, default="hot", older="hot",
                        said=lambda r: "cold cache" if r["cache"] == "cold" else "")
    coalesce: int = column("calls issued as one group (--coalesce K: torch's coalescing manager; "
                           "MPI's non-blocking calls started together, then completed), each on "
                           "buffers of its own; the row's times are per call (a sample's time over "
                           "K); 1 for calls issued one at a time", identity=True,
                           matched=True, since=10, default=1, older=1,
                           said=lambda r: f"{r['coalesce']} grouped" if r["coalesce"] > 1 else "")
    cache_span: float = column("a cold row's pool: how many times the cache behind its buffers its "
                               "sets spanned, each set page-aligned (metadata.settings.caches has "
                               "the cache's size): 2 or more, less where the pool's 1,024 sets of "
                               "a small size fall short; 0 for a hot row",
                               identity=True, since=10, default=0.0, older=0.0)

    def key(self) -> tuple:
        return tuple(getattr(self, name) for name in KEY_FIELDS)

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in ROW_FIELDS}     # shallow: asdict deep-copies


ROW_FIELDS = tuple(f.name for f in fields(Row))
#: What says which row this is; a run holds one row per value of these.
KEY_FIELDS = tuple(f.name for f in fields(Row) if f.metadata["identity"])
#: Identity columns that follow from the size (a line of a figure, a series of the fit, runs over
#: them).
BY_SIZE = ("size_bytes", "per_rank_bytes", "count", "imbalance_sent", "imbalance_received",
           "cache_span")
#: What ``compare`` matches two files' rows on (the identity, less what follows from it).
MATCH_FIELDS = tuple(f.name for f in fields(Row) if f.metadata["matched"])
#: Columns added after schema version 1, with the value an older row has.
ADDED_LATER = {f.name: f.metadata["older"] for f in fields(Row)
               if f.metadata["older"] is not MISSING}
#: The schema version each column came with.
ADDED_IN = {f.name: f.metadata["since"] for f in fields(Row)}
#: Columns by type, as the annotations give them ("int", "float", "str", "bool", "tuple").
COLUMN_TYPES = {f.name: str(f.type) for f in fields(Row)}
WIDE_FIELDS = frozenset(f.name for f in fields(Row) if f.metadata["wide"])
_SAID = tuple((f.name, f.metadata["said"]) for f in fields(Row) if f.metadata["said"])
SAID_FIELDS = tuple(name for name, _ in _SAID)
#: Identity columns that belong to a backend's line rather than to a setup (several backends
#: side by side differ in them): a table's or a figure's backend label names them.
PER_BACKEND = ("buffers", "payload", "init_method", "api", "placement", "thread_level", "cache",
               "coalesce")
SETUP_SAID = tuple(name for name in SAID_FIELDS if name not in PER_BACKEND)


#: The longest text a row's text column holds (the loader refuses longer).
LONGEST_TEXT = 256


def axes_problem(values: dict) -> Optional[str]:
    """Why row columns ``values`` (a backend's ``row_axes``) would make a row collbench's own
    loader refuses, or None: a column that is not one, a text that is not printable or longer
    than LONGEST_TEXT, a number that is not a whole one of 0 or more."""
    for name, value in values.items():
        kind = COLUMN_TYPES.get(name)
        if kind is None:
            return f"{name!r} is not a row column"
        if kind == "str" and not (isinstance(value, str) and value.isprintable()
                                  and len(value) <= LONGEST_TEXT):
            return (f"{name} {value!r:.60} is not printable text of at most {LONGEST_TEXT} "
                    "characters")
        if kind == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            return f"{name} {value!r:.60} is not a whole number of 0 or more"
    return None


def older_value(name: str, earlier: dict):
    """The value column ``name`` has in a file written before it existed, given the row's
    earlier columns."""
    older = ADDED_LATER[name]
    return older(earlier) if callable(older) else older


def with_older(values: dict) -> dict:
    """``values`` with every later-added identity column it lacks at the value a file written
    before the column existed has: the plain setup (the whole world, usual buffers...)."""
    out = dict(values)
    for name in KEY_FIELDS:
        if name not in out and name in ADDED_LATER:
            out[name] = older_value(name, out)
    return out


def setup_words(values, names=None) -> list:
    """How a title names the setup columns of a row (a Row, or a mapping of its columns) that do
    not have their usual value: "pair 0-1", "window 64", "split intra", "mpi buffers"...;
    ``names``: only these columns (by default those of the setup, not the backend's)."""
    names = names if names is not None else SETUP_SAID
    get = (values.get if isinstance(values, dict) else lambda name,
           default=None: getattr(values, name, default))
    known = {name: get(name) for name in ROW_FIELDS if get(name) is not None}
    words = []
    for name, said in _SAID:
        if name not in names:
            continue
        try:
            word = said(known)
        except KeyError:          # a mapping without a column the word needs
            continue
        if word:
            words.append(word)
    return words


def backend_label(row) -> str:
    """A row's backend as a line or column of results names it: "mpi", "mpi (mpi buffers)",
    "mpi-pickle (list payload)" where its per-backend columns are not the usual."""
    words = setup_words(row, PER_BACKEND)
    backend = row["backend"] if isinstance(row, dict) else row.backend
    return f"{backend} ({', '.join(words)})" if words else backend


#: Everything about a row that does not come from timing: its identity and its bus factor.
RowIdentity = make_dataclass(
    "RowIdentity", [(name, COLUMN_TYPES[name]) for name in KEY_FIELDS] + [("bus_factor", "float")],
    frozen=True,
    namespace={"of": classmethod(lambda cls, row,
                                 bus_factor: cls(**{n: getattr(row, n) for n in KEY_FIELDS},
                                                                   bus_factor=bus_factor))})


#: the collectives whose bandwidths count the busiest rank's bytes where a pattern spreads them
#: (nccl-tests' alltoallv); allgatherv, gatherv and scatterv move the whole array through every
#: rank (or the root) whatever its pieces, and count the size
BUSIEST_RANK_COUNTS = frozenset({"alltoallv"})


def busiest_bytes(row) -> float:
    """The bytes a row's bandwidths count: its size, or where a pattern spread alltoallv's bytes
    unevenly the busiest rank's, sent or received (nccl-tests' alltoallv)."""
    if row.collective not in BUSIEST_RANK_COUNTS:
        return row.size_bytes
    return row.size_bytes * max(row.imbalance_sent, row.imbalance_received, 1.0)


def bandwidths(size_bytes: float, median_us: float, bus_factor: float) -> tuple[float, float]:
    if not size_bytes or not median_us or math.isnan(median_us):
        return 0.0, 0.0
    algbw = size_bytes / (median_us * 1e-6) / 1e9
    return algbw, algbw * bus_factor


@dataclass(frozen=True)
class RoundData:
    """What one round measured for one row (JSON only; CSV keeps the rows)."""

    round: int = column("1-based round number, as in the metadata's rounds")
    iterations: int = column("timed samples of this round")
    time_us_p50: float = column("this round's median (µs)")
    time_us_ci_low: float = column("its within-round 95% CI (order statistics)", wide=True)
    time_us_ci_high: float = column("upper end of its within-round 95% CI", wide=True)
    precision_reached: bool = column("its CI reached --precision before its share of --max-time "
                                     "ran out")
    check: str = column("ok, wrong:N or skipped")
    calls_per_sample: int = column("calls timed together in one sample (throughput and graph: k)",
                                   default=1)
    samples_us: Optional[tuple] = column("per iteration: max over the timed ranks (latency) or "
                                         "loop / k; per message", default=None)
    rank_means_us: Optional[tuple] = column("each rank's mean time", default=None)
    overall_us: float = column("--api nonblocking, persistent: this round's median overall time "
                               "(start, compute, complete)", default=math.nan)
    compute_us: float = column("this round's median time of the compute inside overall_us",
                               default=math.nan)
    window: int = column("messages in flight per sample this round where fewer than the row's "
                         "window (a slow pair's, shrunk); 0: the row's window", default=0)
    short: bool = column("its share of --max-time ran out before --min-iters samples",
                         default=False)


def windows_sent(rounds, window: int) -> set:
    """The windows a row's rounds sent (``RoundData.window``, 0 standing for the row's
    ``window``)."""
    return {d.window or window for d in rounds}


@dataclass
class RunResult:
    """A run: metadata, rows in file order, and per row what each round measured."""

    metadata: dict
    rows: list = field(default_factory=list)
    rounds: list = field(default_factory=list)       # per row: tuple of RoundData, in round order
    notes: list = field(default_factory=list)
    # memo of what is derived from the rows while they stay the same objects: exporters' JSON text,
    # ranks.row_views' views (the per-rank report's too)
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    def add(self, row: Row, rounds: tuple = ()) -> None:
        self.rows.append(row)
        self.rounds.append(tuple(rounds))

    def round_numbers(self, i: int) -> tuple:
        """The rounds row ``i`` was measured in (1, 2, ... when the file does not say)."""
        data = self.rounds[i] if i < len(self.rounds) else ()
        if data:
            return tuple(d.round for d in data)
        return tuple(range(1, self.rows[i].rounds + 1))


def root_rank(metadata: dict) -> int:
    """The run's root rank (``settings.root``); 0 where the file does not say."""
    settings = metadata.get("settings") if isinstance(metadata, dict) else None
    root = settings.get("root") if isinstance(settings, dict) else None
    return root if isinstance(root, int) and not isinstance(root, bool) and root >= 0 else 0
