"""Coverage of collbench's run-to-run confidence interval, by simulation.

A row's run-to-run CI (``collbench.measure.runstats.summarize_rounds``) is a Student t interval on the
logs of its per-round medians; its target is the centre of the distribution a round's median
is drawn from (exp of the mean log median: what many more launches would settle on). This
script draws rounds from several models of launch-to-launch variation and counts how often
the interval covers the centre, for 3, 5 and 10 rounds. It also checks the comparison built on
the same statistics: how often ``runstats.change`` calls two sets of rounds from one model
different at the 5% level (it should be about 5%, or less).

Models (log scale; every one adds within-round noise of sd 0.02 to each round's median):

* ``normal-5%``, ``normal-15%``, ``normal-30%``: normal launch effects of that sd;
* ``bimodal``: most launches fast, one in four 35% slower — the shape seen on a shared
  2-core VM, where whole launches land in a slow mode;
* ``heavy``: Student t launch effects with 3 degrees of freedom (occasional wild launches);
* ``empirical``: with result files given (``--files run*.json``), each row's real round
  medians, pooled over the files, resampled with replacement; the centre is their geometric mean.

    python benchmarks/coverage.py                    # about 20 s
    python benchmarks/coverage.py --files /tmp/calib/quiet-*.json
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collbench.measure.runstats import change, summarize_rounds, within_spread  # noqa: E402

ROUNDS = (3, 5, 10)
WITHIN = 0.02


def _normal(sd):
    return lambda rng, k: rng.normal(0.0, sd, k)


def _bimodal(rng, k):
    return np.where(rng.random(k) < 0.25, math.log(1.35), 0.0) + rng.normal(0.0, 0.02, k)


def _heavy(rng, k):
    return 0.08 * rng.standard_t(3, k)


MODELS = {"normal-5%": _normal(0.05), "normal-15%": _normal(0.15), "normal-30%": _normal(0.30),
          "bimodal": _bimodal, "heavy": _heavy}


def _centre(model, rng) -> float:
    """exp(E[log median]) of a model, by a large draw."""
    return float(np.exp(np.mean(model(rng, 2_000_000))))


def _alarm(a, b) -> bool:
    """Whether ``change`` calls two single runs of rounds different at the 5% level. The
    rounds here are independent launches with no drift between runs, so the drift term is 0."""
    spread = within_spread([a], [b], assumed_log_sd=0.25)
    return change([a], [b], spread=spread, drift=(0.0, math.inf)).p_value < 0.05


def coverage(model, rounds: int, trials: int, rng) -> tuple:
    """(share of CIs covering the centre, share of same-model pairs called different at 5%)."""
    centre = _centre(model, rng)
    covered = alarms = 0
    for _ in range(trials):
        medians = 40.0 * np.exp(model(rng, rounds) + rng.normal(0.0, WITHIN, rounds))
        s = summarize_rounds(medians)
        covered += s.ci_low <= 40.0 * centre <= s.ci_high
        other = 40.0 * np.exp(model(rng, rounds) + rng.normal(0.0, WITHIN, rounds))
        alarms += _alarm(medians, other)
    return covered / trials, alarms / trials


def empirical(files: list, rounds: int, trials: int, rng) -> tuple:
    from collbench.results.loader import load_result

    pools: dict = {}
    for path in files:
        for row in load_result(path).rows:
            pools.setdefault(row.key(), []).extend(row.time_us_round_p50s)
    covered = alarms = total = 0
    for values in pools.values():
        pool = np.asarray(values, dtype=np.float64)
        if len(pool) < 2 * rounds:
            continue
        centre = float(np.exp(np.log(pool).mean()))
        for _ in range(trials):
            draw = rng.choice(pool, rounds)
            s = summarize_rounds(draw)
            covered += s.ci_low <= centre <= s.ci_high
            alarms += _alarm(draw, rng.choice(pool, rounds))
            total += 1
    return (covered / total, alarms / total, len(pools)) if total else (math.nan, math.nan, 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=4000, help="simulated runs per model and round count")
    parser.add_argument("--files", nargs="*", default=[], help="result files for the empirical model")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"coverage of the 95% run-to-run CI, and A/A alarm rate of change() at p < 0.05 "
          f"({args.trials} trials each)")
    print(f"{'model':<12}" + "".join(f"{f'{r} rounds':>22}" for r in ROUNDS))
    for name, model in MODELS.items():
        cells = [coverage(model, r, args.trials, rng) for r in ROUNDS]
        print(f"{name:<12}" + "".join(f"{c:>12.3f} {a:>8.3f} " for c, a in cells))
    if args.files:
        trials = max(50, args.trials // 50)
        cells = [empirical(args.files, r, trials, rng) for r in ROUNDS]
        label = f"empirical ({cells[0][2]} rows)"
        print(f"{label:<12}" + "".join(f"{c:>12.3f} {a:>8.3f} " for c, a, _ in cells))
    print("columns per round count: coverage (target 0.95), alarm rate (target 0.05 or less)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
