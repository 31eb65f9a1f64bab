"""Starting and watching ranks, in four rooms and two shared modules.

* ``origin``: who started this process (``launcher``: the launcher, rank, local rank, world
  size, hosts), whether MPI can start from it (``pmi``), and where its output reaches a person
  (``terminal``).
* ``liveness``: a rank that fails is named and its job ended on every host: each rank's
  ``guardian``, the job's ``coordinator`` and a guardian's ``link`` to it, speaking ``wire``
  (which also holds the exit codes and timings every side agrees on); what a rank asks of its
  guardian (``supervise``); ``--timeout`` (``watchdog``); ``signals`` on a rank; the kernel's
  out-of-memory killer (``oom``).
* ``network``: how ranks on several hosts reach each other: joining the coordinator, torch's
  store and gloo's interface (``rendezvous``), this host's ``addresses`` and free ports.
* ``self_launch``: collbench launching its own ranks, one launch per round, when no launcher
  did (``spawn``), through ``mpiexec`` (finding it, its command line), whose output it
  ``relay``s; a stand-in (``janitor``) finishes for it should it be killed.
* ``processes``: processes as the kernel sees them (the one reader of /proc/<pid>/stat);
  ``notes``: what a self-launched job leaves in its state folder for the process that launched
  it.

Each room imports only those below it: ``origin`` ← ``liveness`` ← ``network`` ←
``self_launch``, all of them ``processes`` and ``notes``, and no module imports one that imports
it back (``tests/test_layout.py``).

May import: ``collbench.errors``, ``collbench.environment``, the standard library. Nothing here
imports numpy, mpi4py or torch. The run's ``journal`` is here: the launching process, the
guardians and the stand-in read it; the result files are rebuilt from it by
``python -m collbench.live.recover``, in a process of its own.
"""
