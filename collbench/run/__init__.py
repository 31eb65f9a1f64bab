"""One benchmark run, from options to rows.

``plan`` (options to a validated plan), ``runner`` (set-up and the rounds of one process),
``sweep`` (one round's walk over collectives, backends and sizes), ``rounds`` (round schedule,
shuffled order, CPU load), ``metadata`` (what a result file records about the machine and the
run).

May import: every package below it: ``measure``, ``collectives``, ``backends``, ``launch``,
``results``, and ``collbench.errors``, numpy; never mpi4py or torch itself (the backends do).
"""
