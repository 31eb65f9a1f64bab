"""The benchmarks, one module each: the collectives and the point-to-point exchanges. Each says
who takes part, what one timed sample is, what it moves, how its result is checked and its
bus-bandwidth factor (``base``, the contract).

``registry`` (every benchmark by name), ``dtypes`` (element types, and the value–index pairs of
maxloc and minloc), ``ops`` (reduction operators: numpy's reduction of each, the dtypes it takes,
the element it reduces), ``payloads`` (what mpi4py's pickle API sends, ``--payload``), ``check``
(the result check: fill, expected values, sentinel and comparison, exact at any scale, worked on
the buffers' device through its few array operations).

May import: ``collbench.errors``, numpy.
"""
