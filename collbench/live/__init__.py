"""Rank 0's output while a run measures.

``output`` (what rank 0 shows and writes as sizes finish), ``progress`` (the bar and its time
left), ``files`` (claiming the result files and rewriting them on a schedule), ``recover``
(files rebuilt from the run's journal, ``collbench.launch.journal``, when rank 0 could not write
them).

May import: ``collbench.errors``, ``collbench.results``, ``collbench.render``,
``collbench.launch.journal``, rich.
"""
