"""What collbench does with result files once measured.

``compare`` and ``compare_render`` (the regression gate and its output), ``runs`` (the runs
and rounds inside a file: busy rounds, run ids, drift between runs), ``significance``
(max-T over rows), ``comparability`` (warnings when two runs differ in set-up),
``fit`` (latency-bandwidth model), ``report`` (fit and detectable change per row),
``per_rank`` (``report --per-rank``: slowest and outlier ranks, per host), ``overlay``
(several runs of one set-up side by side, and ``report --diff``), ``merge`` (several runs of
one sweep into one file, with ``comparability``'s warnings), ``plot``.

May import: ``collbench.errors``, ``collbench.measure``, ``collbench.results``,
``collbench.benchmarks``, numpy, rich, matplotlib (plot only, lazily).
"""
