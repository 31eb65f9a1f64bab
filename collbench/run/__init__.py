"""One benchmark run, from options to rows.

``plan`` (options to a validated plan), ``runner`` (set-up and the rounds of one process),
``sweep`` (one round's walk over collectives, backends and sizes), ``rounds`` (round schedule,
shuffled order), ``cpuload`` (how much CPU other processes took during a round: busy rounds),
``metadata`` (what a result file records about the machine and the run), ``groups`` (the
groups of ``--split`` that measure at once), ``pairing`` (which pairs ``collbench pairs``
measures, and which at once), ``interleaved`` (the two sides of ``collbench ab``, launched in
turns).

May import: every package below it: ``stats``, ``measure``, ``benchmarks``, ``backends``,
``launch``, ``results``, and ``collbench.errors``, numpy; never mpi4py or torch itself (the backends
do).
"""
