"""Result records and files.

``records`` (Row, RoundData, RunResult and the schema), ``aggregate`` and ``collector`` (rows
built from their rounds), ``loader`` (reading files of every schema version), ``dataframe``
(files as one pandas DataFrame: ``collbench.read_results``), ``exporters`` (JSON, CSV, markdown),
``ci_export`` (github-action-benchmark and Bencher documents), ``tables`` (the tables as data),
``render`` (drawn to fit a terminal's width), ``progress``
(the bar and its time left), ``output`` (what rank 0 shows and writes during a run), ``files``
(claiming and rewriting the result files on a schedule), ``recover`` (files rebuilt from the
run's journal, ``collbench.launch.journal``, when rank 0 could not write them), ``ranks`` (each row's slowest and outlier ranks,
from its rounds' per-rank times).

May import: ``collbench.errors``, ``collbench.stats``, ``collbench.measure`` (sizes),
``collbench.benchmarks.registry``, ``collbench.launch.journal``, numpy, rich; pandas in ``dataframe`` alone, which nothing on
the measuring path imports.
"""
