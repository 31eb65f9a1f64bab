"""Taking numbers and summarising them.

``calls`` (what the harness drives: a bound call, the control channel), ``harness`` (the
timed loop of one size), ``timings`` (what a sample is: latency, throughput,
graph, device), ``sizes`` (parsing and printing sizes), ``memory`` (what fits). The statistics
of what is taken are ``collbench.stats``.

May import: ``collbench.errors``, ``collbench.benchmarks``, ``collbench.stats``, numpy.
Nothing here imports mpi4py or torch.
"""
