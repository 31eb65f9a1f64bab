"""Backends for the scripts of ``benchmarks/``, outside the product.

* ``probe-mpi``, ``probe-gloo``: the start-up probe of ``overhead.py``: the ``mpi`` and ``gloo``
  backends under other names, whose bound call prints ``time.time()`` once, when this process
  makes call number ``PROBE_CALL`` to it through the harness (the result check calls the
  library directly and is not counted). With ``--warmup 0`` the harness makes one untimed first
  call, so ``PROBE_CALL=2`` is the first timed iteration.
* ``spin-mpi``: a real slowdown of known size for ``calibrate.py``: the ``mpi`` backend whose
  every timed call, once the library returns, spins for ``SPIN_FRACTION`` (default 0.25) of the
  time the call itself took. The extra time is CPU work on the same core, so it meets whatever
  interference the call meets; ``SPIN_FRACTION=0`` is the plain backend.
"""

from __future__ import annotations

import os
import sys
import time

from collbench.backends.base import Bound
from collbench.backends.gloo import GlooBackend
from collbench.backends.mpi import MpiBackend

_calls = 0


class Probe:
    def bind(self, buffers, **kwargs) -> Bound:
        bound = super().bind(buffers, **kwargs)
        target = int(os.environ.get("PROBE_CALL", "2"))
        rank = self.rank

        def counted(call):
            def run():
                global _calls
                _calls += 1
                if _calls == target:
                    print(f"collbench-probe: rank {rank} first timed iteration at "
                          f"{time.time():.6f}", file=sys.stderr, flush=True)
                return call()
            return run

        return Bound(run=counted(bound.run), run_blocking=counted(bound.run_blocking),
                     checked=bound.checked)


class ProbeMpi(Probe, MpiBackend):
    name = "probe-mpi"


class ProbeGloo(Probe, GlooBackend):
    name = "probe-gloo"


class SpinMpi(MpiBackend):
    name = "spin-mpi"

    def bind(self, buffers, **kwargs) -> Bound:
        bound = super().bind(buffers, **kwargs)
        fraction = float(os.environ.get("SPIN_FRACTION", "0.25"))
        if fraction <= 0:
            return bound
        clock = time.perf_counter

        def spun(call):
            def run():
                start = clock()
                result = call()
                until = clock() + (clock() - start) * fraction
                while clock() < until:
                    pass
                return result
            return run

        return Bound(run=spun(bound.run), run_blocking=spun(bound.run_blocking),
                     checked=bound.checked)
