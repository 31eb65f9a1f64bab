"""What a reader of results sees.

``tables`` (the tables as data: title, headers, cells), ``console`` (drawn by rich to fit a
terminal's width), ``exporters`` (one per file format, by suffix or ``--format``, markdown
among them), ``ci_export`` (github-action-benchmark and Bencher documents).

May import: ``collbench.errors``, ``collbench.results``, ``collbench.measure`` (sizes, timings),
``collbench.benchmarks.registry``, numpy, rich.
"""
