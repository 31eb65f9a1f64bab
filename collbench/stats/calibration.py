"""Every number that can move a verdict, an interval or a row's p50, with the measurement that
set it: the one place to look before a change to the statistics, and the one place a
recalibration edits. ``TERMS`` names each term of a verdict (a part of a change's variance, or a
rule that holds a row back) with the constants that set it and where their figures are.

Nothing here computes; the modules of ``collbench.stats`` read these names. Numerical settings
that change no answer (the grid a trend is fitted over, the simulation's chunk size, overflow
guards) stay beside the code that uses them.
"""

from __future__ import annotations

from dataclasses import dataclass

# -- intervals and tests ------------------------------------------------------------------

#: The confidence of every interval collbench prints or judges by (a round's median, a row
#: across rounds, a change).
CONFIDENCE = 0.95
#: A comparison's family-wise error rate: the chance that any unchanged row is called slower or
#: faster (``--alpha``).
DEFAULT_ALPHA = 0.05
#: The change a comparison gates on (``--threshold``).
DEFAULT_THRESHOLD = 0.05
#: "What this comparison can detect" is the change found with this probability, the rows
#: adjusted together (``change.detectable_change``), in report and compare alike.
POWER = 0.8
#: Draws of the max-T simulation (``family.max_t_adjust``): its p-values move by about
#: 1/sqrt(DRAWS) of themselves from one seed to the next.
DRAWS = 20_000
#: The share of the rows both files have that a comparison must decide (same, slower or faster)
#: for its gate to pass: below it the answer is UNDECIDED, exit status 3 (``--min-decided``).
#: An A/A pair measured in one job on a busy 2-core runner decided 133 of 145 rows (92%); two
#: stored runs of it decided none (../shared/data/busy-runner/), and then passed a 2.5x slowdown.
DEFAULT_MIN_DECIDED = 0.8

# -- a row's own rounds: which count (its p50) ---------------------------------------------

#: A row needs this many rounds before any is set aside: with fewer, its own rounds cannot tell
#: interference from its ordinary spread, and every round counts.
MIN_ROUNDS_TO_SET_ASIDE = 4
#: A row's own window is OWN_WIDTH + OWN_WIDTH_FEW / (n − 3) spreads of its n rounds' lower half:
#: wide enough that a row of ordinary lognormal rounds loses one in about 1% of rows (simulated,
#: 20,000 rows for each n: 0.2% at 4 rounds, 1.5% at 5, 0.6% at 10 and 20), since its spread is
#: estimated from its own few rounds; it sets aside a round 20 spreads up in 67% of rows of 5
#: rounds and all rows of 10 (benchmarks/README.md, "A row's number is its own").
OWN_WIDTH = 6.5
OWN_WIDTH_FEW = 19.0

# -- the file's noise model: a row's interval and ‡ ----------------------------------------

