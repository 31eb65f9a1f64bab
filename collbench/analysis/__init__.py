"""What collbench does with result files once measured.

``compare`` and ``compare_render`` (the regression gate: rows matched, verdicts laid out, and
its output), ``runs`` (the runs and rounds inside a file, as a comparison reads them: busy
rounds, run ids, each row's counted rounds per run), ``comparability`` (warnings when two runs
differ in set-up), ``fit`` (latency-bandwidth model), ``report`` (fit and detectable change per
row), ``per_rank`` (``report --per-rank``: slowest and outlier ranks, per host), ``overlay``
(several runs of one set-up side by side, and ``report --diff``), ``merge`` (several runs of one
sweep into one file, with ``comparability``'s warnings), ``plot``.

May import: ``collbench.errors``, ``collbench.stats``, ``collbench.measure``, ``collbench.results``,
``collbench.benchmarks``, numpy, rich, matplotlib (plot only, lazily).
"""
