"""The collectives: what each moves, how its result is checked, its bus-bandwidth factor.

``registry`` (every collective by name), ``datatypes`` (dtypes, reduction operators and the
check patterns, exact at any scale).

May import: ``collbench.errors``, numpy.
"""
