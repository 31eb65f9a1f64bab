"""Rank side of ``benchmarks/overhead.py``: collbench's harness against a bare loop, one MPI job.

Run under ``mpiexec -n 2``. For each case (backend, size) both ranks alternate blocks of

  A ``collbench.measure.harness.measure`` on a real backend from ``collbench.backends``, latency
  mode
     (the CLI's default), the code path ``collbench`` runs: first call and warm-up untimed, then
     barrier + time one call, max over ranks, gathered after the block;
  B  a bare loop written the way a user would, straight on mpi4py or torch.distributed, on the
     same communicator, timed the same way: first call and the same warm-up untimed, then
     barrier + time one call with ``time.perf_counter``, max over ranks.

Both sides take the same number of samples per block, chosen once per case so that a block
lasts about 10 ms: a noisy machine drifts on a scale of 100 ms, so short blocks in many pairs,
ordered A B B A A B ..., put the drift on both sides equally. The bare loop runs on the
harness's own arrays: where a buffer lies (a fresh page-aligned mmap or the heap, which depends
on what the process freed before) moves a 1 MiB allreduce by a few per cent on its own. (The
harness's blocks use a fixed count, ``--iters N``; the adaptive stop rule only decides how many
samples a row gets, not how each one is taken.) Rank 0 prints one JSON line per case: the medians of
all A and all B samples and the median-over-blocks ratio of each pair.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from collbench.backends import backend_class
from collbench.backends._mpi import MpiControl, mpi_module
from collbench.benchmarks.base import Roles
from collbench.benchmarks.dtypes import dtype_of
from collbench.benchmarks.ops import OPS
from collbench.benchmarks.registry import get_benchmark
from collbench.measure.harness import TimingSettings, measure
from collbench.stats.samples import median_ci

FLOAT32 = dtype_of("float32")
MIN_BLOCK, MAX_BLOCK = 20, 5000     # samples per block


def bare_mpi(backend, buffers, count: int):
    """comm.Allreduce on numpy arrays: the loop a user of mpi4py's buffer API writes."""
    MPI, comm = backend.MPI, backend.comm
    send, recv = buffers.send[:count], buffers.recv[:count]

    def call():
        comm.Allreduce(send, recv, MPI.SUM)

    def loop(n: int, out: list) -> None:
        clock = time.perf_counter
        for _ in range(n):
            comm.Barrier()
            t0 = clock()
            comm.Allreduce(send, recv, MPI.SUM)
            out.append(clock() - t0)

    return call, loop


def bare_pickle(backend, buffers, count: int):
    """comm.allreduce on a numpy array: mpi4py's object API, pickling included."""
    MPI, comm = backend.MPI, backend.comm
    send = buffers.send[:count]

    def call():
        comm.allreduce(send, op=MPI.SUM)

    def loop(n: int, out: list) -> None:
        clock = time.perf_counter
        for _ in range(n):
            comm.barrier()
            t0 = clock()
            comm.allreduce(send, op=MPI.SUM)
            out.append(clock() - t0)

    return call, loop


def bare_torch(backend, buffers, count: int):
    """dist.all_reduce on a CPU tensor (in place, as collbench does), on the backend's own group."""
    dist, group = backend.dist, backend.group
    tensor = buffers.recv[:count]

    def call():
        dist.all_reduce(tensor, group=group)

    def loop(n: int, out: list) -> None:
        clock = time.perf_counter
        for _ in range(n):
            dist.barrier(group=group)
            t0 = clock()
            dist.all_reduce(tensor, group=group)
            out.append(clock() - t0)

    return call, loop


BARE = {"mpi": bare_mpi, "mpi-pickle": bare_pickle, "gloo": bare_torch}


def max_over_ranks(world, mine: list) -> np.ndarray:
    values = np.asarray(mine, dtype=np.float64)
    out = np.empty_like(values) if world.Get_rank() == 0 else None
    world.Reduce(values, out, op=mpi_module().MAX, root=0)
    return out


def run_case(control, backend, name: str, size: int, pairs: int, block_s: float) -> dict:
    world = control.comm
    count = size // FLOAT32.itemsize
    buffers = backend.allocate(send_len=count, recv_len=count, dtype=FLOAT32, in_place=False)
    backend.fill(buffers, start=0,
                 values=OPS["sum"].value(control.rank, np.arange(count), control.size)
                 .astype(FLOAT32.host))
    allreduce = get_benchmark("allreduce")
    bound = backend.bind(buffers, collective=allreduce, send_len=count, recv_len=count, op="sum",
                         roles=Roles())
    call, loop = BARE[name](backend, buffers, count)
    defaults = TimingSettings()

    call()                                       # calibrate: how many samples make a block
    probe: list = []
    loop(20, probe)
    top = max_over_ranks(world, probe)
    n = (int(min(MAX_BLOCK, max(MIN_BLOCK, block_s / float(np.median(top)))))
         if control.rank == 0 else None)
    n = world.bcast(n, root=0)
    settings = TimingSettings(iters=n, warmup=defaults.warmup)

    a_blocks, b_blocks = [], []
    for pair in range(pairs):
        for side in ("AB" if pair % 2 == 0 else "BA"):
            if side == "A":
                m = measure(bound, bench=allreduce, roles=Roles(), barrier=backend.barrier,
                            sync=backend.synchronize, control=control, settings=settings)
                a_blocks.append(m.samples_us[0] if control.rank == 0 else None)
            else:
                call()                           # first call, then the same warm-up as measure
                loop(settings.warmup, [])
                mine: list = []
                loop(n, mine)
                top = max_over_ranks(world, mine)
                b_blocks.append(top * 1e6 if top is not None else None)
    del buffers
    if control.rank != 0:
        return {}
    a, b = np.concatenate(a_blocks), np.concatenate(b_blocks)
    pair_ratios = [float(np.median(x) / np.median(y)) for x, y in zip(a_blocks, b_blocks)]
    return {"backend": name, "size_bytes": size, "pairs": pairs, "block_iterations": n,
            "harness_us": float(np.median(a)), "harness_ci_us": list(median_ci(a)),
            "bare_us": float(np.median(b)), "bare_ci_us": list(median_ci(b)),
            "ratio": float(np.median(pair_ratios)),
            "pooled_ratio": float(np.median(a) / np.median(b)), "pair_ratios": pair_ratios}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", default="mpi,mpi-pickle,gloo")
    parser.add_argument("--sizes", default="8,1048576")
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--block-s", type=float, default=0.01, help="target duration of one block")
    args = parser.parse_args()
    mpi_module()
    control = MpiControl()
    for name in args.backends.split(","):
        if backend_class(name).unavailable_reason():
            if control.rank == 0:
                print(json.dumps({"backend": name,
                                  "skipped": backend_class(name).unavailable_reason()}),
                      flush=True)
            continue
        backend = backend_class(name)()
        backend.setup(control=control)
        for size in (int(s) for s in args.sizes.split(",")):
            result = run_case(control, backend, name, size, args.pairs, args.block_s)
            if result:
                print(json.dumps(result), flush=True)
        control.barrier()
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
