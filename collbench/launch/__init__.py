"""Starting and watching ranks.

``launcher`` (which launcher started us: rank, local rank, world size, hosts), ``pmi``
(whether MPI can start from it, and the line that says why not: srun's MPI plugins), ``spawn``
(self-launch when there is none: one launch per round), ``janitor`` (the self-launching
process's stand-in, should it be killed), ``supervise`` (what a rank asks of its guardian,
ending early), ``watchdog`` (``--timeout``), ``signals`` (signals on a rank), ``guardian``,
``link``, ``coordinator`` and ``wire`` (collbench's own channel between the ranks of a job, on
every host), ``relay`` (mpiexec's output, less its noise), ``rendezvous`` and ``netaddr`` (how
ranks on several hosts reach each other: joining the channel, the store's address, gloo's
interface), ``oom`` (whether the kernel's out-of-memory killer ended a rank).

May import: ``collbench.errors``, ``collbench.run.rounds`` (the environment of a self-launched
round), ``collbench.results.journal`` and, after a launch that failed, ``collbench.results.recover``,
the standard library. Nothing here imports numpy, mpi4py or torch (the recovery after a failed
launch does, in the self-launching process, or in a process of its own for a guardian or the
stand-in).
"""
