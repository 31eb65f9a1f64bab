"""Result records and files.

``records`` (Row, RoundData, RunResult and the schema), ``aggregate`` and ``collector`` (rows
built from their rounds), ``loader`` (reading files of every schema version), ``exporters``
(JSON, CSV, markdown), ``tables`` (the terminal tables), ``output`` (what rank 0 shows and
writes during a run), ``merge`` (several runs into one file).

May import: ``collbench.errors``, ``collbench.measure`` (statistics, sizes), numpy, rich.
"""
