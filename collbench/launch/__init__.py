"""Starting and watching ranks, in four rooms and three shared modules.

* ``origin``: who started this process (``launcher``), whether MPI can start from it (``pmi``),
  whether its output reaches a person (``terminal``).
* ``liveness``: a failing rank named and its job ended on every host (``guardian``,
  ``coordinator``, ``link``, ``wire``, ``supervise``, ``watchdog``, ``signals``, ``oom``).
* ``network``: ranks on several hosts reaching each other (``rendezvous``, ``addresses``).
* ``self_launch``: collbench launching its own ranks (``spawn``, ``mpiexec``, ``relay``), and
  its stand-in should it be killed (``janitor``).
* Shared: ``processes`` (read from /proc), ``notes`` (left for the launching process),
  ``journal`` (every measurement, for the files' rebuild).

Each room imports only the rooms above it and the shared modules (``tests/test_layout.py``).

May import: ``collbench.errors``, ``collbench.environment``, the standard library. Nothing here
imports numpy, mpi4py or torch.
"""