#: The smallest spread (sd of log medians) a row is taken to have: identical round medians (a
#: rounded file, a synthetic test) must not make every difference significant.
MIN_LOG_SD = 0.001
#: Weight of the trend's prior, in degrees of freedom, against a row's own spread (a moderated t,
#: as in limma): a few rounds that happen to agree cannot promise more than rows like it allow.
#: Calibrated by benchmarks/coverage.py.
PRIOR_DF = 4.0
#: Rows with two or more rounds a stratum needs for a trend of its own; the file needs as many
#: for any.
MIN_ROWS_FOR_PRIOR = 8
#: A row's CI within a sweep also carries the spread between whole runs, taken as this many times
#: the row's modelled spread: the rounds of one run agree more closely than runs do (a machine
#: state outlasts a launch). On ten quiet runs of the calibration VM the CIs from the rounds alone
#: held what the other nine runs settled on for 25% of 1450 rows; with this term, for 96%
#: (benchmarks/coverage.py, "next runs").
BETWEEN_RUNS_FACTOR = 1.5
#: A row's rounds spread beyond its trend (‡, ``RoundsSummary.disagree``) when their variance
#: exceeds the trend's by more than the F distribution of the two allows at this level: about one
#: row in a hundred of a file the model describes.
DISAGREE_LEVEL = 0.01
#: A round more than this many clean spreads above the row's fastest round is set aside as
#: interference. Ten clean rounds span about 3 spreads (with 5, 0.4% of ordinary lognormal rounds
#: are set aside; with 4, 2-4%); what a neighbour adds is 10-100 of them on a quiet machine's scale
#: (benchmarks/README.md, "the estimator").
INTERFERENCE_WIDTH = 5.0
#: The clean spread is never taken as smaller than this (a window of 2.5%): rounds that agree to
#: the timer's last digit must not make every ordinary difference interference.
MIN_CLEAN_SD = 0.005
#: Rounds set aside above a row's counted ones are interference — or a state of the machine that
#: a whole run may spend in. Where at least this share of a row's rounds ran at a level, that
#: level is one its next run may settle on (``state_level``): a row's CI reaches up to it, and
#: compare does not blame the code for a side that ran there (``holds.state_reach``).
#: On ten runs of one H100 the overhead-bound rows' CIs held what the other nine settled on for
#: 70% of rows without it and 96% with it, and two sessions there no longer call bcast 20-87%
#: slower. The share trades power for it: with any one set-aside round taken as a state, the CPU
#: calibration's pinned runs had 72.8% of rows called slower (90.3% without the rule); with a
#: fifth, 82.9% (benchmarks/README.md, "States the other side was seen in").
STATE_SEEN_SHARE = 0.2

# -- a stored baseline: whole runs and the machine's states --------------------------------

#: Whole runs made minutes apart move together by this fraction of each row's modelled spread of
#: rounds, unless a file merged from three or more runs measures more. Calibrated on a shared
#: 2-core VM, where it measured about 0.6 (benchmarks/README.md).
DRIFT_FACTOR = 0.75
#: Runs a side needs before its own drift between runs is trusted: with fewer, the estimate has
#: too few degrees of freedom to be anything but noise (calibration: with three runs it cost
#: more power than it bought, benchmarks/README.md).
MIN_RUNS_FOR_DRIFT = 3
#: A side's measured drift overrules DRIFT_FACTOR only beyond this quantile of what the assumed
#: drift allows over that many runs (chi²).
DRIFT_OVERRULE_LEVEL = 0.95
#: How far a state of the machine may move a whole sweep (log): states that outlast launches moved
#: every row by +11…+18% on a quiet VM and +4…+21% beside a CPU-heavy neighbour
#: (benchmarks/README.md). A stored baseline's comparison reads the two sides' whole shift, up to
#: this, as possibly the machine's.
STATE_LOG_SHIFT = 0.15
#: How unevenly such a state moves the rows: each by a share of its own, of this sd relative to the
#: whole shift (0.33-0.46 measured: allreduce and barrier more, bcast and gather less).
STATE_ROW_SHARE = 0.45
#: A run of a merged file that had more than NOISY_RUN_SHARE of its rounds set aside as
#: interference (the median over rows), and more than NOISY_RUN_FACTOR times the other runs'
#: share, ran in a noisy period: on the busy runner (tests/data/busy-runner) base-3 lost 60% of
#: its rounds against the others' 20-30%, and its rounds at a pinned run's level let a 2.5x
#: slowdown pass as a state of the machine on 34 of 145 rows.
NOISY_RUN_SHARE = 0.5
NOISY_RUN_FACTOR = 2.0
#: Run-to-run spread (sd of log round medians) assumed when neither file has two rounds of a
#: row: about the largest seen per row on a noisy 2-core VM (benchmarks/README.md), so that a
#: one-round comparison flags only changes far beyond what launches alone do there.
ASSUMED_LOG_SD = 0.25

