"""The benchmarks, one module each: the collectives and the point-to-point exchanges. Each says
who takes part, what one timed sample is, what it moves, how its result is checked and its
bus-bandwidth factor (``base``, the contract).

``registry`` (every benchmark by name), ``datatypes`` (dtypes, reduction operators and the
check patterns, exact at any scale).

May import: ``collbench.errors``, numpy.
"""
