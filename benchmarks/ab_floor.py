"""A read-only check of an idea for collbench ab on a many-moded machine: judge each side by
the rounds of its own window (``stats.noise.own_rounds``: the machine at its best) with a Welch
t at 10%, unadjusted, beside what the gate decides now. Not in the product; the figures of
2026-11-29 are in benchmarks/README.md ("Like for like with IMB, and the statistics in one
package").

    python benchmarks/ab_floor.py FOLDER...     # folders of ab jobs: NAME-a.json beside NAME-b.json
"""

import glob
import math
import sys

import numpy as np

from collbench.results.loader import load_result
from collbench.stats.noise import own_rounds
from collbench.stats.distributions import t_quantile
from collbench.analysis.compare import compare_runs

def floor_stats(meds):
    x = np.array([m for m in meds if m and m > 0], float)
    keep = own_rounds(list(x))
    k = np.log(x[keep])
    return k

def judge(a, b, thr=0.10):
    out = {"same": 0, "slower": 0, "faster": 0, "inc": 0}
    for ra in a.rows:
        rb = next((r for r in b.rows if r.key() == ra.key()), None)
        if rb is None:
            continue
        ka, kb = floor_stats(ra.time_us_round_p50s), floor_stats(rb.time_us_round_p50s)
        if len(ka) < 2 or len(kb) < 2:
            out["inc"] += 1
            continue
        d = kb.mean() - ka.mean()
        va, vb = ka.var(ddof=1) / len(ka), kb.var(ddof=1) / len(kb)
        se = math.sqrt(max(va + vb, 1e-8))
        df = (va + vb) ** 2 / (va ** 2 / (len(ka) - 1) + vb ** 2 / (len(kb) - 1) + 1e-30)
        h = t_quantile(0.975, max(df, 1)) * se
        lo, hi = math.expm1(d - h), math.expm1(d + h)
        if lo > thr:
            out["slower"] += 1
        elif hi < -thr:
            out["faster"] += 1
        elif lo >= -thr and hi <= thr:
            out["same"] += 1
        else:
            out["inc"] += 1
    return out

if len(sys.argv) < 2:
    sys.exit(__doc__)
for d in sys.argv[1:]:
    for a in sorted(glob.glob(d + '/*-a.json')):
        b = a[:-7] + '-b.json'
        A, B = load_result(a), load_result(b)
        c = compare_runs(A, B, threshold=0.10)
        print(a.split('/')[-2] + '/' + a.split('/')[-1][:-7], 'rows', len(A.rows), 'floor:',
              judge(A, B), 'current:', {k: v for k, v in c.counts.items() if v}, 'exit', c.status)