# -- rules that hold a row back -------------------------------------------------------------

#: A side whose ranks, on a busy machine, used this much less of their usable cores than the
#: other side's (``cpuload``'s ``cpu_share``) is starved: beside CPU-bound loops on the 2-core VM
#: MPI's polling ranks used 62-91% of their cores against 85-99% alone, and without this rule 85
#: of 200 A/A comparisons beside one loop exited 1; with the ranks pausing between sizes, under
#: 10%, and rows up to 2.4× slower (benchmarks/README.md, "Starved ranks and step-down max-T").
STARVED_DEFICIT = 0.15
#: A side is judged for starvation only where at least this share of its counted rounds ran on a
#: busy machine.
STARVED_BUSY_SHARE = 0.5
#: How alike a row's runs are in the share of their rounds a state of the machine holds, before
#: the runs say (the intra-class correlation of a beta-binomial; 0: every run alike, 1: each run
#: wholly in the state or out of it), and the weight of that guess in runs. Set on the files that
#: made and broke the rule before it (benchmarks/README.md, "Evidence, not presence"): two H100
#: runs of one code, bcast slow in 1-2 of one run's 5 rounds and in all 5 of the other's, must not
#: be called a change (p 0.08-0.18 at 0.5); a merged CPU baseline that ran slow in 2-5 rounds of
#: each of its runs against both ranks on one core in all 10 must be (p 0.002-0.02).
STATE_RUN_LIKENESS = 0.5
STATE_LIKENESS_WEIGHT = 1.0
#: The least likeness the faster side's runs are taken to show (a share of exactly 0 or 1 in every
#: run would otherwise make it 0).
MIN_LIKENESS = 0.02
#: An interleaved job's row is called only where at least this share of its pairs counted
#: (both rounds kept): two A/A jobs beside two busy loops called 1.7-2.9x changes from 2-3 of 10
#: pairs (benchmarks/README.md, "A row's number is its own; the busy term goes; ab live").
MIN_PAIRS_SHARE = 0.5
#: Nor with fewer pairs than this: two pairs give its t one degree of freedom, with tails so
#: heavy that one such row in the family (max-T) held every other row back (a +25% job's rows at
#: p 1e-7 adjusted to 0.04-0.12).
MIN_PAIRS_TO_CALL = 3
#: A pair of an interleaved job whose log ratio lies more than PAIR_WIDTH + PAIR_WIDTH_FEW / (n − 3)
#: robust spreads (1.4826 × the median absolute deviation of the row's n log ratios, at least
#: MIN_PAIR_SD) from their median is set aside: one side met interference in its turn alone.
#: Taking turns size by size, most pairs of a busy minute agreed within 3-4% while one or two of
#: ten lay 30-50% out, on either side, and held 40-70% of the A/A rows undecided (benchmarks/
#: README.md, "Turns size by size"). Simulated (20,000 rows each), the width sets aside 0.2-1%
#: of normal pairs at 5-20 pairs; it needs MIN_PAIRS_TO_SET_ASIDE pairs.
PAIR_WIDTH = 5.0
PAIR_WIDTH_FEW = 10.0
MIN_PAIR_SD = 0.01
MIN_PAIRS_TO_SET_ASIDE = 5


@dataclass(frozen=True)
class Term:
    """One term of a verdict: what it adds, the constants above that set it, and where the
    figures that set them are."""

    name: str
    adds: str
    constants: tuple
    measured: str


