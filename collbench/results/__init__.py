"""The result: the row model and its files.

``records`` (Row, RoundData, RunResult), ``aggregate`` and ``collector`` (rows built from their
rounds), ``rank_view`` (each row's slowest and outlier ranks, from its rounds' per-rank times),
``link_map`` (the rows of many pairs as a matrix, and what lies out), ``formats`` (the JSON and
CSV writers), ``loader`` (reading files of every schema version), ``schema`` (the JSON Schema
derived from the rows), ``paths`` (writing a file whole, never over a device), ``dataframe``
(files as one pandas DataFrame: ``collbench.read_results``).

May import: ``collbench.errors``, ``collbench.stats``, ``collbench.measure`` (sizes),
``collbench.benchmarks.registry``, numpy; pandas in ``dataframe`` alone, which nothing on the
measuring path imports.
"""
