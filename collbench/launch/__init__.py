"""Starting and watching ranks.

``launcher`` (which launcher started us: rank, local rank, world size, hosts), ``spawn``
(self-launch when there is none: one launch per round), ``supervise`` (the guardian of each
rank, the watchdog, signals).

May import: ``collbench.errors``, ``collbench.run.rounds`` (the environment of a self-launched
round), the standard library. Nothing here imports numpy, mpi4py or torch.
"""