TERMS = (
    Term("own rounds", "which of a row's rounds count, and so its p50 (noise.own_rounds)",
         ("MIN_ROUNDS_TO_SET_ASIDE", "OWN_WIDTH", "OWN_WIDTH_FEW", "MIN_CLEAN_SD"),
         "simulated rows, benchmarks/README.md \"A row's number is its own\""),
    Term("within", "the spread of a row's rounds within a run, moderated by its stratum's trend "
         "(rounds.summarize_rounds, change.estimate_change, change.paired_changes)",
         ("MIN_LOG_SD", "PRIOR_DF", "MIN_ROWS_FOR_PRIOR", "DISAGREE_LEVEL"),
         "benchmarks/coverage.py, next-run coverage"),
    Term("between runs",
         "a row's interval holds what its next run measures (rounds.summarize_rounds)",
         ("BETWEEN_RUNS_FACTOR",), "benchmarks/coverage.py \"next runs\", ten quiet runs"),
    Term("interference window",
         "which rounds and runs a comparison of stored files sets aside, in the file's units "
         "(noise.clean_rounds, runs.slow_runs)", ("INTERFERENCE_WIDTH", "MIN_CLEAN_SD"),
         "benchmarks/README.md \"the estimator\""),
    Term("state level",
         "a row's interval reaches up to a level a fifth of its rounds ran at (noise.state_level)",
         ("STATE_SEEN_SHARE",), "ten H100 runs, benchmarks/noise_h100.py"),
    Term("drift", "whole runs made at different times move together (runs.estimate_drift)",
         ("DRIFT_FACTOR", "MIN_RUNS_FOR_DRIFT", "DRIFT_OVERRULE_LEVEL"),
         "benchmarks/calibrate.py, quiet runs"),
    Term("machine state",
         "the two sides' whole shift read as possibly the machine's (noise.machine_state)",
         ("STATE_LOG_SHIFT", "STATE_ROW_SHARE"),
         "benchmarks/README.md, states that outlast launches"),
    Term("floor gap", "a side's fastest round may be its own time (runs.floor_gap)", (),
         "benchmarks/README.md, quiet runs with one collective 25-35% slower"),
    Term("fast gap", "a lone round far faster than the rest casts doubt (analysis.runs.SideRounds)",
         (), "benchmarks/README.md, the estimator"),
    Term("noisy run",
         "a merged run that lost most of its rounds is left out (analysis.runs.noisy_runs)",
         ("NOISY_RUN_SHARE", "NOISY_RUN_FACTOR"), "../shared/data/busy-runner/, base-3"),
    Term("assumed spread", "rows with one round a side", ("ASSUMED_LOG_SD",),
         "benchmarks/README.md, noisy VM"),
    Term("starvation", "a side whose ranks lacked CPU is not called slower by what that explains "
                       "(holds.starvation)",
         ("STARVED_DEFICIT", "STARVED_BUSY_SHARE"), "200 A/A comparisons beside one busy loop"),
    Term("state evidence",
         "the other side's slow rounds hold a row unless how often they ran there is itself "
         "evidence (holds.state_evidence)",
         ("STATE_RUN_LIKENESS", "STATE_LIKENESS_WEIGHT", "MIN_LIKENESS"),
         "benchmarks/README.md \"Evidence, not presence\""),
    Term("pairs", "an interleaved job's row needs most of its pairs counted (verdict.decide)",
         ("MIN_PAIRS_SHARE", "MIN_PAIRS_TO_CALL"),
         "two A/A ab jobs beside two busy loops"),
    Term("pair window", "a pair whose log ratio lies far from the row's other pairs is set aside "
                        "(change.pairs_kept)",
         ("PAIR_WIDTH", "PAIR_WIDTH_FEW", "MIN_PAIR_SD", "MIN_PAIRS_TO_SET_ASIDE"),
         "live ab jobs taking turns size by size, benchmarks/README.md \"Turns size by size\""),
    Term("family", "max-T over every row tested (family.max_t_adjust)", ("DEFAULT_ALPHA", "DRAWS"),
         "benchmarks/README.md \"Starved ranks and step-down max-T\""),
    Term("gate", "the exit status: slower, undecided (3) or passed",
         ("DEFAULT_THRESHOLD", "DEFAULT_MIN_DECIDED",
         "POWER", "CONFIDENCE"), "../shared/data/busy-runner/"),
)
